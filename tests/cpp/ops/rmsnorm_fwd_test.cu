// GPU tests of RMSNorm and LayerNorm forward through the public C++ API
// (quack::rmsnorm_fwd, quack::layernorm_fwd: the same kernels, the second in
// their centred mode). Every case runs as both ops; LayerNorm's inputs get a
// per-row offset (up to 8 standard deviations), so a variance taken as
// mean(h^2) - mean^2 or a row centred on another's mean shows.
//
// Each case lays every operand out in its own cudaMalloc'ed buffer:
//   [guard][offset elements][row 0][gap][row 1][gap] ... [row M-1][guard]
// where gap = row_stride - N. Every byte that is not an element of a row is
// poison (0xFF: NaN in all three dtypes) in inputs and outputs alike: a kernel
// that reads an input's gap or guard turns its row into NaN, one that writes
// an output's is caught byte by byte. Inputs must come back unchanged.
// Outputs are compared with a float64 reference; the call is then repeated on
// freshly poisoned outputs and must give bit-identical results.
//
// Every case runs three times: as the library dispatches it (the register-
// resident kernels wherever the layout allows, clustered rows without a
// residual staged in shared memory), with their shared-memory staging off
// (persistent register-held clusters), and with the register kernels off
// (the general staged kernel). Cases cover every regime of both configurations
// (core/config.hpp): sub-warp
// teams with several rows per team, whole-CTA teams, clusters (N = 65536 and
// 262144 in bf16), chunked rows past a 16-CTA cluster's capacity (N = 4194304
// fp32), plus residual / residual_out / rstd / weight / bias / weight_offset,
// pointers off by one element (the element-wise path), row strides > N, and
// mixed dtypes. Rows are scaled differently so that a row mixed up with
// another shows. A separate test puts a row beyond 2^31 elements.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
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
using test::load_elem;
using test::round_to;
using test::store_elem;

// ---------------------------------------------------------------------------
// Cases.

enum Operand { kX, kRes, kW, kB, kOut, kResOut, kRstd, kMean, kNumOperands };
const char* const kOperandName[kNumOperands] = {"x", "residual", "weight", "bias", "out", "residual_out", "rstd", "mean"};

struct OperandSpec {
  bool present = false;
  DType dtype = DType::kFloat32;
  int64_t pad = 0;     // row_stride = N + pad (matrices only)
  int64_t offset = 0;  // elements past a 256-byte boundary
};

struct FwdCase {
  std::string name;
  int64_t rows = 0, cols = 0;
  OperandSpec op[kNumOperands];
  float eps = 1e-6f;
  float weight_offset = 0.0f;
  // x about 100 with a spread of 1, and every 997th column 50 higher: a
  // variance taken as mean(h^2) - mean^2 in fp32 loses it, and a shifted
  // sum whose shift is an outlier is at its least exact.
  bool hostile_moments = false;
  // In place (the README's guarantee): out written over x, and residual_out
  // over the residual, where their dtypes agree (the inputs uploaded afresh
  // before each call).
  bool in_place = false;

  FwdCase(std::string n, int64_t m, int64_t cols_, DType x) : name(std::move(n)), rows(m), cols(cols_) {
    op[kX] = {true, x};
    op[kOut] = {true, x};
  }
  FwdCase& with(Operand o, DType t) {
    op[o].present = true;
    op[o].dtype = t;
    return *this;
  }
  FwdCase& with_rstd() { return with(kRstd, DType::kFloat32); }
  FwdCase& out_as(DType t) { return with(kOut, t); }
  FwdCase& with_eps(float e) {
    eps = e;
    return *this;
  }
  FwdCase& with_weight_offset(float w) {
    weight_offset = w;
    return *this;
  }
  FwdCase& with_hostile_moments() {
    hostile_moments = true;
    return *this;
  }
  // Every present operand one element past alignment (the element-wise path).
  FwdCase& misaligned() {
    for (auto& s : op) s.offset = 1;
    return *this;
  }
  FwdCase& offset(Operand o, int64_t elems) {
    op[o].offset = elems;
    return *this;
  }
  FwdCase& pad(Operand o, int64_t elems) {
    op[o].pad = elems;
    return *this;
  }
  FwdCase& pad_all(int64_t elems) {
    for (const Operand o : {kX, kRes, kOut, kResOut}) op[o].pad = elems;
    return *this;
  }
};

void PrintTo(const FwdCase& c, std::ostream* os) { *os << c.name; }

constexpr DType kF32 = DType::kFloat32;
constexpr DType kF16 = DType::kFloat16;
constexpr DType kBF16 = DType::kBFloat16;

