// GPU tests of softmax / log-softmax, forward and backward, through the
// public C++ API (quack::softmax_fwd / softmax_bwd).
//
// Every operand lives in its own poisoned, guarded buffer (support/
// guarded_tensor.hpp). Forward outputs are compared with a float64 reference
// of x as stored; the backward runs on y = that reference rounded to the
// dtype and a random dy, against a float64 reference of the same. Each call is
// repeated on freshly poisoned outputs and must give bit-identical results;
// inputs must come back unchanged and no byte outside the outputs' elements
// may change.
//
// Cases cover every kernel family: register-resident (sub-warp teams,
// whole-CTA teams, clusters, many rows per persistent cluster, forward rows
// staged in shared memory), chunked (rows beyond the register tiles) and
// streaming (misaligned rows or strides), plus rows of +inf, -inf and NaN
// checked against torch's rules, and rows of finite values of any magnitude
// (3e7, -1e12, up to 3e38: `huge`), where log2-unit arithmetic breaks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
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

using test::GuardedTensor;
using test::Layout;
using test::round_to;

constexpr DType kF32 = DType::kFloat32;
constexpr DType kF16 = DType::kFloat16;
constexpr DType kBF16 = DType::kBFloat16;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct SmCase {
  std::string name;
  int64_t rows, cols;
  DType dtype;
  bool log = false;
  int64_t offset = 0;   // elements before row 0 (1: misaligned rows)
  int64_t pad = 0;      // row stride = cols + pad
  double shift = 0.0;   // added to every x (large-magnitude stability)
  bool special = false; // rows of +inf / -inf / NaN mixed in
  bool huge = false;    // rows of huge finite values (fill_huge_rows)
  int64_t out_offset = 0;  // the outputs (out, dx; so y) start this much further than x, dy
};

std::vector<SmCase> cases() {
  std::vector<SmCase> v;
  auto add = [&](SmCase c) {
    v.push_back(c);
    c.log = true;
    c.name += "_log";
    v.push_back(c);
  };
  // Register-resident: sub-warp teams, whole CTAs.
  add({"N1_f32", 7, 1, kF32});
  add({"N3_bf16_M199", 199, 3, kBF16});
  add({"N8_f16_M1000", 1000, 8, kF16});
  add({"N100_bf16", 37, 100, kBF16});
  add({"N1000_f32_shift1e4", 13, 1000, kF32, false, 0, 0, 1e4});
  add({"N4096_bf16_M8192", 8192, 4096, kBF16});
  add({"N8191_f16", 9, 8191, kF16});
  add({"N32768_bf16", 4, 32768, kBF16});
  // Clusters, many rows per persistent cluster (register-held in the backward;
  // by default the forward chunks these rows, or stages them (fp32):
  // SoftmaxGpuRegister keeps them in registers, SoftmaxGpuStaged stages them).
  add({"N65544_bf16", 5, 65544, kBF16});
  add({"N70000_bf16_M300", 300, 70000, kBF16});
  add({"N131072_f32", 3, 131072, kF32});
  add({"N262144_bf16_shift1e4", 2, 262144, kBF16, false, 0, 0, 1e4});
  // Rows the forward can stage (StagedCases): a partial last vector in a
  // padded row, special values across a cluster.
  add({"N65541_f16_padded", 7, 65541, kF16, false, 0, 3});
  add({"N131072_bf16_special", 8, 131072, kBF16, false, 0, 0, 0.0, true});
  // Shifted rows: every operand's rows start at the same offset in a
  // 16-byte vector, not always 0 -- pitches that are not whole vectors
  // (contiguous odd N; N = 1, 3, 7 above too) put rows at every offset
  // (bf16 4100: 0 and 8 bytes; fp32 1001: 0, 4, 8, 12; 16-bit 32001 /
  // 50257: all eight), a misaligned base shifts them all. The register and
  // staged kernels take them from the vector that holds each row's first
  // element (kShift; sub-warp teams, one CTA, staged clusters), rows
  // beyond them the streaming kernel in shifted vectors. Outputs at other
  // offsets than the inputs' (out_shifted): streaming, element by element.
  add({"N200_bf16_misaligned", 37, 200, kBF16, false, 1});
  add({"N4097_f16_misaligned_padded", 11, 4097, kF16, false, 1, 3});
  add({"N512_f32_padded", 13, 512, kF32, false, 0, 4});
  add({"N4100_bf16_M37_odd_pitch", 37, 4100, kBF16});
  add({"N1001_f32_odd_pitch", 13, 1001, kF32});
  add({"N7_bf16_M40_odd_pitch", 40, 7, kBF16});
  add({"N32001_bf16_odd_pitch_shift1e4", 9, 32001, kBF16, false, 0, 0, 1e4});
  add({"N50257_f16_odd_pitch", 9, 50257, kF16});
  add({"N50257_bf16_special_odd_pitch", 8, 50257, kBF16, false, 0, 0, 0.0, true});
  add({"N128257_f32_misaligned_odd_pitch", 3, 128257, kF32, false, 1});
  // Planned past a CTA's columns by the head's VEC - 1 alone: rows at
  // offsets 0 and 1 leave the cluster's last CTA no element (bf16 32767:
  // SoftmaxGpuRegister's backward, 2 CTAs of 32768 columns; fp32 65535:
  // its 5 CTAs of 16384 and the staged backward's 9 of 8192 at 8 vectors
  // a thread), offsets 2 and 3 one or two.
  add({"N32767_bf16_M9_odd_pitch", 9, 32767, kBF16});
  add({"N65535_f32_odd_pitch", 5, 65535, kF32});
  add({"N4097_bf16_out_shifted", 11, 4097, kBF16, false, 0, 0, 0.0, false, false, 1});
  add({"N1000_f32_aligned_out_shifted", 13, 1000, kF32, false, 0, 0, 0.0, false, false, 3});
  // Beyond the register tiles (a partial last vector in the first). fp32 N =
  // 256K: forward staged in 16 CTAs, backward in the wide geometry by
  // default (SoftmaxGpuRegister: a 16-CTA register cluster both ways;
  // SoftmaxGpuChunked: chunked).
  add({"N262144_f32", 2, 262144, kF32});
  // Backward rows past 16 staged 256-thread CTAs: y staged, dy in registers
  // (SoftmaxGpuWideStaged), partial last vectors, idle threads in the last
  // CTA, a full 16-CTA 16-bit row.
  add({"N150001_f32_padded_wide", 3, 150001, kF32, false, 0, 3});
  add({"N300001_f16_padded_wide", 3, 300001, kF16, false, 0, 7});
  add({"N524288_bf16_wide", 2, 524288, kBF16});
  // Forward rows past 16 staged 256-thread CTAs: x split between shared
  // memory and registers (the wide geometry, the default since the
  // forty-first session; SoftmaxGpuWideStaged at both CTA sizes); the
  // longest backward rows (fp32 past 512K) chunked.
  add({"N400000_f32_wide", 2, 400000, kF32});
  add({"N700001_f16_padded_wide", 2, 700001, kF16, false, 0, 7});
  add({"N1048576_f32_wide", 2, 1048576, kF32});
  add({"N300001_f32_chunked", 2, 300001, kF32});
  add({"N1048576_bf16_chunked", 2, 1048576, kBF16});
  // Shifted rows in the wide geometry (3, 4 and 5 elements before each
  // row in its first vector) both ways.
  add({"N700001_bf16_misaligned_odd_pitch_wide", 3, 700001, kBF16, false, 3});
  // 131 grid ranks of 8192 columns (SoftmaxGpuGrid): lanes 0-2 of phase B's
  // combine take a fifth rank (1 to 128 ranks take at most four); special
  // rows, a partial last rank and vector.
  add({"N1070001_bf16_special_131_ranks", 8, 1070001, kBF16, false, 0, 7, 0.0, true});
  // Special values (torch: +inf or NaN anywhere -> the row is NaN; all -inf ->
  // NaN; -inf entries -> 0 / -inf).
  add({"N64_f32_special", 8, 64, kF32, false, 0, 0, 0.0, true});
  add({"N5000_bf16_special", 8, 5000, kBF16, false, 0, 0, 0.0, true});
  add({"N300001_f32_special_chunked", 8, 300001, kF32, false, 0, 0, 0.0, true});
  // Finite values of any magnitude (fill_huge_rows): sub-warp teams, a
  // whole CTA, a cluster (staged by default, and register-held under
  // SoftmaxGpuRegister), fp32 staged, streaming (N = 1 rows are 4 bytes
  // apart: streaming too). Against 97cefa5's kernels every case that
  // reached the register or staged forwards failed (bench/results/logs/
  // 2026-12-04-finite-old-huge-97cefa5.txt).
  add({"N1_f32_huge", 16, 1, kF32, false, 0, 0, 0.0, false, true});
  add({"N96_bf16_huge", 16, 96, kBF16, false, 0, 0, 0.0, false, true});  // (aligned rows: a register team)
  add({"N4096_f32_huge", 16, 4096, kF32, false, 0, 0, 0.0, false, true});
  add({"N32768_f32_huge", 8, 32768, kF32, false, 0, 0, 0.0, false, true});
  add({"N65544_bf16_huge", 8, 65544, kBF16, false, 0, 0, 0.0, false, true});
  add({"N200_bf16_huge_misaligned", 16, 200, kBF16, false, 1, 0, 0.0, false, true});
  return v;
}

