// RMSNorm / LayerNorm forward for rows past what a cluster holds well
// (rmsnorm_fwd_grid_kernel): the backward's grid (ops/rmsnorm_bwd.cuh, 2'')
// with x's tile alone a stage. A cooperative grid of `groups` groups of
// `ranks` CTAs, one CTA of kNormGridCtaThreads an SM (core/config.hpp,
// NormGridConfig; what two CTAs an SM measured is noted there): rank r of
// every group owns the same tile of columns and holds its weight and bias in
// registers; group g takes rows g, g + groups, ... in order, R of its rows a
// step (R = 2 for 16-bit rows by default: the step's barriers and exchange
// paid once for both; RowTuning::fwd_grid_rows16 / 32 -- up to 4 16-bit
// rows, 2 fp32 ones). Step i of a group:
//   A. the tiles of its R rows arrive by bulk copy in a ring of `stages`
//      shared-memory stages, a row a stage (each issued `stages` rows
//      ahead); each CTA reduces its tiles' sums -- RMSNorm: sum(x^2);
//      LayerNorm: sum(x) and the squared deviations from the tile's own
//      mean, two block reductions -- and publishes them (core::GridExchange,
//      one word a sum);
//   B. `lag` steps later it collects the step's words of every rank (by then
//      they have usually been published; the loads are issued at the top of
//      the step, under A: RowTuning::fwd_grid_prefetch), combines them in
//      rank order -- LayerNorm: the mean from the sums, then each rank's
//      deviations plus n_r (mean_r - mean)^2 (Chan's parallel variance: no
//      cancellation) -- writes out from the same stages, then refills them.
// The ring and the step loop are core/grid_ring.cuh's (shared with softmax's
// grid forward, ops/softmax_grid.cuh); this kernel is its two phases.
// x crosses HBM once and out once; the exchange costs a 64-bit store a CTA
// and a word and as many loads a rank, from L2, spread over the CTA. Every
// CTA combines the same words in the same order: the rstd (and mean) are the
// same bits in every CTA and every run.
#pragma once

#include <cstdint>
#include <type_traits>

#include "quack/core/bulk.cuh"
#include "quack/core/config.hpp"
#include "quack/core/grid_exchange.cuh"
#include "quack/core/grid_ring.cuh"
#include "quack/core/launch.cuh"
#include "quack/core/reduce.cuh"
#include "quack/core/row_tile.cuh"
#include "quack/core/vec.cuh"
#include "quack/ops/rmsnorm.cuh"