std::vector<FwdCase> fwd_cases() {
  return {
      // Sub-warp teams, several teams (and rows per team) per CTA.
      FwdCase("N1_f32_w_rstd", 5, 1, kF32).with(kW, kF32).with_rstd(),
      FwdCase("N1_bf16_M8192_w", 8192, 1, kBF16).with(kW, kBF16),
      FwdCase("N3_bf16_w", 37, 3, kBF16).with(kW, kBF16),
      FwdCase("N7_f16_res_resout_f32_out_bf16", 300, 7, kF16).with(kRes, kF16).with(kResOut, kF32).out_as(kBF16),
      FwdCase("N8_f16_M67", 67, 8, kF16),
      FwdCase("N48_bf16_M1000_w", 1000, 48, kBF16).with(kW, kBF16),
      FwdCase("N100_bf16_res_w_b_resout_rstd", 37, 100, kBF16)
          .with(kRes, kBF16).with(kW, kBF16).with(kB, kBF16).with(kResOut, kBF16).with_rstd(),
      FwdCase("N256_f32_gemma_offset_large_eps", 33, 256, kF32).with(kW, kF32).with_weight_offset(1.0f).with_eps(0.5f),
      // Whole-CTA teams.
      FwdCase("N1000_mixed_dtypes", 11, 1000, kF16)
          .with(kRes, kF32).with(kW, kBF16).with(kB, kF16).out_as(kF32).with(kResOut, kBF16).with_rstd(),
      FwdCase("N4096_bf16_w_rstd", 16, 4096, kBF16).with(kW, kBF16).with_rstd(),
      FwdCase("N8191_f32_res_w_b_resout", 9, 8191, kF32).with(kRes, kF32).with(kW, kF32).with(kB, kF32).with(kResOut, kF32),
      FwdCase("N32768_bf16_w_f32_out_f32", 4, 32768, kBF16).with(kW, kF32).out_as(kF32),
      // Clusters.
      FwdCase("N65536_bf16_w_rstd", 5, 65536, kBF16).with(kW, kBF16).with_rstd(),
      FwdCase("N131071_f32_res_resout", 3, 131071, kF32).with(kRes, kF32).with(kW, kF32).with(kResOut, kF32),
      FwdCase("N262144_bf16_res_w_b_resout_rstd", 3, 262144, kBF16)
          .with(kRes, kBF16).with(kW, kBF16).with(kB, kBF16).with(kResOut, kBF16).with_rstd().with_weight_offset(0.5f),
      FwdCase("N65537_bf16_cluster_misaligned_strided", 4, 65537, kBF16)
          .with(kRes, kBF16).with(kW, kBF16).with(kB, kBF16).with(kResOut, kBF16).misaligned().pad_all(3),
      // Chunked: beyond a 16-CTA cluster's on-chip capacity.
      FwdCase("N1638401_bf16_w", 2, 1638401, kBF16).with(kW, kBF16),
      FwdCase("N2097157_bf16_res_resout_misaligned", 3, 2097157, kBF16)
          .with(kRes, kBF16).with(kW, kBF16).with(kResOut, kBF16).misaligned(),
      FwdCase("N4194304_f32_w_rstd", 2, 4194304, kF32).with(kW, kF32).with_rstd(),
      // Register-resident kernel layouts: fp32 weight/bias and an fp32
      // residual stream under 16-bit x, residual_out without a residual
      // (prenorm of x alone), partial last vectors, the largest tile.
      FwdCase("N20_bf16_M999_f32_weight", 999, 20, kBF16).with(kW, kF32),
      FwdCase("N4097_bf16_f32_res_w_b_resout_rstd", 9, 4097, kBF16)
          .with(kRes, kF32).with(kW, kF32).with(kB, kF32).with(kResOut, kF32).with_rstd(),
      FwdCase("N2050_f16_resout_only_f32", 7, 2050, kF16).with(kW, kF16).with(kResOut, kF32),
      FwdCase("N262143_f32_w_b", 2, 262143, kF32).with(kW, kF32).with(kB, kF32),
      // The small-CTA instance (8 vectors of 16-bit x, fp32 weight, 256
      // threads): whole rows, and a partial last vector with idle threads
      // (rows padded to a 16-byte stride, or they go element-wise). Past
      // decode sizes: up to ~150 rows these widths plan 512 x 4 (the decode
      // fill's cap, RowTuning::reg_fill_max_team), not the small CTA.
      FwdCase("N16384_bf16_f32_w_b_rstd_small_cta", 257, 16384, kBF16).with(kW, kF32).with(kB, kF32).with_rstd(),
      FwdCase("N12289_f16_f32_w_small_cta_partial", 263, 12289, kF16).with(kW, kF32).pad(kX, 7).pad(kOut, 7),
      FwdCase("N1048576_bf16_w_rstd_full_tile", 2, 1048576, kBF16).with(kW, kBF16).with_rstd(),
      // Rows far off zero with outliers (with_hostile_moments): the
      // register and staged moments, a whole tile and partial vectors.
      FwdCase("N4096_f32_w_b_rstd_hostile_moments", 9, 4096, kF32).with(kW, kF32).with(kB, kF32).with_rstd()
          .with_hostile_moments(),
      FwdCase("N65536_bf16_f32_w_b_rstd_hostile_moments", 6, 65536, kBF16).with(kW, kF32).with(kB, kF32).with_rstd()
          .with_hostile_moments(),
      FwdCase("N24580_f32_w_rstd_hostile_moments", 5, 24580, kF32).with(kW, kF32).with_rstd().with_hostile_moments(),
      FwdCase("N131069_f16_b_rstd_hostile_moments", 3, 131069, kF16).with(kB, kF16).with_rstd().pad(kX, 3).pad(kOut, 3)
          .with_hostile_moments(),
      // Clustered register kernels: persistent, many rows per cluster (the
      // exchange's alternating barriers), a 3-CTA cluster, each family.
      FwdCase("N70000_bf16_M300_w_rstd_persistent_cluster", 300, 70000, kBF16).with(kW, kBF16).with_rstd(),
      FwdCase("N40000_bf16_M300_res_resout_cluster3", 300, 40000, kBF16)
          .with(kRes, kBF16).with(kW, kBF16).with(kResOut, kBF16).with_rstd(),
      FwdCase("N131072_bf16_f32_weight_cluster", 9, 131072, kBF16).with(kW, kF32),
      FwdCase("N100003_f16_f32_res_w_b_cluster", 5, 100003, kF16).with(kRes, kF32).with(kW, kF16).with(kB, kF16).with(kResOut, kF32),
      // Rows staged in shared memory (smem_staged_cases below), fp32 and
      // 16-bit: a partial last vector, a last CTA with one vector, clusters
      // of 16, a bias and a weight offset.
      FwdCase("N65540_f32_w_b_rstd_cluster", 6, 65540, kF32).with(kW, kF32).with(kB, kF32).with_rstd(),
      FwdCase("N12288_f32_w_rstd_half_cluster", 5, 12288, kF32).with(kW, kF32).with_rstd(),
      FwdCase("N24577_f32_w_padded_partial_vector", 7, 24577, kF32).with(kW, kF32).pad(kX, 3).pad(kOut, 7),
      FwdCase("N131072_f32_w_b_rstd_cluster16", 3, 131072, kF32).with(kW, kF32).with(kB, kF32).with_rstd(),
      FwdCase("N262144_f16_w_b_offset_cluster16", 2, 262144, kF16).with(kW, kF16).with(kB, kF16).with_weight_offset(1.0f),
      // ... and past a 16-CTA cluster at 8 vectors a thread: 16 or 32.
      FwdCase("N524288_bf16_w_rstd_staged16", 2, 524288, kBF16).with(kW, kBF16).with_rstd(),
      FwdCase("N300001_bf16_w_b_padded_partial_staged16", 3, 300001, kBF16)
          .with(kW, kBF16).with(kB, kBF16).pad(kX, 7).pad(kOut, 15),
      FwdCase("N200000_f32_w_rstd_staged16", 3, 200000, kF32).with(kW, kF32).with_rstd(),
      FwdCase("N1048576_bf16_w_b_f32_staged32", 2, 1 << 20, kBF16).with(kW, kF32).with(kB, kF32).with_rstd(),
      // Misaligned pointers and row strides > N.
      FwdCase("N200_bf16_all_misaligned", 37, 200, kBF16)
          .with(kRes, kBF16).with(kW, kBF16).with(kB, kBF16).with(kResOut, kBF16).with_rstd().misaligned(),
      FwdCase("N4096_f16_x_misaligned", 8, 4096, kF16).with(kW, kF16).offset(kX, 1),
      FwdCase("N4096_bf16_out_misaligned", 8, 4096, kBF16).with(kW, kBF16).offset(kOut, 1),
      FwdCase("N512_f32_strided_aligned", 13, 512, kF32)
          .with(kRes, kF32).with(kResOut, kF32).pad(kX, 4).pad(kOut, 12).pad(kRes, 8).pad(kResOut, 4),
      FwdCase("N512_bf16_odd_strides", 13, 512, kBF16).with(kRes, kBF16).with(kResOut, kBF16).pad_all(1),
      FwdCase("N3000_bf16_wide_strides", 6, 3000, kBF16).with(kW, kBF16).pad(kX, 5000).pad(kOut, 808),
  };
}

// ---------------------------------------------------------------------------
// Reference and comparison.

// |got - want| <= atol + rtol * |want|, by the dtype the result is stored in
// (its rounding, plus fp32 accumulation over up to 4M elements).
bool close(double got, double want, DType t) {
  const double rtol = t == DType::kFloat32 ? 1e-4 : t == DType::kFloat16 ? 1e-3 : 8e-3;
  return std::fabs(got - want) <= 1e-4 + rtol * std::fabs(want);
}

struct Inputs {
  std::vector<float> x, res, w, b;  // values representable in their dtypes
};

