// Softmax and log-softmax forward for rows past what a cluster holds
// (softmax_fwd_grid_kernel): the grid forward of RMSNorm and LayerNorm
// (ops/norm_fwd_grid.cuh) on the same ring and steps (core/grid_ring.cuh),
// with the tile's online-softmax pair in place of the tile's sums. A
// cooperative grid of `groups` groups of `ranks` CTAs, one CTA of
// kNormGridCtaThreads an SM; rank r of every group owns the same tile of
// columns, group g takes rows g, g + groups, ... in order, R of its rows a
// step (R = 2 for 16-bit rows by default; RowTuning::fwd_grid_rows16 / 32,
// at most 2 in either dtype). Step i of a group:
//   A. each CTA reduces its tiles (x staged by bulk copy in the ring): a
//      thread's max, then its sum of exponentials against that max in log2
//      units (the register kernels' arithmetic, ops/softmax.cuh), the CTA's
//      pair (m, s) max first in one barrier for the step's rows -- and
//      publishes it (core::GridExchange: two words a row);
//   B. `lag` steps later every CTA collects the step's pairs of every rank
//      and combines them in rank order -- the max of the ranks' maxima,
//      then the sum of s_r e^(m_r - M) (a rank whose max is -inf adds
//      s_r * 0, as core::MaxSumOp) -- into the row's SoftmaxRowLog2, and
//      writes the outputs from the stages.
// x crosses HBM once and out once (the chunked kernel, which served these
// rows, reads x twice). Every CTA combines the same words in the same order:
// the row's constants are the same bits in every CTA and every run.
// Special values as the other kernels: NaN and +inf make the row NaN (the
// sum carries them), an all -inf row is NaN, |max| >= 2^24 takes natural
// units (SoftmaxRowLog2::natural; a thread's own sum likewise).
//
// The backward (softmax_bwd_grid_kernel; RowTuning::softmax_bwd_grid) is
// the same grid over a ring of two tiles a stage, y's and dy's (the norm
// grid backward's layout, ops/rmsnorm_bwd.cuh): phase A reduces each row's
// dot -- sum(y * dy), log-softmax's sum(dy) -- a word a row, and phase B
// writes dx = y * (dy - dot), log-softmax's dy - exp(y) * dot, from the
// stages. y and dy cross HBM once and dx once, where the chunked kernel
// re-reads what its stages do not hold (fp32 1M: ~4.6 tensors against 3).
#pragma once

#include <cstdint>
#include <type_traits>

#include "quack/core/config.hpp"
#include "quack/core/grid_exchange.cuh"
#include "quack/core/grid_ring.cuh"
#include "quack/core/launch.cuh"
#include "quack/core/reduce.cuh"
#include "quack/core/vec.cuh"
#include "quack/ops/softmax.cuh"

namespace quack {
namespace ops {

// The grid kernel's parameters: the op's, then the grid's (NormGridConfig):
// the groups' exchange logs (the caller's workspace) of grid_steps steps
// each, the layout, RowTuning::fwd_grid_prefetch. (A struct of its own:
// appending these fields to SoftmaxParams changed the SASS of every other
// softmax kernel -- e.g. the clustered staged bf16 forward 9442 -> 7018
// instructions, CUDA 13.0 -- unmeasured changes to measured kernels.)
struct SoftmaxGridParams {
  SoftmaxParams op;  // rows, cols, a (x; y backward), a_stride, b (dy, backward), b_stride, out, out_stride, log
  uint64_t* exchange;
  int grid_ranks, grid_groups, grid_lag, grid_stages, grid_prefetch;
  int64_t grid_tile_vecs, grid_steps;
};

constexpr int kSoftmaxGridThreads = kNormGridCtaThreads;
// The scratch's two areas (steps of either parity): the warps' pairs of a
// step's rows, [row][warp].
constexpr uint32_t kSoftmaxGridScratchArea = kNormGridScratchBytes / 2;
static_assert(kNormGridMaxRowsPerStep * (kSoftmaxGridThreads / 32) * sizeof(core::MaxSum) <= kSoftmaxGridScratchArea,
              "grid softmax scratch: two areas of the warps' pairs");

// R rows' pairs reduced over the CTA, max first (MaxSumMaxFirstOp), in one
// barrier; every thread gets them. Consecutive calls alternate areas (the
// barrier of the second orders the first's reads before the third's writes).
template <int R>
__device__ __forceinline__ void grid_block_max_sums(core::MaxSum (&v)[R], unsigned char* smem, int area) {
  using namespace core;
  constexpr int kWarps = kSoftmaxGridThreads / 32;
  auto* scratch = reinterpret_cast<MaxSum*>(smem + area * kSoftmaxGridScratchArea);
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
#pragma unroll
  for (int r = 0; r < R; ++r) v[r] = warp_reduce<MaxSumMaxFirstOp>(v[r]);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) scratch[r * kWarps + warp] = v[r];
  }
  __syncthreads();
  // Every warp reads the partials in the same order: the same bits everywhere.
#pragma unroll
  for (int r = 0; r < R; ++r)
    v[r] = warp_reduce<MaxSumMaxFirstOp>(lane < kWarps ? scratch[r * kWarps + lane] : MaxSumOp::identity());
}

