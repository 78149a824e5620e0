// GPU tests of cross-entropy (forward and backward in one call) and of its
// gradient scaling, through the public C++ API (quack::cross_entropy,
// quack::cross_entropy_scale_grad), against a float64 reference written from
// the maths (include/quack/ops/cross_entropy.cuh's header), not from the
// kernels: lse by log-sum-exp in double, the softcap by std::tanh, the
// smoothing as sum_c w_c (lse - x'_c) term by term, and the gradient in
// closed form, which a host test (no GPU needed) checks against central
// finite differences of the reference loss itself.
//
// Every operand lives in its own guarded, poisoned buffer (support/
// guarded_tensor.hpp): writes outside an output's elements are counted byte
// by byte, inputs (logits unless in place, targets, weights, dloss) must come
// back unchanged, and the workspace may be written only inside its size.
// Outputs are set to a sentinel before each call (so a NaN the maths asks for
// cannot be mistaken for the NaN poison); each call runs twice and must give
// bit-identical loss, lse and dlogits (determinism: fixed summation orders).
//
// Cases (~30% ignored rows in each unless named otherwise) cover every kernel:
// register-resident rows in sub-CTA teams (V <= 200), a whole CTA (V 1000 ..
// 32000 16-bit), clusters of 2..16 CTAs (V 32000 fp32 .. 262144), and the
// streaming kernel, element-wise for misaligned rows (pointer off by one
// element, odd row strides, only dlogits misaligned) and vectorised beyond the
// register tiles (V 300000 fp32, 600000 bf16); the whole list runs a second
// time with the register kernels disabled (the vectorised streaming kernel on
// every shape). Across them each option appears several times in several
// dtypes: int32/int64 targets, target strides 0 and 3, an ignore_index inside
// [0, V), reductions none/mean/sum, class weights (with zeros), label
// smoothing, z_loss, softcap, dloss (none: per row, mixed with exact 1s), in
// place, forward only, gradient only, out-of-range targets, all rows ignored.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"
#include "support/cuda_test.hpp"
#include "support/guarded_tensor.hpp"
#include "support/staged_plan.hpp"
#include "support/tuned_suite.hpp"

namespace quack {
namespace {

using test::DeviceBuffer;
using test::GuardedTensor;
using test::Layout;
using test::round_to;

constexpr DType kF32 = DType::kFloat32, kF16 = DType::kFloat16, kBF16 = DType::kBFloat16;
constexpr Reduction kNone = Reduction::kNone, kMean = Reduction::kMean, kSum = Reduction::kSum;
const double kNaN = std::nan("");
// Written into every output element before a call: no correct output is 1024
// (|loss| and |dlogits| stay far below it here) and it is exact in every dtype.
constexpr float kSentinel = 1024.0f;

// ---------------------------------------------------------------------------
// Float64 reference.

struct Problem {
  int64_t rows = 0, cols = 0;
  std::vector<double> x;        // [rows * cols] the logits as stored
  std::vector<int64_t> target;  // [rows] as read (target_stride applied)
  std::vector<double> weight;   // [cols], or empty: all 1
  int64_t ignore_index = -100;
  Reduction reduction = kMean;
  double eps = 0.0, z_loss = 0.0, cap = 0.0;
  std::vector<double> dloss;  // empty: 1; kNone: [rows]; else [1]
};

struct RowRef {
  bool ignored = false, bad = false;
  double lse = 0.0;
  double ce = 0.0, z = 0.0;  // 0 for an ignored row, NaN for a bad one
};

struct Reference {
  std::vector<RowRef> row;
  double W = 0.0, R = 0.0;  // sum of w_t and count over counted rows
  double wsum = 0.0;        // sum_c w_c
  double loss = 0.0;        // kMean / kSum: the reduced loss
};

double capped(const Problem& p, double x) { return p.cap > 0.0 ? p.cap * std::tanh(x / p.cap) : x; }
double weight_of(const Problem& p, int64_t c) { return p.weight.empty() ? 1.0 : p.weight[size_t(c)]; }
double upstream(const Problem& p, int64_t row) {
  if (p.dloss.empty()) return 1.0;
  return p.reduction == kNone ? p.dloss[size_t(row)] : p.dloss[0];
}

double lse_of(const Problem& p, int64_t r) {
  const double* xr = &p.x[size_t(r * p.cols)];
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < p.cols; ++c) m = std::max(m, capped(p, xr[c]));
  double s = 0.0;
  for (int64_t c = 0; c < p.cols; ++c) s += std::exp(capped(p, xr[c]) - m);
  return m + std::log(s);
}

Reference reference(const Problem& p) {
  Reference ref;
  ref.row.resize(size_t(p.rows));
  for (int64_t c = 0; c < p.cols; ++c) ref.wsum += weight_of(p, c);
  double sum_ce = 0.0, sum_z = 0.0;
  for (int64_t r = 0; r < p.rows; ++r) {
    RowRef& o = ref.row[size_t(r)];
    const int64_t t = p.target[size_t(r)];
    o.ignored = t == p.ignore_index;
    o.bad = !o.ignored && (t < 0 || t >= p.cols);
    o.lse = lse_of(p, r);
    if (o.ignored) continue;
    if (o.bad) {
      o.ce = o.z = kNaN;
    } else {
      const double* xr = &p.x[size_t(r * p.cols)];
      double smooth = 0.0;  // sum_c w_c (lse - x'_c)
      for (int64_t c = 0; c < p.cols; ++c) smooth += weight_of(p, c) * (o.lse - capped(p, xr[c]));
      o.ce = (1.0 - p.eps) * weight_of(p, t) * (o.lse - capped(p, xr[t])) + p.eps / double(p.cols) * smooth;
      o.z = p.z_loss * o.lse * o.lse;
      ref.W += weight_of(p, t);
      ref.R += 1.0;
    }
    sum_ce += o.ce;
    sum_z += o.z;
  }
  if (p.reduction == kSum) ref.loss = sum_ce + sum_z;
  // torch's 0 / 0 for a mean over no weight.
  if (p.reduction == kMean) ref.loss = ref.W == 0.0 ? kNaN : sum_ce / ref.W + sum_z / ref.R;
  return ref;
}

// The scalar whose gradient dlogits holds: sum_r dloss_r loss_r (kNone), or
// dloss * loss.
double objective(const Problem& p) {
  const Reference ref = reference(p);
  if (p.reduction != kNone) return upstream(p, 0) * ref.loss;
  double s = 0.0;
  for (int64_t r = 0; r < p.rows; ++r) s += upstream(p, r) * (ref.row[size_t(r)].ce + ref.row[size_t(r)].z);
  return s;
}

// d objective / d x in closed form, p_c = exp(x'_c - lse):
//   d ce / d x'_j = (1 - eps) w_t (p_j - [j == t]) + (eps / V) sum_c w_c (p_j - [j == c])
//   d z  / d x'_j = 2 z_loss lse p_j
//   d x' / d x    = 1 - tanh^2(x / cap)
// times dloss, and 1 / W (ce) and 1 / R (z) for a mean.
std::vector<double> gradient(const Problem& p, const Reference& ref) {
  std::vector<double> dx(p.x.size(), 0.0);
  for (int64_t r = 0; r < p.rows; ++r) {
    const RowRef& o = ref.row[size_t(r)];
    double* dr = &dx[size_t(r * p.cols)];
    if (o.ignored) continue;
    if (o.bad) {
      std::fill(dr, dr + p.cols, kNaN);
      continue;
    }
    const double* xr = &p.x[size_t(r * p.cols)];
    const int64_t t = p.target[size_t(r)];
    double g_ce = upstream(p, r), g_z = g_ce;
    if (p.reduction == kMean) {
      g_ce /= ref.W;
      g_z /= ref.R;
    }
    for (int64_t j = 0; j < p.cols; ++j) {
      const double pj = std::exp(capped(p, xr[j]) - o.lse);
      const double dce = (1.0 - p.eps) * weight_of(p, t) * (pj - (j == t ? 1.0 : 0.0)) +
                         p.eps / double(p.cols) * (ref.wsum * pj - weight_of(p, j));
      const double dz = 2.0 * p.z_loss * o.lse * pj;
      double d = g_ce * dce + g_z * dz;
      if (p.cap > 0.0) {
        const double th = std::tanh(xr[j] / p.cap);
        d *= 1.0 - th * th;
      }
      dr[j] = d;
    }
  }
  return dx;
}

// ---------------------------------------------------------------------------
// Error bounds.
//
// The kernels compute in fp32 (unit roundoff u = 2^-24) and store dlogits in
// the logits' dtype (u_t = 2^-24, 2^-11, 2^-8 for fp32, fp16, bf16). Each
// bound below is a worst case of that rounding model for the steps the
// quantity goes through, not a fit to observed errors:
//  * s = sum_c exp(x'_c - m): a thread adds up to n_thr terms in sequence (at
//    most 4 vectors = 32 elements in the register tiles; V / 1024 + 8 in a
//    1024-thread streaming CTA, with as many online rescalings), then a tree
//    of <= log2(V) levels. Each term's exponent (x'_c - m) log2(e) carries
//    2u |x'_c - m|, which weighted by p_c sums to <= 2u ln V (the entropy), and
//    ex2.approx / lg2.approx add a few ulps. So s has a relative error, i.e.
//    lse an absolute error, of at most
//      gamma = (2 n_thr + 4 log2(V + 1) + 32) u   (8e-6 at V = 1000, 3.8e-5 at 2^18)
//    and lse's own rounding adds 2u |lse|. The plain forward's fold computes
//    the exponent as x'_c log2(e) - m log2(e) in one FFMA: m log2(e)'s
//    rounding shifts every exponent of the thread alike, lse by u |m| <=
//    u (|lse| + ln V) (m <= lse <= m + ln V). Sums of V terms of either sign
//    (sum_c w_c x'_c, sum_c w_c) err by gamma times the sum of magnitudes.
//  * softcap: c - 2c / (1 + 2^(2 x log2(e) / c)) with MUFU ex2 and a fast
//    divide errs by d_cap <= (24 + 4 max|x| / c) u c per element, absolute
//    (5e-5 at c = 30); lse moves by at most d_cap, as does each x'_c.
//  * the reduction: W's sum (prepare kernel) and the total's (finish kernel)
//    are sequential strands of at most max(4, M / 1024) rows (a CTA of 32 to
//    1024 threads sized to the rows, ce_scalar_threads) and a tree of at
//    most 10 levels: gamma_M = (M / 1024 + 16) u relative.
// A row's loss then errs by each term's error (written out in bound_loss),
// and a gradient element A p_c - b w_c - a [c == t] by p_c's relative error
// (lse's and x'_c's errors, 2u |x'_c - lse| in its exponent, ex2's ulps), the
// few roundings of A, a, b (and W's for a mean), the softcap factor's
// (2 d_cap / c + 3u absolute), then the rounding to the dtype u_t |dx| and
// the dtype's smallest step (fp16 subnormals; fp32 values below 2^-126 flush
// to zero, as does p_c).
//
// The bounds stay far below what a wrong kernel changes: the loss bound is
// < 5e-5 relative at V = 2^18 (< 1e-5 at V = 1000), while z_loss = 1e-4 adds
// ~1e-3 of the loss (lse ~ 10..30) and label smoothing 0.1 ~10%. In the
// gradient, the smoothing's -b w_c dominates every class with p_c << 1 / V
// (most of them at these logit spreads), 100% of the element, against
// u_t <= 0.4%; the z term changes A by 2 z_loss lse ~ 2e-3..6e-3 relative,
// above the fp32 and fp16 bounds (u_t = 2^-11 = 4.9e-4) for the elements whose
// p_c dominates; bf16 (0.4%) sees it in the loss, and in the gradient of the
// case with z_loss = 0.05.
struct Bounds {
  double u = std::ldexp(1.0, -24);
  double gamma = 0.0, gamma_m = 0.0, d_cap = 0.0;
  int64_t cols = 1;

  explicit Bounds(const Problem& p) : cols(p.cols) {
    const double n_thr = std::max(32.0, std::ceil(double(p.cols) / 1024.0) + 8.0);
    gamma = (2.0 * n_thr + 4.0 * std::log2(double(p.cols) + 1.0) + 32.0) * u;
    gamma_m = (std::ceil(double(p.rows) / 1024.0) + 16.0) * u;
    if (p.cap > 0.0) {
      double max_abs = 0.0;
      for (double v : p.x) max_abs = std::max(max_abs, std::fabs(v));
      d_cap = (24.0 + 4.0 * max_abs / p.cap) * u * p.cap;
    }
  }
  double lse(double lse) const { return gamma + 3.0 * u * std::fabs(lse) + u * std::log(double(cols)) + d_cap; }
};

struct LossBound {
  double ce = 0.0, z = 0.0;
};

// The error bound of a counted row's ce and z terms.
LossBound bound_loss(const Problem& p, const Reference& ref, const Bounds& b, int64_t r) {
  const RowRef& o = ref.row[size_t(r)];
  const double* xr = &p.x[size_t(r * p.cols)];
  const int64_t t = p.target[size_t(r)];
  const double dl = b.lse(o.lse), u = b.u;
  LossBound lb;
  // (1 - eps) w_t (lse - x'_t): lse's and x'_t's errors, the subtraction and
  // two products.
  lb.ce = (1.0 - p.eps) * weight_of(p, t) * (dl + b.d_cap + 4.0 * u * std::fabs(o.lse - capped(p, xr[t])));
  if (p.eps != 0.0) {
    // (eps / V) (lse sum_c w_c - sum_c w_c x'_c): lse's error times the
    // weights, both sums' errors, the final subtraction and products.
    double d = 0.0, d_abs = 0.0;
    for (int64_t c = 0; c < p.cols; ++c) {
      d += weight_of(p, c) * capped(p, xr[c]);
      d_abs += weight_of(p, c) * std::fabs(capped(p, xr[c]));
    }
    const double lw = std::fabs(o.lse) * ref.wsum;
    lb.ce += p.eps / double(p.cols) *
             (ref.wsum * (dl + b.d_cap) + (b.gamma + u) * lw + b.gamma * d_abs + 4.0 * u * std::fabs(o.lse * ref.wsum - d));
  }
  lb.ce += 2.0 * u * std::fabs(o.ce);
  lb.z = p.z_loss * (2.0 * std::fabs(o.lse) * dl + 3.0 * u * o.lse * o.lse);
  return lb;
}

// Bound of one gradient element of a counted row.
double bound_grad(const Problem& p, const Reference& ref, const Bounds& b, int64_t r, int64_t j, double want, DType t) {
  const RowRef& o = ref.row[size_t(r)];
  const double* xr = &p.x[size_t(r * p.cols)];
  const int64_t tgt = p.target[size_t(r)];
  const double u = b.u, dl = b.lse(o.lse);
  double g_ce = upstream(p, r), g_z = g_ce;
  if (p.reduction == kMean) {
    g_ce /= ref.W;
    g_z /= ref.R;
  }
  const double a = std::fabs(g_ce * (1.0 - p.eps) * weight_of(p, tgt));
  const double bb = std::fabs(g_ce * p.eps / double(p.cols));
  const double zt = std::fabs(2.0 * g_z * p.z_loss * o.lse);
  const double A_mag = a + bb * ref.wsum + zt;
  const double xp = capped(p, xr[j]);
  const double pj = std::exp(xp - o.lse);
  const double wj = weight_of(p, j), at_t = j == tgt ? a : 0.0;
  // A, a, b: a few roundings each, W's sum for a mean, sum_c w_c's for
  // weighted smoothing, and the z term's share of lse's error.
  const double gm = p.reduction == kMean ? b.gamma_m : 0.0;
  const double err_A = (4.0 * u + gm + (p.weight.empty() ? 0.0 : b.gamma)) * A_mag +
                       2.0 * std::fabs(g_z) * p.z_loss * dl;
  const double rel_p = dl + b.d_cap + 2.0 * u * std::fabs(xp - o.lse) + 4.0 * u;
  double err = A_mag * pj * rel_p + err_A * pj + (bb * wj + at_t) * (gm + 3.0 * u) +
               2.0 * u * (A_mag * pj + bb * wj + at_t);
  if (p.cap > 0.0) {
    const double th = std::tanh(xr[j] / p.cap), f = 1.0 - th * th;
    const double g_uncapped = A_mag * pj + bb * wj + at_t;  // a bound of |dL/dx'_j|
    err = f * err + g_uncapped * (2.0 * b.d_cap / p.cap + 3.0 * u);
  }
  const double ut = t == kF32 ? u : t == kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  const double step = t == kF16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -126);
  return err + ut * (std::fabs(want) + err) + step + std::ldexp(1.0, -125) * A_mag;
}

// ---------------------------------------------------------------------------
// The closed form against central finite differences of the reference loss
// (host only): validates the gradient formula the GPU cases compare against.

