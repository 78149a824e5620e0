// GPU tests of RMSNorm and LayerNorm backward through the public C++ API
// (quack::rmsnorm_bwd, quack::layernorm_bwd: the same kernels, the second in
// their centred mode) against a float64 reference. Every case runs as both
// ops; LayerNorm's rows of h sit off zero by up to 4 standard deviations.
//
// Every operand lives in its own guarded, poisoned buffer
// (support/guarded_tensor.hpp): reads of a gap or guard turn a row into NaN,
// writes there are counted byte by byte, inputs must come back unchanged.
// dx, dresidual, dweight and dbias are poisoned before each call; the call
// runs twice and must give bit-identical results (the weight gradients are
// deterministic by construction: per-CTA partial rows and a fixed-order sum).
// Cases cover the pipelined kernel (sub-warp and multi-warp teams sharing a
// CTA, whole-CTA teams, clusters of 2-16 CTAs, 2-4 stages, many row blocks a
// CTA), the
// register-resident kernel (the same rows with the pipelined kernel off,
// clusters up to 16 CTAs at N = 256K), the general kernel
// (misaligned pointers, odd strides, mixed dtypes, rows beyond the register
// tiles), every optional operand, weight_offset, fp32 weights for 16-bit
// rows, and rows = 0 (weight gradients of zero). Shifted rows (every matrix
// at one offset inside a 16-byte vector: odd N, a misaligned base) take the
// general kernel by default and the pipelined kernel's shifted rows under
// RowTuning::shifted_rows bit 4 (ShiftedRowsMatchFloat64).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"
#include "support/cuda_test.hpp"
#include "support/guarded_tensor.hpp"