Inputs make_inputs(const FwdCase& c, bool centre) {
  std::mt19937 gen(uint32_t(c.rows * 7919 + c.cols));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Inputs in;
  auto fill = [&](std::vector<float>& v, Operand o, int64_t rows, auto value) {
    if (!c.op[o].present) return;
    v.resize(size_t(rows * c.cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < c.cols; ++j) v[r * c.cols + j] = float(round_to(c.op[o].dtype, value(r, j)));
  };
  // Row scales from 0.25 to 4: a row normalised with another's rstd shows.
  fill(in.x, kX, c.rows, [&](int64_t r, int64_t j) {
    if (c.hostile_moments) return 100.0f + u(gen) + (j % 997 == 0 ? 50.0f : 0.0f);
    return std::ldexp(2.0f * u(gen) + (centre ? float(r % 9) - 4.0f : 0.0f), int(r % 5) - 2);
  });
  fill(in.res, kRes, c.rows, [&](int64_t, int64_t) { return u(gen); });
  fill(in.w, kW, 1, [&](int64_t, int64_t) { return 1.0f + 0.5f * u(gen); });
  fill(in.b, kB, 1, [&](int64_t, int64_t) { return 0.5f * u(gen); });
  return in;
}

Layout layout_of(const FwdCase& c, Operand o) {
  const OperandSpec& s = c.op[o];
  if (o == kW || o == kB) return {s.dtype, 1, c.cols, c.cols, s.offset};
  if (o == kRstd || o == kMean) return {s.dtype, c.rows, 1, 1, s.offset};
  return {s.dtype, c.rows, c.cols, c.cols + s.pad, s.offset};
}

// Runs one case end to end, as RMSNorm or (centre) LayerNorm, which also
// writes the mean wherever the case asks for rstd; reports every kind of
// mismatch.
// What the plan of the call (norm_fwd_plan_description) must say, when given:
// its start, and words it must and must not contain.
struct PlanCheck {
  std::string prefix;
  std::vector<std::string> with, without;
};

// with_workspace: the workspace the call asks for (rmsnorm_fwd_workspace_bytes;
// the grid kernel's exchange rings), as the Python front passes it, in a
// guarded buffer poisoned before each call; false: none (the other kernels).
void run_case(const FwdCase& case_, bool centre, const PlanCheck& expect_plan = {}, bool with_workspace = true) {
  FwdCase c = case_;
  c.rows = test::case_rows(c.rows, c.cols);
  if (centre && c.op[kRstd].present) c.op[kMean] = c.op[kRstd];
  const Inputs in = make_inputs(c, centre);
  std::vector<GuardedTensor> t;
  t.reserve(kNumOperands);
  for (int o = 0; o < kNumOperands; ++o) {
    t.emplace_back(c.op[o].present ? layout_of(c, Operand(o)) : Layout{});
    ASSERT_TRUE(t.back().ok()) << "cudaMalloc failed for " << kOperandName[o];
  }
  const std::vector<float>* input_values[kNumOperands] = {&in.x, &in.res, &in.w, &in.b, nullptr, nullptr, nullptr, nullptr};
  for (const Operand o : {kX, kRes, kW, kB})
    if (c.op[o].present) QUACK_ASSERT_CUDA(t[o].upload(*input_values[o]));
  // The buffer each operand lives in: its own, or (in place) the input's
  // whose matrix an output is written over.
  int buf[kNumOperands];
  for (int o = 0; o < kNumOperands; ++o) buf[o] = o;
  if (c.in_place) {
    for (const auto& [out, in] : {std::pair{kOut, kX}, std::pair{kResOut, kRes}})
      if (c.op[out].present && c.op[in].present && c.op[out].dtype == c.op[in].dtype) buf[out] = in;
    ASSERT_EQ(buf[kOut], kX) << "an in-place case needs out in x's dtype";
  }

  LayerNormFwdArgs a;  // (an RMSNormFwdArgs and the mean)
  a.rows = c.rows;
  a.cols = c.cols;
  auto matrix = [&](Operand o) {
    return MatrixRef{c.op[o].present ? t[o].ptr() : nullptr, c.op[o].dtype, t[o].layout().stride};
  };
  auto mut_matrix = [&](Operand o) {
    return MutMatrixRef{c.op[o].present ? t[buf[o]].ptr() : nullptr, c.op[o].dtype, t[buf[o]].layout().stride};
  };
  auto vector = [&](Operand o) { return VectorRef{c.op[o].present ? t[o].ptr() : nullptr, c.op[o].dtype}; };
  a.x = matrix(kX);
  a.residual = matrix(kRes);
  a.weight = vector(kW);
  a.bias = vector(kB);
  a.out = mut_matrix(kOut);
  a.residual_out = mut_matrix(kResOut);
  a.rstd = c.op[kRstd].present ? static_cast<float*>(t[kRstd].ptr()) : nullptr;
  a.mean = c.op[kMean].present ? static_cast<float*>(t[kMean].ptr()) : nullptr;
  a.eps = c.eps;
  a.weight_offset = c.weight_offset;
  {
    const Status st = centre ? can_implement(a) : can_implement(static_cast<const RMSNormFwdArgs&>(a));
    ASSERT_TRUE(st.ok()) << st.message;
  }
  size_t ws_bytes = 0;
  {
    const Status st = centre ? layernorm_fwd_workspace_bytes(a, &ws_bytes)
                             : rmsnorm_fwd_workspace_bytes(static_cast<const RMSNormFwdArgs&>(a), &ws_bytes);
    ASSERT_TRUE(st.ok()) << st.message;
    ASSERT_EQ(ws_bytes % 16, 0u);
  }
  if (!with_workspace) ws_bytes = 0;
  const int64_t ws_words = int64_t(ws_bytes / 4);
  GuardedTensor ws(ws_bytes > 0 ? Layout{kF32, 1, ws_words, ws_words, 0} : Layout{});
  if (ws_bytes > 0) {
    ASSERT_TRUE(ws.ok()) << "cudaMalloc failed for the workspace";
    a.workspace = ws.ptr();
    a.workspace_bytes = ws_bytes;
  }
  if (!expect_plan.prefix.empty()) {
    const std::string plan = norm_fwd_plan_description(a, centre, DeviceLimits{});
    ASSERT_EQ(plan.rfind(expect_plan.prefix, 0), 0u) << "the call does not take the kernel under test: " << plan;
    for (const std::string& w : expect_plan.with) ASSERT_NE(plan.find(w), std::string::npos) << plan;
    for (const std::string& w : expect_plan.without) ASSERT_EQ(plan.find(w), std::string::npos) << plan;
  }

  // Float64 reference.
  std::vector<double> want_out(size_t(c.rows * c.cols)), want_h(want_out.size()), want_rstd(size_t(c.rows)),
      want_mean(size_t(c.rows));
  for (int64_t r = 0; r < c.rows; ++r) {
    double sum = 0.0;
    for (int64_t j = 0; j < c.cols; ++j) {
      const size_t i = size_t(r * c.cols + j);
      const double h = double(in.x[i]) + (in.res.empty() ? 0.0 : double(in.res[i]));
      want_h[i] = h;
      sum += h;
    }
    const double mean = centre ? sum / double(c.cols) : 0.0;
    double ss = 0.0;
    for (int64_t j = 0; j < c.cols; ++j) {
      const double d = want_h[size_t(r * c.cols + j)] - mean;
      ss += d * d;
    }
    const double rstd = 1.0 / std::sqrt(ss / double(c.cols) + double(c.eps));
    want_rstd[size_t(r)] = rstd;
    want_mean[size_t(r)] = mean;
    for (int64_t j = 0; j < c.cols; ++j) {
      const size_t i = size_t(r * c.cols + j);
      double y = (want_h[i] - mean) * rstd;
      if (!in.w.empty()) y *= double(in.w[size_t(j)]) + double(c.weight_offset);
      if (!in.b.empty()) y += double(in.b[size_t(j)]);
      want_out[i] = y;
    }
  }
  const std::vector<double>* want[kNumOperands] = {nullptr,   nullptr, nullptr,     nullptr,
                                                  &want_out, &want_h, &want_rstd, &want_mean};

  cudaStream_t stream;
  QUACK_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<double> first[kNumOperands];
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run == 0 ? "first call" : "second call (must repeat the first bit for bit)");
    for (const Operand o : {kOut, kResOut, kRstd, kMean})
      if (c.op[o].present) QUACK_ASSERT_CUDA(buf[o] == o ? t[o].poison() : t[buf[o]].upload(*input_values[buf[o]]));
    if (ws_bytes > 0) QUACK_ASSERT_CUDA(ws.poison());
    // The uploads and memsets ran on the legacy stream, which a non-blocking
    // stream does not wait for.
    QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
    const Status st = centre ? layernorm_fwd(a, stream) : rmsnorm_fwd(a, stream);
    ASSERT_TRUE(st.ok()) << st.message;
    QUACK_ASSERT_CUDA(cudaStreamSynchronize(stream));
    QUACK_ASSERT_CUDA(cudaGetLastError());
    if (ws_bytes > 0) {
      std::vector<double> words;
      int64_t dirty = 0;
      QUACK_ASSERT_CUDA(ws.download(&words, &dirty));
      EXPECT_EQ(dirty, 0) << "bytes around the workspace are no longer poison";
    }

    for (int o = 0; o < kNumOperands; ++o) {
      if (!c.op[o].present || (o != kOut && buf[kOut] == o) || (o != kResOut && buf[kResOut] == o)) continue;
      std::vector<double> got;
      int64_t dirty = 0;
      QUACK_ASSERT_CUDA(t[buf[o]].download(&got, &dirty));
      EXPECT_EQ(dirty, 0) << "bytes around " << kOperandName[o] << "'s rows are no longer poison";
      int64_t bad = 0;
      const int64_t cols = t[buf[o]].layout().cols;
      for (size_t i = 0; i < got.size(); ++i) {
        bool ok;
        double expect;
        if (want[o] == nullptr) {  // an input: unchanged
          expect = (*input_values[o])[i];
          ok = got[i] == expect;
        } else if (run == 0) {
          expect = (*want[o])[i];
          // (a mean near 0 is an absolute error of the row's scale)
          ok = close(got[i], expect, c.op[o].dtype) || (o == kMean && std::fabs(got[i] - expect) <= 1e-5);
        } else {
          expect = first[o][i];
          ok = got[i] == expect;
        }
        if (!ok && ++bad <= 5)
          ADD_FAILURE() << kOperandName[o] << "[" << int64_t(i) / cols << ", " << int64_t(i) % cols << "] = " << got[i]
                        << ", expected " << expect;
      }
      EXPECT_EQ(bad, 0) << kOperandName[o] << ": " << bad << " of " << got.size() << " elements wrong";
      if (run == 0) first[o] = std::move(got);
    }
  }
  QUACK_ASSERT_CUDA(cudaStreamDestroy(stream));
}