TEST(CrossEntropyReference, ClosedFormGradientMatchesFiniteDifferences) {
  struct Opt {
    Reduction red;
    bool weight;
    double eps, z, cap;
    bool dloss;
  };
  const Opt opts[] = {
      {kMean, false, 0.0, 0.0, 0.0, false}, {kSum, false, 0.0, 0.0, 0.0, true},
      {kNone, false, 0.0, 0.0, 0.0, true},  {kMean, true, 0.0, 0.0, 0.0, true},
      {kMean, false, 0.3, 0.0, 0.0, false}, {kSum, true, 0.3, 0.0, 0.0, true},
      {kNone, true, 0.3, 0.0, 0.0, true},   {kMean, false, 0.0, 0.05, 0.0, true},
      {kNone, false, 0.0, 0.05, 0.0, true}, {kMean, false, 0.0, 0.0, 4.0, false},
      {kSum, false, 0.0, 0.0, 4.0, true},   {kMean, true, 0.2, 0.05, 4.0, true},
      {kNone, true, 0.2, 0.05, 4.0, true},  {kSum, true, 1.0, 0.05, 4.0, false},
  };
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  int config = 0;
  for (const Opt& o : opts) {
    SCOPED_TRACE("config " + std::to_string(config++));
    Problem p;
    p.rows = 6;
    p.cols = 5;
    p.reduction = o.red;
    p.eps = o.eps;
    p.z_loss = o.z;
    p.cap = o.cap;
    p.x.resize(size_t(p.rows * p.cols));
    for (double& v : p.x) v = 3.0 * u(gen);
    p.target = {0, 4, -100, 2, 2, 1};  // row 2 ignored
    if (o.weight) p.weight = {0.5, 1.5, 0.0, 2.0, 1.0};  // row 3's target weighs 0
    if (o.dloss) {
      if (o.red == kNone) p.dloss = {0.7, -1.3, 2.0, 1.0, 0.4, -0.6};
      else p.dloss = {1.7};
    }
    const Reference ref = reference(p);
    const std::vector<double> cf = gradient(p, ref);
    double largest = 0.0;
    for (size_t i = 0; i < p.x.size(); ++i) {
      const double x0 = p.x[i], h = 1e-5 * std::max(1.0, std::fabs(x0));
      p.x[i] = x0 + h;
      const double up = objective(p);
      p.x[i] = x0 - h;
      const double down = objective(p);
      p.x[i] = x0;
      const double fd = (up - down) / (2.0 * h);
      // Truncation ~h^2 |f'''| / 6 ~ 1e-10, cancellation ~1e-16 |f| / h ~ 1e-10.
      EXPECT_NEAR(cf[i], fd, 1e-7 + 1e-6 * std::fabs(fd)) << "row " << i / 5 << " col " << i % 5;
      largest = std::max(largest, std::fabs(cf[i]));
    }
    EXPECT_GT(largest, 1e-2);  // the comparison is not of zeros
    for (int64_t c = 0; c < p.cols; ++c) EXPECT_EQ(cf[size_t(2 * p.cols + c)], 0.0) << "ignored row";
  }
}

// ---------------------------------------------------------------------------
// GPU cases.

struct CeCase {
  DType dtype;
  int64_t rows, cols;
  Reduction red;
  bool i32 = false;        // int32 targets (else int64)
  bool weight = false;     // class weights (uniform in [0.25, 2], ~3% zeros)
  float eps = 0.0f, z = 0.0f, cap = 0.0f;
  float dloss = 0.0f;      // 0: nullptr; else the upstream factor (kNone: per row, some exactly 1)
  bool in_place = false;   // dlogits = logits
  int64_t offset = 0, pad = 0;        // logits: elements before row 0; stride = cols + pad
  int64_t dx_offset = 0, dx_pad = 0;  // dlogits (unless in place)
  int64_t tstride = 1;
  int64_t ignore_index = -100;
  int ignored = 3;         // tenths of the rows ignored (row_ignored): 3 ~30%, 0 none, 10 all
  bool bad = false;        // out-of-range targets in some rows
  bool want_loss = true, want_lse = true, want_grad = true;
  double spread = 3.0;     // logits ~ N(0, (spread * (0.5 .. 2))^2) per row
  bool huge = false;       // rows of huge finite logits (fill_huge_rows)

  // Fluent setters for the case list.
  CeCase& i32_() { i32 = true; return *this; }
  CeCase& w() { weight = true; return *this; }
  CeCase& smooth(float v) { eps = v; return *this; }
  CeCase& zl(float v) { z = v; return *this; }
  CeCase& softcap(float v) { cap = v; return *this; }
  CeCase& g(float v) { dloss = v; return *this; }
  CeCase& inplace() { in_place = true; return *this; }
  CeCase& mis(int64_t off, int64_t pd) { offset = off; pad = pd; return *this; }
  CeCase& dx_mis(int64_t off, int64_t pd) { dx_offset = off; dx_pad = pd; return *this; }
  CeCase& ts(int64_t s) { tstride = s; return *this; }
  CeCase& ii(int64_t v) { ignore_index = v; return *this; }
  CeCase& ign(int tenths) { ignored = tenths; return *this; }
  CeCase& badt() { bad = true; return *this; }
  CeCase& noloss() { want_loss = false; return *this; }
  CeCase& nolse() { want_lse = false; return *this; }
  CeCase& nograd() { want_grad = false; return *this; }
  CeCase& big() { huge = true; return *this; }

  std::string name() const {
    auto num = [](double v) {
      std::string s = std::to_string(v);
      s.erase(s.find_last_not_of('0') + 1);
      if (!s.empty() && s.back() == '.') s.pop_back();
      for (char& ch : s) {
        if (ch == '.') ch = 'p';
        if (ch == '-') ch = 'm';
      }
      return s;
    };
    std::string n = "V" + std::to_string(cols) + "_M" + std::to_string(rows) + "_" +
                    (dtype == kF32 ? "f32" : dtype == kF16 ? "f16" : "bf16") + "_" +
                    (red == kNone ? "none" : red == kMean ? "mean" : "sum");
    if (i32) n += "_i32";
    if (weight) n += "_w";
    if (eps != 0.0f) n += "_eps" + num(eps);
    if (z != 0.0f) n += "_z" + num(z);
    if (cap != 0.0f) n += "_cap" + num(cap);
    if (dloss != 0.0f) n += "_g" + num(dloss);
    if (in_place) n += "_inplace";
    if (offset) n += "_off" + std::to_string(offset);
    if (pad) n += "_pad" + std::to_string(pad);
    if (dx_offset) n += "_dxoff" + std::to_string(dx_offset);
    if (dx_pad) n += "_dxpad" + std::to_string(dx_pad);
    if (tstride != 1) n += "_ts" + std::to_string(tstride);
    if (ignore_index != -100) n += "_ii" + std::to_string(ignore_index);
    if (ignored != 3) n += ignored == 0 ? "_noignored" : ignored == 10 ? "_allignored" : "_ign" + std::to_string(ignored);
    if (bad) n += "_badtargets";
    if (!want_loss) n += "_noloss";
    if (!want_lse) n += "_nolse";
    if (!want_grad) n += "_nograd";
    if (huge) n += "_huge";
    return n;
  }
};

CeCase C(DType t, int64_t rows, int64_t cols, Reduction red) {
  CeCase c{t, rows, cols, red};
  return c;
}

std::vector<CeCase> cases() {
  std::vector<CeCase> v;
  // Register-resident, sub-CTA teams (1, 2, 16, 32 threads a row).
  v.push_back(C(kF32, 7, 1, kSum).i32_().smooth(0.1f).zl(1e-4f));
  v.push_back(C(kBF16, 289, 1, kNone).w().g(0.75f));
  v.push_back(C(kF16, 289, 2, kMean).i32_().smooth(0.1f));
  v.push_back(C(kBF16, 7, 2, kNone).zl(1e-4f).softcap(30.0f).g(1.5f));
  v.push_back(C(kF32, 1, 2, kSum).softcap(30.0f).g(-0.5f));
  v.push_back(C(kF32, 289, 7, kSum).w().smooth(0.1f).zl(1e-4f).softcap(30.0f).g(0.75f));
  v.push_back(C(kBF16, 1, 7, kMean).inplace());
  v.push_back(C(kBF16, 7, 7, kMean).ts(0).ign(0));
  v.push_back(C(kBF16, 289, 100, kMean).w().smooth(0.1f));
  v.push_back(C(kF16, 289, 200, kSum).i32_().zl(1e-4f).softcap(30.0f).inplace());
  // Register-resident, a whole CTA a row (vpt 1, 2, 4).
  v.push_back(C(kBF16, 289, 1000, kMean));  // torch's defaults
  v.push_back(C(kF32, 289, 1000, kNone).i32_().w().smooth(0.1f).g(0.75f));
  v.push_back(C(kF16, 7, 1000, kSum).zl(1e-4f).g(2.5f));
  v.push_back(C(kBF16, 1, 1000, kMean).w().smooth(0.1f).softcap(30.0f));
  v.push_back(C(kF32, 7, 1000, kMean).ts(3).ii(3));
  v.push_back(C(kBF16, 289, 1000, kSum).zl(0.05f).inplace());
  v.push_back(C(kF32, 2000, 1000, kMean).zl(1e-4f).softcap(30.0f));
  v.push_back(C(kBF16, 289, 4096, kMean).w().smooth(0.1f).zl(1e-4f).g(0.75f));
  v.push_back(C(kF32, 289, 4096, kNone).i32_().softcap(30.0f));
  v.push_back(C(kF16, 7, 4096, kSum).smooth(0.1f).inplace());
  v.push_back(C(kBF16, 7, 4096, kNone).i32_().ts(3).g(0.75f));
  v.push_back(C(kBF16, 7, 32000, kMean).zl(1e-4f).softcap(30.0f));
  v.push_back(C(kF16, 1, 32000, kNone).w().smooth(0.1f));
  v.push_back(C(kBF16, 7, 32000, kMean).w().smooth(0.1f).ign(0));
  // Register-resident, clusters of 2 .. 16 CTAs a row.
  v.push_back(C(kF32, 7, 32000, kSum).w().inplace());
  v.push_back(C(kBF16, 7, 50304, kMean).w().smooth(0.1f).zl(1e-4f).softcap(30.0f).g(0.75f));
  v.push_back(C(kF32, 7, 50304, kNone).i32_().g(0.75f));
  v.push_back(C(kF16, 1, 50304, kSum).softcap(30.0f));
  v.push_back(C(kBF16, 7, 128256, kMean).zl(1e-4f));
  v.push_back(C(kF32, 7, 128256, kNone).w().smooth(0.1f).inplace());
  v.push_back(C(kF16, 7, 128256, kSum).i32_().softcap(30.0f).g(2.5f));
  v.push_back(C(kBF16, 3, 262144, kMean).smooth(0.1f).zl(1e-4f).softcap(30.0f));
  v.push_back(C(kF32, 3, 262144, kSum).w().softcap(30.0f).g(0.75f));
  v.push_back(C(kF16, 3, 262144, kNone).i32_().inplace());
  // Clusters of 5 (bf16) and 10 (fp32) CTAs (general options); the plain
  // options' gradient from 32000 classes takes two passes (forward, then
  // the gradient from lse), rows with a partial last vector included.
  v.push_back(C(kBF16, 5, 151936, kNone).w().softcap(30.0f).g(0.75f));
  v.push_back(C(kF32, 5, 151936, kMean).smooth(0.1f).zl(1e-4f));
  v.push_back(C(kBF16, 7, 50257, kMean).smooth(0.1f).zl(1e-4f).mis(0, 7));
  v.push_back(C(kF16, 5, 128259, kNone).w().g(0.75f).mis(0, 5).badt());
  v.push_back(C(kF32, 3, 65537, kSum).smooth(0.2f).mis(0, 3).inplace().nolse());
  // A cluster whose last CTA holds one element (fp32 65537 staged: 9 CTAs,
  // the row's last vector partial in its thread 0), and a few (65541).
  v.push_back(C(kF32, 3, 65537, kSum).smooth(0.2f).mis(0, 3));
  v.push_back(C(kF32, 3, 65537, kNone).mis(0, 3).inplace());
  v.push_back(C(kF32, 5, 65541, kMean).mis(0, 3).inplace());
  v.push_back(C(kBF16, 3, 131073, kSum).smooth(0.1f).mis(0, 7).inplace());
  // Many rows: the scalar kernels split into parts (16384 rows each) and
  // combine them.
  v.push_back(C(kBF16, 40000, 7, kMean).w().smooth(0.1f).zl(1e-4f));
  v.push_back(C(kF32, 70001, 3, kSum).i32_().g(0.75f));
  // Streaming, element-wise: misaligned pointers and odd row strides.
  v.push_back(C(kF16, 7, 7, kNone).mis(1, 0));
  v.push_back(C(kF16, 289, 1000, kMean).w().smooth(0.1f).mis(0, 1));
  v.push_back(C(kF32, 1, 4096, kMean).zl(1e-4f).g(0.75f).mis(1, 0));
  v.push_back(C(kBF16, 7, 50304, kMean).softcap(30.0f).dx_mis(1, 0));
  v.push_back(C(kBF16, 7, 128256, kSum).i32_().smooth(0.1f).zl(1e-4f).mis(0, 3));
  v.push_back(C(kBF16, 3, 262144, kNone).w().smooth(0.1f).g(0.75f).mis(1, 0));
  v.push_back(C(kF32, 7, 32000, kNone).inplace().mis(1, 2));
  // Shifted rows: odd V with logits and dlogits contiguous (consecutive
  // rows at other offsets in their first vector), or a misaligned base
  // they share: element-wise streaming by default, the register kernels
  // from the vector holding each row's first logit (kShift) under
  // RowTuning::shifted_rows (CrossEntropyGpuShifted, which also takes the
  // other cases whose logits and dlogits share their offsets: V = 1, 2, 7,
  // 100, in place or forward only).
  v.push_back(C(kBF16, 37, 50257, kMean));  // GPT-2's vocabulary, torch's defaults
  v.push_back(C(kF32, 7, 32001, kNone).w().smooth(0.1f).g(0.75f));  // weights by column
  v.push_back(C(kBF16, 7, 128257, kSum).softcap(30.0f).zl(1e-4f));
  v.push_back(C(kBF16, 7, 50257, kMean).smooth(0.1f).nograd());  // the plain forward
  v.push_back(C(kF16, 289, 4097, kMean).smooth(0.1f).zl(1e-4f).inplace());
  v.push_back(C(kBF16, 5, 1001, kNone).w().mis(3, 0).dx_mis(3, 0));
  v.push_back(C(kF32, 10, 1001, kNone).big());
  v.push_back(C(kBF16, 7, 50257, kMean).g(0.75f).badt());
  v.push_back(C(kF16, 5, 128257, kNone).badt().nograd());  // the plain streaming forward, no sum
  v.push_back(C(kF32, 10, 65537, kNone).big().nograd());   // ... in natural units (ce_fold_finish)
  // Streaming, vectorised: beyond the register tiles.
  v.push_back(C(kF32, 2, 300000, kMean).smooth(0.1f).zl(1e-4f));
  v.push_back(C(kBF16, 2, 600000, kSum).w().softcap(30.0f));
  // Out-of-range targets (NaN rows) on each kernel.
  v.push_back(C(kF32, 7, 1000, kNone).badt());
  v.push_back(C(kBF16, 7, 4096, kMean).w().smooth(0.1f).badt());
  v.push_back(C(kF16, 7, 50304, kSum).i32_().badt());
  v.push_back(C(kBF16, 7, 1000, kMean).g(0.75f).mis(1, 0).badt());
  v.push_back(C(kBF16, 7, 1, kSum).badt());
  // Some outputs only: forward only, gradient only (a mean without shares),
  // per-row losses without lse.
  v.push_back(C(kBF16, 289, 4096, kMean).nograd());
  // The plain forward: 8-vector register tiles below 48 KB rows, the
  // streaming kernel from there (whole vectors, and partial last vectors in
  // rows whose padded stride keeps them aligned), bad targets included.
  v.push_back(C(kF16, 289, 1000, kSum).smooth(0.1f).zl(1e-4f).nograd());
  v.push_back(C(kBF16, 7, 32768, kMean).nograd());
  v.push_back(C(kBF16, 7, 50257, kMean).smooth(0.1f).mis(0, 7).nograd());
  v.push_back(C(kF32, 3, 262144, kNone).i32_().zl(1e-4f).nograd());
  v.push_back(C(kF16, 5, 128259, kSum).mis(0, 5).badt().nograd());
  v.push_back(C(kF32, 2, 600001, kMean).smooth(0.2f).mis(0, 3).nograd().nolse());
  v.push_back(C(kBF16, 7, 32000, kMean).zl(1e-4f).g(0.75f).noloss().nolse());
  v.push_back(C(kF16, 289, 1000, kNone).w().smooth(0.1f).noloss());
  v.push_back(C(kF32, 289, 1000, kSum).zl(1e-4f).nolse());
  // Every row ignored: mean NaN (0 / 0), sum 0, none 0s, zero gradient.
  v.push_back(C(kBF16, 7, 1000, kMean).w().smooth(0.1f).g(0.75f).ign(10));
  v.push_back(C(kF32, 7, 4096, kSum).zl(1e-4f).ign(10));
  v.push_back(C(kF16, 7, 200, kNone).softcap(30.0f).ign(10));
  // Logits of any finite magnitude (fill_huge_rows): the register rows, the
  // staged gradient (and the two-pass one under staging off), the plain
  // streaming and bulk forwards (CrossEntropyGpuBulk), element-wise rows.
  v.push_back(C(kF32, 10, 1000, kNone).big());
  v.push_back(C(kBF16, 10, 50304, kNone).big());
  v.push_back(C(kF32, 10, 32000, kMean).big().inplace());
  v.push_back(C(kF32, 10, 262144, kNone).big().nograd());
  v.push_back(C(kBF16, 1100, 4096, kSum).big().nograd());
  v.push_back(C(kBF16, 10, 1000, kNone).big().mis(1, 0));
  return v;
}