namespace quack {
namespace {

using test::DeviceBuffer;
using test::GuardedTensor;
using test::Layout;
using test::round_to;

constexpr DType kF32 = DType::kFloat32, kF16 = DType::kFloat16, kBF16 = DType::kBFloat16;

struct BwdCase {
  std::string name;
  int64_t rows, cols;
  DType t;                   // h, dy, dx, dresidual_out, dresidual (unless overridden below)
  DType wt;                  // weight, dweight
  bool weight = true, dweight = true, dbias = true, dres_out = false, dres = false;
  float weight_offset = 0.0f;
  int64_t offset = 0;        // elements h starts past its guard (1: misaligned)
  int64_t pad = 0;           // row stride = N + pad for every matrix
  DType dy_t = DType(-1);    // != t: mixed dtypes
  DType dx_t = DType(-1);
  bool offset_all = false;   // every matrix starts `offset` elements past its guard (h's alone otherwise)
};

// A case whose every matrix starts `offset` elements into a 16-byte vector
// (shifted rows from a misaligned base).
BwdCase offset_all(BwdCase c) {
  c.offset_all = true;
  return c;
}

std::vector<BwdCase> cases() {
  std::vector<BwdCase> v;
  auto add = [&](BwdCase c) { v.push_back(c); };
  // Register-resident: sub-warp teams, whole CTAs, clusters.
  add({"N1_f32_M7", 7, 1, kF32, kF32});
  add({"N3_bf16_M199", 199, 3, kBF16, kBF16});
  add({"N100_f16_M37_fp32w_dres", 37, 100, kF16, kF32, true, true, true, true, true});
  add({"N1000_bf16_M4096_fp32w_offset", 4096, 1000, kBF16, kF32, true, true, true, false, false, 1.0f});
  add({"N4096_bf16_M4096", 4096, 4096, kBF16, kBF16});
  add({"N8191_f32_M9", 9, 8191, kF32, kF32});
  add({"N512_bf16_M1000_noweight_dbias", 1000, 512, kBF16, kBF16, false, false, true});
  add({"N2048_f16_M33_no_weight_grads", 33, 2048, kF16, kF16, true, false, false, true, false});
  add({"N1000_bf16_M1_padded", 1, 1000, kBF16, kBF16, true, true, true, false, false, 0.0f, 0, 8});
  add({"N65544_bf16_M5_cluster", 5, 65544, kBF16, kBF16});
  add({"N262144_f32_M3_cluster16", 3, 262144, kF32, kF32, true, true, true, true, true});
  add({"N262144_bf16_M2_cluster16_dres_out", 2, 262144, kBF16, kF32, true, true, false, true, false});
  // The pipelined kernel over many row blocks a CTA (the stages wrap many
  // times): sub-warp teams with dresidual_out (three staged tensors), one
  // thread a row at four stages, fp32 rows with a partial last row block,
  // bf16 16K (with dbias: a cluster of four 256-thread CTAs, whose 1024-thread
  // stages do not fit; without: one 1024-thread CTA a row), fp32 weights of
  // 16-bit rows.
  add({"N96_bf16_M200000_dres", 200000, 96, kBF16, kBF16, true, true, true, true, true});
  add({"N8_f16_M1000000_noweight_dbias", 1000000, 8, kF16, kF16, false, false, true});
  add({"N2000_f32_M3001_dres_out_offset", 3001, 2000, kF32, kF32, true, true, true, true, false, 1.0f});
  add({"N16384_bf16_M600", 600, 16384, kBF16, kBF16});
  add({"N16384_bf16_M600_one_cta", 600, 16384, kBF16, kBF16, true, true, false});
  add({"N8192_bf16_M1000_fp32w", 1000, 8192, kBF16, kF32});
  // Teams of 64 sharing 512-thread CTAs (bf16 1024; LayerNorm's too since
  // its 4-vector tile, a warp a row, gave way: with dbias in the big CTA),
  // 625 row blocks over 132 CTAs.
  add({"N1024_bf16_M5000_fp32w_team64", 5000, 1024, kBF16, kF32});
  // The pipelined kernel in clusters (rows past one CTA; a cluster walks
  // many rows), as the 2-vector tile lays them out
  // (TwoVectorPipelineMatchesFloat64; the defaults give 16-bit rows of 16K
  // and more 4 vectors in 256-thread CTAs): 2 CTAs of 1024 threads, 5 of 256 with dbias (a partial last
  // slice), fp32 with dresidual_out and dresidual (6 of 256), no weight at
  // cluster 8, bf16 at cluster 16 (and N65544 above: 9 of 512).
  add({"N32768_bf16_M300_pipe_cluster2", 300, 32768, kBF16, kBF16, true, true, false});
  add({"N20000_bf16_M1000_pipe_cluster5_dbias", 1000, 20000, kBF16, kBF16});
  add({"N12288_f32_M2000_pipe_cluster_dres", 2000, 12288, kF32, kF32, true, true, true, true, true, 0.5f});
  add({"N131072_bf16_M40_pipe_cluster8_noweight", 40, 131072, kBF16, kBF16, false, false, true});
  add({"N262144_bf16_M64_pipe_cluster16_fp32w", 64, 262144, kBF16, kF32, true, true, false});
  add({"N65536_f32_M100_pipe_cluster8", 100, 65536, kF32, kF32});
  // Rows the 4-vector tile serves when asked (FourVectorPipelineMatchesFloat64):
  // 128-thread CTAs (fp32 weight, dbias), a partial last vector's thread in
  // 256-thread CTAs (fp16, dresidual_out), sub-warp teams, and clusters of
  // 2 (bf16 16K) and of 3 with a partial last slice.
  add({"N4096_bf16_M3000_fp32w_vpt4", 3000, 4096, kBF16, kF32});
  add({"N8000_f16_M500_dres_out_vpt4", 500, 8000, kF16, kF16, true, true, true, true, false});
  add({"N200_bf16_M20000_vpt4", 20000, 200, kBF16, kBF16});
  add({"N16384_bf16_M300_fp32w_vpt4_cluster2", 300, 16384, kBF16, kF32});
  add({"N20000_bf16_M200_vpt4_cluster3", 200, 20000, kBF16, kBF16, true, true, false});
  // Model widths, whose pipelined rows of one CTA leave part of a
  // power-of-two CTA idle, or fill one fitted to the row
  // (FittedPipeTeamsMatchFloat64): bf16 5120 (512 or 320 threads at 2
  // vectors; LayerNorm 256 or 160 at 4), fp32 6144 with dresidual_out (1024
  // or 768; 3 x 256 by default, whose 1024 threads' stages do not fit), fp16
  // 2560 with fp32 weights, bf16 12288 without dbias (1024 or 768; LayerNorm's
  // 4-vector tile clusters it), bf16 7168 without a weight.
  add({"N5120_bf16_M3000_fit", 3000, 5120, kBF16, kBF16});
  add({"N6144_f32_M1001_dres_out_fit", 1001, 6144, kF32, kF32, true, true, true, true, false, 0.5f});
  add({"N2560_f16_M2000_fp32w_fit", 2000, 2560, kF16, kF32});
  add({"N12288_bf16_M500_nodbias_fit", 500, 12288, kBF16, kBF16, true, true, false});
  add({"N7168_bf16_M700_noweight_dbias_fit", 700, 7168, kBF16, kBF16, false, false, true});
  // General kernel.
  add({"N999_bf16_M17_misaligned", 17, 999, kBF16, kBF16, true, true, true, true, true, 0.0f, 1});
  add({"N1000_f16_M11_odd_stride", 11, 1000, kF16, kF16, true, true, true, false, false, 0.0f, 0, 3});
  BwdCase mixed{"N300_mixed_M50", 50, 300, kBF16, kF32, true, true, true, true, true};
  mixed.dy_t = kF32;
  mixed.dx_t = kF16;
  add(mixed);
  // Long general rows (N > 128K, not register-resident): the two-kernel
  // split path -- one group, several groups, and dx alone (the row dots
  // still need the workspace).
  add({"N300001_f32_M2_beyond_tiles", 2, 300001, kF32, kF32});
  add({"N131073_bf16_M37_misaligned_split", 37, 131073, kBF16, kF32, true, true, true, true, true, 0.5f, 1});
  add({"N140000_f16_M100_odd_stride_split_groups", 100, 140000, kF16, kF16, true, true, true, false, false, 0.0f, 0, 3});
  add({"N1048576_bf16_M3_split_dx_only", 3, 1048576, kBF16, kBF16, true, false, false});
  // The grid kernel (aligned rows past 128K fp32 / 256K 16-bit by default;
  // GridKernelMatchesFloat64, at a threshold of 1 column, sends
  // every case it serves there): 128 ranks of one group (bf16 and fp32 1M,
  // fp32 weight, dresidual_out and dresidual), two groups of 64 (fp32 512K
  // with a weight offset, dresidual_out), 4 groups of 32 over 300 rows (the
  // stages and the exchange ring wrap many times), a partial last vector
  // (N = 262147, rows padded to 16 bytes), fewer rows than groups, no weight.
  add({"N1048576_bf16_M33_grid_fp32w_dres", 33, 1048576, kBF16, kF32, true, true, true, true, true});
  add({"N1048576_f32_M5_grid", 5, 1048576, kF32, kF32});
  add({"N524288_f32_M20_grid_groups2_dres_out", 20, 524288, kF32, kF32, true, true, true, true, false, 0.5f});
  add({"N262144_bf16_M300_grid_groups4", 300, 262144, kBF16, kBF16, true, true, false});
  add({"N262147_bf16_M9_grid_tail", 9, 262147, kBF16, kBF16, true, true, true, false, false, 0.0f, 0, 5});
  add({"N139264_f16_M3_grid_rows_lt_groups", 3, 139264, kF16, kF16, true, true, true, true, true});
  add({"N393216_bf16_M40_grid_noweight_dbias", 40, 393216, kBF16, kBF16, false, false, true});
  // Shifted rows (ShiftedRowsMatchFloat64, RowTuning::shifted_rows bit 4):
  // every row starting inside a 16-byte vector, every matrix at the same
  // offset, so the pipelined kernel walks each class of rows (every P-th)
  // in its own CTAs from the vector that holds the row's first element.
  // Odd contiguous rows (P = 8 for 16-bit, 4 for fp32): bf16 4101 with
  // dbias, fp32 4101 with dresidual and 2001 with both residual gradients
  // (4101's three staged tensors do not fit one CTA), bf16 with an fp32 weight
  // and a weight offset, fp16 without a weight; short rows of sub-warp teams
  // sharing a CTA (63, 7 columns); rows of an even pitch (bf16 4098: P = 4;
  // 4100: P = 2); a misaligned base with whole-vector pitches (P = 1, every
  // row 3 elements in), and with an odd padded pitch (P = 8); fewer rows
  // than classes. Then ("_cshift") odd rows whose N + VEC - 1 columns one
  // CTA does not hold, in clusters of small CTAs, the classes the
  // clusters': bf16 8191 with dbias (RMSNorm 3 CTAs at 2 vectors,
  // LayerNorm 2 at 4), bf16 16383 (3 at 4 vectors), fp32 8191 with
  // dresidual (5), fp32 32001 without a weight (16), bf16 12287 with both
  // residual gradients and fewer rows than classes, a misaligned base with
  // an odd pitch (8190 padded by 3). (fp16 LayerNorm has no small CTA: its
  // rows past one CTA stay element by element, so no fp16 case here.)
  add({"N4101_bf16_M600_shift", 600, 4101, kBF16, kBF16});
  add({"N4101_f32_M300_dres_shift", 300, 4101, kF32, kF32, true, true, true, false, true});
  add({"N2001_f32_M400_dres_out_dres_shift", 400, 2001, kF32, kF32, true, true, true, true, true});
  add({"N5123_bf16_M1000_fp32w_offset_shift", 1000, 5123, kBF16, kF32, true, true, true, false, false, 1.0f});
  add({"N1001_f16_M2000_noweight_dbias_shift", 2000, 1001, kF16, kF16, false, false, true});
  add({"N63_bf16_M5000_dres_out_shift", 5000, 63, kBF16, kBF16, true, true, true, true, false});
  add({"N7_f32_M3000_shift", 3000, 7, kF32, kF32});
  add({"N4098_bf16_M700_shift", 700, 4098, kBF16, kBF16, true, true, false});
  // bf16 1017 without dbias (its plan covers 1024 columns: RMSNorm's teams
  // of 64 share 512-thread CTAs; LayerNorm's 4-vector tile of a warp stays,
  // where aligned 1024 gave way: src/config.cpp, choose_norm_bwd_pipe_config).
  add({"N1017_bf16_M3000_nodbias_shift", 3000, 1017, kBF16, kBF16, true, true, false});
  add({"N4100_f16_M500_fp32w_shift", 500, 4100, kF16, kF32});
  add(offset_all({"N4096_bf16_M300_base3_shift", 300, 4096, kBF16, kBF16, true, true, true, true, true, 0.0f, 3}));
  add(offset_all({"N2000_f16_M77_base1_pad3_shift", 77, 2000, kF16, kF16, true, true, true, false, false, 0.5f, 1, 3}));
  add({"N3001_f32_M5_few_rows_shift", 5, 3001, kF32, kF32, true, true, true, true, false});
  add({"N8191_bf16_M300_cshift", 300, 8191, kBF16, kBF16});
  add({"N16383_bf16_M40_fp32w_offset_cshift", 40, 16383, kBF16, kF32, true, true, true, false, false, 1.0f});
  add({"N8191_f32_M200_dres_cshift", 200, 8191, kF32, kF32, true, true, true, false, true});
  add({"N32001_f32_M40_noweight_cshift", 40, 32001, kF32, kF32, false, false, true});
  add({"N12287_bf16_M5_dres_out_dres_cshift", 5, 12287, kBF16, kBF16, true, true, true, true, true});
  add(offset_all({"N8190_bf16_M50_base1_pad3_cshift", 50, 8190, kBF16, kBF16, true, true, true, false, false, 0.5f, 1, 3}));
  return v;
}

// Whether the grid kernel serves the case (src/rmsnorm_bwd.cu's plan: h, dy,
// dx, dresidual* in one dtype, the weight in it or fp32, 16-byte-aligned
// rows, at most one 512-thread CTA of 16 elements a thread per SM).
bool grid_serves(const BwdCase& c) {
  const int64_t vec = c.t == kF32 ? 4 : 8;
  const bool uniform = (int(c.dy_t) < 0 || c.dy_t == c.t) && (int(c.dx_t) < 0 || c.dx_t == c.t) &&
                       (!c.weight || c.wt == c.t || c.wt == kF32);
  const int64_t nvec = (c.cols + vec - 1) / vec, tile = kNormGridCtaThreads * (kNormGridCtaElems / vec);
  return uniform && c.offset == 0 && (c.cols + c.pad) % vec == 0 && (nvec + tile - 1) / tile <= DeviceLimits{}.num_sms;
}

void PrintTo(const BwdCase& c, std::ostream* os) { *os << c.name; }

std::vector<float> random_values(size_t n, DType t, std::mt19937& gen, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = float(round_to(t, nd(gen)));
  return v;
}

// |got - want| <= rtol * |want| + atol (NaN never passes).
bool close(double got, double want, double rtol, double atol) {
  return std::fabs(got - want) <= rtol * std::fabs(want) + atol;
}
double rtol_of(DType t) { return t == kF32 ? 1e-6 : t == kF16 ? 1e-3 : 8e-3; }
double tiny_of(DType t) { return t == kF16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -126); }

// A case's host inputs, drawn from its own seed: h, dy, the weight,
// dresidual_out, and the forward's rstd and mean. The suites call a case
// under several tunings in turn, RMSNorm and LayerNorm alternately, so the
// last inputs of each norm are kept for the next call with the same draws
// (the grid rows' normal draws -- 157M values for h and dy -- took 2.3 s a
// call on the CPU machine; bench/results/logs/2026-12-05-tests-* for the
// suite's ctest times).
struct BwdInputs {
  std::vector<int64_t> key;  // what the draws depend on
  std::vector<float> h, dy, w, dro, rstd, mean;
};
const BwdInputs& inputs_of(const BwdCase& c, bool centre, int64_t M, DType dy_t) {
  static BwdInputs kept[2];
  BwdInputs& in = kept[centre ? 1 : 0];
  const std::vector<int64_t> key = {M, c.cols, int64_t(c.t), int64_t(dy_t), int64_t(c.wt), int64_t(c.dres_out)};
  if (in.key == key) return in;
  in = BwdInputs{};  // (the last case's memory first)
  const int64_t N = c.cols;
  std::mt19937 gen(uint32_t(M * 7919 + N));

  // Inputs: rows of h scaled 1..8 (a row mixed up with another shows), dy,
  // weight around 1, dresidual_out; rstd from h in float64, rounded to fp32.
  std::vector<float>& h = in.h;
  h.resize(size_t(M * N));
  std::vector<float>& dy = in.dy;
  dy = random_values(size_t(M * N), dy_t, gen, 1.0f);
  {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t j = 0; j < N; ++j)
        h[size_t(r * N + j)] = float(round_to(c.t, float(1 + r % 8) * (nd(gen) + (centre ? float(r % 9) - 4.0f : 0.0f))));
  }
  std::vector<float>& w = in.w;
  w = random_values(size_t(N), c.wt, gen, 0.5f);
  for (auto& x : w) x = float(round_to(c.wt, 1.0f + x));
  in.dro = c.dres_out ? random_values(size_t(M * N), c.t, gen, 1.0f) : std::vector<float>{};
  // The forward's mean (LayerNorm) and rstd, from h in float64, rounded to fp32.
  std::vector<float>& rstd = in.rstd;
  std::vector<float>& mean = in.mean;
  rstd.assign(static_cast<size_t>(M), 0.0f);
  mean.assign(static_cast<size_t>(M), 0.0f);
  for (int64_t r = 0; r < M; ++r) {
    double sum = 0.0, ss = 0.0;
    for (int64_t j = 0; j < N; ++j) sum += double(h[size_t(r * N + j)]);
    if (centre) mean[size_t(r)] = float(sum / double(N));
    for (int64_t j = 0; j < N; ++j) {
      const double d = double(h[size_t(r * N + j)]) - mean[size_t(r)];
      ss += d * d;
    }
    rstd[size_t(r)] = float(1.0 / std::sqrt(ss / double(N) + 1e-6));
  }