// Rows of large finite values, by row % 8 (the others as generated): 0:
// shifted by 3e7 (fp32 steps of 2: a spread of probabilities); 1: -1e12 +
// 2e6 u (steps of 65536: e^(x - max) is 0 or 1); 2: one 3e38; 3: 3e38, 2.5e38
// and -3e38 (its log_softmax, -6e38, is -inf in every dtype); 4: 3e38 twice
// (two maxima: 1/2 each); 5: all -3e38 but one -2.9e38; 6: all -3e38
// (uniform); 7: shifted by 1e7, just inside log2 units' range (max log2 e
// rounds by up to 1/2 there: the sums' conversion, core::from_log2_units,
// at its largest). |max| >= 2^24 takes natural units in the
// register and staged forwards; in log2 units the rounding of max log2 e
// leaves the float range from about 1e10, and past 2.36e38 max log2 e does.
void fill_huge_rows(std::vector<float>& x, int64_t rows, int64_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto at = [&](int64_t r, int64_t j) -> float& { return x[size_t(r * n + j)]; };
  for (int64_t r = 0; r < rows; ++r) {
    switch (r % 8) {
      case 0: for (int64_t j = 0; j < n; ++j) at(r, j) += 3e7f; break;
      case 1: for (int64_t j = 0; j < n; ++j) at(r, j) = -1e12f + 2e6f * u(gen); break;
      case 2: at(r, n / 2) = 3e38f; break;
      case 3: at(r, n / 3) = -3e38f; at(r, 0) = 3e38f; at(r, n - 1) = 2.5e38f; break;
      case 4: at(r, n / 4) = 3e38f; at(r, 3 * n / 4) = 3e38f; break;
      case 5: for (int64_t j = 0; j < n; ++j) at(r, j) = j == n - 1 ? -2.9e38f : -3e38f; break;
      case 6: for (int64_t j = 0; j < n; ++j) at(r, j) = -3e38f; break;
      default: for (int64_t j = 0; j < n; ++j) at(r, j) += 1e7f; break;
    }
  }
}

void PrintTo(const SmCase& c, std::ostream* os) { *os << c.name; }

// Elements a 16-byte vector holds.
int64_t vec_elems(DType t) { return t == kF32 ? 4 : 8; }
// The case's rows start inside a vector (a misaligned base or a pitch that
// is not whole vectors), every operand's at the same offset (out_offset
// whole vectors): shifted rows, planned for N + VEC - 1 columns.
bool shifted(const SmCase& c) {
  const int64_t v = vec_elems(c.dtype);
  return c.out_offset % v == 0 && (c.offset % v != 0 || (c.cols + c.pad) % v != 0);
}
// The plan the case's call takes (workspace as softmax_plan_description's
// default).
std::string plan_of(const SmCase& c, bool backward) {
  return softmax_plan_description(c.rows, c.cols, c.dtype, backward, DeviceLimits{}, true, shifted(c));
}

// Float64 forward reference with torch's special-value rules.
std::vector<double> reference_fwd(const std::vector<float>& x, int64_t rows, int64_t cols, bool log) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = &x[size_t(r * cols)];
    double m = -kInf;
    bool poisoned = false;
    for (int64_t c = 0; c < cols; ++c) {
      if (std::isnan(xr[c]) || xr[c] == float(kInf)) poisoned = true;
      m = std::max(m, double(xr[c]));
    }
    if (m == -kInf) poisoned = true;
    double s = 0.0;
    for (int64_t c = 0; c < cols && !poisoned; ++c) s += std::exp(double(xr[c]) - m);
    for (int64_t c = 0; c < cols; ++c) {
      const double d = double(xr[c]) - m;
      double v = poisoned ? std::nan("") : (log ? d - std::log(s) : std::exp(d) / s);
      // Beyond every dtype's range (log_softmax of -3e38 against 3e38):
      // the stored result is -inf.
      if (std::fabs(v) > 3.5e38) v = std::copysign(kInf, v);
      y[size_t(r * cols + c)] = v;
    }
  }
  return y;
}

// |got - want| within the dtype's rounding of |want| + scale, plus `atol`
// and the smallest step the output can resolve (fp16 subnormals; results
// below 2^-126 flush to zero).
bool close(double got, double want, double scale, DType t, double atol = 0.0) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  const double rtol = t == kF32 ? 2e-5 : t == kF16 ? 2e-3 : 1.6e-2;
  const double tiny = t == kF16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -126);
  return std::fabs(got - want) <= rtol * (std::fabs(want) + scale) + atol + tiny;
}