// A thread's pair (m, s) of its KV vectors (padding already -inf): the max,
// then the exponentials against it in log2 units, summed over VEC chains
// and a fixed tree (grid_tree); |m| >= 2^24 (or +inf, NaN) in natural units.
template <typename T, int VEC, int KV>
__device__ __forceinline__ core::MaxSum grid_thread_max_sum(const core::RawVec<T, VEC> (&xv)[KV]) {
  using namespace core;
  const float m = max_of<T, VEC, KV>(xv);
  float acc[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) acc[e] = 0.0f;
  if (log2_units_ok(m)) {
    const float b = log2_base(m);
#pragma unroll
    for (int k = 0; k < KV; ++k) {
      float f[VEC];
      xv[k].widen(f);
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] += fast_exp2(fmaf(f[e], kLog2e, -b));
    }
    return {m, from_log2_units(grid_tree(acc), m, b)};
  }
#pragma unroll
  for (int k = 0; k < KV; ++k) {
    float f[VEC];
    xv[k].widen(f);
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[e] += fast_exp2((f[e] - m) * kLog2e);
  }
  return {m, grid_tree(acc)};
}

// w[i] for an i known only at run time, by selects (an index into a
// register array would put it in local memory).
template <int K>
__device__ __forceinline__ float grid_pick(const float (&w)[K], int i) {
  float v = w[0];
#pragma unroll
  for (int k = 1; k < K; ++k) v = i == k ? w[k] : v;
  return v;
}

template <typename T, int R>
__global__ void __launch_bounds__(kSoftmaxGridThreads, 1) softmax_fwd_grid_kernel(const SoftmaxGridParams gp) {
  using namespace core;
  using Ring = GridRowRing<T>;
  constexpr int VEC = Ring::VEC;
  constexpr int KV = Ring::KV;  // vectors a thread
  constexpr int kWords = 2 * R;  // (m, s) a row
  using XOp = std::conditional_t<R == 1, SumPairOp, SumQuadOp>;  // (the words' container: four floats at most)
  using V = typename Ring::V;
  static_assert(GridWords<typename XOp::T>::kWords == kWords, "two words a row");
  extern __shared__ __align__(16) unsigned char smem[];  // (the softmax kernels' declaration)
  float* vals = reinterpret_cast<float*>(smem + kNormGridValsOffset);  // collected words

  const SoftmaxParams& p = gp.op;
  Ring ring = Ring::make(smem, static_cast<const T*>(p.a), p.a_stride, p.rows, p.cols, gp.grid_ranks, gp.grid_groups,
                         gp.grid_tile_vecs, gp.grid_stages, norm_fwd_grid_header(kWords));
  const int ranks = ring.ranks, tid = ring.tid;
  const GridExchange<XOp> ex{gp.exchange + ring.group * GridExchange<XOp>::words(ranks, gp.grid_steps), ranks,
                             ring.rank};
  T* out = static_cast<T*>(p.out);
  const int rows_here = ring.rows_here;
  const bool full = ring.full;

  ring.start();

  // A: step i's pairs, two words a row.
  auto phase_a = [&](int i, float (&words)[kWords]) {
    MaxSum ms[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int j = i * R + r;
      ms[r] = MaxSumOp::identity();
      if (j >= rows_here) continue;  // the group's last step: fewer rows (uniform over the CTA)
      const int s = ring.wait_next();
      const int64_t row = ring.row(j);
      V xv[KV];
      if (full) {
        ring.load_tile(true, s, row, xv);
      } else {
        ring.load_tile(false, s, row, xv);
#pragma unroll
        for (int k = 0; k < KV; ++k) xv[k].fill_tail(ring.valid_at(k), neg_inf_bits<T>());
      }
      ms[r] = grid_thread_max_sum<T, VEC, KV>(xv);
    }
    grid_block_max_sums<R>(ms, smem, i & 1);
#pragma unroll
    for (int r = 0; r < R; ++r) words[2 * r] = ms[r].m, words[2 * r + 1] = ms[r].s;
  };

  // B: step q's rows' constants from every rank's pairs, then the outputs.
  auto phase_b = [&](int q) {
    const int lane = tid & 31;
    // The lane's ranks' words, each rank's in one load (rank_words,
    // core/grid_exchange.cuh), read once for both rows and both passes.
    float cw[kGridLaneRanks][kWords];
    lane_rank_words(vals, lane, ranks, cw);
    // (Rows one after another: the loop's body holds the output pass in
    // seven forms, which unrolled twice doubled the kernel's code.)
#pragma unroll 1
    for (int r = 0; r < R; ++r) {
      const int j = q * R + r;
      if (j >= rows_here) continue;
      // Every warp combines the ranks' pairs in rank order: the same bits
      // in every warp and CTA. The max first (exact), then the sums
      // rescaled to it.
      float m = -INFINITY;
#pragma unroll
      for (int it = 0; it < kGridLaneRanks; ++it)
        if (lane + 32 * it < ranks) m = fmaxf(m, grid_pick(cw[it], 2 * r));
      m = warp_reduce<MaxOp>(m);
      float sum = 0.0f;
#pragma unroll
      for (int it = 0; it < kGridLaneRanks; ++it) {
        if (lane + 32 * it < ranks) {
          const float mr = grid_pick(cw[it], 2 * r), sr = grid_pick(cw[it], 2 * r + 1);
          sum += mr == -INFINITY ? __fmul_rn(sr, 0.0f) : __fmul_rn(sr, fast_exp2((mr - m) * kLog2e));
        }
      }
      const SoftmaxRowLog2 rc(MaxSum{m, warp_reduce<SumOp>(sum)}, softmax_near_bound<T>());

      const int s = ring.next_written();
      const int64_t row = ring.row(j);
      T* orow = out + row * p.out_stride + (ring.vb + tid) * VEC;
      // One instantiation per form of the output and of the thread's tile
      // (whole or partial): no run-time choice inside the loop.
      auto write = [&](auto whole_c, auto&& f) {
        ring.write_tile(decltype(whole_c)::value, s, row, orow, [&](int, float (&x)[VEC]) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) x[e] = f(x[e]);
        });
      };
      // Rows of |max| >= 2^24 (a cold path) take the partial tile's copy.
      auto forms = [&](auto whole_c) {
        if (p.log) write(whole_c, [&](float x) { return rc.out(x, true); });
        else if (rc.near) write(whole_c, [&](float x) { return rc.out_near(x); });
        else write(whole_c, [&](float x) { return rc.out(x, false); });
      };
      if (rc.natural) write(std::false_type{}, [&](float x) { return rc.out_natural(x, p.log); });
      else if (full) forms(std::true_type{});
      else forms(std::false_type{});
    }
  };

  grid_fwd_steps<R>(ring, ex, vals, gp.grid_lag, gp.grid_prefetch != 0, phase_a, phase_b);
}