  in.key = key;
  return in;
}

// In place (the README's guarantee): dx written over dy or over h (an
// input of every pass), and dresidual over dresidual_out where the case has
// both, the aliased inputs uploaded afresh before each call.
enum class InPlace { kNone, kOverDy, kOverH };

// want_in_plan: words the call's plan (norm_bwd_plan_description) must
// contain, or the test fails (empty: not checked); '&' between pieces that
// must each be there. max_elems > 0: the case's rows capped at max_elems
// over its columns (at least 1).
void run_case(const BwdCase& c, bool centre, const std::string& want_in_plan = "", InPlace in_place = InPlace::kNone,
              int64_t max_elems = 0) {
  const DType dy_t = int(c.dy_t) < 0 ? c.t : c.dy_t, dx_t = int(c.dx_t) < 0 ? c.t : c.dx_t;
  int64_t M = test::case_rows(c.rows, c.cols);
  if (max_elems > 0) M = std::min(M, std::max<int64_t>(1, max_elems / c.cols));
  const int64_t N = c.cols, stride = N + c.pad;
  const BwdInputs& in = inputs_of(c, centre, M, dy_t);
  const std::vector<float>& h = in.h;
  const std::vector<float>& dy = in.dy;
  const std::vector<float>& w = in.w;
  const std::vector<float>& dro = in.dro;
  const std::vector<float>& rstd = in.rstd;
  const std::vector<float>& mean = in.mean;

  const int64_t off = c.offset_all ? c.offset : 0;  // the other matrices'
  GuardedTensor th({c.t, M, N, stride, c.offset}), tdy({dy_t, M, N, stride, off}), tdx({dx_t, M, N, stride, off});
  GuardedTensor tdro({c.t, c.dres_out ? M : 0, N, stride, off}), tdres({c.t, c.dres ? M : 0, N, stride, off});
  GuardedTensor tw({c.wt, 1, N, N, 0}), tdw({c.wt, 1, N, N, 0}), tdb({c.wt, 1, N, N, 0}), trstd({kF32, 1, M, M, 0});
  GuardedTensor tmean({kF32, 1, M, M, 0});
  for (const GuardedTensor* t : {&th, &tdy, &tdx, &tdro, &tdres, &tw, &tdw, &tdb, &trstd, &tmean})
    ASSERT_TRUE(t->ok()) << "cudaMalloc failed";
  QUACK_ASSERT_CUDA(tmean.upload(mean));
  QUACK_ASSERT_CUDA(th.upload(h));
  QUACK_ASSERT_CUDA(tdy.upload(dy));
  QUACK_ASSERT_CUDA(tw.upload(w));
  QUACK_ASSERT_CUDA(trstd.upload(rstd));
  if (c.dres_out) QUACK_ASSERT_CUDA(tdro.upload(dro));
  // The buffers dx and dresidual are written to, and what they hold first
  // (null: poison).
  GuardedTensor* dx_buf = in_place == InPlace::kOverDy ? &tdy : in_place == InPlace::kOverH ? &th : &tdx;
  const std::vector<float>* dx_init = in_place == InPlace::kOverDy ? &dy : in_place == InPlace::kOverH ? &h : nullptr;
  ASSERT_TRUE(dx_init == nullptr || dx_buf->layout().dtype == dx_t) << "in place needs dx's dtype";
  const bool dres_over_dro = in_place != InPlace::kNone && c.dres && c.dres_out;
  GuardedTensor* dres_buf = dres_over_dro ? &tdro : &tdres;

  LayerNormBwdArgs a;  // (an RMSNormBwdArgs and the mean)
  const RMSNormBwdArgs& base = a;
  a.mean = centre ? static_cast<const float*>(tmean.ptr()) : nullptr;
  auto bwd = [&](const LayerNormBwdArgs& args) {
    return centre ? layernorm_bwd(args, nullptr) : rmsnorm_bwd(static_cast<const RMSNormBwdArgs&>(args), nullptr);
  };
  a.rows = M;
  a.cols = N;
  a.h = {th.ptr(), c.t, stride};
  a.dy = {tdy.ptr(), dy_t, stride};
  if (c.dres_out) a.dresidual_out = {tdro.ptr(), c.t, stride};
  if (c.weight) a.weight = {tw.ptr(), c.wt};
  a.rstd = static_cast<const float*>(trstd.ptr());
  a.dx = {dx_buf->ptr(), dx_t, stride};
  if (c.dres) a.dresidual = {dres_buf->ptr(), c.t, stride};
  if (c.dweight) a.dweight = {tdw.ptr(), c.wt};
  if (c.dbias) a.dbias = {tdb.ptr(), c.wt};
  a.weight_offset = c.weight_offset;
  if (!want_in_plan.empty()) {
    const std::string plan = norm_bwd_plan_description(a, centre, DeviceLimits{});
    for (size_t at = 0; at <= want_in_plan.size();) {
      const size_t end = std::min(want_in_plan.find('&', at), want_in_plan.size());
      ASSERT_NE(plan.find(want_in_plan.substr(at, end - at)), std::string::npos)
          << "the call does not take the kernel under test (" << want_in_plan << "): " << plan;
      at = end + 1;
    }
  }
  size_t ws_bytes = 0;
  {
    const Status st = centre ? layernorm_bwd_workspace_bytes(a, &ws_bytes) : rmsnorm_bwd_workspace_bytes(base, &ws_bytes);
    ASSERT_TRUE(st.ok()) << st.message;
  }
  DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
  ASSERT_TRUE(ws.ok());
  a.workspace = ws.data();
  a.workspace_bytes = ws_bytes;
  // (An upper bound: long general rows also keep M row dots there.)
  const int64_t parts = ws_bytes / (size_t(N) * 8);
  if (c.dweight || c.dbias) ASSERT_GT(parts, 0);
  if (ws_bytes > 0) {
    // Too small a workspace is refused, naming it.
    LayerNormBwdArgs small = a;
    small.workspace_bytes = ws_bytes - 8;
    const Status st = bwd(small);
    EXPECT_EQ(st.code, Code::kInvalidArgument);
    EXPECT_EQ(st.message.rfind("workspace_bytes:", 0), 0u) << st.message;
  }

  // Two runs on poisoned outputs: bit-identical, nothing written outside.
  std::vector<GuardedTensor*> outs = {dx_buf, dres_buf, &tdw, &tdb};
  std::vector<std::vector<double>> first(outs.size());
  for (int run = 0; run < 2; ++run) {
    QUACK_ASSERT_CUDA(dx_init ? dx_buf->upload(*dx_init) : dx_buf->poison());
    QUACK_ASSERT_CUDA(dres_over_dro ? tdro.upload(dro) : tdres.poison());
    for (GuardedTensor* t : {&tdw, &tdb}) QUACK_ASSERT_CUDA(t->poison());
    const Status st = bwd(a);
    ASSERT_TRUE(st.ok()) << st.message;
    QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
    for (size_t k = 0; k < outs.size(); ++k) {
      std::vector<double> v;
      int64_t dirty = 0;
      QUACK_ASSERT_CUDA(outs[k]->download(&v, &dirty));
      EXPECT_EQ(dirty, 0) << "bytes written outside output " << k;
      if (run == 0) {
        first[k] = std::move(v);
      } else {
        int64_t diff = 0;
        for (size_t i = 0; i < v.size(); ++i)
          diff += std::memcmp(&v[i], &first[k][i], sizeof(double)) != 0;
        EXPECT_EQ(diff, 0) << "output " << k << " differs between two runs";
      }
    }
  }
  // Inputs unchanged.
  {
    const std::vector<std::pair<const GuardedTensor*, const std::vector<float>*>> ins = {
        {&th, &h}, {&tdy, &dy}, {&tw, &w}, {&trstd, &rstd}, {&tmean, &mean}};
    for (const auto& [t, ref] : ins) {
      if (t == dx_buf) continue;  // (in place: dx)
      std::vector<double> v;
      int64_t dirty = 0;
      QUACK_ASSERT_CUDA(t->download(&v, &dirty));
      int64_t changed = dirty;
      for (size_t i = 0; i < v.size(); ++i) changed += v[i] != double((*ref)[i]);
      EXPECT_EQ(changed, 0) << "an input was modified";
    }
  }

  // Float64 reference and checks.
  const double fp32_err = (64.0 + std::log2(double(N))) * std::ldexp(1.0, -24);
  std::vector<double> dw(size_t(N), 0.0), db(size_t(N), 0.0), dw_abs(size_t(N), 0.0), db_abs(size_t(N), 0.0);
  int64_t bad = 0;
  for (int64_t r = 0; r < M; ++r) {
    const double rs = rstd[size_t(r)], mu = mean[size_t(r)];
    // (|h| * rs, not |xhat|: the kernel rounds h - mean in fp32)
    double dot = 0.0, dot_abs = 0.0, gsum = 0.0, gsum_abs = 0.0;
    for (int64_t j = 0; j < N; ++j) {
      const size_t i = size_t(r * N + j);
      const double wj = c.weight ? double(w[size_t(j)]) + c.weight_offset : 1.0;
      const double xh = (h[i] - mu) * rs, g = dy[i] * wj;
      dot += g * xh;
      dot_abs += std::fabs(g * h[i] * rs) + std::fabs(g * xh);
      gsum += g;
      gsum_abs += std::fabs(g);
      dw[size_t(j)] += dy[i] * xh;
      dw_abs[size_t(j)] += std::fabs(dy[i] * h[i] * rs) + std::fabs(dy[i] * xh);
      db[size_t(j)] += dy[i];
      db_abs[size_t(j)] += std::fabs(dy[i]);
    }
    const double cm = dot / double(N), cm_abs = dot_abs / double(N);
    const double gm = centre ? gsum / double(N) : 0.0, gm_abs = centre ? gsum_abs / double(N) : 0.0;
    for (int64_t j = 0; j < N; ++j) {
      const size_t i = size_t(r * N + j);
      const double wj = c.weight ? double(w[size_t(j)]) + c.weight_offset : 1.0;
      const double xh = (h[i] - mu) * rs, g = dy[i] * wj;
      const double want = rs * (g - gm - xh * cm) + (c.dres_out ? double(dro[i]) : 0.0);
      // fp32: the terms' rounding carried through the formula.
      const double cond = rs * (std::fabs(g) + gm_abs + (std::fabs(h[i]) * rs + std::fabs(xh)) * cm_abs) +
                          (c.dres_out ? std::fabs(dro[i]) : 0.0);
      const double atol = fp32_err * cond + tiny_of(dx_t);
      if (!close(first[0][i], want, 2 * rtol_of(dx_t), atol) && ++bad <= 5)
        ADD_FAILURE() << "dx row " << r << " col " << j << ": got " << first[0][i] << ", want " << want;
      if (c.dres && !close(first[1][i], want, 2 * rtol_of(c.t), atol) && ++bad <= 5)
        ADD_FAILURE() << "dresidual row " << r << " col " << j << ": got " << first[1][i] << ", want " << want;
    }
  }
  EXPECT_EQ(bad, 0) << "dx / dresidual elements wrong";
  // Weight gradients: sequential fp32 sums of <= ceil(M / parts) rows per
  // slot, up to 256 team slots, then parts / 8 + 8 partial rows.
  const double sum_err = (double((M + parts - 1) / std::max<int64_t>(parts, 1)) + 256.0 + double(parts) / 8.0 + 8.0) *
                         std::ldexp(1.0, -24);
  bad = 0;
  for (int64_t j = 0; j < N; ++j) {
    if (c.dweight && !close(first[2][size_t(j)], dw[size_t(j)], 2 * rtol_of(c.wt), sum_err * dw_abs[size_t(j)] + tiny_of(c.wt)) &&
        ++bad <= 5)
      ADD_FAILURE() << "dweight col " << j << ": got " << first[2][size_t(j)] << ", want " << dw[size_t(j)];
    if (c.dbias && !close(first[3][size_t(j)], db[size_t(j)], 2 * rtol_of(c.wt), sum_err * db_abs[size_t(j)] + tiny_of(c.wt)) &&
        ++bad <= 5)
      ADD_FAILURE() << "dbias col " << j << ": got " << first[3][size_t(j)] << ", want " << db[size_t(j)];
  }
  EXPECT_EQ(bad, 0) << "weight gradient elements wrong";
}