// Rows of huge finite logits, by row % 5 (t: the row's target, or column 0
// where it has none): 0 as generated; 1 shifted by 3e7 (fp32 steps of 2);
// 2: -1e12 + 1e6 N(0, 1) (steps of 65536); 3: x_t = 2.5e38 and -3e38 beside
// it (the loss ~ 0, the gradient's p_t ~ 1); 4: all -3e38 but x_t = -2.9e38.
// |max| >= 2^24 takes natural units in every kernel (core::log2_units_ok);
// in log2 units the rounding of max log2 e leaves the float range from
// about 1e10, and past 2.36e38 max log2 e does. Plain options only: lse^2,
// the smoothing's lse sum_c w_c and a reduced sum of such rows leave fp32's
// range, as they would in torch.
void fill_huge_rows(std::vector<float>& x, const std::vector<int64_t>& target, int64_t rows, int64_t V,
                    std::mt19937& gen) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = &x[size_t(r * V)];
    const int64_t t = target[size_t(r)] >= 0 && target[size_t(r)] < V ? target[size_t(r)] : 0;
    switch (r % 5) {
      case 1: for (int64_t j = 0; j < V; ++j) xr[j] += 3e7f; break;
      case 2: for (int64_t j = 0; j < V; ++j) xr[j] = -1e12f + 1e6f * normal(gen); break;
      case 3: xr[t] = 2.5e38f; if (V > 1) xr[(t + 1) % V] = -3e38f; break;
      case 4: for (int64_t j = 0; j < V; ++j) xr[j] = j == t ? -2.9e38f : -3e38f; break;
      default: break;
    }
  }
}

void PrintTo(const CeCase& c, std::ostream* os) { *os << c.name(); }

uint32_t seed_of(const std::string& s) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (char ch : s) h = (h ^ uint8_t(ch)) * 16777619u;
  return h;
}

// Rows ignored: r % 10 in the first `ignored` of {1, 4, 8, 6, 0, 2, 3, 5, 7, 9}
// (3: ~30%, row 0 kept); out of range (bad): r % 10 in {2, 3, 7}, unless ignored.
bool row_ignored(int64_t r, int ignored) {
  static const int order[10] = {1, 4, 8, 6, 0, 2, 3, 5, 7, 9};
  for (int k = 0; k < ignored; ++k)
    if (r % 10 == order[k]) return true;
  return false;
}

template <class T>
cudaError_t download_bytes(const DeviceBuffer& b, std::vector<T>* out) {
  out->resize(b.bytes() / sizeof(T));
  return cudaMemcpy(out->data(), b.data(), b.bytes(), cudaMemcpyDeviceToHost);
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0 && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
  return true;
}

// Expects `got` within `bound` of `want` (NaN wants NaN); counts and reports
// the first failures; tracks the worst ratio error / bound.
struct Checker {
  const char* what;
  int64_t bad = 0;
  double worst = 0.0;
  void check(double got, double want, double bound, int64_t r, int64_t c = -1) {
    bool ok;
    if (std::isnan(want)) {
      ok = std::isnan(got);
    } else {
      const double e = std::fabs(got - want);
      ok = e <= bound;  // false for NaN
      if (bound > 0.0) worst = std::max(worst, e / bound);
    }
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << what << " row " << r << (c >= 0 ? " col " + std::to_string(c) : std::string()) << ": got "
                    << got << ", want " << want << " (bound " << bound << ")";
  }
  void exact(double got, double want, int64_t r, int64_t c = -1) {
    if (!(got == want) && ++bad <= 5)
      ADD_FAILURE() << what << " row " << r << (c >= 0 ? " col " + std::to_string(c) : std::string()) << ": got "
                    << got << ", want exactly " << want;
  }
  ~Checker() { EXPECT_EQ(bad, 0) << what << " elements wrong (worst error / bound " << worst << ")"; }
};

// lse and the loss (either may be null: not written) against the float64
// reference, within the bounds above.
void check_loss_lse(const Problem& p, const Reference& ref, const std::vector<double>* loss,
                    const std::vector<double>* lse, bool bad_targets) {
  const int64_t M = p.rows;
  const Bounds b(p);
  std::vector<LossBound> lb(static_cast<size_t>(M));
  for (int64_t r = 0; r < M; ++r)
    if (!ref.row[size_t(r)].ignored && !ref.row[size_t(r)].bad) lb[size_t(r)] = bound_loss(p, ref, b, r);
  if (lse != nullptr) {
    Checker ck{"lse"};
    for (int64_t r = 0; r < M; ++r) ck.check((*lse)[size_t(r)], ref.row[size_t(r)].lse, b.lse(ref.row[size_t(r)].lse), r);
  }
  if (loss == nullptr) return;
  Checker ck{"loss"};
  if (p.reduction == kNone) {
    for (int64_t r = 0; r < M; ++r) {
      const RowRef& o = ref.row[size_t(r)];
      if (o.ignored) ck.exact((*loss)[size_t(r)], 0.0, r);
      else ck.check((*loss)[size_t(r)], o.ce + o.z, lb[size_t(r)].ce + lb[size_t(r)].z + b.u * std::fabs(o.ce + o.z), r);
    }
    return;
  }
  // The total of the rows' shares: their bounds, the shares' own roundings
  // (a division by W or R each for a mean) and the sum's.
  double bound = 0.0, mag = 0.0;
  for (int64_t r = 0; r < M; ++r) {
    const RowRef& o = ref.row[size_t(r)];
    if (o.ignored || o.bad) continue;
    if (p.reduction == kMean) {
      bound += lb[size_t(r)].ce / ref.W + lb[size_t(r)].z / ref.R + (b.gamma_m + 2.0 * b.u) * std::fabs(o.ce) / ref.W +
               2.0 * b.u * std::fabs(o.z) / ref.R;
      mag += std::fabs(o.ce / ref.W + o.z / ref.R);
    } else {
      bound += lb[size_t(r)].ce + lb[size_t(r)].z + b.u * std::fabs(o.ce + o.z);
      mag += std::fabs(o.ce + o.z);
    }
  }
  bound += b.gamma_m * mag;
  ck.check((*loss)[0], ref.loss, bound, 0);
  if (p.reduction == kSum && ref.R == 0.0 && !bad_targets) ck.exact((*loss)[0], 0.0, 0);
}

// The case's logits or gradient are not 16-byte aligned: a start or a row
// stride (cols + pad) off 16 bytes (element-wise streaming kernels).
bool case_misaligned(const CeCase& c) {
  const int es = dtype_size(c.dtype), vec = 16 / es;
  return c.offset % vec != 0 || ((c.cols + c.pad) * es) % 16 != 0 ||
         (!c.in_place && c.want_grad && (c.dx_offset % vec != 0 || ((c.cols + c.dx_pad) * es) % 16 != 0));
}

// A misaligned case whose logits and dlogits (when written, not in place)
// start every row at the same offset in a 16-byte vector: shifted rows.
bool case_shifted(const CeCase& c) {
  const int64_t vec = 16 / dtype_size(c.dtype);
  if (!case_misaligned(c)) return false;
  if (!c.want_grad || c.in_place) return true;
  return (c.dx_offset - c.offset) % vec == 0 && (c.dx_pad - c.pad) % vec == 0;
}

// The plan of an aligned or shifted case under the current tuning.
std::string case_plan(const CeCase& c) {
  const bool general = c.cap != 0.0f || (c.weight && c.eps != 0.0f);
  return cross_entropy_plan_description(test::case_rows(c.rows, c.cols), c.cols, c.dtype, DeviceLimits{}, !c.want_grad,
                                        general, case_shifted(c));
}

void run_case(const CeCase& case_) {
  CeCase c = case_;
  c.rows = test::case_rows(c.rows, c.cols);
  const std::string name = c.name();
  const bool misaligned = case_misaligned(c);
  SCOPED_TRACE("plan (current tuning): " +
               (misaligned && !case_shifted(c) ? std::string("stream, element-wise") : case_plan(case_)));
  std::mt19937 gen(seed_of(name));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  const int64_t V = c.cols, M = c.rows;

  // Logits as stored; in half the rows the target's logit is lifted by 2
  // standard deviations (p_t near 1: the gradient's a - A p_t cancels).
  Problem p;
  p.rows = M;
  p.cols = V;
  p.ignore_index = c.ignore_index;
  p.reduction = c.red;
  p.eps = c.eps;
  p.z_loss = c.z;
  p.cap = c.cap;

  // Targets, as the row reads them: tbuf[r * tstride]; the slots between are
  // valid but wrong classes.
  std::vector<int64_t> want_t(static_cast<size_t>(M));
  std::uniform_int_distribution<int64_t> cls(0, V - 1);
  for (int64_t r = 0; r < M; ++r) {
    int64_t t = cls(gen);
    if (row_ignored(r, c.ignored)) {
      t = c.ignore_index;
    } else if (c.bad && (r % 10 == 2 || r % 10 == 3 || r % 10 == 7)) {
      if (r % 10 == 2) t = V;
      if (r % 10 == 3) t = c.i32 ? int64_t(std::numeric_limits<int32_t>::min()) : -(int64_t(1) << 40);
      if (r % 10 == 7) t = -1;
    }
    want_t[size_t(r)] = t;
  }
  const size_t tslots = M == 0 ? 1 : size_t((M - 1) * c.tstride + 1);
  std::vector<int64_t> tbuf(tslots);
  for (size_t i = 0; i < tslots; ++i) tbuf[i] = cls(gen);
  for (int64_t r = 0; r < M; ++r) tbuf[size_t(r * c.tstride)] = want_t[size_t(r)];
  p.target.resize(static_cast<size_t>(M));
  for (int64_t r = 0; r < M; ++r) p.target[size_t(r)] = tbuf[size_t(r * c.tstride)];

  std::vector<float> x(size_t(M * V));
  for (int64_t r = 0; r < M; ++r) {
    const float s = float(c.spread) * (0.5f + 0.5f * float(r % 4));
    for (int64_t j = 0; j < V; ++j) x[size_t(r * V + j)] = s * normal(gen);
    const int64_t t = p.target[size_t(r)];
    if (r % 2 == 0 && t >= 0 && t < V) x[size_t(r * V + t)] += 2.0f * s;
  }
  if (c.huge) fill_huge_rows(x, p.target, M, V, gen);
  for (float& v : x) v = float(round_to(c.dtype, v));
  p.x.assign(x.begin(), x.end());

  std::vector<float> w;
  if (c.weight) {
    w.resize(static_cast<size_t>(V));
    for (float& v : w) v = uni(gen) < 0.03f ? 0.0f : 0.25f + 1.75f * uni(gen);
    // Keep W > 0 (a mean over weight 0 is a separate, all-ignored case).
    for (int64_t r = 0; r < M; ++r) {
      const int64_t t = p.target[size_t(r)];
      if (t >= 0 && t < V && t != c.ignore_index) {
        if (w[size_t(t)] == 0.0f) w[size_t(t)] = 1.0f;
        break;
      }
    }
    p.weight.assign(w.begin(), w.end());
  }
  std::vector<float> dloss;
  if (c.dloss != 0.0f && c.want_grad) {
    if (c.red == kNone) {
      dloss.resize(size_t(std::max<int64_t>(M, 1)));
      for (int64_t r = 0; r < int64_t(dloss.size()); ++r)
        dloss[size_t(r)] = r % 3 == 0 ? 1.0f : c.dloss * (0.5f + uni(gen)) * (r % 3 == 1 ? 1.0f : -1.0f);
    } else {
      dloss = {c.dloss};
    }
    p.dloss.assign(dloss.begin(), dloss.end());
  }

  // Device operands.
  const Layout lx{c.dtype, M, V, V + c.pad, c.offset};
  const Layout ldx{c.dtype, M, V, V + c.dx_pad, c.dx_offset};
  GuardedTensor tx(lx);
  GuardedTensor tdx(c.want_grad && !c.in_place ? ldx : Layout{c.dtype, 0, 1, 1, 0});
  const int64_t nloss = c.red == kNone ? M : 1;
  GuardedTensor tloss(Layout{kF32, c.want_loss ? nloss : 0, 1, 1, 0});
  GuardedTensor tlse(Layout{kF32, c.want_lse ? M : 0, 1, 1, 0});
  ASSERT_TRUE(tx.ok() && tdx.ok() && tloss.ok() && tlse.ok()) << "cudaMalloc failed";
  DeviceBuffer dtarget(tslots * (c.i32 ? 4 : 8));
  DeviceBuffer dweight(c.weight ? size_t(V) * 4 : 0);
  DeviceBuffer ddloss(dloss.size() * 4);
  ASSERT_TRUE(dtarget.ok() && (!c.weight || dweight.ok()) && (dloss.empty() || ddloss.ok()));
  std::vector<int32_t> tbuf32(tbuf.begin(), tbuf.end());
  if (c.i32) {
    QUACK_ASSERT_CUDA(cudaMemcpy(dtarget.data(), tbuf32.data(), dtarget.bytes(), cudaMemcpyHostToDevice));
  } else {
    QUACK_ASSERT_CUDA(cudaMemcpy(dtarget.data(), tbuf.data(), dtarget.bytes(), cudaMemcpyHostToDevice));
  }
  if (c.weight) QUACK_ASSERT_CUDA(cudaMemcpy(dweight.data(), w.data(), dweight.bytes(), cudaMemcpyHostToDevice));
  if (!dloss.empty()) QUACK_ASSERT_CUDA(cudaMemcpy(ddloss.data(), dloss.data(), ddloss.bytes(), cudaMemcpyHostToDevice));

  CrossEntropyArgs a;
  a.rows = M;
  a.cols = V;
  a.logits = {tx.ptr(), c.dtype, lx.stride};
  a.target = dtarget.data();
  a.target_dtype = c.i32 ? IndexDType::kInt32 : IndexDType::kInt64;
  a.target_stride = c.tstride;
  a.weight = c.weight ? reinterpret_cast<const float*>(dweight.data()) : nullptr;
  a.ignore_index = c.ignore_index;
  a.reduction = c.red;
  a.label_smoothing = c.eps;
  a.z_loss = c.z;
  a.softcap = c.cap;
  a.loss = c.want_loss ? static_cast<float*>(tloss.ptr()) : nullptr;
  a.lse = c.want_lse ? static_cast<float*>(tlse.ptr()) : nullptr;
  if (c.want_grad) {
    if (c.in_place) a.dlogits = {tx.ptr(), c.dtype, lx.stride};
    else a.dlogits = {tdx.ptr(), c.dtype, ldx.stride};
  }
  a.dloss = dloss.empty() ? nullptr : reinterpret_cast<const float*>(ddloss.data());
  size_t ws_bytes = 0;
  {
    const Status st = cross_entropy_workspace_bytes(a, &ws_bytes);
    ASSERT_TRUE(st.ok()) << st.message;
  }
  ASSERT_EQ(ws_bytes % 16, 0u);
  const int64_t ws_elems = int64_t(ws_bytes / 4);
  GuardedTensor tws(Layout{kF32, ws_elems > 0 ? 1 : 0, std::max<int64_t>(ws_elems, 1), std::max<int64_t>(ws_elems, 1), 0});
  ASSERT_TRUE(tws.ok());
  a.workspace = ws_bytes > 0 ? tws.ptr() : nullptr;
  a.workspace_bytes = ws_bytes;

  // Two calls on fresh outputs.
  std::vector<double> loss[2], lse[2], dx[2];
  GuardedTensor& tgrad = c.in_place ? tx : tdx;
  for (int run = 0; run < 2; ++run) {
    QUACK_ASSERT_CUDA(tx.upload(x));
    if (c.want_grad && !c.in_place) QUACK_ASSERT_CUDA(tdx.upload(std::vector<float>(size_t(M * V), kSentinel)));
    QUACK_ASSERT_CUDA(tloss.upload(std::vector<float>(size_t(c.want_loss ? nloss : 0), kSentinel)));
    QUACK_ASSERT_CUDA(tlse.upload(std::vector<float>(size_t(c.want_lse ? M : 0), kSentinel)));
    QUACK_ASSERT_CUDA(tws.poison());
    const Status st = cross_entropy(a, nullptr);
    ASSERT_TRUE(st.ok()) << st.message;
    QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
    int64_t dirty = 0;
    std::vector<double> scratch;
    QUACK_ASSERT_CUDA(tws.download(&scratch, &dirty));
    EXPECT_EQ(dirty, 0) << "bytes written past the workspace";
    if (c.want_loss) {
      QUACK_ASSERT_CUDA(tloss.download(&loss[run], &dirty));
      EXPECT_EQ(dirty, 0) << "bytes outside loss's elements were written";
    }
    if (c.want_lse) {
      QUACK_ASSERT_CUDA(tlse.download(&lse[run], &dirty));
      EXPECT_EQ(dirty, 0) << "bytes outside lse's elements were written";
    }
    if (c.want_grad) {
      QUACK_ASSERT_CUDA(tgrad.download(&dx[run], &dirty));
      EXPECT_EQ(dirty, 0) << "bytes outside dlogits' elements were written";
    }
  }
  EXPECT_TRUE(same_bits(loss[0], loss[1])) << "a repeated call gave a different loss";
  EXPECT_TRUE(same_bits(lse[0], lse[1])) << "a repeated call gave a different lse";
  EXPECT_TRUE(same_bits(dx[0], dx[1])) << "a repeated call gave a different dlogits";

  // Inputs unchanged.
  if (!(c.in_place && c.want_grad)) {
    int64_t dirty = 0;
    std::vector<double> xv;
    QUACK_ASSERT_CUDA(tx.download(&xv, &dirty));
    EXPECT_EQ(dirty, 0) << "the logits' guard or gaps changed";
    int64_t changed = 0;
    for (size_t i = 0; i < xv.size(); ++i) changed += xv[i] != p.x[i];
    EXPECT_EQ(changed, 0) << "the logits were modified";
  }
  if (c.i32) {
    std::vector<int32_t> back;
    QUACK_ASSERT_CUDA(download_bytes(dtarget, &back));
    EXPECT_TRUE(back == tbuf32) << "the targets were modified";
  } else {
    std::vector<int64_t> back;
    QUACK_ASSERT_CUDA(download_bytes(dtarget, &back));
    EXPECT_TRUE(back == tbuf) << "the targets were modified";
  }
  if (c.weight) {
    std::vector<float> back;
    QUACK_ASSERT_CUDA(download_bytes(dweight, &back));
    EXPECT_TRUE(back == w) << "the weights were modified";
  }
  if (!dloss.empty()) {
    std::vector<float> back;
    QUACK_ASSERT_CUDA(download_bytes(ddloss, &back));
    EXPECT_TRUE(back == dloss) << "dloss was modified";
  }

  // Against the reference.
  const Reference ref = reference(p);
  const Bounds b(p);
  check_loss_lse(p, ref, c.want_loss ? &loss[0] : nullptr, c.want_lse ? &lse[0] : nullptr, c.bad);
  if (c.want_grad) {
    const std::vector<double> want = gradient(p, ref);
    Checker ck{"dlogits"};
    for (int64_t r = 0; r < M; ++r) {
      const RowRef& o = ref.row[size_t(r)];
      for (int64_t j = 0; j < V; ++j) {
        const size_t i = size_t(r * V + j);
        if (o.ignored) ck.exact(dx[0][i], 0.0, r, j);
        else if (o.bad) ck.check(dx[0][i], kNaN, 0.0, r, j);
        else ck.check(dx[0][i], want[i], bound_grad(p, ref, b, r, j, want[i], c.dtype), r, j);
      }
    }
  }
}