class RMSNormFwdGpu : public testing::TestWithParam<FwdCase> {};

TEST_P(RMSNormFwdGpu, MatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam(), false);
}

TEST_P(RMSNormFwdGpu, LayerNormMatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(Cases, RMSNormFwdGpu, testing::ValuesIn(fwd_cases()),
                         [](const testing::TestParamInfo<FwdCase>& i) { return i.param.name; });

// The cases whose out is in x's dtype, in place (out over x, residual_out
// over the residual where the dtypes agree), by default tuning: every
// kernel they reach reads a row's elements before writing over them.
std::vector<FwdCase> in_place_cases() {
  std::vector<FwdCase> v;
  for (FwdCase c : fwd_cases())
    if (c.op[kOut].dtype == c.op[kX].dtype) {
      c.in_place = true;
      v.push_back(c);
    }
  return v;
}

// (RMSNormFwdGpu's tests: the case carries in_place.)
INSTANTIATE_TEST_SUITE_P(InPlaceCases, RMSNormFwdGpu, testing::ValuesIn(in_place_cases()),
                         [](const testing::TestParamInfo<FwdCase>& i) { return i.param.name; });

// Installs a tuning for the duration of each test of a suite.
template <void (*kTune)(RowTuning&)>
using RMSNormFwdGpuTuned = test::TunedSuite<FwdCase, kTune>;

// Model widths whose power-of-two CTAs leave a quarter or more of the tile
// idle, with every optional operand: by default (RowTuning::norm_fit_team)
// their register rows take CTAs fitted to the row, the fewest whole warps
// at the tile (bf16 5120: 160 threads, not 256; 1 << team_shift no longer
// the team).
std::vector<FwdCase> model_width_cases() {
  std::vector<FwdCase> v;
  v.push_back(FwdCase("N5120_bf16_M64_res_w_resout_rstd", 64, 5120, kBF16)
                  .with(kRes, kBF16).with(kW, kBF16).with(kResOut, kBF16).with_rstd());
  v.push_back(FwdCase("N2560_f32_M33_w_b", 33, 2560, kF32).with(kW, kF32).with(kB, kF32));
  v.push_back(FwdCase("N7168_bf16_M20_f32_w_b_rstd", 20, 7168, kBF16).with(kW, kF32).with(kB, kF32).with_rstd());
  v.push_back(FwdCase("N3584_f16_M40_w_hostile_moments", 40, 3584, kF16).with(kW, kF16).with_hostile_moments());
  v.push_back(FwdCase("N6144_bf16_M24_f32_res_w", 24, 6144, kBF16).with(kRes, kF32).with(kW, kBF16).with(kResOut, kF32));
  return v;
}

INSTANTIATE_TEST_SUITE_P(ModelWidthCases, RMSNormFwdGpu, testing::ValuesIn(model_width_cases()),
                         [](const testing::TestParamInfo<FwdCase>& i) { return i.param.name; });

// The same, and the cases of one CTA a row, with norm_fit_team off: the
// power-of-two CTAs (team_shift's mask exact), the default until the
// forty-sixth session and still softmax's and cross-entropy's.
std::vector<FwdCase> pow2_team_cases() {
  std::vector<FwdCase> v;
  for (const FwdCase& c : fwd_cases())
    if (c.cols > 256 && c.cols <= 32768) v.push_back(c);
  for (const FwdCase& c : model_width_cases()) v.push_back(c);
  return v;
}

void pow2_teams(RowTuning& t) { t.norm_fit_team = 0; }
using RMSNormFwdGpuPow2Teams = RMSNormFwdGpuTuned<pow2_teams>;

TEST_P(RMSNormFwdGpuPow2Teams, MatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam(), false);
}

TEST_P(RMSNormFwdGpuPow2Teams, LayerNormMatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(Pow2TeamCases, RMSNormFwdGpuPow2Teams, testing::ValuesIn(pow2_team_cases()),
                         [](const testing::TestParamInfo<FwdCase>& i) { return i.param.name; });

// The same cases with the register-resident kernel switched off, so that the
// staged kernel is checked on every layout too (by default it only serves
// misaligned operands, mixed dtypes outside the register kernels' set, and
// rows beyond their capacity).
// (The grid forward off too: it would take the longest rows.)
void register_kernels_off(RowTuning& t) {
  t.reg_enable = 0;
  t.fwd_grid = 0;
}
using RMSNormFwdGpuStaged = RMSNormFwdGpuTuned<register_kernels_off>;

TEST_P(RMSNormFwdGpuStaged, MatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam(), false);
}

TEST_P(RMSNormFwdGpuStaged, LayerNormMatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(StagedCases, RMSNormFwdGpuStaged, testing::ValuesIn(fwd_cases()),
                         [](const testing::TestParamInfo<FwdCase>& i) { return i.param.name; });

// And with the register kernels' shared-memory staging of clustered rows
// switched off, so that their persistent register-held clusters are checked
// on the layouts that would otherwise be staged.
void smem_staging_off(RowTuning& t) {
  t.reg_staged = 0;
  t.fwd_grid = 0;
}
using RMSNormFwdGpuRegClusters = RMSNormFwdGpuTuned<smem_staging_off>;

TEST_P(RMSNormFwdGpuRegClusters, MatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam(), false);
}