class RMSNormBwdGpu : public testing::TestWithParam<BwdCase> {};

// Installs a tuning for one test (the kernels that serve a call follow it).
struct TuningScope {
  explicit TuningScope(const RowTuning& t) { set_row_tuning(&t); }
  ~TuningScope() { set_row_tuning(nullptr); }
};

TEST_P(RMSNormBwdGpu, MatchesFloat64AndIsDeterministic) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam(), false);
}

TEST_P(RMSNormBwdGpu, LayerNormMatchesFloat64AndIsDeterministic) {
  QUACK_REQUIRE_SM90();
  run_case(GetParam(), true);
}

// The variant tunings' rows: at most 2^24 elements a case (every row of
// every case runs under the defaults, above). The suite's five largest
// cases -- bf16 262144 x 300 and 1048576 x 33, fp32 12288 x 2000, bf16 96
// x 200000 and 20000 x 1000 -- ran 14-46 s a test in every variant (the
// float64 reference on the CPU), 2338 case-seconds in all at e4b1ba2
// (bench/results/logs/2026-12-07-tests-e4b1ba2-h100.txt); capped, ~200
// fewer. Every case the tests name for a plan is at or below the cap;
// GridKernelMatchesFloat64 keeps every row.
constexpr int64_t kVariantMaxElems = int64_t(1) << 24;