class CrossEntropyGpu : public testing::TestWithParam<CeCase> {};

TEST_P(CrossEntropyGpu, MatchesFloat64Reference) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, CrossEntropyGpu, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });

// The same cases with the register-resident kernels off: every row through
// the streaming kernel (vectorised where aligned), one CTA a row.
void register_kernels_off(RowTuning& t) { t.reg_enable = 0; }
class CrossEntropyGpuStreaming : public test::TunedSuite<CeCase, register_kernels_off> {};

TEST_P(CrossEntropyGpuStreaming, MatchesFloat64Reference) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(StreamCases, CrossEntropyGpuStreaming, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });

// The shifted cases (case_shifted) with RowTuning::shifted_rows' cross-entropy
// bit: the register kernels (kShift; sub-warp teams with rows at every
// offset, one CTA; the plain forward's 8-vector tile, the general options,
// class weights by column, in place, huge logits, bad targets), the
// staged gradient (ce_staged_kernel's kShift: 50257, 32001, 128257) and
// the plain streaming forward (ce_fwd_stream_kernel's kShift: 50257) from
// the vector holding each row's first logit. (CrossEntropyGpuStaged and
// BalancedStaged stage shifted rows from short ones, walking rows.)
std::vector<CeCase> shifted_cases() {
  std::vector<CeCase> v;
  for (const CeCase& c : cases())
    if (case_shifted(c)) v.push_back(c);
  return v;
}

void ce_shifted_rows(RowTuning& t) { t.shifted_rows = 2; }
class CrossEntropyGpuShifted : public test::TunedSuite<CeCase, ce_shifted_rows> {};

TEST_P(CrossEntropyGpuShifted, MatchesFloat64Reference) {
  const std::string plan = case_plan(GetParam());
  EXPECT_TRUE(plan.rfind("reg", 0) == 0 || plan.rfind("stage", 0) == 0 || plan.rfind("fwd-stream", 0) == 0)
      << "not the register, staged or streaming-forward kernels: " << plan;
  QUACK_REQUIRE_SM90();
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(ShiftedCases, CrossEntropyGpuShifted, testing::ValuesIn(shifted_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });

// Lean forward rows (RowTuning::reg_lean bit 2, ce_reg_kernel's kLean):
// decode-sized plain forwards whose row is one team owning its CTA and
// exactly the tile take the kernel with the row's bounds compiled away and
// the CTA's narrow reduction (the plan says so, or the test fails), then
// again with the bit off: both tiles (1 and 2 vectors), the three dtypes,
// every reduction (one row's own loss, the rows cluster at 2 .. 16 rows,
// the finish kernel past them), class weights, unweighted smoothing,
// z-loss, int32 targets, bad and ignored targets, every row ignored, huge
// logits, no loss (lse alone).
std::vector<CeCase> lean_cases() {
  return {C(kBF16, 1, 2048, kMean).nograd(),
          C(kBF16, 4, 4096, kMean).nograd(),
          C(kBF16, 16, 4096, kSum).nograd().w().i32_(),
          C(kF16, 3, 4096, kMean).nograd().smooth(0.1f).zl(1e-4f),
          C(kF32, 7, 1024, kNone).nograd().badt(),
          C(kF32, 2, 2048, kMean).nograd().ign(10),
          C(kBF16, 64, 8192, kMean).nograd().big(),
          C(kBF16, 1024, 2048, kMean).nograd().w().zl(1e-4f),
          C(kF16, 5, 8192, kNone).nograd().noloss()};
}

class CrossEntropyGpuLean : public testing::TestWithParam<CeCase> {
 protected:
  void TearDown() override { set_row_tuning(nullptr); }
};

TEST_P(CrossEntropyGpuLean, MatchesFloat64LeanAndNot) {
  const CeCase& c = GetParam();
  ASSERT_NE(case_plan(c).find(" lean"), std::string::npos) << "not lean: " << case_plan(c);
  QUACK_REQUIRE_SM90();
  run_case(c);
  if (HasFatalFailure()) return;
  RowTuning t = default_row_tuning();
  t.reg_lean &= ~4;
  set_row_tuning(&t);
  ASSERT_EQ(case_plan(c).find(" lean"), std::string::npos) << case_plan(c);
  run_case(c);
}

INSTANTIATE_TEST_SUITE_P(LeanCases, CrossEntropyGpuLean, testing::ValuesIn(lean_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });

// A register plan of one CTA a row whose team, above a warp, is not a power
// of two: fitted to the row (RowTuning::reg_fit_team).
bool fitted_plan(const std::string& plan) {
  int team = 0, cl = 0;
  if (std::sscanf(plan.c_str(), "reg team %d thr %*d cl %d", &team, &cl) != 2) return false;
  return cl == 1 && team > 32 && (team & (team - 1)) != 0;
}

// Model vocabularies and widths of every option, and rows just past a power
// of two of the tile, whose unclustered register CTAs the default plan fits
// to the row (reg_fit_team, the default since the forty-seventh session:
// the fewest whole warps at the tile, not the power of two above).
std::vector<CeCase> model_width_cases() {
  return {C(kBF16, 64, 5120, kMean).w().smooth(0.1f).zl(1e-4f),
          C(kF32, 33, 2560, kSum).softcap(30.0f).g(0.75f),
          C(kBF16, 40, 3000, kNone).inplace().nolse(),
          C(kF16, 20, 6150, kMean).mis(0, 2).dx_mis(0, 2).nograd(),
          C(kBF16, 24, 5121, kMean).big(),
          C(kBF16, 48, 4100, kMean),
          C(kBF16, 21, 8200, kSum).w().inplace(),
          C(kBF16, 17, 12301, kMean).smooth(0.1f)};
}

INSTANTIATE_TEST_SUITE_P(ModelWidthCases, CrossEntropyGpu, testing::ValuesIn(model_width_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });

// The same, and every case, whose default plan is such a CTA, with
// reg_fit_team off: the power-of-two CTAs (the default until the
// forty-seventh session).
std::vector<CeCase> pow2_team_cases() {
  std::vector<CeCase> v = cases();
  for (const CeCase& c : model_width_cases()) v.push_back(c);
  std::vector<CeCase> out;
  for (const CeCase& c : v)
    if ((!case_misaligned(c) || case_shifted(c)) && fitted_plan(case_plan(c))) out.push_back(c);
  return out;
}

void pow2_teams(RowTuning& t) { t.reg_fit_team = 0; }

class CrossEntropyGpuPow2Teams : public test::TunedSuite<CeCase, pow2_teams> {};

TEST_P(CrossEntropyGpuPow2Teams, MatchesFloat64Reference) {
  int team = 0, cl = 0;
  const std::string plan = case_plan(GetParam());
  ASSERT_EQ(std::sscanf(plan.c_str(), "reg team %d thr %*d cl %d", &team, &cl), 2) << plan;
  EXPECT_TRUE(cl == 1 && (team & (team - 1)) == 0) << "not a power-of-two register CTA: " << plan;
  QUACK_REQUIRE_SM90();
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Pow2TeamCases, CrossEntropyGpuPow2Teams, testing::ValuesIn(pow2_team_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });

// The tuning that sends every plain aligned forward of rows of 1 KB or more
// (the kernel's floor) to the bulk-copy kernel, whatever the rows' number
// and length.
RowTuning bulk_for_every_row() {
  RowTuning t = default_row_tuning();
  t.ce_fwd_bulk_min_rows = 1;
  t.ce_fwd_bulk_min_bytes2 = 0;
  t.ce_fwd_bulk_min_bytes4 = 0;
  t.ce_fwd_bulk_max_bytes = INT64_MAX;
  return t;
}

// The same cases with the bulk-copy forward (ce_fwd_bulk_kernel, a warp a
// row) for every plain aligned forward of rows of 1 KB or more --
// forward-only calls, and the first pass of the two-pass gradient.
class CrossEntropyGpuBulk : public testing::TestWithParam<CeCase> {
 protected:
  void SetUp() override {
    const RowTuning t = bulk_for_every_row();
    set_row_tuning(&t);
  }
  void TearDown() override { set_row_tuning(nullptr); }
};

TEST_P(CrossEntropyGpuBulk, MatchesFloat64Reference) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam());
}

// The cases above plus many rows of short and long plain rows (the default
// tuning's range: >= 1024 rows), tails of 1..VEC-1 elements included.
std::vector<CeCase> bulk_cases() {
  std::vector<CeCase> v = cases();
  v.push_back(C(kBF16, 3000, 1000, kMean).nograd());
  v.push_back(C(kF32, 1500, 4099, kNone).nograd());
  v.push_back(C(kF16, 1100, 515, kSum).smooth(0.1f).zl(1e-4f).nograd());
  v.push_back(C(kBF16, 1025, 32003, kMean).badt().nograd());
  v.push_back(C(kBF16, 1030, 50304, kMean).smooth(0.1f));  // two-pass: its forward
  v.push_back(C(kF32, 2049, 8192, kSum).mis(0, 4).nograd());
  return v;
}

INSTANTIATE_TEST_SUITE_P(BulkCases, CrossEntropyGpuBulk, testing::ValuesIn(bulk_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });

// Shifted rows through the bulk-copy forward (RowTuning::shifted_rows bit
// 3, built in the forty-seventh session, on by default since the
// forty-eighth): plain forwards of
// rows whose first logit lies inside a 16-byte vector (odd V, a misaligned
// base), with the bulk kernel for every plain forward of 1 KB or more --
// the head vector's row lanes and the last V % VEC + s elements folded by
// lane 0, the target anywhere in the row; the call must take it.
void bulk_for_shifted_rows(RowTuning& t) {
  t = bulk_for_every_row();
  t.shifted_rows |= 8;
}

class CrossEntropyGpuBulkShifted : public test::TunedSuite<CeCase, bulk_for_shifted_rows> {};

TEST_P(CrossEntropyGpuBulkShifted, MatchesFloat64Reference) {
  EXPECT_EQ(case_plan(GetParam()), "fwd-bulk shifted whole");  // (the whole loops: on by default)
  QUACK_REQUIRE_SM90();
  run_case(GetParam());
}

std::vector<CeCase> bulk_shifted_cases() {
  std::vector<CeCase> v;
  v.push_back(C(kBF16, 3000, 1001, kMean).nograd());
  v.push_back(C(kF32, 1500, 4099, kNone).nograd());
  v.push_back(C(kF16, 1100, 515, kSum).smooth(0.1f).zl(1e-4f).nograd());
  v.push_back(C(kBF16, 1025, 32003, kMean).badt().nograd());
  v.push_back(C(kBF16, 1024, 4100, kMean).nograd());
  v.push_back(C(kBF16, 300, 12301, kSum).nograd());
  v.push_back(C(kBF16, 64, 4096, kMean).mis(3, 0).nograd());  // a misaligned base, whole-vector pitch
  v.push_back(C(kF32, 77, 2049, kMean).mis(1, 2).big().nograd());
  std::vector<CeCase> out;
  for (const CeCase& c : v)
    if (case_shifted(c)) out.push_back(c);
  return out;
}

// (On by default, in the aligned rows' bulk range; without bit 3 the same
// rows take the shifted register tiles or the shifted stream.)
TEST(CrossEntropyBulkShiftedPlan, OnByDefaultOffWithoutBit3) {
  ASSERT_EQ(bulk_shifted_cases().size(), 8u);
  EXPECT_EQ(default_row_tuning().shifted_rows & 8, 8);
  for (const CeCase& c : bulk_shifted_cases()) {
    RowTuning off = default_row_tuning();
    off.shifted_rows &= ~8;
    set_row_tuning(&off);
    EXPECT_EQ(case_plan(c).rfind("fwd-bulk shifted", 0), std::string::npos) << c.name();
    set_row_tuning(nullptr);
    // (the default bulk range: 1024 rows or more, 8 KB to 128 KB 16-bit
    // rows, 4 KB fp32)
    const bool in_range = test::case_rows(c.rows, c.cols) >= 1024 &&
                          c.cols * dtype_size(c.dtype) >= (c.dtype == kF32 ? 4096 : 8192);
    EXPECT_EQ(case_plan(c) == "fwd-bulk shifted whole", in_range) << c.name() << ": " << case_plan(c);
  }
  set_row_tuning(nullptr);
}

INSTANTIATE_TEST_SUITE_P(BulkShiftedCases, CrossEntropyGpuBulkShifted, testing::ValuesIn(bulk_shifted_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });

// The plain forward kernels' whole-batch loops (RowTuning::ce_fwd_whole,
// on by default since the seventy-third session's measurement). A thread's
// batches whose vectors all lie in the chunk (bulk) or the row (stream) run
// unchecked first, the rest in the checked loop: rows of whole chunks and
// whole batches only (bf16 16384 in the bulk kernel, 131072 streamed), of a
// partial last chunk or batch (4099, 32003, 50304, 128256), shifted rows
// in the bulk kernel (the head vector's lane 0 takes the checked loop; the
// stream kernel's kShift has no whole loop), bad targets, sums for
// smoothing, the two-pass gradient's forward. The same cases also run
// with the bits off (the checked loops alone: a QUACK_TUNE variant).
void bulk_whole(RowTuning& t) {
  t = bulk_for_every_row();
  t.shifted_rows |= 8;
  t.ce_fwd_whole = 1;
}
void stream_whole(RowTuning& t) { t.ce_fwd_whole = 2; }
void bulk_checked(RowTuning& t) {
  bulk_whole(t);
  t.ce_fwd_whole = 0;
}
void stream_checked(RowTuning& t) { t.ce_fwd_whole = 0; }
// The bulk kernel at three CTAs an SM (RowTuning::ce_fwd_bulk_ctas: 8 KB
// rings, the kCtas = 3 instances), whole and checked loops.
void bulk_three_ctas(RowTuning& t) {
  bulk_whole(t);
  t.ce_fwd_bulk_ctas = 3;
}
void bulk_three_ctas_checked(RowTuning& t) {
  bulk_checked(t);
  t.ce_fwd_bulk_ctas = 3;
}