TEST_P(RMSNormFwdGpuRegClusters, LayerNormMatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(RegClusterCases, RMSNormFwdGpuRegClusters, testing::ValuesIn(fwd_cases()),
                         [](const testing::TestParamInfo<FwdCase>& i) { return i.param.name; });

// Cases run twice: at the defaults, through the instance under test (the
// plan says so: `on`), then under the tuning kOff sets, without it (`off`).
template <void (*kOff)(RowTuning&)>
class RMSNormFwdGpuOnAndOff : public testing::TestWithParam<FwdCase> {
 protected:
  void TearDown() override { set_row_tuning(nullptr); }
  void run_on_and_off(bool centre, const PlanCheck& on, const PlanCheck& off) {
    run_case(GetParam(), centre, on);
    if (HasFatalFailure()) return;
    RowTuning t = default_row_tuning();
    kOff(t);
    set_row_tuning(&t);
    run_case(GetParam(), centre, off);
  }
};

// The small-CTA cases above take the small-CTA instance (and run again
// without it, through the 64-register one): the plan says so, or the test
// fails.
void small_cta_off(RowTuning& t) { t.reg_small_cta = 0; }
class RMSNormFwdGpuSmallCta : public RMSNormFwdGpuOnAndOff<small_cta_off> {
 protected:
  void run_both(bool centre) {
    run_on_and_off(centre, PlanCheck{"reg", {"vpt  8", "small cta"}, {}}, PlanCheck{"reg", {"vpt  8"}, {"small cta"}});
  }
};

TEST_P(RMSNormFwdGpuSmallCta, MatchesFloat64WithAndWithoutTheSmallCtaInstance) {
  QUACK_REQUIRE_SM90();
  run_both(false);
}

TEST_P(RMSNormFwdGpuSmallCta, LayerNormMatchesFloat64WithAndWithoutTheSmallCtaInstance) {
  QUACK_REQUIRE_SM90();
  run_both(true);
}

std::vector<FwdCase> small_cta_cases() {
  std::vector<FwdCase> v;
  for (const FwdCase& c : fwd_cases())
    if (c.name.find("small_cta") != std::string::npos) v.push_back(c);
  return v;
}

INSTANTIATE_TEST_SUITE_P(SmallCtaCases, RMSNormFwdGpuSmallCta, testing::ValuesIn(small_cta_cases()),
                         [](const testing::TestParamInfo<FwdCase>& i) { return i.param.name; });

// Shifted rows (RowTuning::shifted_rows bit 2, built in the forty-seventh
// session, on by default since the forty-eighth; the suite sets it
// whatever the default): rows that are not whole 16-byte vectors, every
// operand's row at x's offset inside a vector -- odd N in contiguous
// tensors (each row at another offset: 4101 bf16 cycles through all
// eight), a misaligned base with whole-vector pitches, an fp32 residual of
// 16-bit x, rows shorter than a vector, in place -- through the register
// kernel from the vector that holds each row's first element; the test
// checks that the call takes it (" shifted"), and the bytes around every
// output row stay poison (the head and tail vectors are the neighbours').
std::vector<FwdCase> shifted_cases() {
  std::vector<FwdCase> v;
  v.push_back(FwdCase("N4100_bf16_M300_w", 300, 4100, kBF16).with(kW, kBF16));
  v.push_back(FwdCase("N4101_bf16_M77_w_b_rstd", 77, 4101, kBF16).with(kW, kBF16).with(kB, kBF16).with_rstd());
  v.push_back(FwdCase("N1001_f32_M40_res_w_b_resout_rstd", 40, 1001, kF32)
                  .with(kRes, kF32).with(kW, kF32).with(kB, kF32).with(kResOut, kF32).with_rstd());
  v.push_back(FwdCase("N3_bf16_M199_w", 199, 3, kBF16).with(kW, kBF16));
  v.push_back(FwdCase("N1_f16_M33_w_b", 33, 1, kF16).with(kW, kF16).with(kB, kF16));
  v.push_back(FwdCase("N7_f16_M300_res_resout_w", 300, 7, kF16).with(kRes, kF16).with(kResOut, kF16).with(kW, kF16));
  v.push_back(FwdCase("N5003_bf16_M64_f32res_resout_f32w", 64, 5003, kBF16)
                  .with(kRes, kF32).with(kResOut, kF32).with(kW, kF32));
  v.push_back(FwdCase("N2051_bf16_M64_f32w_b_rstd", 64, 2051, kBF16).with(kW, kF32).with(kB, kF32).with_rstd());
  // Each tile the shifted kernels are built with (the plans, H200 limits:
  // 16-bit x at 4 vectors below 3000 columns (N1999, N999) and at 8 from
  // there (N4100, N6001: RowTuning::norm_fwd_shift_vpt16_min_cols), fp32
  // x at 8, an fp32 residual at 4, 16-bit x with a residual at 2 -- the
  // shifted cap -- and 8 with an fp32 weight in the small CTA).
  v.push_back(FwdCase("N1999_bf16_M500_w_b", 500, 1999, kBF16).with(kW, kBF16).with(kB, kBF16));
  v.push_back(FwdCase("N6001_bf16_M1000_w", 1000, 6001, kBF16).with(kW, kBF16));
  v.push_back(FwdCase("N2051_bf16_M2000_f32w_b", 2000, 2051, kBF16).with(kW, kF32).with(kB, kF32));
  v.push_back(FwdCase("N4099_f32_M500_w_rstd", 500, 4099, kF32).with(kW, kF32).with_rstd());
  v.push_back(FwdCase("N8191_f32_M600_res_w_b_resout", 600, 8191, kF32)
                  .with(kRes, kF32).with(kW, kF32).with(kB, kF32).with(kResOut, kF32));
  v.push_back(FwdCase("N12001_f16_M300_f32res_resout_w_b", 300, 12001, kF16)
                  .with(kRes, kF32).with(kResOut, kF32).with(kW, kF16).with(kB, kF16));
  v.push_back(FwdCase("N16001_bf16_M1000_f32w_b_small_cta", 1000, 16001, kBF16).with(kW, kF32).with(kB, kF32));
  v.push_back(FwdCase("N32001_bf16_M20_w_rstd", 20, 32001, kBF16).with(kW, kBF16).with_rstd());
  // Rows whose aligned plan stages x in a cluster (fp32 RMSNorm from 16K,
  // 16-bit rows past a 512-thread team) take the widest register CTA,
  // unstaged; 16-bit x with an fp32 weight past the small CTA, 4 vectors
  // a thread (1024 threads at 32001).
  v.push_back(FwdCase("N32001_f32_M30_w_rstd", 30, 32001, kF32).with(kW, kF32).with_rstd());
  v.push_back(FwdCase("N24581_f32_M40_w_b", 40, 24581, kF32).with(kW, kF32).with(kB, kF32));
  v.push_back(FwdCase("N50257_bf16_M16_w", 16, 50257, kBF16).with(kW, kBF16));
  v.push_back(FwdCase("N32001_bf16_M40_f32w_b_rstd", 40, 32001, kBF16).with(kW, kF32).with(kB, kF32).with_rstd());
  v.push_back(FwdCase("N20001_bf16_M64_f32w", 64, 20001, kBF16).with(kW, kF32));
  v.push_back(FwdCase("N3001_bf16_M40_w_hostile_moments", 40, 3001, kBF16).with(kW, kBF16).with_hostile_moments());
  v.push_back(FwdCase("N2048_bf16_M30_res_w_off3", 30, 2048, kBF16)
                  .with(kRes, kBF16).with(kResOut, kBF16).with(kW, kBF16)
                  .offset(kX, 3).offset(kOut, 3).offset(kRes, 3).offset(kResOut, 3));
  v.push_back(FwdCase("N999_f16_M50_w_pad5", 50, 999, kF16).with(kW, kF16).pad(kX, 5).pad(kOut, 5));
  // An fp32 residual one element into its buffer beside x five in: row 0's
  // head (5 elements, 20 bytes of the residual) starts before the
  // residual's first 16 bytes (read element by element).
  v.push_back(FwdCase("N2048_bf16_M30_f32res_resout_w_off5_1", 30, 2048, kBF16)
                  .with(kRes, kF32).with(kResOut, kF32).with(kW, kBF16)
                  .offset(kX, 5).offset(kOut, 5).offset(kRes, 1).offset(kResOut, 1));
  FwdCase in_place = FwdCase("N4097_bf16_M65_res_resout_w_in_place", 65, 4097, kBF16)
                         .with(kRes, kBF16).with(kResOut, kBF16).with(kW, kBF16);
  in_place.in_place = true;
  v.push_back(in_place);
  return v;
}

void shifted_norm_rows(RowTuning& t) { t.shifted_rows |= 4; }
using RMSNormFwdGpuShifted = RMSNormFwdGpuTuned<shifted_norm_rows>;

TEST_P(RMSNormFwdGpuShifted, MatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam(), false, PlanCheck{"reg", {" shifted"}, {}});
}