// Runs `call` twice on poisoned outputs; checks guards, input integrity and
// bit-identical repeats; returns the first run's outputs. With `in_place`,
// `out` is also an input: it holds *in_place (uploaded afresh, its gaps and
// guards poison) before each run instead of poison.
template <class Call>
void run_twice(const std::vector<GuardedTensor*>& inputs, const std::vector<std::vector<float>>& input_values,
               GuardedTensor& out, Call&& call, std::vector<double>* got,
               const std::vector<float>* in_place = nullptr) {
  std::vector<double> first;
  for (int run = 0; run < 2; ++run) {
    QUACK_ASSERT_CUDA(in_place ? out.upload(*in_place) : out.poison());
    const Status st = call();
    ASSERT_TRUE(st.ok()) << st.message;
    QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
    int64_t dirty = 0;
    std::vector<double> v;
    QUACK_ASSERT_CUDA(out.download(&v, &dirty));
    EXPECT_EQ(dirty, 0) << "bytes outside the output's elements were written";
    if (run == 0) {
      first = std::move(v);
    } else {
      int64_t diff = 0;
      for (size_t i = 0; i < v.size(); ++i)
        diff += std::memcmp(&v[i], &first[i], sizeof(double)) != 0 && !(std::isnan(v[i]) && std::isnan(first[i]));
      EXPECT_EQ(diff, 0) << "a repeated call gave different bits";
    }
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    int64_t dirty = 0;
    std::vector<double> v;
    QUACK_ASSERT_CUDA(inputs[k]->download(&v, &dirty));
    EXPECT_EQ(dirty, 0) << "an input's guard or gap changed";
    int64_t changed = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const double want = round_to(inputs[k]->layout().dtype, input_values[k][i]);
      changed += !(v[i] == want || (std::isnan(v[i]) && std::isnan(want)));
    }
    EXPECT_EQ(changed, 0) << "an input was modified";
  }
  *got = std::move(first);
}

// The case as it runs: its rows capped under QUACK_TEST_MAX_ELEMS
// (test::case_rows), before any plan check.
SmCase as_run(SmCase c) {
  c.rows = test::case_rows(c.rows, c.cols);
  return c;
}

// How run_case calls the op: workspace, the forward gets the workspace
// softmax_fwd_workspace_bytes asks for (the grid kernel's, where the tuning
// sends the row to it); forward_only, no backward (suites whose tuning
// changes only the forward); in_place, the forward writes over x and the
// backward over dy, then (a second call) over y: the outputs take the
// inputs' layout (the case's out_offset is not used).
struct RunOpts {
  bool workspace = false;
  bool forward_only = false;
  bool in_place = false;
  bool bwd_workspace = false;  // the backward gets softmax_bwd_workspace_bytes' workspace likewise
};

// A workspace of `bytes` (a multiple of 4) in a guarded buffer of its own,
// poisoned whole (the kernel zeroes what it uses; the guards must stay
// poison), so that a write past either end shows; null if poisoning failed.
std::unique_ptr<GuardedTensor> guarded_workspace(size_t bytes) {
  const int64_t words = int64_t(bytes / 4);
  auto t = std::make_unique<GuardedTensor>(Layout{kF32, 1, words, words, 0});
  if (t->ok() && t->poison() != cudaSuccess) return nullptr;
  return t;
}

// Forward, then backward, of one case against float64.
void run_case(const SmCase& c, const RunOpts& opts = RunOpts{}) {
  const Layout layout{c.dtype, c.rows, c.cols, c.cols + c.pad, c.offset};
  std::mt19937 gen(uint32_t(c.rows * 131 + c.cols));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);

  // x: rows scaled 1..8 so that a row normalised with another's max shows.
  std::vector<float> x(size_t(c.rows * c.cols));
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t j = 0; j < c.cols; ++j)
      x[size_t(r * c.cols + j)] = float(round_to(c.dtype, float(c.shift) + float(1 + r % 8) * 2.0f * u(gen)));
  if (c.special) {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
    const int64_t n = c.cols;
    // Only the rows the case runs (QUACK_TEST_MAX_ELEMS may cap them below 6).
    auto at = [&](int64_t r, int64_t j) -> float& {
      static float sink;
      return r < c.rows ? x[size_t(r * n + j)] : sink;
    };
    at(0, n / 2) = inf;                                      // +inf entry: NaN row
    for (int64_t j = 0; j < n; ++j) at(1, j) = -inf;         // all -inf: NaN row
    at(2, n - 1) = nan;                                      // NaN entry: NaN row
    for (int64_t j = 0; j < n; j += 3) at(3, j) = -inf;      // some -inf: 0 / -inf there
    if (n > 1) at(3, 1) = 0.5f;
    at(4, 0) = -inf;                                         // one -inf at the start
    if (n > 16384)                                           // a long run of -inf: whole
      for (int64_t j = 0; j < 16384; ++j) at(5, j) = -inf;   // tiles and CTAs of nothing else
  }
  if (c.huge) {
    fill_huge_rows(x, c.rows, c.cols, gen);
    for (float& v : x) v = float(round_to(c.dtype, v));
  }

  const Layout out_layout{c.dtype, c.rows, c.cols, c.cols + c.pad, c.offset + (opts.in_place ? 0 : c.out_offset)};
  GuardedTensor tx(layout), ty(out_layout), tdy(layout), tdx(out_layout);
  ASSERT_TRUE(tx.ok() && ty.ok() && tdy.ok() && tdx.ok()) << "cudaMalloc failed";
  QUACK_ASSERT_CUDA(tx.upload(x));

  // Forward.
  SoftmaxFwdArgs fa;
  fa.rows = c.rows;
  fa.cols = c.cols;
  fa.x = {tx.ptr(), c.dtype, layout.stride};
  fa.out = {ty.ptr(), c.dtype, layout.stride};
  fa.log = c.log;
  std::unique_ptr<GuardedTensor> ws;
  if (opts.workspace) {
    size_t bytes = 0;
    const Status st = softmax_fwd_workspace_bytes(fa, &bytes);
    ASSERT_TRUE(st.ok()) << st.message;
    if (bytes > 0) {
      ASSERT_EQ(bytes % 16, 0u);
      ws = guarded_workspace(bytes);
      ASSERT_TRUE(ws && ws->ok()) << "cudaMalloc or poisoning failed";
      fa.workspace = ws->ptr();
      fa.workspace_bytes = bytes;
    }
  }
  std::vector<double> y;
  if (opts.in_place) {
    fa.out = {tx.ptr(), c.dtype, layout.stride};
    run_twice({}, {}, tx, [&] { return softmax_fwd(fa, nullptr); }, &y, &x);
  } else {
    run_twice({&tx}, {x}, ty, [&] { return softmax_fwd(fa, nullptr); }, &y);
  }
  if (testing::Test::HasFatalFailure()) return;
  if (ws) {
    std::vector<double> w;
    int64_t dirty = 0;
    QUACK_ASSERT_CUDA(ws->download(&w, &dirty));
    EXPECT_EQ(dirty, 0) << "bytes around the workspace were written";
  }
  const std::vector<double> want_y = reference_fwd(x, c.rows, c.cols, c.log);
  int64_t bad = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double scale = c.log ? 1.0 : 1.0 / double(c.cols);
    if (!close(y[i], want_y[i], scale, c.dtype) && ++bad <= 5)
      ADD_FAILURE() << "forward row " << int64_t(i) / c.cols << " col " << int64_t(i) % c.cols << ": got " << y[i]
                    << ", want " << want_y[i];
  }
  EXPECT_EQ(bad, 0) << "forward elements wrong";
  // The backward of NaN rows is NaN, and huge rows' outputs are ordinary
  // probabilities (the backward never sees x): nothing more to learn.
  if (c.special || c.huge || opts.forward_only) return;

  // Backward on y = the reference rounded to the dtype, and a random dy.
  std::vector<float> yin(want_y.size()), dy(want_y.size());
  for (size_t i = 0; i < yin.size(); ++i) {
    yin[i] = float(round_to(c.dtype, float(want_y[i])));
    dy[i] = float(round_to(c.dtype, u(gen)));
  }
  QUACK_ASSERT_CUDA(ty.upload(yin));
  QUACK_ASSERT_CUDA(tdy.upload(dy));
  SoftmaxBwdArgs ba;
  ba.rows = c.rows;
  ba.cols = c.cols;
  ba.y = {ty.ptr(), c.dtype, layout.stride};
  ba.dy = {tdy.ptr(), c.dtype, layout.stride};
  ba.dx = {tdx.ptr(), c.dtype, layout.stride};
  ba.log = c.log;
  std::unique_ptr<GuardedTensor> bws;
  if (opts.bwd_workspace) {
    size_t bytes = 0;
    const Status st = softmax_bwd_workspace_bytes(ba, &bytes);
    ASSERT_TRUE(st.ok()) << st.message;
    if (bytes > 0) {
      ASSERT_EQ(bytes % 16, 0u);
      bws = guarded_workspace(bytes);
      ASSERT_TRUE(bws && bws->ok()) << "cudaMalloc or poisoning failed";
      ba.workspace = bws->ptr();
      ba.workspace_bytes = bytes;
    }
  }
  std::vector<double> dx;
  if (opts.in_place) {
    ba.dx = {tdy.ptr(), c.dtype, layout.stride};  // over dy, then over y (its second call)
    run_twice({&ty}, {yin}, tdy, [&] { return softmax_bwd(ba, nullptr); }, &dx, &dy);
    if (testing::Test::HasFatalFailure()) return;
    std::vector<double> over_y;
    QUACK_ASSERT_CUDA(tdy.upload(dy));
    ba.dx = {ty.ptr(), c.dtype, layout.stride};
    run_twice({&tdy}, {dy}, ty, [&] { return softmax_bwd(ba, nullptr); }, &over_y, &yin);
    if (testing::Test::HasFatalFailure()) return;
    int64_t diff = 0;
    for (size_t i = 0; i < dx.size(); ++i) diff += std::memcmp(&dx[i], &over_y[i], sizeof(double)) != 0;
    EXPECT_EQ(diff, 0) << "the backward over y differs from the backward over dy";
  } else {
    run_twice({&ty, &tdy}, {yin, dy}, tdx, [&] { return softmax_bwd(ba, nullptr); }, &dx);
  }
  if (testing::Test::HasFatalFailure()) return;
  if (bws) {
    std::vector<double> w;
    int64_t dirty = 0;
    QUACK_ASSERT_CUDA(bws->download(&w, &dirty));
    EXPECT_EQ(dirty, 0) << "bytes around the backward's workspace were written";
  }
  // fp32 arithmetic cannot do better than its rounding of the terms: dot
  // is a sum of N terms (sequential per thread, then a tree) whose error is
  // up to (64 + log2 N) fp32 ulps of sum |terms|, and dy - dot cancels. The
  // bound per element is that error carried through the formula; a typical
  // element's rounding budget is far larger, so the check stays tight.
  const double fp32_err = (64.0 + std::log2(double(c.cols))) * std::ldexp(1.0, -24);
  bad = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    double dot = 0.0, mean_abs = 0.0, abs_dot = 0.0;
    for (int64_t j = 0; j < c.cols; ++j) {
      const size_t i = size_t(r * c.cols + j);
      dot += c.log ? double(dy[i]) : double(dy[i]) * double(yin[i]);
      abs_dot += c.log ? std::fabs(double(dy[i])) : std::fabs(double(dy[i]) * double(yin[i]));
    }
    std::vector<double> want(size_t(c.cols));
    for (int64_t j = 0; j < c.cols; ++j) {
      const size_t i = size_t(r * c.cols + j);
      want[size_t(j)] = c.log ? double(dy[i]) - std::exp(double(yin[i])) * dot : double(yin[i]) * (double(dy[i]) - dot);
      mean_abs += std::fabs(want[size_t(j)]) / double(c.cols);
    }
    for (int64_t j = 0; j < c.cols; ++j) {
      const size_t i = size_t(r * c.cols + j);
      const double yj = double(yin[i]), dyj = std::fabs(double(dy[i]));
      const double cond = c.log ? dyj + std::exp(yj) * abs_dot * (1.0 + std::fabs(yj)) : std::fabs(yj) * (dyj + abs_dot);
      if (!close(dx[i], want[size_t(j)], mean_abs, c.dtype, fp32_err * cond) && ++bad <= 5)
        ADD_FAILURE() << "backward row " << r << " col " << j << ": got " << dx[i] << ", want " << want[size_t(j)];
    }
  }
  EXPECT_EQ(bad, 0) << "backward elements wrong";
}