// The cases whose plan (under `tune`) names `kernel` with its whole loop.
std::vector<CeCase> whole_cases(void (*tune)(RowTuning&), const std::string& kernel) {
  std::vector<CeCase> all = bulk_cases();
  for (const CeCase& c : bulk_shifted_cases()) all.push_back(c);
  all.push_back(C(kBF16, 1024, 16384, kMean).nograd());
  all.push_back(C(kBF16, 1030, 50304, kSum).nograd());
  all.push_back(C(kBF16, 5, 131072, kSum).smooth(0.1f).nograd());
  all.push_back(C(kF16, 7, 131072, kMean).badt().nograd());
  all.push_back(C(kBF16, 7, 196608, kNone).nograd());
  RowTuning t = default_row_tuning();
  tune(t);
  set_row_tuning(&t);
  std::vector<CeCase> v;
  std::set<std::string> names;  // (bulk_cases and bulk_shifted_cases share some)
  for (const CeCase& c : all) {
    const std::string plan = case_plan(c);
    const bool elementwise = case_misaligned(c) && !case_shifted(c);
    if (!elementwise && plan.find(kernel) != std::string::npos && plan.find(" whole") != std::string::npos &&
        names.insert(c.name()).second)
      v.push_back(c);
  }
  set_row_tuning(nullptr);
  return v;
}
std::vector<CeCase> bulk_whole_cases() { return whole_cases(bulk_whole, "fwd-bulk"); }
std::vector<CeCase> stream_whole_cases() { return whole_cases(stream_whole, "fwd-stream"); }

// On by default (both bits); the plans say where they apply, each suite
// holds the kinds of rows above, and with the bits off no plan names them.
TEST(CrossEntropyWholePlan, OnByDefaultNamedWhereSet) {
  EXPECT_EQ(default_row_tuning().ce_fwd_whole, 3);
  const std::vector<CeCase> bulk = bulk_whole_cases(), stream = stream_whole_cases();
  auto has = [](const std::vector<CeCase>& v, DType t, int64_t cols) {
    for (const CeCase& c : v)
      if (c.dtype == t && c.cols == cols) return true;
    return false;
  };
  EXPECT_TRUE(has(bulk, kBF16, 16384) && has(bulk, kBF16, 32003) && has(bulk, kF32, 4099) && has(bulk, kBF16, 50304) &&
              has(bulk, kBF16, 4100))
      << bulk.size() << " bulk cases";
  EXPECT_TRUE(has(stream, kBF16, 131072) && has(stream, kBF16, 196608) && has(stream, kF32, 262144) &&
              has(stream, kF16, 128259))
      << stream.size() << " stream cases";
  // (the stream's rows under the defaults)
  for (const CeCase& c : stream) EXPECT_NE(case_plan(c).find("fwd-stream whole"), std::string::npos) << c.name();
  RowTuning t = default_row_tuning();
  bulk_whole(t);
  set_row_tuning(&t);
  for (const CeCase& c : bulk) {
    const std::string plan = case_plan(c);
    EXPECT_TRUE(plan == "fwd-bulk whole" || plan == "fwd-bulk shifted whole" || plan == "2-pass: fwd-bulk whole")
        << c.name() << ": " << plan;
  }
  for (void (*checked)(RowTuning&) : {bulk_checked, stream_checked}) {
    t = default_row_tuning();
    checked(t);
    set_row_tuning(&t);
    for (const std::vector<CeCase>* v : {&bulk, &stream})
      for (const CeCase& c : *v) EXPECT_EQ(case_plan(c).find(" whole"), std::string::npos) << c.name();
  }
  // Two bulk CTAs an SM by default; three where asked, named by the plan
  // (any value but 3 reads as 2).
  EXPECT_EQ(default_row_tuning().ce_fwd_bulk_ctas, 2);
  for (int ctas : {0, 2, 3, 4}) {
    t = default_row_tuning();
    bulk_whole(t);
    t.ce_fwd_bulk_ctas = ctas;
    set_row_tuning(&t);
    for (const CeCase& c : bulk) {
      const std::string plan = case_plan(c);
      EXPECT_EQ(plan.find(" 3 ctas") != std::string::npos, ctas == 3) << c.name() << ": " << plan;
    }
    // (the stream's rows under the default bulk rules: never the bulk kernel)
    t = default_row_tuning();
    t.ce_fwd_bulk_ctas = ctas;
    set_row_tuning(&t);
    for (const CeCase& c : stream) EXPECT_EQ(case_plan(c).find(" ctas"), std::string::npos) << c.name();
  }
  set_row_tuning(nullptr);
}

class CrossEntropyGpuBulkWhole : public test::TunedSuite<CeCase, bulk_whole> {};
class CrossEntropyGpuStreamWhole : public test::TunedSuite<CeCase, stream_whole> {};
class CrossEntropyGpuBulkChecked : public test::TunedSuite<CeCase, bulk_checked> {};
class CrossEntropyGpuStreamChecked : public test::TunedSuite<CeCase, stream_checked> {};
class CrossEntropyGpuBulkThreeCtas : public test::TunedSuite<CeCase, bulk_three_ctas> {};
class CrossEntropyGpuBulkThreeCtasChecked : public test::TunedSuite<CeCase, bulk_three_ctas_checked> {};

TEST_P(CrossEntropyGpuBulkWhole, MatchesFloat64Reference) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam());
}
TEST_P(CrossEntropyGpuStreamWhole, MatchesFloat64Reference) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam());
}
TEST_P(CrossEntropyGpuBulkChecked, MatchesFloat64Reference) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam());
}
TEST_P(CrossEntropyGpuStreamChecked, MatchesFloat64Reference) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam());
}
TEST_P(CrossEntropyGpuBulkThreeCtas, MatchesFloat64Reference) {
  QUACK_REQUIRE_SM90();
  EXPECT_NE(case_plan(GetParam()).find(" 3 ctas"), std::string::npos) << case_plan(GetParam());
  run_case(GetParam());
}
TEST_P(CrossEntropyGpuBulkThreeCtasChecked, MatchesFloat64Reference) {
  QUACK_REQUIRE_SM90();
  EXPECT_NE(case_plan(GetParam()).find(" 3 ctas"), std::string::npos) << case_plan(GetParam());
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(BulkWholeCases, CrossEntropyGpuBulkWhole, testing::ValuesIn(bulk_whole_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });
INSTANTIATE_TEST_SUITE_P(StreamWholeCases, CrossEntropyGpuStreamWhole, testing::ValuesIn(stream_whole_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });
INSTANTIATE_TEST_SUITE_P(BulkCheckedCases, CrossEntropyGpuBulkChecked, testing::ValuesIn(bulk_whole_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });
INSTANTIATE_TEST_SUITE_P(StreamCheckedCases, CrossEntropyGpuStreamChecked, testing::ValuesIn(stream_whole_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });
INSTANTIATE_TEST_SUITE_P(BulkThreeCtasCases, CrossEntropyGpuBulkThreeCtas, testing::ValuesIn(bulk_whole_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });
INSTANTIATE_TEST_SUITE_P(BulkThreeCtasCheckedCases, CrossEntropyGpuBulkThreeCtasChecked,
                         testing::ValuesIn(bulk_whole_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });

// The staged fused gradient (ce_staged_kernel) from short rows:
// CTAs of 64 threads, every row wider than a 32-thread register team
// staged where a cluster of 2..16 holds it, at the tile `vpt`.
RowTuning staged_from_short_rows(int vpt) {
  RowTuning t = default_row_tuning();
  t.ce_staged_grad = 3;
  t.ce_staged_vpt = vpt;
  t.ce_staged_min_cols = 0;
  t.reg_staged_team = 64;
  t.reg_staged_above_team = 0;
  t.reg_max_team = t.reg_wide_team = 32;
  t.shifted_rows = 2;  // shifted rows staged too (ce_staged_kernel's kShift)
  return t;
}

// The aligned or shifted gradient cases of `v` whose plan under tuning t
// is (staged) or is not (!staged) the staged kernel.
std::vector<CeCase> cases_planned(std::vector<CeCase> v, const RowTuning& t, bool staged) {
  set_row_tuning(&t);
  std::vector<CeCase> out;
  for (const CeCase& c : v)
    if (c.want_grad && (!case_misaligned(c) || case_shifted(c)) && (case_plan(c).rfind("stage", 0) == 0) == staged)
      out.push_back(c);
  set_row_tuning(nullptr);
  return out;
}

// The cases with a gradient that the short-row staging stages at 8 vectors
// a thread (2..16 CTAs of 64 threads: 16-bit rows of 4097..65536 classes,
// fp32 of 2049..32768), plus many rows and odd tails. Each runs at 8
// vectors, then at 16 where a cluster of those still takes it.
// The gradient cases plus the staged kernel's odd tails and many rows.
std::vector<CeCase> cases_with_staged_tails() {
  std::vector<CeCase> v = cases();
  // (Odd V with padded strides, so that the rows stay 16-byte aligned and
  // their partial last vectors reach the staged kernel.)
  v.push_back(C(kBF16, 2000, 8191, kMean).zl(1e-4f).mis(0, 1).dx_mis(0, 9));
  v.push_back(C(kF16, 300, 5003, kNone).w().g(0.75f).mis(0, 5).inplace());
  v.push_back(C(kF32, 1000, 20001, kSum).smooth(0.1f).mis(0, 3).dx_mis(0, 7).badt());
  v.push_back(C(kF32, 300, 20002, kMean).softcap(30.0f).mis(0, 2).inplace());
  v.push_back(C(kBF16, 64, 65531, kMean).w().smooth(0.1f).softcap(30.0f).mis(0, 5).dx_mis(0, 5).ign(10));
  v.push_back(C(kF32, 7, 32768, kMean).softcap(30.0f).zl(1e-4f).g(2.5f));
  // Many rows, in place, a partial last vector: with two clusters each
  // walks 150 rows, refilling the slots it has just read.
  v.push_back(C(kF32, 301, 8195, kNone).mis(0, 1).inplace().badt());
  v.push_back(C(kBF16, 300, 16383, kMean).w().smooth(0.1f).mis(0, 1).inplace());
  // Shifted rows (odd pitches, a shared misaligned base: every offset in
  // the first vector, the head vector apart), many rows walked by two
  // clusters, in place, general options.
  v.push_back(C(kBF16, 300, 16383, kMean).w().smooth(0.1f).inplace());
  v.push_back(C(kF32, 301, 8195, kNone).badt());
  v.push_back(C(kBF16, 64, 65531, kMean).w().smooth(0.1f).softcap(30.0f).ign(10));
  v.push_back(C(kF16, 300, 5003, kNone).w().g(0.75f).mis(3, 0).dx_mis(3, 0));
  return v;
}
std::vector<CeCase> staged_cases() { return cases_planned(cases_with_staged_tails(), staged_from_short_rows(8), true); }

class CrossEntropyGpuStaged : public testing::TestWithParam<CeCase> {
 protected:
  void TearDown() override { set_row_tuning(nullptr); }
};

// Each tile with the grid as many clusters as are resident (small CTAs: most
// rows their own cluster), with two clusters (each walks half the rows: the
// next row staged under the gradient's stores), and one cluster a row.
TEST_P(CrossEntropyGpuStaged, MatchesFloat64Reference) {
  for (const int vpt : {8, 16}) {
    for (const int clusters : {0, 2, -1}) {
      SCOPED_TRACE("staged tile " + std::to_string(vpt) + ", clusters " + std::to_string(clusters));
      RowTuning t = staged_from_short_rows(vpt);
      t.ce_staged_clusters = clusters;
      set_row_tuning(&t);
      const std::string plan = case_plan(GetParam());
      if (vpt == 8) ASSERT_EQ(plan.rfind("stage", 0), 0u) << plan;
      else if (plan.rfind("stage", 0) != 0) break;  // one CTA of 16 holds the row
      if (test::sm90_device()) run_case(GetParam());
      if (HasFatalFailure()) return;
    }
  }
  QUACK_REQUIRE_SM90();
}

INSTANTIATE_TEST_SUITE_P(StagedCases, CrossEntropyGpuStaged, testing::ValuesIn(staged_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });

// The staged fused gradient with its CTAs fitted to the row
// (RowTuning::reg_staged_balance; on by default since the forty-second session): every
// gradient case staged from 4K classes in 256-thread CTAs (the default CTA)
// whose CTA the balance trims below 256 threads (whole warps: 50304 classes
// bf16 in 2 x 224, fp32 50304 in 4 x 224, ...), plus the staged suite's odd
// tails; the plan's CTA must be the fewest whole warps covering the row at
// its cluster and tile. Each at both tiles, with the grid one cluster a row
// and two clusters walking the rows.
RowTuning balanced_staged(int vpt) {
  RowTuning t = default_row_tuning();
  t.ce_staged_grad = 3;
  t.ce_staged_vpt = vpt;
  t.ce_staged_min_cols = 0;
  t.reg_staged_balance = 1;
  t.shifted_rows = 2;  // shifted rows staged too
  return t;
}
// "stage team T thr H cl C vpt V": whether the threads are the fewest whole
// warps that cover c's row at C CTAs and V vectors a thread (*trimmed: and
// fewer than a power of two).
bool balanced_plan(const CeCase& c, const std::string& plan, bool* trimmed) {
  test::StagedPlan sp;
  if (!test::parse_staged_plan(plan, &sp)) return false;
  const int64_t vec = 16 / dtype_size(c.dtype);
  const int64_t cols = c.cols + (case_shifted(c) ? vec - 1 : 0);  // (shifted: from the vector before the row)
  *trimmed = (sp.threads & (sp.threads - 1)) != 0;
  return sp.threads == test::balanced_threads((cols + vec - 1) / vec, sp.cluster, sp.vpt);
}
std::vector<CeCase> balanced_cases() {
  const std::vector<CeCase> staged = cases_planned(cases_with_staged_tails(), balanced_staged(16), true);
  const RowTuning t = balanced_staged(16);
  set_row_tuning(&t);
  std::vector<CeCase> out;
  for (const CeCase& c : staged) {
    bool trimmed = false;
    if (balanced_plan(c, case_plan(c), &trimmed) && trimmed) out.push_back(c);
  }
  set_row_tuning(nullptr);
  return out;
}

class CrossEntropyGpuBalancedStaged : public testing::TestWithParam<CeCase> {
 protected:
  void TearDown() override { set_row_tuning(nullptr); }
};

TEST_P(CrossEntropyGpuBalancedStaged, MatchesFloat64Reference) {
  for (const int vpt : {16, 8}) {
    for (const int clusters : {-1, 2}) {
      SCOPED_TRACE("staged tile " + std::to_string(vpt) + ", clusters " + std::to_string(clusters));
      RowTuning t = balanced_staged(vpt);
      t.ce_staged_clusters = clusters;
      set_row_tuning(&t);
      const std::string plan = case_plan(GetParam());
      bool trimmed = false;
      if (vpt == 16) ASSERT_TRUE(balanced_plan(GetParam(), plan, &trimmed)) << plan;
      else if (!balanced_plan(GetParam(), plan, &trimmed)) break;  // not staged at 8 vectors
      if (test::sm90_device()) run_case(GetParam());
      if (HasFatalFailure()) return;
    }
  }
  QUACK_REQUIRE_SM90();
}

INSTANTIATE_TEST_SUITE_P(BalancedStagedCases, CrossEntropyGpuBalancedStaged, testing::ValuesIn(balanced_cases()),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });

// The cases the default tuning stages, with staging off: the register
// clusters (general options) and the two-pass gradient (plain ones) they
// took before and still take past a 16-CTA cluster's staging.
void unstaged(RowTuning& t) { t.ce_staged_grad = 0; }
class CrossEntropyGpuUnstaged : public test::TunedSuite<CeCase, unstaged> {};