TEST_P(RMSNormFwdGpuShifted, LayerNormMatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam(), true, PlanCheck{"reg", {" shifted"}, {}});
}

INSTANTIATE_TEST_SUITE_P(ShiftedCases, RMSNormFwdGpuShifted, testing::ValuesIn(shifted_cases()),
                         [](const testing::TestParamInfo<FwdCase>& i) { return i.param.name; });

// Lean rows (RowTuning::reg_lean, kLean): decode-sized calls whose row is
// one team owning its CTA and exactly the tile (N = vpt * team * vec) take
// the kernel with the row's bounds compiled away. Each case runs lean (the
// plan says so, or the test fails) and again with the knob off, through the
// general register kernel: every operand combination the lean instances
// serve (weights in x's dtype and fp32, a bias, a residual stream in x's
// dtype and fp32, rstd and the mean, Gemma's offset, in place), both tiles
// (1 and 2 vectors), the three dtypes, 1 row and several.
std::vector<FwdCase> lean_cases() {
  std::vector<FwdCase> v;
  v.push_back(FwdCase("N2048_bf16_M1_w", 1, 2048, kBF16).with(kW, kBF16));
  v.push_back(FwdCase("N2048_bf16_M7_f32w_b_rstd", 7, 2048, kBF16).with(kW, kF32).with(kB, kF32).with_rstd());
  v.push_back(FwdCase("N4096_bf16_M3_res_resout_w_rstd", 3, 4096, kBF16)
                  .with(kRes, kBF16).with(kResOut, kBF16).with(kW, kBF16).with_rstd());
  v.push_back(FwdCase("N8192_bf16_M5_f32res_resout_f32w", 5, 8192, kBF16)
                  .with(kRes, kF32).with(kResOut, kF32).with(kW, kF32));
  v.push_back(FwdCase("N8192_f16_M64_w_b_off", 64, 8192, kF16).with(kW, kF16).with(kB, kF16).with_weight_offset(1.0f));
  v.push_back(FwdCase("N2048_bf16_M1024_w", 1024, 2048, kBF16).with(kW, kBF16));
  v.push_back(FwdCase("N4096_bf16_M16_w_hostile_moments", 16, 4096, kBF16).with(kW, kBF16).with_hostile_moments());
  v.push_back(FwdCase("N1024_f32_M4_w_b_rstd", 4, 1024, kF32).with(kW, kF32).with(kB, kF32).with_rstd());
  v.push_back(FwdCase("N4096_f32_M2_res_resout", 2, 4096, kF32).with(kRes, kF32).with(kResOut, kF32));
  v.push_back(FwdCase("N2048_f16_M9_none", 9, 2048, kF16));
  FwdCase in_place = FwdCase("N4096_bf16_M8_res_resout_w_in_place", 8, 4096, kBF16)
                         .with(kRes, kBF16).with(kResOut, kBF16).with(kW, kBF16);
  in_place.in_place = true;
  v.push_back(in_place);
  return v;
}

void lean_off(RowTuning& t) { t.reg_lean = 0; }
class RMSNormFwdGpuLean : public RMSNormFwdGpuOnAndOff<lean_off> {
 protected:
  void run_both(bool centre) { run_on_and_off(centre, PlanCheck{"reg", {" lean"}, {}}, PlanCheck{"reg", {}, {" lean"}}); }
};

TEST_P(RMSNormFwdGpuLean, MatchesFloat64LeanAndNot) {
  QUACK_REQUIRE_SM90();
  run_both(false);
}

TEST_P(RMSNormFwdGpuLean, LayerNormMatchesFloat64LeanAndNot) {
  QUACK_REQUIRE_SM90();
  run_both(true);
}

INSTANTIATE_TEST_SUITE_P(LeanCases, RMSNormFwdGpuLean, testing::ValuesIn(lean_cases()),
                         [](const testing::TestParamInfo<FwdCase>& i) { return i.param.name; });

// The cases whose rows every dtype stages in shared memory when the tuning
// allows (reg_staged = ln_staged = 3): no residual stream, 16-byte-aligned operands, out
// in x's dtype, weight and bias in x's dtype or fp32, and a row that needs a
// 1024-thread register team yet fits a cluster of at most 16 256-thread CTAs.
// Each runs at both staged kernels, the weight loaded after the reduction
// and while x is in flight; the test checks that the call takes it.
std::vector<FwdCase> smem_staged_cases() {
  std::vector<FwdCase> v;
  for (const FwdCase& c : fwd_cases()) {
    const DType x = c.op[kX].dtype;
    const int vec = 16 / dtype_size(x);
    bool ok = !c.op[kRes].present && !c.op[kResOut].present && c.op[kOut].dtype == x;
    for (const Operand o : {kW, kB})
      ok = ok && (!c.op[o].present || c.op[o].dtype == x || c.op[o].dtype == kF32);
    if (c.op[kW].present && c.op[kB].present) ok = ok && c.op[kW].dtype == c.op[kB].dtype;
    for (const auto& o : c.op) ok = ok && o.offset == 0;
    ok = ok && (c.cols + c.op[kX].pad) % vec == 0 && (c.cols + c.op[kOut].pad) % vec == 0;
    const int64_t nvec = (c.cols + vec - 1) / vec;
    ok = ok && nvec > 512 * 8 && (nvec + 256 * 32 - 1) / (256 * 32) <= 16;
    if (ok) v.push_back(c);
  }
  return v;
}

// The staged plan's tile and cluster under run_all's tuning (the 8-vector
// tile, doubled while 16 CTAs of 256 threads do not hold the row), and the
// CTA norm_staged_balance fits to the row: the fewest whole warps covering it.
struct StagedShape {
  int vpt, cluster, balanced_threads;
};
StagedShape staged_shape(const FwdCase& c) {
  const int vec = 16 / dtype_size(c.op[kX].dtype);
  const int64_t nvec = (c.cols + vec - 1) / vec;
  int vpt = 8;
  while ((nvec + 256 * vpt - 1) / (256 * vpt) > 16) vpt *= 2;
  const int cluster = int((nvec + 256 * vpt - 1) / (256 * vpt));
  return {vpt, cluster, int(test::balanced_threads(nvec, cluster, vpt))};
}