// Both norms under a tuning; want_in_plan as run_case's, for the cases
// `wanted` picks (all: nullptr); rows capped at max_elems elements (0: none).
void run_both_under(const RowTuning& t, const BwdCase& c, const std::string& want_in_plan = "",
                    bool (*wanted)(const BwdCase&, bool centre) = nullptr, int64_t max_elems = kVariantMaxElems) {
  TuningScope scope(t);
  for (const bool centre : {false, true}) {
    SCOPED_TRACE(centre ? "LayerNorm" : "RMSNorm");
    run_case(c, centre, wanted == nullptr || wanted(c, centre) ? want_in_plan : "", InPlace::kNone, max_elems);
    if (testing::Test::HasFatalFailure()) return;
  }
}

// The case is one of `names` (the cases whose plan a test asserts).
bool named(const BwdCase& c, std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (c.name == name) return true;
  return false;
}

// The defaults without the grid kernel: rows past 128K take the kernels
// that served them before it (clusters, the register kernel, the split path).
RowTuning without_grid() {
  RowTuning t = default_row_tuning();
  t.bwd_grid = 0;
  return t;
}

// The same cases with the pipelined kernel off (rows it would serve take
// the register kernel with shared-memory accumulators), and at one vector a
// thread with up to four stages (most rows that fit one CTA at one vector
// take three or four, longer ones two vectors, clusters two to four stages)
// and the 64-register kernel with the dbias sums in shared memory (the
// defaults take the small-CTA kernel, dbias sums in registers, in CTAs of
// up to 256 threads). None takes the grid kernel.
TEST_P(RMSNormBwdGpu, RegisterKernelMatchesFloat64) {
  QUACK_REQUIRE_SM90();
  RowTuning t = without_grid();
  t.bwd_pipe = 0;
  run_both_under(t, GetParam());
}