TEST_P(CrossEntropyGpuUnstaged, MatchesFloat64Reference) {
  const std::string plan = case_plan(GetParam());
  ASSERT_NE(plan.rfind("stage", 0), 0u) << plan;
  QUACK_REQUIRE_SM90();
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(UnstagedCases, CrossEntropyGpuUnstaged,
                         testing::ValuesIn(cases_planned(cases(), default_row_tuning(), true)),
                         [](const testing::TestParamInfo<CeCase>& i) { return i.param.name(); });

// ---------------------------------------------------------------------------
// Vocabulary shards: each shard [a, b) of the whole logits (a view into them:
// row stride V, so shards start misaligned or aligned) writes its statistics
// (shard_stats), checked against float64 over the shard; then, given the
// whole rows' float64 lse (rounded to fp32), its slice of dlogits (lse_in),
// checked against the float64 gradient of the whole vocabulary. Targets
// include ignored rows and bad ones (V, -1).
struct ShardCase {
  DType dtype;
  int64_t rows, V;
  std::vector<int64_t> cuts;  // shard boundaries, 0 .. V
  Reduction red;
  bool weight;
  double eps, z, cap, dloss;
};

void run_shards(const ShardCase& c) {
  const int64_t M = c.rows, V = c.V;
  const int es = dtype_size(c.dtype);
  std::mt19937 gen(uint32_t(V * 31 + M));
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  Problem p;
  p.rows = M;
  p.cols = V;
  p.reduction = c.red;
  p.eps = c.eps;
  p.z_loss = c.z;
  p.cap = c.cap;
  std::uniform_int_distribution<int64_t> cls(0, V - 1);
  p.target.resize(size_t(M));
  // Out-of-range targets (NaN rows) only without a reduction, so that the
  // combined reduced losses are numbers to check.
  const bool bad_targets = c.red == kNone;
  for (int64_t r = 0; r < M; ++r)
    p.target[size_t(r)] = r % 9 == 4                      ? -100
                          : bad_targets && r % 13 == 6 ? V
                          : bad_targets && r % 17 == 8 ? -1
                                                        : cls(gen);
  std::vector<float> x(size_t(M * V));
  for (float& v : x) v = float(round_to(c.dtype, normal(gen)));
  p.x.assign(x.begin(), x.end());
  std::vector<float> w;
  if (c.weight) {
    w.resize(size_t(V));
    for (float& v : w) v = 0.25f + 1.75f * uni(gen);
    p.weight.assign(w.begin(), w.end());
  }
  std::vector<float> dloss;
  if (c.dloss != 0.0) {
    dloss.assign(size_t(c.red == kNone ? M : 1), float(c.dloss));
    if (c.red == kNone)
      for (int64_t r = 0; r < M; r += 3) dloss[size_t(r)] = -0.5f;
    p.dloss.assign(dloss.begin(), dloss.end());
  }
  const Reference ref = reference(p);
  const std::vector<double> grad = gradient(p, ref);

  GuardedTensor tx(Layout{c.dtype, M, V, V, 0});
  DeviceBuffer dt(size_t(M) * 8), dw(c.weight ? size_t(V) * 4 : 0), dl(dloss.size() * 4), dlse(size_t(M) * 4);
  ASSERT_TRUE(tx.ok() && dt.ok() && dlse.ok());
  QUACK_ASSERT_CUDA(tx.upload(x));
  QUACK_ASSERT_CUDA(cudaMemcpy(dt.data(), p.target.data(), dt.bytes(), cudaMemcpyHostToDevice));
  if (c.weight) QUACK_ASSERT_CUDA(cudaMemcpy(dw.data(), w.data(), dw.bytes(), cudaMemcpyHostToDevice));
  if (!dloss.empty()) QUACK_ASSERT_CUDA(cudaMemcpy(dl.data(), dloss.data(), dl.bytes(), cudaMemcpyHostToDevice));
  std::vector<float> lse32(static_cast<size_t>(M));
  for (int64_t r = 0; r < M; ++r) lse32[size_t(r)] = float(ref.row[size_t(r)].lse);
  QUACK_ASSERT_CUDA(cudaMemcpy(dlse.data(), lse32.data(), dlse.bytes(), cudaMemcpyHostToDevice));
  const bool wsmooth = c.weight && c.eps != 0.0;
  const double u = std::ldexp(1.0, -24), dcap = c.cap > 0.0 ? (24.0 + 4.0 * 12.0 / c.cap) * u * c.cap : 0.0;
  const double rt = c.dtype == kF32 ? 2e-5 : c.dtype == kF16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);

  const size_t shards = c.cuts.size() - 1;
  std::vector<float> gathered(shards * size_t(M) * 4);  // every shard's statistics, shard-major
  for (size_t k = 0; k + 1 < c.cuts.size(); ++k) {
    const int64_t a = c.cuts[k], b = c.cuts[k + 1], n = b - a;
    SCOPED_TRACE("shard [" + std::to_string(a) + ", " + std::to_string(b) + ") of " + std::to_string(V));
    CrossEntropyArgs args;
    args.rows = M;
    args.cols = n;
    args.logits = {static_cast<char*>(tx.ptr()) + a * es, c.dtype, V};
    args.target = dt.data();
    args.weight = c.weight ? reinterpret_cast<const float*>(dw.data()) : nullptr;
    args.reduction = c.red;
    args.label_smoothing = float(c.eps);
    args.z_loss = float(c.z);
    args.softcap = float(c.cap);
    args.class_offset = a;
    args.num_classes = V;
    GuardedTensor tst(Layout{kF32, M, 4, 4, 0});
    GuardedTensor tdx(Layout{c.dtype, M, n, n, 0});
    ASSERT_TRUE(tst.ok() && tdx.ok());
    // 1. Statistics.
    CrossEntropyArgs sa = args;
    sa.shard_stats = static_cast<float*>(tst.ptr());
    size_t ws = 1;
    ASSERT_TRUE(cross_entropy_workspace_bytes(sa, &ws).ok());
    EXPECT_EQ(ws, 0u) << "the statistics mode needs no workspace";
    QUACK_ASSERT_CUDA(tst.upload(std::vector<float>(size_t(M * 4), kSentinel)));
    const Status st = cross_entropy(sa, nullptr);
    ASSERT_TRUE(st.ok()) << st.message;
    QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
    std::vector<double> got;
    int64_t dirty = 0;
    QUACK_ASSERT_CUDA(tst.download(&got, &dirty));
    EXPECT_EQ(dirty, 0) << "bytes outside shard_stats were written";
    int64_t off = 0;
    for (int64_t r = 0; r < M; ++r) {
      const double* xr = &p.x[size_t(r * V)];
      // d sums w x' over the shard: rounding relative to sum |w x'|, plus each
      // capped logit's own absolute error dcap (tanh.approx) times its weight.
      double m = -INFINITY, s = 0.0, d = 0.0, dabs = 0.0, dcapw = 0.0;
      for (int64_t j = a; j < b; ++j) m = std::max(m, capped(p, xr[j]));
      for (int64_t j = a; j < b; ++j) {
        const double xc = capped(p, xr[j]), wc = wsmooth ? weight_of(p, j) : 1.0;
        s += std::exp(xc - m);
        d += wc * xc;
        dabs += wc * std::fabs(xc);
        dcapw += wc * dcap;
      }
      const int64_t t = p.target[size_t(r)];
      const double xt = (t >= a && t < b) ? capped(p, xr[t]) : 0.0;
      const double gamma = (2.0 * double(n) / 64.0 + 4.0 * std::log2(double(n) + 1.0) + 64.0) * u;
      const double* g4 = &got[size_t(r * 4)];
      const bool row_ok = std::fabs(g4[0] - m) <= dcap + 2.0 * u * std::fabs(m) &&
                          // (u |m|: the fold's exponent x' log2e - m log2e, one FFMA)
                          std::fabs(g4[1] - s) <= (gamma + 2.0 * dcap + u * std::fabs(m)) * s &&
                          std::fabs(g4[2] - d) <= (gamma + 1e-6) * dabs + dcapw &&
                          std::fabs(g4[3] - xt) <= dcap + 2.0 * u * std::fabs(xt);
      if (!row_ok && off++ < 5)
        ADD_FAILURE() << "row " << r << ": got {" << g4[0] << ", " << g4[1] << ", " << g4[2] << ", " << g4[3]
                      << "}, want {" << m << ", " << s << ", " << d << ", " << xt << "}";
    }
    EXPECT_EQ(off, 0) << "statistics off the float64 shard values";
    std::copy(got.begin(), got.end(), gathered.begin() + std::ptrdiff_t(k * size_t(M) * 4));
    // 2. The gradient from the whole rows' lse.
    CrossEntropyArgs ga = args;
    ga.lse_in = reinterpret_cast<const float*>(dlse.data());
    ga.dlogits = {tdx.ptr(), c.dtype, n};
    ga.dloss = dloss.empty() ? nullptr : reinterpret_cast<const float*>(dl.data());
    ASSERT_TRUE(cross_entropy_workspace_bytes(ga, &ws).ok());
    GuardedTensor tws(Layout{kF32, ws > 0 ? 1 : 0, std::max<int64_t>(int64_t(ws / 4), 1),
                             std::max<int64_t>(int64_t(ws / 4), 1), 0});
    ASSERT_TRUE(tws.ok());
    ga.workspace = ws > 0 ? tws.ptr() : nullptr;
    ga.workspace_bytes = ws;
    QUACK_ASSERT_CUDA(tdx.upload(std::vector<float>(size_t(M * n), kSentinel)));
    const Status gst = cross_entropy(ga, nullptr);
    ASSERT_TRUE(gst.ok()) << gst.message;
    QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
    QUACK_ASSERT_CUDA(tdx.download(&got, &dirty));
    EXPECT_EQ(dirty, 0) << "bytes outside dlogits were written";
    int64_t bad = 0;
    for (int64_t r = 0; r < M; ++r) {
      double scale = 0.0;
      for (int64_t j = 0; j < V; ++j) scale = std::max(scale, std::fabs(grad[size_t(r * V + j)]));
      for (int64_t j = a; j < b; ++j) {
        const double want = grad[size_t(r * V + j)], have = got[size_t(r * n + (j - a))];
        const double bound = rt * std::fabs(want) + (2e-5 + 20.0 * dcap) * scale + 1e-7;
        const bool ok = std::isnan(want) ? std::isnan(have) : std::fabs(have - want) <= bound;
        if (!ok && bad++ < 5) ADD_FAILURE() << "dlogits[" << r << "][" << j << "] = " << have << ", want " << want;
      }
    }
    EXPECT_EQ(bad, 0) << "gradient elements off";
  }

  // 3. The shards' statistics combined: loss and lse of the whole vocabulary.
  SCOPED_TRACE("combine of " + std::to_string(shards) + " shards");
  DeviceBuffer dg(gathered.size() * 4);
  ASSERT_TRUE(dg.ok());
  QUACK_ASSERT_CUDA(cudaMemcpy(dg.data(), gathered.data(), dg.bytes(), cudaMemcpyHostToDevice));
  const int64_t nloss = c.red == kNone ? M : 1;
  GuardedTensor tloss(Layout{kF32, nloss, 1, 1, 0}), tl2(Layout{kF32, M, 1, 1, 0});
  ASSERT_TRUE(tloss.ok() && tl2.ok());
  CrossEntropyArgs ca;
  ca.rows = M;
  ca.cols = V;
  ca.target = dt.data();
  ca.weight = c.weight ? reinterpret_cast<const float*>(dw.data()) : nullptr;
  ca.reduction = c.red;
  ca.label_smoothing = float(c.eps);
  ca.z_loss = float(c.z);
  ca.softcap = float(c.cap);  // ignored: the statistics hold x'
  ca.combine_stats = reinterpret_cast<const float*>(dg.data());
  ca.combine_shards = int64_t(shards);
  ca.loss = static_cast<float*>(tloss.ptr());
  ca.lse = static_cast<float*>(tl2.ptr());
  size_t cws = 0;
  ASSERT_TRUE(cross_entropy_workspace_bytes(ca, &cws).ok());
  GuardedTensor tcws(Layout{kF32, cws > 0 ? 1 : 0, std::max<int64_t>(int64_t(cws / 4), 1),
                            std::max<int64_t>(int64_t(cws / 4), 1), 0});
  ASSERT_TRUE(tcws.ok());
  ca.workspace = cws > 0 ? tcws.ptr() : nullptr;
  ca.workspace_bytes = cws;
  std::vector<double> closs[2], clse[2];
  for (int run = 0; run < 2; ++run) {
    QUACK_ASSERT_CUDA(tloss.upload(std::vector<float>(size_t(nloss), kSentinel)));
    QUACK_ASSERT_CUDA(tl2.upload(std::vector<float>(size_t(M), kSentinel)));
    if (cws > 0) QUACK_ASSERT_CUDA(tcws.poison());
    const Status cst = cross_entropy(ca, nullptr);
    ASSERT_TRUE(cst.ok()) << cst.message;
    QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
    int64_t dirty = 0, dirty2 = 0;
    QUACK_ASSERT_CUDA(tloss.download(&closs[run], &dirty));
    QUACK_ASSERT_CUDA(tl2.download(&clse[run], &dirty2));
    EXPECT_EQ(dirty + dirty2, 0) << "bytes outside loss and lse were written";
  }
  EXPECT_TRUE(same_bits(closs[0], closs[1]) && same_bits(clse[0], clse[1])) << "a repeated combine differed";
  check_loss_lse(p, ref, &closs[0], &clse[0], bad_targets);
}

// The plain aligned shards' statistics through the bulk-copy forward.
TEST(CrossEntropyGpuShards, StatisticsThroughTheBulkKernel) {
  QUACK_REQUIRE_SM90();
  const RowTuning t = bulk_for_every_row();
  set_row_tuning(&t);
  struct Restore {
    ~Restore() { set_row_tuning(nullptr); }
  } restore;
  const ShardCase cases[] = {
      {kBF16, 37, 50000, {0, 20000, 50000}, kMean, false, 0.1, 1e-4, 0.0, 0.0},
      {kF32, 29, 65536, {0, 16384, 40000, 65536}, kNone, false, 0.0, 0.0, 0.0, 0.75},
  };
  for (const ShardCase& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " V = " + std::to_string(c.V));
    run_shards(c);
  }
}

std::vector<ShardCase> lse_shard_cases() {
  return {
      // Plain, aligned shards: the streaming forward and the two-pass gradient kernel.
      {kBF16, 37, 50000, {0, 20000, 50000}, kMean, false, 0.1, 1e-4, 0.0, 0.0},
      {kF32, 29, 65536, {0, 16384, 40000, 65536}, kNone, false, 0.0, 0.0, 0.0, 0.75},
      // General options (class-weighted smoothing, softcap): register and streaming row kernels.
      {kF32, 41, 4099, {0, 1000, 4099}, kSum, true, 0.2, 1e-4, 30.0, 1.5},
      // Misaligned shards (element-wise kernels), fp16.
      {kF16, 23, 1001, {0, 333, 1001}, kMean, true, 0.0, 0.0, 0.0, 0.0},
      {kBF16, 19, 7, {0, 3, 4, 7}, kNone, true, 0.1, 0.0, 15.0, -2.0},
      // GPT-2's vocabulary in halves, softcapped (the register forward at
      // any width): rows at all eight offsets in their first vector.
      {kBF16, 17, 50257, {0, 25129, 50257}, kMean, false, 0.0, 1e-4, 30.0, 0.0},
  };
}

TEST(CrossEntropyGpuShards, StatisticsAndGradientFromLse) {
  QUACK_REQUIRE_SM90();
  for (const ShardCase& c : lse_shard_cases()) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " V = " + std::to_string(c.V));
    run_shards(c);
  }
}

// The same under RowTuning::shifted_rows' cross-entropy bit: the shifted
// shards' statistics from ce_reg_kernel's kShift, where a row whose target
// lies in another shard (or is ignored, or bad) must pick no lane -- a
// shifted head's padding lanes hold -inf, and an x_t of -inf (or -softcap)
// there made the combined loss +inf (or wrong by the softcap).
class CrossEntropyGpuShiftedShards : public test::Tuned<ce_shifted_rows> {};

TEST_F(CrossEntropyGpuShiftedShards, StatisticsAndGradientFromLse) {
  for (const int64_t cols : {25129, 25128}) {  // (GPT-2's halves: softcapped forwards, shifted rows)
    const std::string plan = cross_entropy_plan_description(17, cols, kBF16, DeviceLimits{}, true, true, true);
    EXPECT_EQ(plan.rfind("reg", 0), 0u) << "V = " << cols << ": " << plan;
  }
  QUACK_REQUIRE_SM90();
  for (const ShardCase& c : lse_shard_cases()) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " V = " + std::to_string(c.V));
    run_shards(c);
  }
}