class RMSNormFwdGpuSmemStaged : public testing::TestWithParam<FwdCase> {
 protected:
  void TearDown() override { set_row_tuning(nullptr); }
  // balance: norm_staged_balance (both dtypes' bits), in modes 2 and 3 (the early weight; two
  // rows a cluster with the weight in batches), the plan's CTA checked.
  void run_all(bool centre, bool balance = false) {
    const FwdCase& c = GetParam();
    const bool w_f32 = (c.op[kW].present && c.op[kW].dtype == kF32 && c.op[kX].dtype != kF32) ||
                       (c.op[kB].present && c.op[kB].dtype == kF32 && c.op[kX].dtype != kF32);
    const int vec = 16 / dtype_size(c.op[kX].dtype);
    const bool tile8 = (c.cols + vec - 1) / vec <= 16 * 256 * 8;  // the 8-vector tile holds it
    const char* mode_name[] = {"weight after the reduction, a vector at a time",
                               "weight after the reduction, in batches", "weight loaded early",
                               "two rows a cluster, weight in batches", "two rows a cluster, a vector at a time",
                               "two rows a cluster, the next batch ahead", "one row a cluster, the next batch ahead"};
    // Two rows a cluster: 16-bit x at the 8-vector tile with a weight or a
    // bias to share, whatever the rows (an odd last pair has one row).
    const bool pairable = dtype_size(c.op[kX].dtype) == 2 && tile8 && (c.op[kW].present || c.op[kB].present) &&
                          test::case_rows(c.rows, c.cols) > 1;
    for (const int mode : {0, 1, 2, 3, 4, 5, 6}) {
      if (balance && mode != 2 && mode != 3 && mode != 5) continue;
      SCOPED_TRACE(mode_name[mode]);
      RowTuning t = default_row_tuning();
      t.norm_staged_balance = balance ? 3 : 0;
      t.reg_staged = 3;
      t.ln_staged = 3;
      t.reg_staged_vpt_max = 32;  // every row up to 16 x 256 x 32 vectors staged
      t.reg_w_batch = mode >= 5 ? 2 : mode == 1 || mode == 2 || mode == 3;
      t.reg_staged_early_w = mode == 2 ? 3 : 0;
      t.reg_staged_pair = mode >= 3 && mode <= 5 ? 15 : 0;
      t.reg_staged_pair_full_wave = 0;
      t.reg_staged_pair_min_cluster = 2;
      t.fwd_grid = 0;  // (it would take the 1M rows with fp32 weights)
      set_row_tuning(&t);
      // fp32 weights of 16-bit x, and the 16- and 32-vector tiles, never
      // load the weight early.
      const bool early = mode == 2 && !w_f32 && tile8;
      PlanCheck check{"stage", {}, {}};
      (early ? check.with : check.without).push_back("early w");
      (t.reg_w_batch && !early ? check.with : check.without).push_back("w batch");
      (mode >= 3 && mode <= 5 && pairable ? check.with : check.without).push_back("2 rows");
      // The batch ahead where the kernel has the registers for it: two rows
      // a cluster, or tiles past 8 vectors (ops::staged_w_ahead).
      (mode >= 5 && ((mode == 5 && pairable) || !tile8) ? check.with : check.without).push_back("ahead");
      if (balance) {
        const StagedShape sh = staged_shape(c);
        char thr[32];
        std::snprintf(thr, sizeof thr, "thr %4d cl %2d vpt %2d", sh.balanced_threads, sh.cluster, sh.vpt);
        check.with.push_back(thr);
      }
      run_case(c, centre, check);
      if (HasFatalFailure()) return;
    }
  }
};

TEST_P(RMSNormFwdGpuSmemStaged, MatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_all(false);
}

TEST_P(RMSNormFwdGpuSmemStaged, LayerNormMatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_all(true);
}

INSTANTIATE_TEST_SUITE_P(SmemStagedCases, RMSNormFwdGpuSmemStaged, testing::ValuesIn(smem_staged_cases()),
                         [](const testing::TestParamInfo<FwdCase>& i) { return i.param.name; });

// The staged cases whose CTA norm_staged_balance trims below 256 threads
// (by default for fp32 x only): the staged kernels' geometry at CTAs of
// whole warps that are not a power of two, one row a cluster and two.
class RMSNormFwdGpuBalancedStaged : public RMSNormFwdGpuSmemStaged {};

TEST_P(RMSNormFwdGpuBalancedStaged, MatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_all(false, true);
}

TEST_P(RMSNormFwdGpuBalancedStaged, LayerNormMatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_all(true, true);
}

std::vector<FwdCase> balanced_staged_cases() {
  std::vector<FwdCase> v;
  for (const FwdCase& c : smem_staged_cases())
    if (staged_shape(c).balanced_threads != 256) v.push_back(c);
  return v;
}

INSTANTIATE_TEST_SUITE_P(BalancedStagedCases, RMSNormFwdGpuBalancedStaged, testing::ValuesIn(balanced_staged_cases()),
                         [](const testing::TestParamInfo<FwdCase>& i) { return i.param.name; });

// The grid kernel (ops/norm_fwd_grid.cuh): rows from 64K columns spread
// over every SM, the CTAs exchanging their sums through the workspace. The
// tuning sends every such row of every layout it serves there (the
// defaults: fp32 rows past 512K, 16-bit ones with fp32 weights from 512K);
// the plan must say "grid". Cases: each dtype, weight and bias in x's dtype
// or fp32 or absent, a weight offset, rstd / mean, partial last vectors
// (odd N, padded strides), one row and a group's odd last step (two 16-bit
// rows a step), 131 ranks (a fifth rank a lane in the combine), many rows (a long exchange log, several groups), rows
// far off zero with outliers (LayerNorm's combined moments).
std::vector<FwdCase> grid_cases() {
  return {
      FwdCase("G65536_bf16_w_rstd_M300", 300, 65536, kBF16).with(kW, kBF16).with_rstd(),
      FwdCase("G1048576_f32_w_b_rstd_M40_long_log", 40, 1 << 20, kF32).with(kW, kF32).with(kB, kF32).with_rstd(),
      FwdCase("G1048573_bf16_f32_w_b_rstd_padded", 3, 1048573, kBF16).with(kW, kF32).with(kB, kF32).with_rstd()
          .pad(kX, 3).pad(kOut, 11),
      FwdCase("G131075_f16_b_offset_padded", 9, 131075, kF16).with(kB, kF16).with_weight_offset(1.0f).pad(kX, 5)
          .pad(kOut, 5),
      FwdCase("G200000_f32_w_rstd_hostile_moments", 37, 200000, kF32).with(kW, kF32).with_rstd().with_hostile_moments(),
      FwdCase("G300001_bf16_f32_w_b_rstd_hostile_moments", 7, 300001, kBF16).with(kW, kF32).with(kB, kF32).with_rstd()
          .pad(kX, 7).pad(kOut, 7).with_hostile_moments(),
      FwdCase("G65544_bf16_no_weight_M257", 257, 65544, kBF16).with_rstd(),
      FwdCase("G524289_f16_f32_w_rstd_M80_two_groups", 80, 524289, kF16).with(kW, kF32).with_rstd().pad(kX, 7).pad(kOut, 7),
      FwdCase("G1048576_bf16_w_M3", 3, 1 << 20, kBF16).with(kW, kBF16).with_weight_offset(0.5f),
      FwdCase("G262144_f32_w_M1", 1, 262144, kF32).with(kW, kF32).with_rstd(),
      FwdCase("G98304_f32_M150", 150, 98304, kF32),
      // 131 ranks: lanes 0-2 of phase B's combine take a fifth rank's words.
      FwdCase("G1070001_bf16_f32_w_b_rstd_131_ranks_hostile_moments", 5, 1070001, kBF16).with(kW, kF32)
          .with(kB, kF32).with_rstd().pad(kX, 7).pad(kOut, 7).with_hostile_moments(),
  };
}