// The backward: R rows a step (1; 2 for 16-bit rows), a word a row (the
// dot) in the exchange, the ring's stages y's tile then dy's.
template <typename T, int R>
__global__ void __launch_bounds__(kSoftmaxGridThreads, 1) softmax_bwd_grid_kernel(const SoftmaxGridParams gp) {
  using namespace core;
  using Ring = GridRowRing<T, 2>;
  constexpr int VEC = Ring::VEC;
  constexpr int KV = Ring::KV;  // vectors a thread
  using XOp = std::conditional_t<R == 1, SumOp, SumPairOp>;  // a word a row: its dot
  using XT = typename XOp::T;
  using Words = GridWords<XT>;
  using V = typename Ring::V;
  static_assert(Words::kWords == R, "a word a row");
  extern __shared__ __align__(16) unsigned char smem[];  // (the softmax kernels' declaration)
  XT* scratch = reinterpret_cast<XT*>(smem);  // block_reduce's [2][32] partials, by step parity
  static_assert(2 * 32 * sizeof(XT) <= kNormGridScratchBytes, "grid softmax backward: the block partials");
  float* vals = reinterpret_cast<float*>(smem + kNormGridValsOffset);  // collected words

  const SoftmaxParams& p = gp.op;
  Ring ring = Ring::make(smem, static_cast<const T*>(p.a), p.a_stride, p.rows, p.cols, gp.grid_ranks, gp.grid_groups,
                         gp.grid_tile_vecs, gp.grid_stages, kNormGridHeader, static_cast<const T*>(p.b), p.b_stride);
  const GridExchange<XOp> ex{gp.exchange + ring.group * GridExchange<XOp>::words(ring.ranks, gp.grid_steps),
                             ring.ranks, ring.rank};
  T* out = static_cast<T*>(p.out);
  const int rows_here = ring.rows_here;
  const bool full = ring.full;

  ring.start();

  // A: step i's dots, a word a row. Zeros past the tile add nothing.
  auto phase_a = [&](int i, float (&words)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int j = i * R + r;
      words[r] = 0.0f;
      if (j >= rows_here) continue;  // the group's last step: fewer rows (uniform over the CTA)
      const int s = ring.wait_next();
      const int64_t row = ring.row(j);
      V yv[KV], dv[KV];
      if (full) {
        ring.template load_tile<0>(true, s, row, yv);
        ring.template load_tile<1>(true, s, row, dv);
      } else {
        ring.template load_tile<0>(false, s, row, yv);
        ring.template load_tile<1>(false, s, row, dv);
      }
      // VEC independent chains, then a fixed tree: the same bits every run.
      float acc[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] = 0.0f;
      auto dots = [&](auto log_c) {
#pragma unroll
        for (int k = 0; k < KV; ++k) {
          float y[VEC], d[VEC];
          yv[k].widen(y);
          dv[k].widen(d);
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[e] = decltype(log_c)::value ? acc[e] + d[e] : fmaf(d[e], y[e], acc[e]);
        }
      };
      if (p.log) dots(std::true_type{});
      else dots(std::false_type{});
      words[r] = grid_tree(acc);
    }
    Words::put(block_reduce<XOp>(Words::get(words), scratch + 32 * (i & 1)), words);
  };

  // B: step q's dots from every rank's words (in rank order: the same bits
  // in every CTA), then dx from the stages.
  auto phase_b = [&](int q) {
    float dots[R];
    Words::put(ex.combine(vals), dots);
#pragma unroll 1
    for (int r = 0; r < R; ++r) {
      const int j = q * R + r;
      if (j >= rows_here) continue;
      const float dot = grid_pick(dots, r);
      const int s = ring.next_written();
      const int64_t row = ring.row(j);
      T* orow = out + row * p.out_stride + (ring.vb + ring.tid) * VEC;
      // One instantiation per form and per tile (whole or partial): no
      // run-time choice inside the loop.
      auto write = [&](auto whole_c, auto&& f) {
        ring.write_tile(decltype(whole_c)::value, s, row, orow, [&](int, float (&y)[VEC], const float (&d)[VEC]) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) y[e] = f(y[e], d[e]);
        });
      };
      auto forms = [&](auto whole_c) {
        if (p.log) write(whole_c, [&](float y, float d) { return d - __expf(y) * dot; });
        else write(whole_c, [&](float y, float d) { return y * (d - dot); });
      };
      if (full) forms(std::true_type{});
      else forms(std::false_type{});
    }
  };

  grid_fwd_steps<R>(ring, ex, vals, gp.grid_lag, gp.grid_prefetch != 0, phase_a, phase_b);
}