// ---------------------------------------------------------------------------
// rows = 0: a reduced loss is still written (mean NaN, sum 0, as torch); with
// reduction none nothing is; no other pointer is needed.
TEST(CrossEntropyGpuEdge, NoRows) {
  QUACK_REQUIRE_SM90();
  GuardedTensor tloss(Layout{kF32, 1, 1, 1, 0}), tlse(Layout{kF32, 1, 1, 1, 0});
  ASSERT_TRUE(tloss.ok() && tlse.ok());
  for (const Reduction red : {kNone, kMean, kSum}) {
    SCOPED_TRACE(red == kNone ? "none" : red == kMean ? "mean" : "sum");
    QUACK_ASSERT_CUDA(tloss.upload({kSentinel}));
    QUACK_ASSERT_CUDA(tlse.upload({kSentinel}));
    CrossEntropyArgs a;
    a.rows = 0;
    a.cols = 1000;
    a.reduction = red;
    a.loss = static_cast<float*>(tloss.ptr());
    a.lse = static_cast<float*>(tlse.ptr());
    const Status st = cross_entropy(a, nullptr);
    ASSERT_TRUE(st.ok()) << st.message;
    QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
    std::vector<double> loss, lse;
    int64_t dirty = 0, dirty2 = 0;
    QUACK_ASSERT_CUDA(tloss.download(&loss, &dirty));
    QUACK_ASSERT_CUDA(tlse.download(&lse, &dirty2));
    EXPECT_EQ(dirty + dirty2, 0);
    EXPECT_EQ(lse[0], kSentinel) << "lse has no rows to write";
    if (red == kNone) EXPECT_EQ(loss[0], kSentinel) << "no per-row loss to write";
    if (red == kMean) EXPECT_TRUE(std::isnan(loss[0])) << loss[0];
    if (red == kSum) EXPECT_EQ(loss[0], 0.0);
  }
}

// The reduced loss is bit-identical run after run (fixed-order sums, no
// atomics), here with many rows per strand of the finishing sum.
TEST(CrossEntropyGpuEdge, DeterministicLoss) {
  QUACK_REQUIRE_SM90();
  // 40000 rows: the scalar kernels in three parts.
  const int64_t M = 40000, V = 160;
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(size_t(M * V));
  for (float& v : x) v = float(round_to(kBF16, normal(gen)));
  std::vector<int64_t> t(static_cast<size_t>(M));
  for (int64_t r = 0; r < M; ++r) t[size_t(r)] = r % 10 == 1 ? -100 : (r * 7919) % V;
  std::vector<float> w(static_cast<size_t>(V));
  for (int64_t c = 0; c < V; ++c) w[size_t(c)] = 0.5f + float(c % 7) * 0.25f;
  GuardedTensor tx(Layout{kBF16, M, V, V, 0}), tdx(Layout{kBF16, M, V, V, 0});
  DeviceBuffer dt(size_t(M) * 8), dw(size_t(V) * 4), dl(4);
  ASSERT_TRUE(tx.ok() && tdx.ok() && dt.ok() && dw.ok() && dl.ok());
  QUACK_ASSERT_CUDA(tx.upload(x));
  QUACK_ASSERT_CUDA(cudaMemcpy(dt.data(), t.data(), dt.bytes(), cudaMemcpyHostToDevice));
  QUACK_ASSERT_CUDA(cudaMemcpy(dw.data(), w.data(), dw.bytes(), cudaMemcpyHostToDevice));
  for (const Reduction red : {kMean, kSum}) {
    CrossEntropyArgs a;
    a.rows = M;
    a.cols = V;
    a.logits = {tx.ptr(), kBF16, V};
    a.target = dt.data();
    a.weight = reinterpret_cast<const float*>(dw.data());
    a.reduction = red;
    a.label_smoothing = 0.1f;
    a.z_loss = 1e-4f;
    a.loss = reinterpret_cast<float*>(dl.data());
    a.dlogits = {tdx.ptr(), kBF16, V};
    // The workspace as the library sizes it (a hand-written size went stale
    // when a mean's shares became two arrays).
    size_t need = 0;
    ASSERT_TRUE(cross_entropy_workspace_bytes(a, &need).ok());
    DeviceBuffer dws(need);
    ASSERT_TRUE(dws.ok());
    a.workspace = dws.data();
    a.workspace_bytes = dws.bytes();
    uint32_t first = 0;
    std::vector<double> g0;
    for (int run = 0; run < 4; ++run) {
      QUACK_ASSERT_CUDA(cudaMemset(dl.data(), 0xFF, 4));
      QUACK_ASSERT_CUDA(tdx.poison());
      const Status st = cross_entropy(a, nullptr);
      ASSERT_TRUE(st.ok()) << st.message;
      QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
      uint32_t bits = 0;
      QUACK_ASSERT_CUDA(cudaMemcpy(&bits, dl.data(), 4, cudaMemcpyDeviceToHost));
      float f;
      std::memcpy(&f, &bits, 4);
      EXPECT_TRUE(std::isfinite(f)) << f;
      std::vector<double> g;
      int64_t dirty = 0;
      QUACK_ASSERT_CUDA(tdx.download(&g, &dirty));
      EXPECT_EQ(dirty, 0) << "bytes outside dlogits' elements were written";
      if (run == 0) {
        first = bits;
        g0 = std::move(g);
      } else {
        EXPECT_EQ(bits, first) << "run " << run << " gave another loss";
        EXPECT_TRUE(same_bits(g, g0)) << "run " << run << " gave another gradient";
      }
    }
  }
}

// The reduced-loss edge tests' option sets: none, class weights with
// smoothing (which also launches the prepare kernel), z-loss with softcap,
// class weights with z-loss.
struct LossOpt {
  const char* name;
  bool weight;
  float eps, z, cap;
};
const LossOpt kLossOpts[] = {{"plain", false, 0.0f, 0.0f, 0.0f},
                             {"w_eps", true, 0.1f, 0.0f, 0.0f},
                             {"z_cap", false, 0.0f, 1e-4f, 30.0f},
                             {"w_z", true, 0.0f, 1e-4f, 0.0f}};
// A reduced loss of M rows of V contiguous logits with option set o (its
// class weights from `weight` where it has them), no gradient.
CrossEntropyArgs loss_args(int64_t M, int64_t V, DType dt, void* logits, const void* target, const void* weight,
                           Reduction red, const LossOpt& o, float* loss) {
  CrossEntropyArgs a;
  a.rows = M;
  a.cols = V;
  a.logits = {logits, dt, V};
  a.target = target;
  a.weight = o.weight ? static_cast<const float*>(weight) : nullptr;
  a.reduction = red;
  a.label_smoothing = o.eps;
  a.z_loss = o.z;
  a.softcap = o.cap;
  a.loss = loss;
  return a;
}

// One row's reduced loss is written by the row's own kernel
// (RowTuning::ce_one_row_loss, CEParams::loss_out) and no finish kernel
// runs: the same bits as the finish kernel's (the tuning off) and the
// float64 reference's value, for every kind of target -- counted, ignored,
// out of range, and (with class weights) of zero weight, where a mean is
// NaN -- with and without the options and the gradient, through the
// register (V = 7 .. 16384 bf16), streaming (fp32 16384, and 50304's
// forward) and two-pass (50304's gradient) kernels. It needs no shares in
// the workspace (none at all for a plain call without a gradient); the
// finish kernel's run gets its own, larger, workspace, which the row's own
// run is given too.
TEST(CrossEntropyGpuEdge, OneRowLossIsTheFinishKernelsBits) {
  QUACK_REQUIRE_SM90();
  const char* kinds[] = {"counted", "ignored", "out of range", "zero weight"};
  std::mt19937 gen(23);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  RowTuning off = default_row_tuning();
  off.ce_one_row_loss = 0;
  int64_t direct_nan = 0, compared = 0;
  for (const DType dt : {kBF16, kF32}) {
    for (const int64_t V : {int64_t(7), int64_t(1000), int64_t(4096), int64_t(16384), int64_t(50304)}) {
      std::vector<float> x(static_cast<size_t>(V)), w(static_cast<size_t>(V));
      for (float& v : x) v = float(round_to(dt, normal(gen)));
      for (float& v : w) v = 0.25f + 1.75f * uni(gen);
      const int64_t t0 = (V * 7) / 11;
      x[size_t(t0)] = float(round_to(dt, x[size_t(t0)] + 4.0f));
      GuardedTensor tx(Layout{dt, 1, V, V, 0}), tdx(Layout{dt, 1, V, V, 0}), tloss(Layout{kF32, 1, 1, 1, 0});
      DeviceBuffer dtarget(8), dweight(size_t(V) * 4);
      ASSERT_TRUE(tx.ok() && tdx.ok() && tloss.ok() && dtarget.ok() && dweight.ok());
      QUACK_ASSERT_CUDA(tx.upload(x));
      for (const LossOpt& o : kLossOpts) {
        for (int kind = 0; kind < 4; ++kind) {
          if (kind == 3 && !o.weight) continue;
          const int64_t t = kind == 1 ? -100 : kind == 2 ? V + 3 : t0;
          std::vector<float> wk = w;
          if (kind == 3) wk[size_t(t0)] = 0.0f;
          QUACK_ASSERT_CUDA(cudaMemcpy(dtarget.data(), &t, 8, cudaMemcpyHostToDevice));
          QUACK_ASSERT_CUDA(cudaMemcpy(dweight.data(), wk.data(), dweight.bytes(), cudaMemcpyHostToDevice));
          Problem p;
          p.rows = 1;
          p.cols = V;
          p.x.assign(x.begin(), x.end());
          p.target = {t};
          if (o.weight) p.weight.assign(wk.begin(), wk.end());
          p.eps = o.eps;
          p.z_loss = o.z;
          p.cap = o.cap;
          for (const Reduction red : {kMean, kSum}) {
            p.reduction = red;
            const Reference ref = reference(p);
            for (const bool grad : {false, true}) {
              SCOPED_TRACE(std::string(dt == kBF16 ? "bf16" : "f32") + " V " + std::to_string(V) + " " + o.name + " " +
                           kinds[kind] + (red == kMean ? " mean" : " sum") + (grad ? " with dlogits" : ""));
              CrossEntropyArgs a = loss_args(1, V, dt, tx.ptr(), dtarget.data(), dweight.data(), red, o,
                                             static_cast<float*>(tloss.ptr()));
              if (grad) a.dlogits = {tdx.ptr(), dt, V};
              // The workspace of the finish kernel's run (the larger: one
              // row's own loss needs no shares).
              size_t need = 0, need_on = 0;
              ASSERT_TRUE(cross_entropy_workspace_bytes(a, &need_on).ok());
              set_row_tuning(&off);
              const Status q = cross_entropy_workspace_bytes(a, &need);
              set_row_tuning(nullptr);
              ASSERT_TRUE(q.ok()) << q.message;
              EXPECT_LT(need_on, need) << "one row's own loss still asks for shares";
              GuardedTensor tws(Layout{kF32, 1, int64_t(std::max<size_t>(need / 4, 1)), int64_t(std::max<size_t>(need / 4, 1)), 0});
              ASSERT_TRUE(tws.ok());
              a.workspace = need > 0 ? tws.ptr() : nullptr;
              a.workspace_bytes = need;
              std::vector<double> loss[2];
              for (int run = 0; run < 2; ++run) {  // 0: one row's own loss (the default), 1: the finish kernel
                set_row_tuning(run == 0 ? nullptr : &off);
                QUACK_ASSERT_CUDA(tloss.upload({kSentinel}));
                QUACK_ASSERT_CUDA(tws.poison());
                const Status st = cross_entropy(a, nullptr);
                set_row_tuning(nullptr);
                ASSERT_TRUE(st.ok()) << st.message;
                QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
                int64_t dirty = 0;
                QUACK_ASSERT_CUDA(tloss.download(&loss[run], &dirty));
                EXPECT_EQ(dirty, 0) << "bytes outside loss were written";
                std::vector<double> scratch;
                QUACK_ASSERT_CUDA(tws.download(&scratch, &dirty));
                EXPECT_EQ(dirty, 0) << "bytes written past the workspace";
                EXPECT_NE(loss[run][0], double(kSentinel)) << "run " << run << ": the loss was not written";
              }
              EXPECT_TRUE(same_bits(loss[0], loss[1])) << loss[0][0] << " against the finish kernel's " << loss[1][0];
              check_loss_lse(p, ref, &loss[0], nullptr, kind == 2);
              direct_nan += std::isnan(loss[0][0]) ? 1 : 0;
              ++compared;
            }
          }
        }
      }
    }
  }
  // The NaN cases are there: a mean over an ignored, out-of-range or
  // zero-weight row, and a sum with an out-of-range target.
  EXPECT_GT(direct_nan, 0);
  EXPECT_GT(compared - direct_nan, 0);
}

// The finish kernel after the rows' kernel by programmatic dependent launch
// (RowTuning::ce_finish_pdl, the default): it may start while the rows run
// and must wait for their shares. Through every kernel that can come before
// it -- register rows, the forward streams, the bulk kernel, the two-pass
// gradient, staged gradients, and the combine kernel after it (40000 rows:
// three parts) -- each call eagerly and captured in a CUDA graph, replayed
// three times, with the loss and the workspace poisoned before each run:
// every run must give the bits of the ordinary launch (the tuning off) and
// the float64 reference's loss. A finish kernel that read the shares early
// would add poison.
TEST(CrossEntropyGpuEdge, FinishByPdlWaitsForTheRows) {
  QUACK_REQUIRE_SM90();
  struct Case {
    DType dt;
    int64_t rows, V;
    bool grad;
  };
  const Case cases[] = {{kBF16, 4, 4096, false},   {kBF16, 2, 8192, true},    {kF32, 3, 16384, false},
                        {kBF16, 1024, 4096, false}, {kBF16, 5, 50304, true},   {kBF16, 6, 32768, true},
                        {kF32, 40000, 160, false},  {kBF16, 700, 2048, true}};
  // (Decode-sized rows would take the rows' cluster and no finish kernel at
  // all: ce_cluster_rows off, in both runs.)
  RowTuning on = default_row_tuning();
  on.ce_cluster_rows = 0;
  RowTuning off = on;
  off.ce_finish_pdl = 0;
  struct Restore {
    ~Restore() { set_row_tuning(nullptr); }
  } restore;
  set_row_tuning(&on);
  std::mt19937 gen(29);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  cudaStream_t stream = nullptr;
  QUACK_ASSERT_CUDA(cudaStreamCreate(&stream));
  for (const Case& c : cases) {
    for (const Reduction red : {kMean, kSum}) {
      SCOPED_TRACE(std::string(c.dt == kBF16 ? "bf16" : "f32") + " M " + std::to_string(c.rows) + " V " +
                   std::to_string(c.V) + (red == kMean ? " mean" : " sum") + (c.grad ? " with dlogits" : ""));
      const int64_t M = c.rows, V = c.V;
      std::vector<float> x(static_cast<size_t>(M * V));
      for (float& v : x) v = float(round_to(c.dt, normal(gen)));
      std::vector<int64_t> t(static_cast<size_t>(M));
      for (int64_t r = 0; r < M; ++r) t[size_t(r)] = r % 5 == 3 ? -100 : (r * 7919 + 13) % V;
      GuardedTensor tx(Layout{c.dt, M, V, V, 0}), tdx(Layout{c.dt, M, V, V, 0}), tloss(Layout{kF32, 1, 1, 1, 0});
      DeviceBuffer dtarget(size_t(M) * 8);
      ASSERT_TRUE(tx.ok() && tdx.ok() && tloss.ok() && dtarget.ok());
      QUACK_ASSERT_CUDA(tx.upload(x));
      QUACK_ASSERT_CUDA(cudaMemcpy(dtarget.data(), t.data(), dtarget.bytes(), cudaMemcpyHostToDevice));
      CrossEntropyArgs a;
      a.rows = M;
      a.cols = V;
      a.logits = {tx.ptr(), c.dt, V};
      a.target = dtarget.data();
      a.reduction = red;
      a.loss = static_cast<float*>(tloss.ptr());
      if (c.grad) a.dlogits = {tdx.ptr(), c.dt, V};
      size_t need = 0;
      ASSERT_TRUE(cross_entropy_workspace_bytes(a, &need).ok());
      ASSERT_GT(need, 0u);
      const int64_t words = int64_t(need / 4);
      GuardedTensor tws(Layout{kF32, 1, words, words, 0});
      ASSERT_TRUE(tws.ok());
      a.workspace = tws.ptr();
      a.workspace_bytes = need;
      // One run: poison, call (eagerly, or the graph's replay), the loss.
      auto run = [&](cudaGraphExec_t exec, double* out) {
        QUACK_ASSERT_CUDA(tloss.upload({kSentinel}));
        QUACK_ASSERT_CUDA(tws.poison());
        QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
        if (exec != nullptr) {
          QUACK_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
        } else {
          const Status st = cross_entropy(a, stream);
          ASSERT_TRUE(st.ok()) << st.message;
        }
        QUACK_ASSERT_CUDA(cudaStreamSynchronize(stream));
        std::vector<double> l;
        int64_t dirty = 0;
        QUACK_ASSERT_CUDA(tloss.download(&l, &dirty));
        EXPECT_EQ(dirty, 0) << "bytes outside loss were written";
        std::vector<double> scratch;
        QUACK_ASSERT_CUDA(tws.download(&scratch, &dirty));
        EXPECT_EQ(dirty, 0) << "bytes written past the workspace";
        *out = l[0];
      };
      double ordinary = 0.0;
      set_row_tuning(&off);
      run(nullptr, &ordinary);
      set_row_tuning(&on);
      if (HasFatalFailure()) break;
      std::vector<double> got;
      double v = 0.0;
      run(nullptr, &v);
      got.push_back(v);
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      QUACK_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      const Status cap = cross_entropy(a, stream);
      QUACK_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
      ASSERT_TRUE(cap.ok()) << cap.message;
      QUACK_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      for (int k = 0; k < 3; ++k) {
        run(exec, &v);
        got.push_back(v);
      }
      QUACK_ASSERT_CUDA(cudaGraphExecDestroy(exec));
      QUACK_ASSERT_CUDA(cudaGraphDestroy(graph));
      for (size_t k = 0; k < got.size(); ++k)
        EXPECT_TRUE(same_bits({got[k]}, {ordinary})) << "run " << k << ": " << got[k] << " against the ordinary "
                                                     << "launch's " << ordinary;
      Problem p;
      p.rows = M;
      p.cols = V;
      p.x.assign(x.begin(), x.end());
      p.target = t;
      p.reduction = red;
      std::vector<double> loss = {got.back()};
      check_loss_lse(p, reference(p), &loss, nullptr, false);
    }
  }
  QUACK_ASSERT_CUDA(cudaStreamDestroy(stream));
}