TEST_P(RMSNormBwdGpu, OneVectorDeepPipelineMatchesFloat64) {
  QUACK_REQUIRE_SM90();
  RowTuning t = without_grid();
  t.bwd_pipe_stages = 4;
  t.bwd_pipe_vpt16 = t.bwd_pipe_vpt32 = 1;
  t.bwd_pipe_db_regs = t.bwd_pipe_small_cta = 0;
  run_both_under(t, GetParam());
}

// The 4-vector tile of the small-CTA pipelined kernel (bwd_pipe_vpt16 = 4;
// teams in CTAs of their own, else a row of one CTA would take 2 vectors to
// share 512-thread ones): 16-bit rows it serves take it (the plan says
// vpt=4), everything else what the tuning then gives.
TEST_P(RMSNormBwdGpu, FourVectorPipelineMatchesFloat64) {
  QUACK_REQUIRE_SM90();
  RowTuning t = without_grid();
  t.bwd_pipe_vpt16 = 4;
  t.bwd_pipe_wide_min_cols = t.bwd_pipe_wide_min_cols_ln = 0;
  t.bwd_pipe_min_threads = 0;
  run_both_under(t, GetParam(), "vpt=4", [](const BwdCase& c, bool centre) {
    return c.name.find("_vpt4") != std::string::npos && !(centre && c.t == kF16);
  });
}

// The pipelined rows of one CTA in the fewest whole warps at their tile
// (RowTuning::bwd_pipe_fit_team), at the default tiles and at 2 vectors a
// thread: the cases of 257-16384 columns. The "_fit" cases take one CTA a
// row (whose team, the knob on, is the fitted one: NormBwdPlan.
// FittedTeamsAtModelWidths) but LayerNorm's bf16 12288 at 4 vectors.
TEST_P(RMSNormBwdGpu, FittedPipeTeamsMatchFloat64) {
  const BwdCase& c = GetParam();
  if (c.cols <= 256 || c.cols > 16384) GTEST_SKIP() << "no pipelined row of one CTA above a warp";
  QUACK_REQUIRE_SM90();
  RowTuning t = without_grid();
  t.bwd_pipe_fit_team = 1;
  run_both_under(t, c, "cluster=1 ", [](const BwdCase& k, bool centre) {
    return k.name.find("_fit") != std::string::npos && !(centre && k.cols == 12288);
  });
  if (HasFatalFailure()) return;
  t.bwd_pipe_vpt16 = 2;
  run_both_under(t, c, "cluster=1 ", [](const BwdCase& k, bool) { return k.name.find("_fit") != std::string::npos; });
}