class SoftmaxGpu : public testing::TestWithParam<SmCase> {};

TEST_P(SoftmaxGpu, ForwardAndBackwardMatchFloat64) {
  QUACK_REQUIRE_SM90();
  run_case(as_run(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Cases, SoftmaxGpu, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// In place (the README's guarantee): the forward over x, the backward over
// dy and over y, each kernel reading a row's elements before any of its
// threads writes them, whichever kernel the row takes (every default plan of
// cases(), the shifted rows' head vectors reading the row before's
// outputs). The cases whose outputs sit elsewhere (out_offset) are the
// others in place.
std::vector<SmCase> in_place_cases() {
  std::vector<SmCase> v;
  for (const SmCase& c : cases())
    if (c.out_offset == 0) v.push_back(c);
  return v;
}

class SoftmaxGpuInPlace : public testing::TestWithParam<SmCase> {};

TEST_P(SoftmaxGpuInPlace, ForwardAndBackwardMatchFloat64) {
  QUACK_REQUIRE_SM90();
  RunOpts o;
  o.in_place = true;
  run_case(as_run(GetParam()), o);
}

INSTANTIATE_TEST_SUITE_P(InPlaceCases, SoftmaxGpuInPlace, testing::ValuesIn(in_place_cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// The same cases with every aligned row chunked, in small chunks (clusters
// from N = 8K bf16), half staged in shared memory and half re-read from
// global memory, by 128-thread CTAs: the chunked kernel on every shape,
// with several loop trips, tails, and both halves of pass 2.
void small_chunks(RowTuning& t) {
  t.chunk_min_bytes = 0;
  t.chunk_min_bytes_bwd = 0;
  t.softmax_staged_fwd = 0;  // (staged rows skip the chunking rules)
  t.softmax_staged_bwd = 0;
  t.chunk_cta_bytes = 16 << 10;
  t.chunk_stage_bytes = 8 << 10;
  t.chunk_threads = 128;
}
class SoftmaxGpuChunked : public test::TunedSuite<SmCase, small_chunks> {};

TEST_P(SoftmaxGpuChunked, ForwardAndBackwardMatchFloat64) {
  QUACK_REQUIRE_SM90();
  run_case(as_run(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(ChunkCases, SoftmaxGpuChunked, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// Log-softmax's chunked backward with y and dy both read in pass 1, as
// softmax's (RowTuning::softmax_chunk_log_dy = 0). The default (1) reads dy
// alone in pass 1 and stages it in both halves of the staging area
// (softmax_chunk_kernel's kLogDy), so SoftmaxGpuChunked's log cases above
// test that kernel; these test the two-tensor one the knob still reaches,
// in the same small chunks, with tails. (kLogDy's first run, at dd5bc91
// with the knob set here: 48 of 48 passed,
// bench/results/logs/2026-12-06-softmax-log-dy-dd5bc91-h100.log.)
std::vector<SmCase> log_cases() {
  std::vector<SmCase> v;
  for (const SmCase& c : cases())
    if (c.log) v.push_back(c);
  return v;
}

void small_chunks_log_two_tensor(RowTuning& t) {
  small_chunks(t);
  t.softmax_chunk_log_dy = 0;
}
class SoftmaxGpuChunkedLogTwoTensor : public test::TunedSuite<SmCase, small_chunks_log_two_tensor> {};

TEST_P(SoftmaxGpuChunkedLogTwoTensor, ForwardAndBackwardMatchFloat64) {
  QUACK_REQUIRE_SM90();
  run_case(as_run(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(ChunkLogTwoTensorCases, SoftmaxGpuChunkedLogTwoTensor, testing::ValuesIn(log_cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// The columns a case's rows are planned for (shifted rows: N + VEC - 1).
int64_t planned_cols(const SmCase& c) { return c.cols + (shifted(c) ? vec_elems(c.dtype) - 1 : 0); }

// The clustered cases with the forward's chunking rules off, so that every
// aligned row the register tiles hold is held in registers: the clustered
// register forward, which the defaults no longer choose (softmax-sweep.md
// run 6), stays covered for the tuning that selects it.
std::vector<SmCase> clustered_cases() {
  std::vector<SmCase> v;
  for (const SmCase& c : cases())
    if (c.offset == 0 && c.pad == 0 && !c.special && planned_cols(c) > 32768 && c.cols < 300000) v.push_back(c);
  return v;
}

void rows_in_registers(RowTuning& t) {
  t.chunk_min_bytes = int64_t(1) << 40;
  t.chunk_min_bytes_bwd = int64_t(1) << 40;
  t.chunk_min_cols = int64_t(1) << 40;
  t.chunk_clustered_fwd = 0;
  t.softmax_staged_fwd = 0;
  t.softmax_staged_bwd = 0;
  t.shifted_rows = 1;  // (shifted rows too: N50257_f16_odd_pitch)
}
class SoftmaxGpuRegister : public test::TunedSuite<SmCase, rows_in_registers> {};

TEST_P(SoftmaxGpuRegister, ForwardAndBackwardMatchFloat64) {
  const SmCase c = as_run(GetParam());
  EXPECT_NE(plan_of(c, false).find("reg"), std::string::npos) << "the forward is not register-held under this tuning";
  EXPECT_NE(plan_of(c, true).find("reg"), std::string::npos) << "the backward is not register-held under this tuning";
  QUACK_REQUIRE_SM90();
  run_case(c);
}

INSTANTIATE_TEST_SUITE_P(RegisterCases, SoftmaxGpuRegister, testing::ValuesIn(clustered_cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// The shifted cases (shifted(): odd pitches, misaligned bases; N = 1 to
// 700001, special and huge rows) with RowTuning::shifted_rows on: the
// register kernels (sub-warp teams, several rows a CTA at different
// offsets, one CTA) and the staged ones (clusters of 2 to 16, the wide
// geometry) from the vector that holds each row's first element, every
// offset of it. (The default takes them to the streaming kernel:
// SoftmaxGpu.)
std::vector<SmCase> shifted_cases() {
  std::vector<SmCase> v;
  for (const SmCase& c : cases())
    if (shifted(c)) v.push_back(c);
  return v;
}

void softmax_shifted_rows(RowTuning& t) { t.shifted_rows = 1; }
class SoftmaxGpuShifted : public test::TunedSuite<SmCase, softmax_shifted_rows> {};

TEST_P(SoftmaxGpuShifted, ForwardAndBackwardMatchFloat64) {
  const SmCase c = as_run(GetParam());
  for (bool backward : {false, true}) {
    const std::string plan = plan_of(c, backward);
    EXPECT_TRUE(plan.rfind("reg", 0) == 0 || plan.rfind("stage", 0) == 0)
        << (backward ? "backward " : "forward ") << "not register-held or staged: " << plan;
  }
  QUACK_REQUIRE_SM90();
  run_case(c);
}

INSTANTIATE_TEST_SUITE_P(ShiftedCases, SoftmaxGpuShifted, testing::ValuesIn(shifted_cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// Model widths, and rows just past a power of two of the tile, whose
// unclustered register CTAs the default plan fits to the row (RowTuning::
// reg_fit_team, the default since the forty-seventh session: the fewest
// whole warps at the tile, not the power of two above; bf16 5120: a
// 96-thread forward, a 160-thread backward; bf16 4100: 96 and 160 threads
// where the powers of two are 128 and 256): aligned, shifted, special
// values.
std::vector<SmCase> model_width_cases() {
  return {{"N5120_bf16_M64", 64, 5120, kBF16},
          {"N2560_f32_M33", 33, 2560, kF32},
          {"N7168_f16_M20_log", 20, 7168, kF16, true},
          {"N12288_bf16_M9_shift1e4", 9, 12288, kBF16, false, 0, 0, 1e4},
          {"N3000_bf16_M16_special", 16, 3000, kBF16, false, 0, 0, 0.0, true},
          {"N5121_bf16_M13_odd_pitch", 13, 5121, kBF16},
          {"N6150_f32_M7_misaligned_padded", 7, 6150, kF32, false, 1, 2},
          {"N4100_bf16_M40", 40, 4100, kBF16},
          {"N8200_bf16_M21_log", 21, 8200, kBF16, true},
          {"N12301_bf16_M11_odd_pitch", 11, 12301, kBF16}};
}

INSTANTIATE_TEST_SUITE_P(ModelWidthCases, SoftmaxGpu, testing::ValuesIn(model_width_cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// The same, and the cases of one CTA a row, with reg_fit_team off: the
// power-of-two CTAs, the default until the forty-seventh session.
std::vector<SmCase> pow2_team_cases() {
  std::vector<SmCase> v;
  for (const SmCase& c : cases())
    if (c.cols > 256 && planned_cols(c) <= (c.dtype == kF32 ? 16384 : 32768)) v.push_back(c);
  for (const SmCase& c : model_width_cases()) v.push_back(c);
  return v;
}

void pow2_teams(RowTuning& t) { t.reg_fit_team = 0; }
class SoftmaxGpuPow2Teams : public test::TunedSuite<SmCase, pow2_teams> {};

TEST_P(SoftmaxGpuPow2Teams, ForwardAndBackwardMatchFloat64) {
  QUACK_REQUIRE_SM90();
  run_case(as_run(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Pow2TeamCases, SoftmaxGpuPow2Teams, testing::ValuesIn(pow2_team_cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// The aligned cases whose forward rows are staged when every dtype may
// (softmax_staged_fwd = 3, the default since 5454870's measurements), at both tiles the kernel
// is built with (16 vectors a thread, the default, and 8), and whose
// backward rows are staged likewise (softmax_staged_bwd = 3, its tiles
// 8, the default, and 16): fp32 and 16-bit
// rows, partial last vectors, special values, clusters of 2 to 16 CTAs
// with idle threads in the last.
// Rows the staged kernels may take: 16-byte vectors in every row, or shifted
// rows.
bool stageable(const SmCase& c) {
  return (c.offset % vec_elems(c.dtype) == 0 && (c.cols + c.pad) % vec_elems(c.dtype) == 0) || shifted(c);
}

std::vector<SmCase> staged_cases() {
  std::vector<SmCase> v;
  for (const SmCase& c : cases()) {
    const bool f32 = c.dtype == kF32;
    const int64_t n = planned_cols(c);
    if (stageable(c) && n > (f32 ? 16384 : 32768) && n <= (f32 ? 131072 : 262144)) v.push_back(c);
  }
  return v;
}

// Cases run under a tuning of their own, restored after each.
class TunedSoftmaxGpu : public testing::TestWithParam<SmCase> {
 protected:
  void TearDown() override { set_row_tuning(nullptr); }
};

// Lean forward rows (RowTuning::reg_lean bit 1, kLean): decode-sized rows
// that are one team owning its CTA and exactly the tile take the kernel
// with the row's bounds compiled away (the plan says so, or the test
// fails), then again with the bit off: both tiles (1 and 2 vectors), the
// three dtypes, softmax and log-softmax, 1 row and many, large magnitudes
// and special values.
std::vector<SmCase> lean_cases() {
  return {{"N2048_bf16_M1", 1, 2048, kBF16},
          {"N2048_bf16_M7_log", 7, 2048, kBF16, true},
          {"N4096_f16_M3", 3, 4096, kF16},
          {"N8192_bf16_M64_shift1e4", 64, 8192, kBF16, false, 0, 0, 1e4},
          {"N8192_bf16_M8_special_log", 8, 8192, kBF16, true, 0, 0, 0.0, true},
          {"N1024_f32_M5", 5, 1024, kF32},
          {"N2048_f32_M2_log", 2, 2048, kF32, true},
          {"N2048_bf16_M1024", 1024, 2048, kBF16}};
}

class SoftmaxGpuLean : public TunedSoftmaxGpu {};

TEST_P(SoftmaxGpuLean, ForwardAndBackwardMatchFloat64LeanAndNot) {
  const SmCase c = as_run(GetParam());
  ASSERT_NE(plan_of(c, false).find(" lean"), std::string::npos) << "forward not lean: " << plan_of(c, false);
  QUACK_REQUIRE_SM90();
  run_case(c);
  if (HasFatalFailure()) return;
  RowTuning t = default_row_tuning();
  t.reg_lean &= ~2;
  set_row_tuning(&t);
  ASSERT_EQ(plan_of(c, false).find(" lean"), std::string::npos) << plan_of(c, false);
  run_case(c);
}

INSTANTIATE_TEST_SUITE_P(LeanCases, SoftmaxGpuLean, testing::ValuesIn(lean_cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

class SoftmaxGpuStaged : public TunedSoftmaxGpu {};

TEST_P(SoftmaxGpuStaged, ForwardAndBackwardMatchFloat64) {
  const SmCase c = as_run(GetParam());
  for (int vpt : {16, 8}) {
    SCOPED_TRACE("staged tile " + std::to_string(vpt) + " vectors a thread");
    RowTuning t = default_row_tuning();
    t.softmax_staged_fwd = 3;
    t.softmax_staged_vpt = vpt;
    t.softmax_staged_bwd = 3;
    t.softmax_staged_bwd_vpt = vpt;
    t.shifted_rows = 1;  // (the shifted cases staged too)
    set_row_tuning(&t);
    const std::string plan = plan_of(c, false);
    EXPECT_EQ(plan.rfind("stage", 0), 0u) << "the forward is not staged under this tuning: " << plan;
    EXPECT_NE(plan.find("vpt " + std::to_string(vpt)), std::string::npos) << plan;
    const std::string bplan = plan_of(c, true);
    EXPECT_EQ(bplan.rfind("stage", 0), 0u) << "the backward is not staged under this tuning: " << bplan;
    EXPECT_NE(bplan.find("vpt " + std::to_string(vpt)), std::string::npos) << bplan;
    if (test::sm90_device()) run_case(c);
    if (HasFatalFailure()) return;
  }
  QUACK_REQUIRE_SM90();
}

INSTANTIATE_TEST_SUITE_P(StagedCases, SoftmaxGpuStaged, testing::ValuesIn(staged_cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// The aligned cases with rows past 16 staged 256-thread CTAs that 16 CTAs
// of the wide geometry hold (CTAs of 512 threads, doubled to 1024 where 16
// of 512 do not hold the row): backward rows (fp32 N in (128K, 512K],
// 16-bit (256K, 1M]) with y staged and dy in registers, forward rows (fp32
// N in (256K, 1M], 16-bit (512K, 2M]) with x's tile split between shared
// memory and registers; with the wide CTA at 512 threads and at 1024 (other
// cluster sizes and layouts). Off by default until measured
// (RowTuning::softmax_staged_fwd_wide / _bwd_wide).
constexpr int kWideBwdVecs = 8, kWideFwdVecs = 16;
// The vectors the plan covers (shifted rows: N + VEC - 1 columns).
int64_t row_vectors(const SmCase& c) {
  const int64_t v = vec_elems(c.dtype);
  return (planned_cols(c) + v - 1) / v;
}
bool wide_bwd_row(const SmCase& c) {
  const int64_t v = row_vectors(c);
  return v > 16 * 256 * kWideBwdVecs && v <= 16 * 1024 * kWideBwdVecs;
}
bool wide_fwd_row(const SmCase& c) {
  const int64_t v = row_vectors(c);
  return v > 16 * 256 * 16 && v <= 16 * 1024 * kWideFwdVecs;
}
std::vector<SmCase> wide_cases() {
  std::vector<SmCase> v;
  for (const SmCase& c : cases())
    if (stageable(c) && (wide_bwd_row(c) || wide_fwd_row(c))) v.push_back(c);
  return v;
}

class SoftmaxGpuWideStaged : public TunedSoftmaxGpu {};

TEST_P(SoftmaxGpuWideStaged, ForwardAndBackwardMatchFloat64) {
  const SmCase c = as_run(GetParam());
  for (int wide : {512, 1024}) {
    SCOPED_TRACE("wide staged CTAs of " + std::to_string(wide) + " threads");
    RowTuning t = default_row_tuning();
    t.softmax_staged_fwd = 3;
    t.softmax_staged_vpt = 16;
    t.softmax_staged_fwd_wide = wide;
    t.softmax_staged_bwd = 3;
    t.softmax_staged_bwd_vpt = 8;
    t.softmax_staged_bwd_wide = wide;
    t.softmax_fwd_grid = 0;  // (fp32 rows past 512K would take the grid)
    t.reg_staged_balance = 0;  // (the power-of-two CTAs; SoftmaxGpuBalancedStaged fits them)
    t.shifted_rows = 1;        // (the shifted cases staged too)
    set_row_tuning(&t);
    for (bool backward : {false, true}) {
      if (!(backward ? wide_bwd_row(c) : wide_fwd_row(c))) continue;
      const int vpt = backward ? kWideBwdVecs : kWideFwdVecs;
      int64_t threads = wide;
      while ((row_vectors(c) + threads * vpt - 1) / (threads * vpt) > 16) threads *= 2;
      const std::string plan = plan_of(c, backward);
      EXPECT_EQ(plan.rfind("stage", 0), 0u) << "not staged under this tuning: " << plan;
      char thr[16];
      std::snprintf(thr, sizeof thr, "thr %4d", int(threads));  // (the plan's field)
      EXPECT_NE(plan.find(thr), std::string::npos) << plan;
      EXPECT_NE(plan.find(backward ? " regs 8" : " regs 4"), std::string::npos) << plan;
    }
    if (test::sm90_device()) run_case(c);
    if (HasFatalFailure()) return;
  }
  QUACK_REQUIRE_SM90();
}

INSTANTIATE_TEST_SUITE_P(WideStagedCases, SoftmaxGpuWideStaged, testing::ValuesIn(wide_cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// Staged rows with their CTAs fitted to the row (RowTuning::
// reg_staged_balance; on by default since the forty-second session), the staged and the
// wide geometry's: the staged and wide cases whose forward or backward CTA
// the balance trims below its power of two (whole warps; partial last
// vectors, special values and idle threads in the last CTA among them).
// Each plan's CTA must be the fewest whole warps covering the row at its
// cluster and tile.
RowTuning balanced_staged_tuning() {
  RowTuning t = default_row_tuning();
  t.softmax_staged_fwd = 3;
  t.softmax_staged_bwd = 3;
  t.softmax_staged_fwd_wide = 512;
  t.softmax_staged_bwd_wide = 512;
  t.softmax_fwd_grid = 0;  // (fp32 rows past 512K would take the grid)
  t.reg_staged_balance = 1;
  t.shifted_rows = 1;  // (the shifted cases staged too)
  return t;
}
bool trimmed_plan(const SmCase& c, bool backward) {
  test::StagedPlan sp;
  return test::parse_staged_plan(plan_of(c, backward), &sp) &&
         (sp.threads & (sp.threads - 1)) != 0;
}
std::vector<SmCase> balanced_cases() {
  const RowTuning t = balanced_staged_tuning();
  set_row_tuning(&t);
  std::vector<SmCase> v;
  for (const SmCase& c : cases())
    if (stageable(c) && (trimmed_plan(as_run(c), false) || trimmed_plan(as_run(c), true))) v.push_back(c);
  set_row_tuning(nullptr);
  return v;
}

class SoftmaxGpuBalancedStaged : public TunedSoftmaxGpu {};

TEST_P(SoftmaxGpuBalancedStaged, ForwardAndBackwardMatchFloat64) {
  const SmCase c = as_run(GetParam());
  const RowTuning t = balanced_staged_tuning();
  set_row_tuning(&t);
  for (bool backward : {false, true}) {
    const std::string plan = plan_of(c, backward);
    test::StagedPlan sp;
    if (!test::parse_staged_plan(plan, &sp)) continue;
    EXPECT_EQ(sp.threads, test::balanced_threads(row_vectors(c), sp.cluster, sp.vpt))
        << (backward ? "backward " : "forward ") << plan;
  }
  QUACK_REQUIRE_SM90();
  run_case(c);
}

INSTANTIATE_TEST_SUITE_P(BalancedStagedCases, SoftmaxGpuBalancedStaged, testing::ValuesIn(balanced_cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// The aligned cases of 64K columns and more with the grid forward on for
// both dtypes from 64K (RowTuning::softmax_fwd_grid; off by default until
// measured) and the workspace it asks for: ranks of 8192 columns, 1 to 131
// of them, with a partial last rank and a partial last vector, groups of
// rows (2 to 16: 300 rows in 14 groups), special values (NaN, +inf, all
// -inf, whole tiles of -inf) and huge ones (natural units), large shifts;
// rows two a step (16-bit and fp32) and one a step, the collect's loads
// early and late, at lag 2 and 1.
bool grid_row(const SmCase& c) { return stageable(c) && !shifted(c) && c.cols >= 65536 && (c.cols + 8191) / 8192 <= 132; }
std::vector<SmCase> grid_cases() {
  std::vector<SmCase> v;
  for (const SmCase& c : cases())
    if (grid_row(c)) v.push_back(c);
  return v;
}

class SoftmaxGpuGrid : public TunedSoftmaxGpu {};

TEST_P(SoftmaxGpuGrid, ForwardMatchesFloat64) {
  const SmCase c = as_run(GetParam());
  struct Knobs {
    int rows16, rows32, prefetch, lag;
  };
  // (rows16 4 is taken as 2: two words a row, two rows a step at most.)
  for (const Knobs k : {Knobs{2, 2, 1, 2}, Knobs{1, 1, 0, 1}, Knobs{4, 1, 1, 1}}) {
    SCOPED_TRACE("rows16 " + std::to_string(k.rows16) + " rows32 " + std::to_string(k.rows32) + " prefetch " +
                 std::to_string(k.prefetch) + " lag " + std::to_string(k.lag));
    RowTuning t = default_row_tuning();
    t.softmax_fwd_grid = 3;
    t.softmax_fwd_grid_min_cols16 = t.softmax_fwd_grid_min_cols32 = 65536;
    t.fwd_grid_rows16 = k.rows16;
    t.softmax_fwd_grid_rows32 = k.rows32;
    t.fwd_grid_prefetch = k.prefetch;
    t.fwd_grid_lag = k.lag;
    set_row_tuning(&t);
    const std::string plan = softmax_plan_description(c.rows, c.cols, c.dtype, false, DeviceLimits{});
    EXPECT_EQ(plan.rfind("grid", 0), 0u) << "not the grid under this tuning: " << plan;
    const int rows = std::min(c.dtype == kF32 ? k.rows32 : k.rows16, 2);
    EXPECT_NE(plan.find(" rows " + std::to_string(rows) + " "), std::string::npos) << plan;
    if (test::sm90_device()) run_case(c, RunOpts{true, true});
    if (HasFatalFailure()) return;
  }
  QUACK_REQUIRE_SM90();
}

INSTANTIATE_TEST_SUITE_P(GridCases, SoftmaxGpuGrid, testing::ValuesIn(grid_cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// The grid backward (RowTuning::softmax_bwd_grid; off by default until
// measured) on the same cases, both dtypes from 64K, with the workspace it
// asks for: ranks of 8192 columns, 8 to 128 of them, a partial last rank
// and vector, groups of rows, large shifts, softmax and log-softmax; 16-bit
// rows two a step and one, the collect's loads early and late, lag 2 and 1
// (the plan says grid, or the test fails), and in place under the first.
// The forward keeps its defaults.
class SoftmaxGpuGridBwd : public TunedSoftmaxGpu {};

TEST_P(SoftmaxGpuGridBwd, BackwardMatchesFloat64) {
  const SmCase c = as_run(GetParam());
  struct Knobs {
    int rows16, prefetch, lag;
  };
  for (const Knobs k : {Knobs{2, 1, 2}, Knobs{1, 0, 1}, Knobs{2, 0, 1}}) {
    SCOPED_TRACE("rows16 " + std::to_string(k.rows16) + " prefetch " + std::to_string(k.prefetch) + " lag " +
                 std::to_string(k.lag));
    RowTuning t = default_row_tuning();
    t.softmax_bwd_grid = 3;
    t.softmax_bwd_grid_min_cols16 = t.softmax_bwd_grid_min_cols32 = 65536;
    t.bwd_grid_rows16 = k.rows16;
    t.fwd_grid_prefetch = k.prefetch;
    t.bwd_grid_lag = k.lag;
    set_row_tuning(&t);
    const std::string plan = softmax_plan_description(c.rows, c.cols, c.dtype, true, DeviceLimits{});
    EXPECT_EQ(plan.rfind("grid", 0), 0u) << "not the grid under this tuning: " << plan;
    const int rows = c.dtype == kF32 ? 1 : k.rows16;
    EXPECT_NE(plan.find(" rows " + std::to_string(rows) + " "), std::string::npos) << plan;
    if (test::sm90_device()) {
      RunOpts o;
      o.workspace = true;
      o.bwd_workspace = true;
      run_case(c, o);
      // In place (dx over dy, then over y): each row's tiles are staged
      // before its dx is written, and no later stage reads that row.
      if (k.lag == 2 && !HasFatalFailure()) {
        SCOPED_TRACE("in place");
        o.in_place = true;
        run_case(c, o);
      }
    }
    if (HasFatalFailure()) return;
  }
  QUACK_REQUIRE_SM90();
}

// (Not the special and huge rows: run_case checks no backward of them.)
std::vector<SmCase> grid_bwd_cases() {
  std::vector<SmCase> v;
  for (const SmCase& c : grid_cases())
    if (!c.special && !c.huge) v.push_back(c);
  return v;
}

INSTANTIATE_TEST_SUITE_P(GridCases, SoftmaxGpuGridBwd, testing::ValuesIn(grid_bwd_cases()),
                         [](const testing::TestParamInfo<SmCase>& i) { return i.param.name; });

// The grid's workspace on the device: the query's size is what the call
// needs (a byte less is rejected, naming workspace_bytes, before anything
// is written), and without a workspace the same call takes the other
// kernels.
class SoftmaxGpuGridWorkspace : public testing::Test {
 protected:
  void TearDown() override { set_row_tuning(nullptr); }
  // One call's workspace contract: set(ptr, n) points the call's arguments
  // at a workspace of n bytes (nullptr, 0: none), call() makes it, and
  // bad(got) counts the downloaded output's elements that miss the float64
  // reference. A byte short is rejected, naming workspace_bytes, before
  // `out` is written; the exact size and none both pass; nothing is written
  // around the workspace (`ws`, of `bytes`).
  template <class Set, class Call, class Bad>
  void check_contract(GuardedTensor& out, GuardedTensor& ws, size_t bytes, Set set, Call call, Bad bad) {
    set(ws.ptr(), bytes - 1);
    QUACK_ASSERT_CUDA(out.poison());
    ASSERT_NO_FATAL_FAILURE(test::expect_workspace_refused(call(), out));
    std::vector<double> got;
    int64_t dirty = 0;
    for (const bool with_ws : {true, false}) {
      SCOPED_TRACE(with_ws ? "the grid, with its workspace" : "no workspace: the other kernels");
      set(with_ws ? ws.ptr() : nullptr, with_ws ? bytes : 0);
      QUACK_ASSERT_CUDA(out.poison());
      const Status ok = call();
      ASSERT_TRUE(ok.ok()) << ok.message;
      QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
      QUACK_ASSERT_CUDA(out.download(&got, &dirty));
      EXPECT_EQ(dirty, 0);
      EXPECT_EQ(bad(got), 0) << "elements wrong";
    }
    QUACK_ASSERT_CUDA(ws.download(&got, &dirty));
    EXPECT_EQ(dirty, 0) << "bytes around the workspace were written";
  }
};

TEST_F(SoftmaxGpuGridWorkspace, TooSmallIsRejectedAndNoneFallsBack) {
  QUACK_REQUIRE_SM90();
  RowTuning t = default_row_tuning();
  t.softmax_fwd_grid = 3;
  set_row_tuning(&t);
  const int64_t rows = 3, cols = 1 << 20;
  const Layout layout{kBF16, rows, cols, cols, 0};
  GuardedTensor tx(layout), ty(layout);
  ASSERT_TRUE(tx.ok() && ty.ok()) << "cudaMalloc failed";
  std::vector<float> x(size_t(rows * cols));
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (float& v : x) v = float(round_to(kBF16, u(gen)));
  QUACK_ASSERT_CUDA(tx.upload(x));
  SoftmaxFwdArgs fa;
  fa.rows = rows;
  fa.cols = cols;
  fa.x = {tx.ptr(), kBF16, cols};
  fa.out = {ty.ptr(), kBF16, cols};
  size_t bytes = 0;
  ASSERT_TRUE(softmax_fwd_workspace_bytes(fa, &bytes).ok());
  EXPECT_EQ(bytes, size_t(2) * 2 * 128 * 16) << "two steps of two rows, 128 ranks, a pair each";
  const std::unique_ptr<GuardedTensor> ws = guarded_workspace(bytes);
  ASSERT_TRUE(ws && ws->ok()) << "cudaMalloc or poisoning failed";
  // The exact size, and none: the same answer within rounding.
  const std::vector<double> want = reference_fwd(x, rows, cols, false);
  check_contract(
      ty, *ws, bytes,
      [&](void* p, size_t n) {
        fa.workspace = p;
        fa.workspace_bytes = n;
      },
      [&] { return softmax_fwd(fa, nullptr); },
      [&](const std::vector<double>& y) {
        int64_t bad = 0;
        for (size_t i = 0; i < y.size(); ++i) bad += !close(y[i], want[i], 1.0 / double(cols), kBF16);
        return bad;
      });
}

// The backward's workspace likewise: the query's size (a word a rank a row
// of every step) is what the call needs, a byte less is rejected naming
// workspace_bytes before anything is written, and without one the same
// call takes the other kernels; both against float64.
TEST_F(SoftmaxGpuGridWorkspace, BackwardTooSmallIsRejectedAndNoneFallsBack) {
  QUACK_REQUIRE_SM90();
  RowTuning t = default_row_tuning();
  t.softmax_bwd_grid = 3;
  set_row_tuning(&t);
  const int64_t rows = 3, cols = 1 << 20;
  const Layout layout{kF32, rows, cols, cols, 0};
  GuardedTensor ty(layout), tdy(layout), tdx(layout);
  ASSERT_TRUE(ty.ok() && tdy.ok() && tdx.ok()) << "cudaMalloc failed";
  std::vector<float> y(size_t(rows * cols)), dy(y.size());
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t i = 0; i < y.size(); ++i) {
    y[i] = (1.0f + u(gen)) / float(cols);  // probabilities-like: positive, summing to about 1
    dy[i] = u(gen);
  }
  QUACK_ASSERT_CUDA(ty.upload(y));
  QUACK_ASSERT_CUDA(tdy.upload(dy));
  SoftmaxBwdArgs ba;
  ba.rows = rows;
  ba.cols = cols;
  ba.y = {ty.ptr(), kF32, cols};
  ba.dy = {tdy.ptr(), kF32, cols};
  ba.dx = {tdx.ptr(), kF32, cols};
  size_t bytes = 0;
  ASSERT_TRUE(softmax_bwd_workspace_bytes(ba, &bytes).ok());
  EXPECT_EQ(bytes, size_t(3) * 128 * 8) << "three steps of one row, 128 ranks, a word each";
  const std::unique_ptr<GuardedTensor> ws = guarded_workspace(bytes);
  ASSERT_TRUE(ws && ws->ok()) << "cudaMalloc or poisoning failed";
  std::vector<double> want(y.size());
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0.0;
    for (int64_t j = 0; j < cols; ++j) dot += double(dy[size_t(r * cols + j)]) * double(y[size_t(r * cols + j)]);
    for (int64_t j = 0; j < cols; ++j) {
      const size_t i = size_t(r * cols + j);
      want[i] = double(y[i]) * (double(dy[i]) - dot);
    }
  }
  check_contract(
      tdx, *ws, bytes,
      [&](void* p, size_t n) {
        ba.workspace = p;
        ba.workspace_bytes = n;
      },
      [&] { return softmax_bwd(ba, nullptr); },
      [&](const std::vector<double>& dx) {
        int64_t bad = 0;
        // |dx| ~ 2 / cols: an absolute bound of fp32's rounding of the terms.
        for (size_t i = 0; i < dx.size(); ++i)
          bad += !(std::fabs(dx[i] - want[i]) <= 1e-5 * (std::fabs(want[i]) + 1.0 / double(cols)));
        return bad;
      });
}

}  // namespace
}  // namespace quack