// 2 .. 16 rows of a reduced loss without a gradient, each row a register
// CTA of its own: the rows' CTAs launch as one cluster and rank 0 writes the
// loss (RowTuning::ce_cluster_rows, ops::ce_cluster_finish) -- one kernel,
// where the tuning off gives two (rows, finish), counted as the kernel nodes
// of the call captured in a CUDA graph -- with the finish kernel's bits and
// the float64 reference's value, by both of the cluster's finishes (two
// cluster barriers; one way, RowTuning::ce_cluster_oneway). Every kind of target (counted, ignored, out
// of range, and with class weights of zero weight), the options, bf16 and
// fp32, loss and workspace poisoned before each run.
TEST(CrossEntropyGpuEdge, ClusterRowsFinishIsTheFinishKernelsBits) {
  QUACK_REQUIRE_SM90();
  RowTuning off = default_row_tuning();
  off.ce_cluster_rows = 0;
  RowTuning barriers = default_row_tuning(), oneway = default_row_tuning();
  barriers.ce_cluster_oneway = 0;
  oneway.ce_cluster_oneway = 1;
  const RowTuning* const runs[3] = {&barriers, &oneway, &off};
  std::mt19937 gen(31);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  cudaStream_t stream = nullptr;
  QUACK_ASSERT_CUDA(cudaStreamCreate(&stream));
  int64_t one_kernel = 0, nan_losses = 0;
  for (const DType dt : {kBF16, kF32}) {
    for (const int64_t V : {int64_t(1000), int64_t(2048), int64_t(4096), int64_t(8192)}) {
      for (const int64_t M : {int64_t(2), int64_t(3), int64_t(4), int64_t(5), int64_t(8), int64_t(11), int64_t(16)}) {
        std::vector<float> x(static_cast<size_t>(M * V)), w(static_cast<size_t>(V));
        for (float& v : x) v = float(round_to(dt, normal(gen)));
        for (float& v : w) v = 0.25f + 1.75f * uni(gen);
        // Targets: counted, with row 1 ignored and, from 5 rows, row 3 out of
        // range (its row's loss NaN: the reduced loss too); class 0 of zero
        // weight where a row targets it (row 2).
        std::vector<int64_t> t(static_cast<size_t>(M));
        for (int64_t r = 0; r < M; ++r) t[size_t(r)] = 1 + (r * 7919 + 17) % (V - 1);
        t[1] = -100;
        if (M >= 3) t[2] = 0;
        w[0] = 0.0f;
        if (M >= 5) t[3] = V + 2;
        GuardedTensor tx(Layout{dt, M, V, V, 0}), tloss(Layout{kF32, 1, 1, 1, 0});
        DeviceBuffer dtarget(size_t(M) * 8), dweight(size_t(V) * 4);
        ASSERT_TRUE(tx.ok() && tloss.ok() && dtarget.ok() && dweight.ok());
        QUACK_ASSERT_CUDA(tx.upload(x));
        QUACK_ASSERT_CUDA(cudaMemcpy(dtarget.data(), t.data(), dtarget.bytes(), cudaMemcpyHostToDevice));
        QUACK_ASSERT_CUDA(cudaMemcpy(dweight.data(), w.data(), dweight.bytes(), cudaMemcpyHostToDevice));
        for (const LossOpt& o : kLossOpts) {
          for (const Reduction red : {kMean, kSum}) {
            SCOPED_TRACE(std::string(dt == kBF16 ? "bf16" : "f32") + " M " + std::to_string(M) + " V " +
                         std::to_string(V) + " " + o.name + (red == kMean ? " mean" : " sum"));
            CrossEntropyArgs a = loss_args(M, V, dt, tx.ptr(), dtarget.data(), dweight.data(), red, o,
                                           static_cast<float*>(tloss.ptr()));
            size_t need = 0;
            set_row_tuning(&off);
            const Status q = cross_entropy_workspace_bytes(a, &need);
            set_row_tuning(nullptr);
            ASSERT_TRUE(q.ok()) << q.message;
            const int64_t words = int64_t(std::max<size_t>(need / 4, 1));
            GuardedTensor tws(Layout{kF32, 1, words, words, 0});
            ASSERT_TRUE(tws.ok());
            a.workspace = need > 0 ? tws.ptr() : nullptr;
            a.workspace_bytes = need;
            double loss[3] = {0.0, 0.0, 0.0};
            size_t kernels[3] = {0, 0, 0};
            for (int run = 0; run < 3; ++run) {  // the cluster's two finishes, then the finish kernel
              set_row_tuning(runs[run]);
              QUACK_ASSERT_CUDA(tloss.upload({kSentinel}));
              QUACK_ASSERT_CUDA(tws.poison());
              QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
              cudaGraph_t graph = nullptr;
              cudaGraphExec_t exec = nullptr;
              QUACK_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
              const Status st = cross_entropy(a, stream);
              QUACK_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
              set_row_tuning(nullptr);
              ASSERT_TRUE(st.ok()) << st.message;
              QUACK_ASSERT_CUDA(cudaGraphGetNodes(graph, nullptr, &kernels[run]));
              QUACK_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
              QUACK_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
              QUACK_ASSERT_CUDA(cudaStreamSynchronize(stream));
              QUACK_ASSERT_CUDA(cudaGraphExecDestroy(exec));
              QUACK_ASSERT_CUDA(cudaGraphDestroy(graph));
              std::vector<double> l, scratch;
              int64_t dirty = 0;
              QUACK_ASSERT_CUDA(tloss.download(&l, &dirty));
              EXPECT_EQ(dirty, 0) << "bytes outside loss were written";
              QUACK_ASSERT_CUDA(tws.download(&scratch, &dirty));
              EXPECT_EQ(dirty, 0) << "bytes written past the workspace";
              EXPECT_NE(l[0], double(kSentinel)) << "run " << run << ": the loss was not written";
              loss[run] = l[0];
            }
            EXPECT_TRUE(same_bits({loss[0]}, {loss[2]})) << loss[0] << " against the finish kernel's " << loss[2];
            EXPECT_TRUE(same_bits({loss[1]}, {loss[2]}))
                << "one way: " << loss[1] << " against the finish kernel's " << loss[2];
            // (Class-weighted smoothing launches the prepare kernel first.)
            const size_t prepare = o.weight && o.eps != 0.0f ? 1 : 0;
            EXPECT_EQ(kernels[2], 2 + prepare) << "the tuning off: the rows' kernel and the finish kernel";
            EXPECT_EQ(kernels[0], 1 + prepare) << "the rows' cluster: no finish kernel";
            EXPECT_EQ(kernels[1], 1 + prepare) << "the rows' cluster one way: no finish kernel";
            one_kernel += kernels[0] == 1 + prepare ? 1 : 0;
            nan_losses += std::isnan(loss[0]) ? 1 : 0;
            Problem p;
            p.rows = M;
            p.cols = V;
            p.x.assign(x.begin(), x.end());
            p.target = t;
            if (o.weight) p.weight.assign(w.begin(), w.end());
            p.reduction = red;
            p.eps = o.eps;
            p.z_loss = o.z;
            p.cap = o.cap;
            std::vector<double> got = {loss[0]};
            check_loss_lse(p, reference(p), &got, nullptr, M >= 5);
          }
        }
      }
    }
  }
  QUACK_ASSERT_CUDA(cudaStreamDestroy(stream));
  // Some losses are NaN (an out-of-range target), most are not.
  EXPECT_GT(one_kernel, 0);
  EXPECT_GT(nan_losses, 0);
  EXPECT_LT(nan_losses, one_kernel);
}

// ---------------------------------------------------------------------------
// cross_entropy_scale_grad: dx *= dloss in fp32, rounded to the dtype, so
// every scaled element is exactly round(float(dx) * f); rows whose factor is
// exactly 1 are neither read nor written (checked on rows of NaN poison, whose
// bits a multiplication by 1 would canonicalise).

struct ScaleSetup {
  DType dtype;
  int64_t rows, cols, offset, pad;
};

class CrossEntropyScaleGrad : public testing::TestWithParam<ScaleSetup> {};

// Raw bytes of the operand's elements region (first element .. last).
cudaError_t raw_bytes(const GuardedTensor& t, std::vector<unsigned char>* out) {
  const Layout& l = t.layout();
  const size_t n = size_t(((l.rows - 1) * l.stride + l.cols) * dtype_size(l.dtype));
  out->resize(n);
  return cudaMemcpy(out->data(), t.ptr(), n, cudaMemcpyDeviceToHost);
}

void run_scale_case(const ScaleSetup& s) {
  const Layout l{s.dtype, s.rows, s.cols, s.cols + s.pad, s.offset};
  const int es = dtype_size(s.dtype);
  std::mt19937 gen(uint32_t(s.rows * 31 + s.cols + int(s.dtype)));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(size_t(s.rows * s.cols));
  for (int64_t i = 0; i < int64_t(v.size()); ++i)  // gradient-like: magnitudes 1e-6 .. 1
    v[size_t(i)] = float(round_to(s.dtype, normal(gen) * std::pow(10.0f, -float(i % 7))));
  GuardedTensor t(l);
  DeviceBuffer dg(size_t(s.rows) * 4);
  ASSERT_TRUE(t.ok() && dg.ok());

  auto run = [&](const std::vector<float>& factors, bool per_row) {
    QUACK_ASSERT_CUDA(cudaMemcpy(dg.data(), factors.data(), factors.size() * 4, cudaMemcpyHostToDevice));
    CrossEntropyGradScaleArgs a;
    a.rows = s.rows;
    a.cols = s.cols;
    a.dlogits = {t.ptr(), s.dtype, l.stride};
    a.dloss = reinterpret_cast<const float*>(dg.data());
    a.per_row = per_row;
    const Status st = cross_entropy_scale_grad(a, nullptr);
    ASSERT_TRUE(st.ok()) << st.message;
    QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
  };
  auto poison_row = [&](int64_t r) {
    return cudaMemset(static_cast<char*>(t.ptr()) + r * l.stride * es, 0xFF, size_t(s.cols * es));
  };
  auto expect_scaled = [&](const std::vector<double>& got, int64_t r, float f) {
    int64_t wrong = 0;
    for (int64_t j = 0; j < s.cols; ++j) {
      const size_t i = size_t(r * s.cols + j);
      const double want = round_to(s.dtype, v[i] * f);
      if (!(got[i] == want) && ++wrong <= 3)
        ADD_FAILURE() << "row " << r << " col " << j << ": got " << got[i] << ", want " << want << " (factor " << f << ")";
    }
    EXPECT_EQ(wrong, 0) << "row " << r;
  };

  // A scalar factor of exactly 1: no byte changes (rows of NaN poison
  // included).
  {
    QUACK_ASSERT_CUDA(t.upload(v));
    QUACK_ASSERT_CUDA(poison_row(s.rows / 2));
    std::vector<unsigned char> before, after;
    QUACK_ASSERT_CUDA(raw_bytes(t, &before));
    run({1.0f}, false);
    QUACK_ASSERT_CUDA(raw_bytes(t, &after));
    EXPECT_TRUE(before == after) << "a factor of 1 changed dlogits";
  }
  // A scalar factor of 2.5: every element exactly scaled; gaps and guards
  // untouched.
  {
    QUACK_ASSERT_CUDA(t.upload(v));
    run({2.5f}, false);
    std::vector<double> got;
    int64_t dirty = 0;
    QUACK_ASSERT_CUDA(t.download(&got, &dirty));
    EXPECT_EQ(dirty, 0);
    for (int64_t r = 0; r < s.rows; ++r) expect_scaled(got, r, 2.5f);
  }
  // Per row, factors 1 (rows r % 3 == 0, poisoned: must keep their bits) mixed
  // with others (negative, fractional, 0).
  {
    QUACK_ASSERT_CUDA(t.upload(v));
    std::vector<float> f(size_t(s.rows));
    for (int64_t r = 0; r < s.rows; ++r) {
      const float others[4] = {-0.5f, 3.0f, 0.0f, 1e-3f};
      f[size_t(r)] = r % 3 == 0 ? 1.0f : others[r % 4];
      if (r % 3 == 0) QUACK_ASSERT_CUDA(poison_row(r));
    }
    std::vector<unsigned char> before, after;
    QUACK_ASSERT_CUDA(raw_bytes(t, &before));
    run(f, true);
    QUACK_ASSERT_CUDA(raw_bytes(t, &after));
    std::vector<double> got;
    int64_t dirty = 0;
    QUACK_ASSERT_CUDA(t.download(&got, &dirty));
    EXPECT_EQ(dirty, 0);
    for (int64_t r = 0; r < s.rows; ++r) {
      if (r % 3 == 0) {
        const size_t b0 = size_t(r * l.stride * es), n = size_t(s.cols * es);
        EXPECT_EQ(std::memcmp(before.data() + b0, after.data() + b0, n), 0) << "row " << r << " (factor 1) was written";
      } else {
        expect_scaled(got, r, f[size_t(r)]);
      }
    }
  }
}

TEST_P(CrossEntropyScaleGrad, ScalesExactlyAndSkipsUnitFactors) {
  QUACK_REQUIRE_SM90();
  run_scale_case(GetParam());
}

std::string scale_name(const testing::TestParamInfo<ScaleSetup>& i) {
  const ScaleSetup& s = i.param;
  return std::string(s.dtype == kF32 ? "f32" : s.dtype == kF16 ? "f16" : "bf16") + "_M" + std::to_string(s.rows) +
         "_V" + std::to_string(s.cols) + (s.offset ? "_off" + std::to_string(s.offset) : std::string()) +
         (s.pad ? "_pad" + std::to_string(s.pad) : std::string());
}

// (Rows that are not whole vectors -- odd pitches, misaligned starts -- go
// element by element by default; CrossEntropyScaleGradShifted takes them
// in shifted vectors.)
INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyScaleGrad,
                         testing::Values(ScaleSetup{kF32, 7, 1000, 0, 0}, ScaleSetup{kBF16, 289, 4096, 0, 8},
                                         ScaleSetup{kF16, 13, 50304, 0, 0}, ScaleSetup{kBF16, 7, 1001, 1, 0},
                                         ScaleSetup{kF32, 5, 3, 0, 1}, ScaleSetup{kF16, 3, 262144, 1, 3},
                                         ScaleSetup{kBF16, 37, 50257, 0, 0}, ScaleSetup{kF32, 9, 32001, 3, 0},
                                         ScaleSetup{kBF16, 40, 7, 0, 0}),
                         scale_name);

// The same shapes with RowTuning::shifted_rows' cross-entropy bit: rows
// that are not whole vectors (every offset in the first vector: bf16 1001
// from a misaligned start, 50257 and 7 contiguous, fp32 32001 from offset
// 3) in shifted vectors, the first and last over the row's lanes only;
// aligned rows as before.
class CrossEntropyScaleGradShifted : public test::TunedSuite<ScaleSetup, ce_shifted_rows> {};

TEST_P(CrossEntropyScaleGradShifted, ScalesExactlyAndSkipsUnitFactors) {
  QUACK_REQUIRE_SM90();
  run_scale_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(ShiftedShapes, CrossEntropyScaleGradShifted,
                         testing::Values(ScaleSetup{kBF16, 7, 1001, 1, 0}, ScaleSetup{kF16, 3, 262144, 1, 3},
                                         ScaleSetup{kBF16, 37, 50257, 0, 0}, ScaleSetup{kF32, 9, 32001, 3, 0},
                                         ScaleSetup{kBF16, 40, 7, 0, 0}, ScaleSetup{kF32, 7, 1000, 0, 0}),
                         scale_name);

}  // namespace
}  // namespace quack