// Teams of more than a warp sharing a CTA (RowTuning::bwd_pipe_min_threads:
// 512, the default, and 1024 threads) at one CTA an SM (bwd_pipe_ctas_per_sm
// = 1) with up to four stages: the cases of 65-16384 columns against the
// float64 reference, LayerNorm with dbias too (bwd_pipe_share_db: its own
// plan by default). The plans these knobs give (a power-of-two team below
// the CTA shares it) are asserted by the host test
// NormBwdPlan.SharedCtasAtOneAnSm, not here.
TEST_P(RMSNormBwdGpu, SharedCtaPipelineMatchesFloat64) {
  const BwdCase& c = GetParam();
  if (c.cols <= 64 || c.cols > 16384) GTEST_SKIP() << "no pipelined row of one CTA above a warp";
  QUACK_REQUIRE_SM90();
  for (const int threads : {512, 1024}) {
    SCOPED_TRACE(threads);
    RowTuning t = without_grid();
    t.bwd_pipe_ctas_per_sm = 1;
    t.bwd_pipe_min_threads = threads;
    t.bwd_pipe_share_db = 1;
    t.bwd_pipe_stages = 4;
    run_both_under(t, c);
    if (HasFatalFailure()) return;
  }
}

// The big-CTA kernel for every row (RowTuning::bwd_pipe_big_cta = 2: the
// 512-thread 2-vector CTAs of aligned rows, the weight, the dw / db sums and
// the row's vectors in registers) at its stages 2 and 4: the cases of 65-16384 columns
// against the float64 reference. The named cases' plans must be big CTAs
// (teams of 64-512 threads sharing them or owning one: weight offset, fp32
// weights, no weight, dresidual_out, fp16, fp32 rows; not bf16 5120 with
// dbias, whose 2-vector CTA is a team with 3/8 of it idle:
// bwd_pipe_wide_idle_db's 4-vector tile); the plans the knob
// gives are asserted by the host test NormBwdPlan.BigCtas.
TEST_P(RMSNormBwdGpu, BigCtaPipelineMatchesFloat64) {
  const BwdCase& c = GetParam();
  if (c.cols <= 64 || c.cols > 16384) GTEST_SKIP() << "no pipelined row of one CTA above a warp";
  QUACK_REQUIRE_SM90();
  for (const int stages : {2, 4}) {
    SCOPED_TRACE(stages);
    RowTuning t = without_grid();
    t.bwd_pipe_big_cta = 2;  // (every row; 1, the default: LayerNorm's with dbias)
    t.bwd_pipe_big_stages = stages;
    run_both_under(t, c, " big_cta", [](const BwdCase& k, bool centre) {
      return named(k, {"N4096_bf16_M4096", "N8192_bf16_M1000_fp32w", "N2000_f32_M3001_dres_out_offset",
                       "N4096_bf16_M3000_fp32w_vpt4", "N2560_f16_M2000_fp32w_fit", "N7168_bf16_M700_noweight_dbias_fit",
                       "N8000_f16_M500_dres_out_vpt4", "N1024_bf16_M5000_fp32w_team64"}) ||
             (!centre && k.name == "N1000_bf16_M4096_fp32w_offset");  // (LayerNorm's: 4 vectors, a warp a row)
    });
    if (HasFatalFailure()) return;
  }
}

// A row's statistics copied by one thread a warp and shuffled to the others
// (RowTuning::bwd_pipe_lead_threads; by default fp32's 1024-thread CTAs) in
// every pipelined CTA (1): teams of 16 threads, shared CTAs, the 4-vector
// tile's clusters, fp32 clusters of 1024 threads; then with the big-CTA
// kernel for every row. The named cases' plans must copy them so
// (NormBwdPlan.LeadStats asserts the plans the knob gives).
TEST_P(RMSNormBwdGpu, LeadStatsPipelineMatchesFloat64) {
  QUACK_REQUIRE_SM90();
  for (const int big : {1, 2}) {
    SCOPED_TRACE(big);
    RowTuning t = without_grid();
    t.bwd_pipe_lead_threads = 1;
    t.bwd_pipe_big_cta = big;
    run_both_under(t, GetParam(), " lead_stats", [](const BwdCase& k, bool) {
      return named(k, {"N4096_bf16_M4096", "N8192_bf16_M1000_fp32w", "N2000_f32_M3001_dres_out_offset",
                       "N4096_bf16_M3000_fp32w_vpt4", "N8000_f16_M500_dres_out_vpt4", "N32768_bf16_M300_pipe_cluster2",
                       "N65536_f32_M100_pipe_cluster8", "N200_bf16_M20000_vpt4", "N1000_bf16_M4096_fp32w_offset"});
    });
    if (HasFatalFailure()) return;
  }
}

// The 2-vector tile at every row length (bwd_pipe_vpt16 = 2): the layouts
// the defaults gave long 16-bit rows before they took 4 vectors (the case
// names' "pipe_cluster2" and the like count 2-vector CTAs), still the
// fallback where 4 do not serve.
TEST_P(RMSNormBwdGpu, TwoVectorPipelineMatchesFloat64) {
  QUACK_REQUIRE_SM90();
  RowTuning t = without_grid();
  t.bwd_pipe_vpt16 = 2;
  run_both_under(t, GetParam());
}

// The grid kernel at every row length it serves (bwd_grid_min_cols16 / 32 = 1
// and no register cluster kept: a
// 1-column row is one rank's partial vector; N = 8 over 10^6 rows is 132
// one-rank groups walking ~7600 rows each), at its default stages and lag,
// a row a step (16-bit rows take 2 by default), and at 2 stages and a lag
// of 1 (nothing in flight past the lag: every collect waits on the slowest
// rank).
TEST_P(RMSNormBwdGpu, GridKernelMatchesFloat64) {
  QUACK_REQUIRE_SM90();
  RowTuning t = default_row_tuning();
  t.bwd_grid_min_cols16 = t.bwd_grid_min_cols32 = 1;
  t.bwd_grid_keep_cluster16 = 0;
  // (every row: the grid cases' rows wrap the stages and the exchange ring)
  const auto serves = [](const BwdCase& c, bool) { return grid_serves(c); };
  run_both_under(t, GetParam(), "grid ", serves, 0);
  if (HasFatalFailure()) return;
  RowTuning one = t;  // a row a step at the default stages (16-bit rows' default is 2)
  one.bwd_grid_rows16 = 1;
  run_both_under(one, GetParam(), "rows=1", serves, 0);
  if (HasFatalFailure()) return;
  t.bwd_grid_stages16 = t.bwd_grid_stages32 = 2;
  t.bwd_grid_lag = 1;
  run_both_under(t, GetParam(), "stages=2 lag=1", serves, 0);
}