// Every grid row, in five layouts of the kernel: the defaults' stages, lag,
// two 16-bit rows a step and early collect; a lag of 1 with the collect's
// loads after phase A; a row a step; the fewest stages; the most rows a
// step (16-bit rows four, fp32 rows two).
void grid_everywhere(RowTuning& t) {
  t.fwd_grid = 3;
  t.fwd_grid_min_cols16 = t.fwd_grid_min_cols32 = kNormFwdWorkspaceMinCols;
  t.fwd_grid_keep_reg = 0;
}

class RMSNormFwdGpuGrid : public testing::TestWithParam<FwdCase> {
 protected:
  void TearDown() override { set_row_tuning(nullptr); }
  void run_all(bool centre) {
    const char* variant[] = {"defaults", "lag 1, late collect", "a row a step", "2 stages",
                             "rows 4 (16-bit; fp32 2) in 13 stages"};
    const bool f32 = GetParam().op[kX].dtype == kF32;
    for (int v = 0; v < 5; ++v) {
      SCOPED_TRACE(variant[v]);
      RowTuning t = default_row_tuning();
      grid_everywhere(t);
      if (v == 1) t.fwd_grid_lag = 1, t.fwd_grid_prefetch = 0;
      if (v == 2) t.fwd_grid_rows16 = 1;
      if (v == 3) t.fwd_grid_stages16 = t.fwd_grid_stages32 = 2;
      if (v == 4) t.fwd_grid_rows16 = 4, t.fwd_grid_rows32 = 2, t.fwd_grid_stages16 = 13;
      set_row_tuning(&t);
      const int rows = v == 4 ? (f32 ? 2 : 4) : (v != 2 && v != 3 && !f32 ? 2 : 1);
      run_case(GetParam(), centre, PlanCheck{"grid", {"rows " + std::to_string(rows)}, {}});
      if (HasFatalFailure()) return;
    }
    // Without a workspace the same tuning takes the other kernels.
    SCOPED_TRACE("no workspace");
    run_case(GetParam(), centre, PlanCheck{}, false);
  }
};

TEST_P(RMSNormFwdGpuGrid, MatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_all(false);
}

TEST_P(RMSNormFwdGpuGrid, LayerNormMatchesFloat64ReferenceAndStaysInBounds) {
  QUACK_REQUIRE_SM90();
  run_all(true);
}

INSTANTIATE_TEST_SUITE_P(GridCases, RMSNormFwdGpuGrid, testing::ValuesIn(grid_cases()),
                         [](const testing::TestParamInfo<FwdCase>& i) { return i.param.name; });

// The default tuning: fp32 rows from 256K and 16-bit rows from 512K take
// the grid, whatever their weights' dtype.
TEST(RMSNormFwdGpuGridDefaults, LongRowsTakeTheGridWhereTheDefaultsSendThem) {
  QUACK_REQUIRE_SM90();
  for (const bool centre : {false, true}) {
    SCOPED_TRACE(centre ? "LayerNorm" : "RMSNorm");
    run_case(FwdCase("G1048576_f32_w_rstd", 2, 1 << 20, kF32).with(kW, kF32).with_rstd(), centre,
             PlanCheck{"grid", {"rows 1"}, {}});
    run_case(FwdCase("G1048576_bf16_f32_w_b", 2, 1 << 20, kBF16).with(kW, kF32).with(kB, kF32), centre,
             PlanCheck{"grid", {"rows 2"}, {}});
    run_case(FwdCase("G1048576_bf16_bf16_w", 2, 1 << 20, kBF16).with(kW, kBF16), centre,
             PlanCheck{"grid", {"rows 2"}, {}});
    run_case(FwdCase("G262144_f32_w", 3, 262144, kF32).with(kW, kF32), centre, PlanCheck{"grid", {"rows 1"}, {}});
  }
}

// A workspace smaller than the call's need is refused, naming
// workspace_bytes, before anything is launched: the output stays poison.
TEST(RMSNormFwdGpuGridWorkspace, TooSmallIsRefusedAndNothingIsWritten) {
  QUACK_REQUIRE_SM90();
  const int64_t rows = 2, cols = int64_t(1) << 20;
  GuardedTensor x(Layout{kF32, rows, cols, cols, 0}), out(Layout{kF32, rows, cols, cols, 0});
  ASSERT_TRUE(x.ok() && out.ok());
  QUACK_ASSERT_CUDA(x.upload(std::vector<float>(size_t(rows * cols), 1.0f)));
  QUACK_ASSERT_CUDA(out.poison());
  RMSNormFwdArgs a;
  a.rows = rows;
  a.cols = cols;
  a.x = {x.ptr(), kF32, cols};
  a.out = {out.ptr(), kF32, cols};
  size_t need = 0;
  Status st = rmsnorm_fwd_workspace_bytes(a, &need);
  ASSERT_TRUE(st.ok()) << st.message;
  ASSERT_GT(need, 16u);
  GuardedTensor ws(Layout{kF32, 1, int64_t(need / 4), int64_t(need / 4), 0});
  ASSERT_TRUE(ws.ok());
  a.workspace = ws.ptr();
  a.workspace_bytes = need - 16;
  ASSERT_NO_FATAL_FAILURE(test::expect_workspace_refused(rmsnorm_fwd(a, nullptr), out));
  // And the right size works.
  a.workspace_bytes = need;
  const Status fits = rmsnorm_fwd(a, nullptr);
  EXPECT_TRUE(fits.ok()) << fits.message;
  QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<double> got;
  int64_t dirty = 0;
  QUACK_ASSERT_CUDA(out.download(&got, &dirty));
  EXPECT_NEAR(got[0], 1.0, 1e-4);
  EXPECT_NEAR(got.back(), 1.0, 1e-4);
}

// A row that starts past 2^31 elements (and 2^32 bytes): offsets must be
// 64-bit. Once with every stride a whole number of vectors (the vector path),
// once with x one element off (the element-wise path). Four operands of
// 4.3 GB each: about 17 GB of device memory.
TEST(RMSNormFwdGpuLarge, RowOffsetsBeyond2Pow31Elements) {
  QUACK_REQUIRE_SM90();
  size_t free_bytes = 0, total_bytes = 0;
  QUACK_ASSERT_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < (size_t(20) << 30)) GTEST_SKIP() << "needs 20 GB of free device memory";
  const int64_t n = 1024, gap = (int64_t(1) << 31) + 64 - n;
  const FwdCase base = FwdCase("N1024_bf16_stride_2pow31", 2, n, kBF16)
                           .with(kW, kBF16).with(kRes, kBF16).with(kResOut, kBF16).with_rstd()
                           .pad(kX, gap).pad(kOut, gap).pad(kRes, gap + 8).pad(kResOut, gap + 16);
  {
    SCOPED_TRACE("vector path");
    run_case(base, false);
  }
  {
    SCOPED_TRACE("element-wise path");
    run_case(FwdCase(base).offset(kX, 1), false);
  }
  {
    SCOPED_TRACE("LayerNorm, vector path");
    run_case(base, true);
  }
}

}  // namespace
}  // namespace quack