namespace quack {
namespace ops {

constexpr int kNormFwdGridThreads = kNormGridCtaThreads;
// The scratch's four areas: a block reduction's warp partials (up to a
// float4 a warp) each; A's sums and deviations, in two parities by step.
constexpr uint32_t kNormFwdGridScratchArea = kNormGridScratchBytes / 4;
static_assert((kNormFwdGridThreads / 32) * sizeof(float4) <= kNormFwdGridScratchArea,
              "grid forward scratch: four areas of the warps' float4");

// N plain sums as one reduction value (N = 1, 2, 4; 8: the exchange's
// words only, never reduced -- LayerNorm's four rows a step).
struct GridWords8Op {
  using T = core::GridWords8;
};
template <int N>
using GridSums = std::conditional_t<
    N == 1, core::SumOp,
    std::conditional_t<N == 2, core::SumPairOp, std::conditional_t<N == 4, core::SumQuadOp, GridWords8Op>>>;

// a[0..N) summed over the CTA (block_reduce in scratch area `area`), in place.
template <int N>
__device__ __forceinline__ void grid_block_sums(float (&a)[N], unsigned char* smem, int area) {
  using Op = GridSums<N>;
  using Words = core::GridWords<typename Op::T>;
  auto* scratch = reinterpret_cast<typename Op::T*>(smem + area * kNormFwdGridScratchArea);
  Words::put(core::block_reduce<Op>(Words::get(a), scratch), a);
}

// a[0..N) summed over the warp (the butterfly: the same bits in every lane).
template <int N>
__device__ __forceinline__ void grid_warp_sums(float (&a)[N]) {
  using Op = GridSums<N>;
  using Words = core::GridWords<typename Op::T>;
  Words::put(core::warp_reduce<Op>(Words::get(a)), a);
}

// Tw: the weight's and bias's dtype (x's or fp32; x's when neither is given).
template <typename T, typename Tw, bool kCentre, int R>
__global__ void __launch_bounds__(kNormFwdGridThreads, 1) rmsnorm_fwd_grid_kernel(const RMSNormFwdParams p) {
  using namespace core;
  using Ring = GridRowRing<T>;
  constexpr int VEC = Ring::VEC;
  constexpr int KV = Ring::KV;  // vectors a thread
  constexpr int TH = kNormFwdGridThreads;
  constexpr int kPer = kCentre ? 2 : 1, kWords = kPer * R;
  static_assert(kWords <= 8, "the collected words' room (norm_fwd_grid_header): 8 a rank");
  // (fp32 LayerNorm at two rows a step: cached, the words spilled 32 bytes
  // at 128 registers; read once a pass, 121 registers; ptxas -v, CUDA 13.0.)
  constexpr bool kCacheWords = !(kCentre && sizeof(T) == 4 && R == 2) && kWords <= 4;
  using XOp = GridSums<kWords>;
  using V = typename Ring::V;
  extern __shared__ __align__(128) unsigned char smem[];
  float* vals = reinterpret_cast<float*>(smem + kNormGridValsOffset);  // collected words

  Ring ring = Ring::make(smem, static_cast<const T*>(p.x), p.x_stride, p.rows, p.cols, p.grid_ranks, p.grid_groups,
                         p.grid_tile_vecs, p.grid_stages, norm_fwd_grid_header(kWords));
  const int ranks = ring.ranks, rank = ring.rank, tid = ring.tid;
  const int64_t cols = p.cols, tile = ring.tile, vb = ring.vb;
  const GridExchange<XOp> ex{p.exchange + ring.group * GridExchange<XOp>::words(ranks, p.grid_steps), ranks, rank};
  T* out = static_cast<T*>(p.out);
  const Tw* wp = static_cast<const Tw*>(p.w);
  const Tw* bp = static_cast<const Tw*>(p.b);
  const int nval = ring.nval, rows_here = ring.rows_here;
  const bool full = ring.full;
  // Columns rank r owns.
  auto rank_cols = [&](int r) -> float {
    const int64_t c0 = int64_t(r) * tile * VEC, c1 = min(cols, (int64_t(r) + 1) * tile * VEC);
    return float(max(int64_t(0), c1 - c0));
  };
  // Every rank but the last owns a whole tile (check_norm_fwd_grid_config).
  const float n_own = rank_cols(rank), inv_own = n_own > 0.0f ? 1.0f / n_own : 0.0f;
  const float n_mid = float(tile * VEC), inv_mid = 1.0f / n_mid;
  const float n_last = rank_cols(ranks - 1), inv_last = n_last > 0.0f ? 1.0f / n_last : 0.0f;

  ring.start();

  // The weight (plus weight_offset; exactly 1 without a weight) and the
  // bias (0 without) of this thread's columns, while the first rows arrive.
  float w[KV][VEC], b[KV][VEC];
#pragma unroll
  for (int k = 0; k < KV; ++k) {
    const int64_t v = vb + tid + int64_t(k) * TH;
    RawVec<Tw, VEC> wv, bv;
    wv.zero();
    bv.zero();
    if (k < nval) {
      const int valid = ring.valid_at(k);
      if (wp != nullptr) {
        if (valid == VEC) wv.load(wp + v * VEC);
        else wv.load_partial(wp + v * VEC, valid);
      }
      if (bp != nullptr) {
        if (valid == VEC) bv.load(bp + v * VEC);
        else bv.load_partial(bp + v * VEC, valid);
      }
    }
    wv.widen(w[k]);
    bv.widen(b[k]);
#pragma unroll
    for (int e = 0; e < VEC; ++e) w[k][e] = wp != nullptr ? w[k][e] + p.weight_offset : 1.0f;
  }

  // A: step i's sums.
  auto phase_a = [&](int i, float (&part_w)[kWords]) {
    float sum[R], dev[R];
    V xr[R][KV];  // the tiles' vectors as loaded (LayerNorm: for the deviations)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int j = i * R + r;
      sum[r] = dev[r] = 0.0f;
      if (j >= rows_here) {  // the group's last step: fewer rows (uniform over the CTA)
#pragma unroll
        for (int k = 0; k < KV; ++k) xr[r][k].zero();
        continue;
      }
      const int s = ring.wait_next();
      const int64_t row = ring.row(j);
      if (full) ring.load_tile(true, s, row, xr[r]);
      else ring.load_tile(false, s, row, xr[r]);
      float acc[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] = 0.0f;
#pragma unroll
      for (int k = 0; k < KV; ++k) {
        float f[VEC];
        xr[r][k].widen(f);
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[e] = kCentre ? acc[e] + f[e] : fmaf(f[e], f[e], acc[e]);
      }
      sum[r] = grid_tree(acc);
    }
    grid_block_sums<R>(sum, smem, 2 * (i & 1));
    if constexpr (kCentre) {
      // Deviations from the tile's own mean over its valid elements.
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float tm = sum[r] * inv_own;
        float acc[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[e] = 0.0f;
        auto devs = [&](bool whole) {
#pragma unroll
          for (int k = 0; k < KV; ++k) {
            float f[VEC];
            xr[r][k].widen(f);
            const int valid = whole ? VEC : ring.valid_at(k);
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
              const float d = e < valid ? f[e] - tm : 0.0f;
              acc[e] = fmaf(d, d, acc[e]);
            }
          }
        };
        if (full) devs(true);
        else devs(false);
        dev[r] = grid_tree(acc);
      }
      grid_block_sums<R>(dev, smem, 2 * (i & 1) + 1);
#pragma unroll
      for (int r = 0; r < R; ++r) part_w[2 * r] = sum[r], part_w[2 * r + 1] = dev[r];
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) part_w[r] = sum[r];
    }
  };

  // B: step q's rows normalised and written.
  auto phase_b = [&](int q) {
    // Every warp combines the ranks' words in rank order: the same bits
    // in every warp and CTA.
    const int lane = tid & 31;
    float mean[R], rstd[R], acc[R];
    // The lane's ranks' words, each rank's in one load (rank_words,
    // core/grid_exchange.cuh), read once for both of LayerNorm's passes
    // where the registers allow (kCacheWords), else once a pass.
    float cw[kCacheWords ? kGridLaneRanks : 1][kWords];
    if constexpr (kCacheWords) lane_rank_words(vals, lane, ranks, cw);
    auto words_at = [&](int it, float (&w)[kWords]) {
      if constexpr (kCacheWords) {
#pragma unroll
        for (int k = 0; k < kWords; ++k) w[k] = cw[it][k];
      } else {
        rank_words(vals, lane + 32 * it, w);
      }
    };
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
#pragma unroll
    for (int it = 0; it < kGridLaneRanks; ++it) {
      if (lane + 32 * it < ranks) {
        float w[kWords];
        words_at(it, w);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] += w[kPer * r];
      }
    }
    grid_warp_sums<R>(acc);
    if constexpr (kCentre) {
      float m2[R];
#pragma unroll
      for (int r = 0; r < R; ++r) mean[r] = acc[r] / float(cols), m2[r] = 0.0f;
#pragma unroll
      for (int it = 0; it < kGridLaneRanks; ++it) {
        const int rr = lane + 32 * it;
        if (rr < ranks) {
          const bool last = rr == ranks - 1;
          const float n = last ? n_last : n_mid, inv_n = last ? inv_last : inv_mid;
          float w[kWords];
          words_at(it, w);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const float d = w[2 * r] * inv_n - mean[r];
            m2[r] += w[2 * r + 1] + n * d * d;
          }
        }
      }
      grid_warp_sums<R>(m2);