// Shifted rows (RowTuning::shifted_rows bit 4, on by default since the
// fifty-first session; bit 5 for rows past one CTA): the "_shift" and "_cshift" cases must take the
// pipelined kernel's shifted rows (the plan says "shifted"), at the default
// tiles, in place (dx over dy: the head of a row's first vector is the
// previous row's tail, which other CTAs write meanwhile), at 4 vectors in
// small CTAs (16-bit x; not fp16 LayerNorm, which has no small CTA); the
// "_shift" ones (rows of one CTA) also at one vector a thread (up to 1024
// vectors; two beyond) with up to four stages in the 64-register kernel,
// where the "_cshift" ones (clusters: of small CTAs only) may go element by
// element. The other cases whose rows are not whole vectors (odd N, odd
// pitches, h misaligned, mixed dtypes) run under the same tunings and must
// stay right wherever they go. Whole-vector rows skip: the bit cannot
// change their plan (src/rmsnorm_bwd.cu takes it only where a row is not
// aligned), and their float64 references are the suite's slowest (the grid
// cases: 20-74 s a test, bench/results/logs/2026-12-05-tests-1c3e9a0.txt).
// With the bit off, the "_shift" cases go element by element (the general
// kernel), as every odd row did before it.
TEST_P(RMSNormBwdGpu, ShiftedRowsMatchFloat64) {
  const BwdCase& c = GetParam();
  const int64_t vec = c.t == kF32 ? 4 : 8;
  if (c.offset == 0 && (c.cols + c.pad) % vec == 0 && int(c.dy_t) < 0 && int(c.dx_t) < 0)
    GTEST_SKIP() << "rows of whole vectors: the bit does not change the plan";
  QUACK_REQUIRE_SM90();
  RowTuning t = default_row_tuning();
  t.shifted_rows |= 16 | 32;
  const auto one_cta = [](const BwdCase& k, bool) { return k.name.find("_shift") != std::string::npos; };
  const auto shifted = [](const BwdCase& k, bool) {
    return k.name.find("_shift") != std::string::npos || k.name.find("_cshift") != std::string::npos;
  };
  run_both_under(t, GetParam(), " shifted", shifted);
  if (HasFatalFailure()) return;
  if (shifted(GetParam(), false)) {
    TuningScope scope(t);
    run_case(GetParam(), false, " shifted", InPlace::kOverDy);
    if (HasFatalFailure()) return;
  }
  RowTuning one = t;
  one.bwd_pipe_stages = 4;
  one.bwd_pipe_vpt16 = one.bwd_pipe_vpt32 = 1;
  one.bwd_pipe_db_regs = one.bwd_pipe_small_cta = 0;
  run_both_under(one, GetParam(), " shifted", one_cta);
  if (HasFatalFailure()) return;
  RowTuning four = t;
  four.bwd_pipe_vpt16 = 4;
  four.bwd_pipe_wide_min_cols = four.bwd_pipe_wide_min_cols_ln = 0;
  four.bwd_pipe_min_threads = 0;  // (as FourVectorPipelineMatchesFloat64)
  run_both_under(four, GetParam(), "vpt=4& shifted", [](const BwdCase& c, bool centre) {
    return (c.name.find("_shift") != std::string::npos || c.name.find("_cshift") != std::string::npos) &&
           c.t != kF32 && !(centre && c.t == kF16);
  });
  if (HasFatalFailure()) return;
  RowTuning off = default_row_tuning();
  off.shifted_rows &= ~16;
  run_both_under(off, GetParam(), "general", shifted);
}

INSTANTIATE_TEST_SUITE_P(Cases, RMSNormBwdGpu, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<BwdCase>& i) { return i.param.name; });

// The cases in place, by default tuning (every kernel the cases reach:
// register, pipelined, clusters, general, the split rows' two kernels, the
// grid): RMSNorm's dx over dy, LayerNorm's over h; dresidual over
// dresidual_out where the case has both. Cases whose dx dtype differs from
// the input's run apart (RMSNormBwdGpu) only.
class RMSNormBwdGpuInPlace : public testing::TestWithParam<BwdCase> {};

TEST_P(RMSNormBwdGpuInPlace, OverDyMatchesFloat64) {
  const BwdCase& c = GetParam();
  if (int(c.dx_t) >= 0 && c.dx_t != (int(c.dy_t) < 0 ? c.t : c.dy_t)) GTEST_SKIP() << "dx and dy differ in dtype";
  QUACK_REQUIRE_SM90();
  run_case(c, false, "", InPlace::kOverDy);
}

TEST_P(RMSNormBwdGpuInPlace, LayerNormOverHMatchesFloat64) {
  const BwdCase& c = GetParam();
  if (int(c.dx_t) >= 0 && c.dx_t != c.t) GTEST_SKIP() << "dx and h differ in dtype";
  QUACK_REQUIRE_SM90();
  run_case(c, true, "", InPlace::kOverH);
}

INSTANTIATE_TEST_SUITE_P(InPlaceCases, RMSNormBwdGpuInPlace, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<BwdCase>& i) { return i.param.name; });

// rows = 0: nothing is read, and the weight gradients are sums over no rows.
TEST(RMSNormBwdGpuEmpty, ZeroRowsGiveZeroWeightGradients) {
  QUACK_REQUIRE_SM90();
  const int64_t N = 777;
  GuardedTensor tdw({kF32, 1, N, N, 0}), tdb({kBF16, 1, N, N, 0});
  ASSERT_TRUE(tdw.ok() && tdb.ok());
  QUACK_ASSERT_CUDA(tdw.poison());
  QUACK_ASSERT_CUDA(tdb.poison());
  RMSNormBwdArgs a;
  a.rows = 0;
  a.cols = N;
  a.weight = {tdw.ptr(), kF32};  // never read
  a.dweight = {tdw.ptr(), kF32};
  a.dbias = {tdb.ptr(), kBF16};
  const Status st = rmsnorm_bwd(a, nullptr);
  ASSERT_TRUE(st.ok()) << st.message;
  QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
  for (const GuardedTensor* t : {&tdw, &tdb}) {
    std::vector<double> v;
    int64_t dirty = 0;
    QUACK_ASSERT_CUDA(t->download(&v, &dirty));
    EXPECT_EQ(dirty, 0);
    EXPECT_EQ(std::count(v.begin(), v.end(), 0.0), int64_t(N));
  }
}

}  // namespace
}  // namespace quack