// The grid kernel of either direction (cfg from choose_softmax_fwd_grid_config
// or choose_softmax_bwd_grid_config), a cooperative launch after the
// exchange logs at p.exchange (cfg.exchange_bytes) are zeroed.
// *not_resident: set when the grid cannot be resident at once (nothing
// launched; the caller takes the other kernels). Rows a step built: 1, and
// 2 (the forward's every dtype, the backward's 16-bit rows).
template <DType kX>
Status launch_softmax_grid(const SoftmaxGridParams& p, const NormGridConfig& cfg, bool backward, int device,
                           cudaStream_t stream, bool* not_resident) {
  using T = typename core::TypeOf<kX>::type;
  core::LaunchShape shape;
  Status st = core::grid_launch_prologue(cfg, kSoftmaxGridThreads, p.exchange, stream, not_resident,
                                         backward ? "softmax backward exchange reset" : "softmax forward exchange reset",
                                         &shape);
  if (!st.ok()) return st;
  if (cfg.rows == 2) {
    if (!backward) return core::launch_cached<softmax_fwd_grid_kernel<T, 2>>(device, shape, stream, p);
    if constexpr (sizeof(T) == 2) return core::launch_cached<softmax_bwd_grid_kernel<T, 2>>(device, shape, stream, p);
  }
  if (cfg.rows != 1)
    return {Code::kUnsupported, backward ? "softmax backward: grid rows a step outside the built kernels"
                                         : "softmax forward: grid rows a step outside the built kernels"};
  return backward ? core::launch_cached<softmax_bwd_grid_kernel<T, 1>>(device, shape, stream, p)
                  : core::launch_cached<softmax_fwd_grid_kernel<T, 1>>(device, shape, stream, p);
}

#define QUACK_SOFTMAX_GRID_INSTANTIATION(EXTERN, DT)                                                          \
  EXTERN template Status launch_softmax_grid<DT>(const SoftmaxGridParams&, const NormGridConfig&, bool, int, \
                                                 cudaStream_t, bool*);
#ifndef QUACK_SOFTMAX_TU
QUACK_SOFTMAX_GRID_INSTANTIATION(extern, DType::kFloat32)
QUACK_SOFTMAX_GRID_INSTANTIATION(extern, DType::kFloat16)
QUACK_SOFTMAX_GRID_INSTANTIATION(extern, DType::kBFloat16)
#endif

}  // namespace ops
}  // namespace quack