#pragma unroll
      for (int r = 0; r < R; ++r) rstd[r] = rsqrtf(fmaf(m2[r], p.inv_cols, p.eps));
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) mean[r] = 0.0f, rstd[r] = rsqrtf(fmaf(acc[r], p.inv_cols, p.eps));
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int j = q * R + r;
      if (j >= rows_here) continue;
      const int s = ring.next_written();
      const int64_t row = ring.row(j);
      if (rank == 0 && tid == 0) {
        if (p.rstd != nullptr) p.rstd[row] = rstd[r];
        if (kCentre && p.mean != nullptr) p.mean[row] = mean[r];
      }
      T* orow = out + row * p.out_stride + (vb + tid) * VEC;
      auto write = [&](bool whole) {
        ring.write_tile(whole, s, row, orow, [&](int k, float (&f)[VEC]) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float xh = kCentre ? (f[e] - mean[r]) * rstd[r] : f[e] * rstd[r];
            f[e] = fmaf(xh, w[k][e], b[k][e]);
          }
        });
      };
      if (full) write(true);
      else write(false);
    }
  };

  grid_fwd_steps<R>(ring, ex, vals, p.grid_lag, p.grid_prefetch != 0, phase_a, phase_b);
}

// The grid kernel (cfg from choose_norm_fwd_grid_config), a cooperative
// launch after the exchange logs at p.exchange (cfg.exchange_bytes) are
// zeroed. w_f32: the weight and bias are fp32 (else x's dtype, or absent).
// *not_resident: set when the grid cannot be resident at once (nothing
// launched; the caller takes the other kernels).
template <DType kX, bool kCentre>
Status launch_rmsnorm_fwd_grid(const RMSNormFwdParams& p, const NormGridConfig& cfg, bool w_f32, int device,
                               cudaStream_t stream, bool* not_resident) {
  using T = typename core::TypeOf<kX>::type;
  core::LaunchShape shape;
  Status st = core::grid_launch_prologue(
      cfg, kNormFwdGridThreads, p.exchange, stream, not_resident,
      kCentre ? "layernorm forward exchange reset" : "rmsnorm forward exchange reset", &shape);
  if (!st.ok()) return st;
  // Rows a step built: 1 and 2 (every layout), 4 (16-bit rows).
  auto run = [&](auto tw) -> Status {
    using Tw = typename decltype(tw)::type;
    if constexpr (sizeof(T) == 2) {
      if (cfg.rows == 4) {
        return core::launch_cached<rmsnorm_fwd_grid_kernel<T, Tw, kCentre, 4>>(device, shape, stream, p);
      }
    }
    if (cfg.rows == 2) {
      return core::launch_cached<rmsnorm_fwd_grid_kernel<T, Tw, kCentre, 2>>(device, shape, stream, p);
    }
    if (cfg.rows != 1) return {Code::kUnsupported, "norm forward: grid rows a step outside the built kernels"};
    return core::launch_cached<rmsnorm_fwd_grid_kernel<T, Tw, kCentre, 1>>(device, shape, stream, p);
  };
  if (w_f32 && !std::is_same_v<T, float>) return run(core::TypeTag<float>{});
  return run(core::TypeTag<T>{});
}

#define QUACK_NORM_FWD_GRID_INSTANTIATION(EXTERN, DT, CENTRE)                                                   \
  EXTERN template Status launch_rmsnorm_fwd_grid<DT, CENTRE>(const RMSNormFwdParams&, const NormGridConfig&, bool, \
                                                             int, cudaStream_t, bool*);
#ifndef QUACK_RMSNORM_FWD_TU
QUACK_NORM_FWD_GRID_INSTANTIATION(extern, DType::kFloat32, false)
QUACK_NORM_FWD_GRID_INSTANTIATION(extern, DType::kFloat16, false)
QUACK_NORM_FWD_GRID_INSTANTIATION(extern, DType::kBFloat16, false)
QUACK_NORM_FWD_GRID_INSTANTIATION(extern, DType::kFloat32, true)
QUACK_NORM_FWD_GRID_INSTANTIATION(extern, DType::kFloat16, true)
QUACK_NORM_FWD_GRID_INSTANTIATION(extern, DType::kBFloat16, true)
#endif

}  // namespace ops
}  // namespace quack
