// RMSNorm backward (quack.hpp RMSNormBwdArgs):
//   xhat = h * rstd, g = dy * (w + weight_offset), c = mean(g * xhat)
//   dh = rstd * (g - xhat * c) + dresidual_out  -> dx, dresidual
//   dw = sum_rows dy * xhat, db = sum_rows dy (fp32, deterministic)
//
// Three kernels (and a pipelined variant of the first):
// 1'. Pipelined rows (same operand rules, a row that one CTA holds at 2
//    vectors a thread; RowTuning::bwd_pipe): dw sums in registers, the next
//    row block copied into shared memory while this one is reduced (below).
// 1. Register-resident rows (16-byte-aligned operands, h/dy/dx/dresidual*
//    in one dtype, weight in it or fp32, N <= 1024 * 16 * 16): a thread
//    holds its share of h and dy in registers (the RowGeom layout of
//    core/row_tile.cuh), reduces g * xhat over its team (and cluster), and
//    writes dh from the same registers. Persistent: a CTA (cluster) walks
//    row blocks and accumulates dy * xhat and dy for the columns its threads
//    own in shared memory, in slots private to each thread (no atomics), so
//    the per-thread share is capped at 16 elements (16 x 8 bytes x 1024
//    threads = 128 KB). At the end it writes one partial row per cluster
//    into the workspace.
// 2. General rows (any layout, any dtype mix): one CTA per row at a time,
//    element-wise, two passes over the row (the second mostly from L2); the
//    CTA's partial row lives in the workspace and each column is updated by
//    the one thread that owns it. Rows longer than kRMSNormBwdSplitMinCols
//    take 2' instead (two kernels, a grid independent of N).
// 3. The fixed-order reduction of the partial rows into dweight / dbias.
//
// LayerNorm (kCentre; quack.hpp LayerNormBwdArgs) is the same pipeline with
// the forward's mean: xhat = (h - mean) * rstd, and
//   dh = rstd * (g - mean(g) - xhat * mean(g * xhat)) + dresidual_out,
// the two row sums taken in one reduction round (core::SumPairOp).
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
#include "quack/quack.hpp"

namespace quack {
namespace ops {

struct RMSNormBwdParams {
  int64_t rows, cols;
  const void* h;
  int64_t h_stride;
  const void* dy;
  int64_t dy_stride;
  const void* dres_out;  // nullable
  int64_t dres_out_stride;
  const void* w;  // nullable
  const float* rstd;
  const float* mean;  // LayerNorm only
  void* dx;
  int64_t dx_stride;
  void* dres;  // nullable
  int64_t dres_stride;
  float weight_offset;
  float inv_cols;  // 1 / cols
  float2* partial;  // [partials][cols] (sum dy * xhat, sum dy); nullptr: no weight gradients
  // Run-time dtypes (the general kernel; the register kernel's are T / Tw).
  DType h_dtype, dy_dtype, dres_out_dtype, w_dtype, dx_dtype, dres_dtype;
  // Layout (RegRowConfig for the register kernel; team = CTA for the general one).
  int team, cluster;
  int stages;     // the pipelined kernel's shared-memory stages
  int team_log2;  // the pipelined kernel: ceil(log2 team) (a fitted team is below 1 << team_log2)
  int teams;      // and its teams a CTA
  int db_sums;  // the pipelined kernel: 1 when dbias is asked for (its sums in shared memory)
  int lead_stats;  // the pipelined kernel: RegRowConfig::lead_stats
  // The pipelined kernel's shifted rows (kShift): log2 of P, the rows after
  // which a row's offset inside its 16-byte vector repeats (1 << shift_log2
  // classes of rows, each walked by its own CTAs or clusters), and the classes' offsets
  // in elements (RowClasses::shifts: 4 bits a class).
  int shift_log2;
  uint32_t class_shifts;
  int64_t row_blocks;
  // The grid kernel (2''): CTAs a row (ranks of a group), row groups, a
  // CTA's tile of 16-byte vectors, the rows a collect trails its publish,
  // and the groups' exchange logs of grid_steps steps each
  // (core/grid_exchange.cuh).
  int grid_ranks, grid_groups, grid_lag;
  int64_t grid_tile_vecs, grid_steps;
  uint64_t* exchange;
};

// Shared memory before the accumulators: the row reduction's scratch.
constexpr uint32_t kRMSNormBwdScratchBytes = 1024;
static_assert(core::RowReduce<core::SumPairOp, true>::scratch_bytes() <= kRMSNormBwdScratchBytes &&
                  core::RowReducer<core::SumPairOp>::scratch_bytes() <= kRMSNormBwdScratchBytes,
              "rmsnorm bwd scratch");

// A row's reduced sums: (sum g * h', sum g) for LayerNorm, where h' = h - mean,
// (sum g * h, -) for RMSNorm.
template <bool kCentre>
struct NormBwdDots {
  using Op = std::conditional_t<kCentre, core::SumPairOp, core::SumOp>;
  using T = typename Op::T;
  __device__ __forceinline__ static T make(float gh, float g) {
    if constexpr (kCentre) return make_float2(gh, g);
    else return (void)g, gh;
  }
  __device__ __forceinline__ static float gh(T v) {
    if constexpr (kCentre) return v.x;
    else return v;
  }
  // mean(g) over the row (0 for RMSNorm).
  __device__ __forceinline__ static float g_mean(T v, float cols) {
    if constexpr (kCentre) return v.y / cols;
    else return (void)v, (void)cols, 0.0f;
  }
};
// Elements of a row a thread of the register kernel owns at most: its
// accumulators (8 bytes each) for a 1024-thread CTA fill 128 KB.
constexpr int kRMSNormBwdMaxElemsPerThread = 16;
constexpr int rmsnorm_bwd_max_vpt(int elem_bytes) { return kRMSNormBwdMaxElemsPerThread / (16 / elem_bytes); }

// ---------------------------------------------------------------------------
// 1. Register-resident rows.
// Tw: the weight's element type, void without a weight.
template <typename T, typename Tw, int VPT, bool kCluster, bool kCentre>
__global__ void __launch_bounds__(kRegRowMaxThreads, 1) rmsnorm_bwd_reg_kernel(const RMSNormBwdParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  constexpr bool kWeight = !std::is_void_v<Tw>;
  using TwOrT = std::conditional_t<kWeight, Tw, T>;
  constexpr int E = VPT * VEC;
  static_assert(E <= kRMSNormBwdMaxElemsPerThread, "accumulator share");
  extern __shared__ __align__(16) unsigned char smem[];
  using Dots = NormBwdDots<kCentre>;
  RowReduce<typename Dots::Op, kCluster> cred;
  cred.start(smem);
  // Accumulators: slot q of thread tid (elements 2q and 2q + 1 of its
  // share: sum dy * xhat, sum dy, sum dy * xhat, sum dy) is the float4 at
  // acc0 + (q * blockDim.x + tid) * 16 -- consecutive threads, consecutive
  // 16 bytes, read and written with 16-byte shared accesses.
  constexpr int kSlots = E / 2;
  static_assert(VEC % 2 == 0, "two elements a slot");
  const uint32_t acc0 = smem_addr(smem) + kRMSNormBwdScratchBytes;
  const bool grads = p.partial != nullptr;
#pragma unroll
  for (int q = 0; q < kSlots; ++q) sts_f4(acc0 + (uint32_t(q) * blockDim.x + threadIdx.x) * 16, make_float4(0.f, 0.f, 0.f, 0.f));

  // parity: the scratch half of an unclustered row block (alternating, so
  // that consecutive blocks' reductions never share scratch).
  auto do_rows = [&](int64_t blk, int parity) {
    const auto g = RowGeom<VEC, VPT>::make(p.team, p.cluster, p.cols, kCluster, false);
    const int64_t row = blk * g.teams + g.team_id;
    const bool active = row < p.rows;
    // g = dy * (w + weight_offset) of vector i, in place (dy alone without a
    // weight: a compile-time case, or ptxas keeps the constant 1s of the
    // weightless path in registers and spills).
    const TwOrT* w = static_cast<const TwOrT*>(p.w);
    asm volatile("" : "+l"(w));  // (opaque: see RowGeom::make)
    auto scale_by_weight = [&](int i, float (&df)[VEC]) {
      if constexpr (kWeight) {
        // In 16-byte pieces: fp32 weights for 16-bit rows are 32 bytes a
        // vector, and holding them whole spilled.
        constexpr int WV = 16 / int(sizeof(TwOrT));
        const int n = g.valid(i);
#pragma unroll
        for (int q = 0; q < VEC / WV; ++q) {
          RawVec<TwOrT, WV> wv;
          const int m = n - q * WV;
          if (m >= WV) wv.load(w + g.col(i) + q * WV);
          else if (m > 0) wv.load_partial(w + g.col(i) + q * WV, m);
          else wv.zero();
          float wf[WV];
          wv.widen(wf);
#pragma unroll
          for (int j = 0; j < WV; ++j) df[q * WV + j] *= wf[j] + p.weight_offset;
        }
      }
    };

    // This thread's accumulators, addressed from opaque values per row (else
    // ptxas keeps all slot addresses live across the row loop and spills).
    uint32_t my_acc = acc0 + threadIdx.x * 16, acc_stride = blockDim.x * 16;
    asm volatile("" : "+r"(my_acc), "+r"(acc_stride));
    RawVec<T, VEC> hv[VPT], dyv[VPT];
    float rstd = 0.0f, mean = 0.0f, dot = 0.0f, gsum = 0.0f;
    // h - mean of vector i (h for RMSNorm), fp32.
    auto centred = [&](int i, float (&hf)[VEC]) {
      hv[i].widen(hf);
      if constexpr (kCentre) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) hf[j] -= mean;
      }
    };
    // Adds vector i's dy * xhat and dy (hf: h - mean, df: dy) to its slots,
    // two at a time (four spilled the fp16 tiles; LayerNorm's fp16 tiles,
    // one at a time: two spilled 16 bytes): both loads issued, then the
    // math, then the stores.
    auto accumulate = [&](int i, const float (&hf)[VEC], const float (&df)[VEC]) {
      constexpr int S = VEC / 2, G = kCentre && std::is_same_v<T, __half> ? 1 : 2;
#pragma unroll
      for (int q0 = 0; q0 < S; q0 += G) {
        float4 a[G];
#pragma unroll
        for (int q = 0; q < G; ++q) a[q] = lds_f4(my_acc + uint32_t(i * S + q0 + q) * acc_stride);
#pragma unroll
        for (int q = 0; q < G; ++q) {
          const int e = 2 * (q0 + q);
          a[q].x = fmaf(df[e], hf[e] * rstd, a[q].x);
          a[q].y += df[e];
          a[q].z = fmaf(df[e + 1], hf[e + 1] * rstd, a[q].z);
          a[q].w += df[e + 1];
        }
#pragma unroll
        for (int q = 0; q < G; ++q) sts_f4(my_acc + uint32_t(i * S + q0 + q) * acc_stride, a[q]);
      }
    };
    if (active) {
      rstd = p.rstd[row];
      if constexpr (kCentre) mean = p.mean[row];
      const T* hrow = static_cast<const T*>(p.h) + row * p.h_stride;
      const T* dyrow = static_cast<const T*>(p.dy) + row * p.dy_stride;
#pragma unroll
      for (int i = 0; i < VPT; ++i) g.load(hv[i], hrow, i);
#pragma unroll
      for (int i = 0; i < VPT; ++i) g.load(dyv[i], dyrow, i);
      // Padding holds dy = 0: it adds nothing to the sums.
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        float hf[VEC], gf[VEC];
        centred(i, hf);
        dyv[i].widen(gf);
        if constexpr (kCentre) {
          // LayerNorm: the weight-gradient slots of this vector here, from
          // the values already widened (a second pass, as RMSNorm's below,
          // spilled its 16-element tiles within 64 registers, ptxas -v).
          if (grads) accumulate(i, hf, gf);
        }
        scale_by_weight(i, gf);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          dot = fmaf(gf[j], hf[j], dot);  // (times rstd after the reduction)
          if constexpr (kCentre) gsum += gf[j];
        }
      }
      if (!kCentre && grads) {
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
          float hf[VEC], df[VEC];
          centred(i, hf);
          dyv[i].widen(df);
          accumulate(i, hf, df);
        }
      }
    }
    typename Dots::T dots = Dots::make(dot, gsum);
    if constexpr (kCluster) {
      dots = cred.reduce(dots, g.team, p.cluster, g.crank);
    } else {
      RowReducer<typename Dots::Op> red(smem, g.team, 1);
      red.parity = parity;
      dots = red.reduce(dots);
    }
    if (!active) return;
    const float c = Dots::gh(dots) * rstd / float(p.cols), gm = Dots::g_mean(dots, float(p.cols));
    T* dxrow = static_cast<T*>(p.dx) + row * p.dx_stride;
    T* dresrow = p.dres != nullptr ? static_cast<T*>(p.dres) + row * p.dres_stride : nullptr;
    const T* drorow = p.dres_out != nullptr ? static_cast<const T*>(p.dres_out) + row * p.dres_out_stride : nullptr;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (g.valid(i) == 0) continue;
      float hf[VEC], gf[VEC], dro[VEC];
      centred(i, hf);
      if constexpr (kCentre && kWeight && VPT * VEC == kRMSNormBwdMaxElemsPerThread) {
        // dy again, from L1 / L2 (read moments ago): LayerNorm's 16-element
        // tiles with a weight do not hold it across the reduction (they
        // spilled 16-20 bytes, ptxas -v, CUDA 13.0).
        RawVec<T, VEC> d;
        g.load(d, static_cast<const T*>(p.dy) + row * p.dy_stride, i);
        d.widen(gf);
      } else {
        dyv[i].widen(gf);
      }
      scale_by_weight(i, gf);
      if (drorow != nullptr) {
        RawVec<T, VEC> v;
        g.load(v, drorow, i);
        v.widen(dro);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) dro[j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float xh = hf[j] * rstd;
        hf[j] = fmaf(rstd, fmaf(-xh, c, gf[j] - gm), dro[j]);
      }
      RawVec<T, VEC> o;
      o.narrow(hf);
      g.store(o, dxrow, i);
      if (dresrow != nullptr) g.store(o, dresrow, i);
    }
  };

  // Persistent: a CTA (cluster) walks every grid-th row block.
  const int64_t clusters = gridDim.x / unsigned(p.cluster);
  int parity = 0;
  for (int64_t blk = blockIdx.x / unsigned(p.cluster); blk < p.row_blocks; blk += clusters, parity ^= 1)
    do_rows(blk, parity);
  cred.finish();

  if (grads) {
    // The teams of a CTA own the same columns: team 0's threads add the
    // teams' slots in team order and write this cluster's partial row.
    __syncthreads();
    const auto g = RowGeom<VEC, VPT>::make(p.team, p.cluster, p.cols, kCluster, false);
    if (g.team_id == 0) {
      float2* out = p.partial + int64_t(blockIdx.x / unsigned(p.cluster)) * p.cols;
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        const int n = g.valid(i);
#pragma unroll
        for (int q = 0; q < VEC / 2; ++q) {
          if (2 * q >= n) continue;
          float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
          for (int k = 0; k < g.teams; ++k) {
            const float4 a = lds_f4(acc0 + (uint32_t(i * (VEC / 2) + q) * blockDim.x + uint32_t(k * g.team + g.t)) * 16);
            s.x += a.x;
            s.y += a.y;
            s.z += a.z;
            s.w += a.w;
          }
          out[g.col(i) + 2 * q] = make_float2(s.x, s.y);
          if (2 * q + 1 < n) out[g.col(i) + 2 * q + 1] = make_float2(s.z, s.w);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// 1'. Pipelined rows (RegRowConfig with stages > 0, core/config.hpp
// choose_norm_bwd_pipe_config): rows that one CTA holds. A thread owns the
// same VPT vectors of every row its team handles, so it keeps their sums of
// dy * xhat in registers (and of dy in private shared-memory slots) across
// all the rows its persistent CTA walks, and it copies the next stages - 1 row blocks' h and
// dy (and dresidual_out, rstd, mean) into shared memory with cp.async while
// it reduces and writes the current one: a thread reads back only what it
// copied, so the copies need no barrier, only its own cp.async.wait_group.
// Shared memory (norm_bwd_pipe_smem_bytes): scratch (the team reduction),
// then stages of [tensors][VPT][threads] 16-byte vectors + [threads]
// (rstd, mean), then the weight as fp32 w + weight_offset, [E / 4][threads]
// float4s (loaded once: one multiply an element where it is used), then
// with db_sums, the db sums, [E / 4][threads] float4s private to their
// thread (in registers with the dw sums, the 16-bit tiles spill under the
// 64-register budget of 1024-thread CTAs; kSmallCta, below, holds them there
// in CTAs of up to 256 threads; kBigCta, below, in CTAs of 512). dw's sums
// stay in registers.
// At the end the teams of a CTA add their sums in team order (through the
// stages) and the CTA writes one partial row.
// kCluster: a row longer than one CTA holds is spread over a cluster of CTAs
// (team == blockDim.x, CTA r owning the r-th slice of columns, the
// RowGeom layout); the team's sum is exchanged between the cluster's CTAs
// (core::ClusterExchange: no cluster-wide barrier a row), the cluster walks
// every cluster_count()-th row, and it writes one partial row (each CTA its
// columns).
// kSmallCta (RegRowConfig::small_cta: CTAs of at most
// kNormBwdPipeSmallCtaThreads): built for kNormBwdPipeSmallCtaThreadsPerSm
// threads an SM, 80 registers instead of 64; the db sums (with dbias) stay
// in registers beside dw's instead of a 16-byte shared-memory load and store
// for every 4 elements of every row. Its 4-vector tile (16-bit x,
// kNormBwdPipeWideVpt) is built for kNormBwdPipeWideThreadsPerSm threads an
// SM, 128 registers.
// kBigCta (RegRowConfig::big_cta: 2 vectors, unclustered, aligned rows, a
// CTA of up to kNormBwdPipeBigCtaThreads threads one an SM): built for 128
// registers, a thread holds in registers its weight (fp32 w + offset), its
// dw and db sums, and the row's h and dy vectors from the dot pass to the
// dx pass -- the one copy into shared memory (cp.async) and one 16-byte
// read of each, where the other forms read the weight twice a row, h and
// dy twice, and load and store the db sums (ncu, LayerNorm bf16 4096 +dw,db
// in 512-thread CTAs: 94.7M shared-memory wavefronts, 33% of them excess;
// bench/results/logs/2026-12-07-ln-db-shared-d988a08-h100.md). Shared
// memory is the scratch and the stages alone.
template <typename T, typename Tw, int VPT, bool kCentre, bool kCluster, bool kSmallCta = false, bool kShift = false,
          bool kBigCta = false>
__global__ void __launch_bounds__(kBigCta     ? kNormBwdPipeBigCtaThreads
                                  : kSmallCta ? kNormBwdPipeSmallCtaThreads
                                              : kRegRowMaxThreads,
                                  !kSmallCta                  ? 1
                                  : VPT == kNormBwdPipeWideVpt ? kNormBwdPipeWideThreadsPerSm / kNormBwdPipeSmallCtaThreads
                                                               : kNormBwdPipeSmallCtaThreadsPerSm / kNormBwdPipeSmallCtaThreads)
    rmsnorm_bwd_pipe_kernel(const RMSNormBwdParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  constexpr int E = VPT * VEC;
  constexpr bool kWeight = !std::is_void_v<Tw>;
  using TwOrT = std::conditional_t<kWeight, Tw, T>;
  using Dots = NormBwdDots<kCentre>;
  using DT = typename Dots::T;
  static_assert(!kBigCta || (VPT == 2 && !kCluster && !kSmallCta && !kShift), "big CTAs: 2 vectors, one CTA a row");
  // The db sums in registers (beside dw's) rather than shared memory.
  constexpr bool kRegSums = kSmallCta || kBigCta;
  extern __shared__ __align__(16) unsigned char smem[];
  const int crank = kCluster ? cluster_cta_rank() : 0;
  // kShift (RowTuning::shifted_rows bit 4): rows that start inside a
  // 16-byte vector, every operand at the same offset. A row's offset
  // repeats every P = 1 << p.shift_log2 rows, so the rows fall into P
  // classes (row % P), and CTA b walks only the rows of class b % P: all
  // its rows share one offset s, and each thread's vectors -- the aligned
  // 16-byte pieces from the one that holds the row's first element
  // (RowGeom::shift: the row covers cols + s columns, the first s of them
  // not the row's) -- hold the same columns of every row it walks, c - s
  // for the piece's column c. So the kernel is the aligned one, with its
  // row pointers s elements early, the head of the thread at column 0
  // masked, and the per-column state (the weight, the dweight / dbias
  // sums) at c - s. (Planned for N + VEC - 1 columns.)
  // The walk costs the aligned one's but a shift and an add a row: the
  // grid is whole classes (a class's CTAs, its step, the same in every
  // class), every class walks up to class 0's blocks (p.row_blocks), and a
  // row past the last is inactive as in the aligned walk (row < p.rows).
  // In clusters the classes are the clusters' (cluster q walks class
  // q % P; the launch keeps the clusters a multiple of P), the CTAs of a
  // cluster their slices of its rows, the head in rank 0's first vector.
  // (The class and its offset -- p.class_shifts' 4 bits -- are recomputed
  // where used, from a volatile read of the CTA's (cluster's) index: held
  // across the row loop, the class's values spilled the 64-register 16-bit
  // tiles, 8-16 bytes, ptxas -v, CUDA 13.0.)
  auto cls = [&]() -> int {
    if constexpr (!kShift) return 0;
    unsigned b;
    if constexpr (kCluster) asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(b));
    else asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(b));
    return RowClasses::of(b, p.shift_log2);
  };
  auto shift = [&]() -> int { return kShift ? RowClasses::shift_of(p.class_shifts, cls()) : 0; };
  // The geometry is rebuilt (from opaque values) wherever it is used: held
  // across the row loop, its per-vector columns and predicates spilled.
  auto geom = [&]() {
    auto g = RowGeom<VEC, VPT>::make_pow2(p.team_log2, p.team, p.teams, p.cols, crank);
    if constexpr (kShift) g.shift(shift());
    return g;
  };
  // Rows: row m of this CTA's class is class_row(m) (every row unshifted,
  // the class alone shifted).
  auto class_row = [&](int64_t m) -> int64_t { return kShift ? RowClasses::row(cls(), m, p.shift_log2) : m; };
  // Scratch: the team reduction's [2][32] values, then (clustered) the
  // exchange's.
  ClusterExchange<typename Dots::Op> cx;
  static_assert(64 * sizeof(DT) + ClusterExchange<typename Dots::Op>::scratch_bytes() <= kRMSNormBwdScratchBytes,
                "pipe scratch");
  if constexpr (kCluster) cx.start(smem + 64 * sizeof(DT));
  const uint32_t nthr = blockDim.x;
  const int ntens = p.dres_out != nullptr ? 3 : 2;
  const int stages = p.stages;
  // This thread's slots: vector i of tensor k in the stage at offset `so`
  // is my0 + so + (k * VPT + i) * vstride; its (rstd, mean) at my_stat() + so.
  uint32_t my0 = smem_addr(smem) + kRMSNormBwdScratchBytes + threadIdx.x * 16, vstride = nthr * 16;
  asm volatile("" : "+r"(my0), "+r"(vstride));
  const uint32_t stage_bytes = uint32_t(ntens * VPT * 16 + 8) * nthr;
  // (Computed where used: held across the row loop they spilled.)
  auto my_stat = [&]() { return my0 - threadIdx.x * 8 + uint32_t(ntens * VPT) * vstride; };
  // p.lead_stats (RegRowConfig::lead_stats): a row's (rstd, mean) is copied
  // and read by its leaders alone -- the first thread of each team, or of
  // each of a larger team's warps -- and shuffled to the warp's other
  // threads of the team, where every thread's 4-byte cp.async of the same
  // word costs a shared-memory wavefront a thread (ncu, the big-CTA kernel
  // at bf16 4096 +dw,db: 62 excess wavefronts a warp a row in LayerNorm).
  // lead_mask: the lanes a leader serves, less one (teams below a warp
  // are powers of two).
  auto lead_mask = [&]() { return uint32_t(p.team < 32 ? p.team : 32) - 1u; };
  // This thread copies and reads the row's statistics: every thread, or
  // (p.lead_stats) the leaders alone.
  auto copies_stats = [&]() { return !p.lead_stats || (threadIdx.x & lead_mask()) == 0; };
  // Float4 q of this thread's weight, and of its db sums.
  auto my_w = [&](int q) { return my0 + uint32_t(stages) * stage_bytes + uint32_t(q) * vstride; };
  auto my_db = [&](int q) {
    return my0 + uint32_t(stages) * stage_bytes + uint32_t(kWeight ? E / 4 : 0) * vstride + uint32_t(q) * vstride;
  };
  const bool grads = p.partial != nullptr, db = grads && p.db_sums;

  const T* hbase = static_cast<const T*>(p.h);
  const T* dybase = static_cast<const T*>(p.dy);
  const T* drobase = static_cast<const T*>(p.dres_out);
  // Copies row block `blk`'s rows (this thread's vectors) into the stage at
  // offset so; then commits a group (an empty one past the last block, so
  // that every iteration waits for the same count).
  auto issue = [&](int64_t blk, uint32_t so) {
    const auto g = geom();
    const int64_t row = class_row(blk * g.teams + g.team_id);
    if (blk < p.row_blocks && row < p.rows) {
      const int s = shift();  // (0 unshifted)
      const T* hr = hbase + row * p.h_stride - s;
      const T* dr = dybase + row * p.dy_stride - s;
      const T* ro = ntens == 3 ? drobase + row * p.dres_out_stride - s : nullptr;
      // Opaque row pointers: otherwise ptxas re-associates every vector's
      // address as (row * stride + column) * size + base, ~5 integer
      // instructions a copy where a row pointer and an offset take 1-2.
      asm volatile("" : "+l"(hr), "+l"(dr), "+l"(ro));
      // Plain 16-byte copies of the vectors inside the row, tested a vector
      // (a thread short of its last vector copies the others as fast: the
      // zero-filling path cost ~30 instructions a vector more, SASS of the
      // fp32 LayerNorm tile); the row's partial last vector zero-filled;
      // none of a vector past the row's end (the same in every row: its
      // slots are never read -- the sums below stop at it). A shifted row's
      // first vector is copied whole, its head (the bytes before the row in
      // that 16-byte piece, RowGeom::load's) masked where it is read.
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        if (g.inside(i)) {
          cp_async16(my0 + so + uint32_t(i) * vstride, hr + g.col(i));
          cp_async16(my0 + so + uint32_t(VPT + i) * vstride, dr + g.col(i));
          if (ntens == 3) cp_async16(my0 + so + uint32_t(2 * VPT + i) * vstride, ro + g.col(i));
        } else if (g.col(i) < g.cols) {
          const int bytes = (g.cols - g.col(i)) * int(sizeof(T));
          cp_async_zfill<16>(my0 + so + uint32_t(i) * vstride, hr + g.col(i), bytes);
          cp_async_zfill<16>(my0 + so + uint32_t(VPT + i) * vstride, dr + g.col(i), bytes);
          if (ntens == 3) cp_async_zfill<16>(my0 + so + uint32_t(2 * VPT + i) * vstride, ro + g.col(i), bytes);
        }
      }
      if (copies_stats()) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(my_stat() + so), "l"(p.rstd + row) : "memory");
        if constexpr (kCentre)
          asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(my_stat() + so + 4), "l"(p.mean + row)
                       : "memory");
      }
    }
    cp_async_commit();
  };
  auto wait = [&]() {  // the oldest of the stages - 1 groups in flight has landed
    if (stages == 2) cp_async_wait_group<1>();
    else if (stages == 3) cp_async_wait_group<2>();
    else cp_async_wait_group<3>();
  };

  // The weight, once, as fp32 w + weight_offset (0 outside the row: past
  // its end, and a shifted row's head): in shared memory, or (kBigCta) in
  // registers.
  float wr[kBigCta && kWeight ? E : 1];
  if constexpr (kWeight) {
    const auto g = geom();
    const int s = shift();
    const TwOrT* w = static_cast<const TwOrT*>(p.w);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      const int n = g.valid(i), lo = g.lo(i);
      float wf[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        wf[j] = j >= lo && j < n ? to_float(w[g.col(i) + j - s]) + p.weight_offset : 0.0f;
      if constexpr (kBigCta) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) wr[i * VEC + j] = wf[j];
      } else {
#pragma unroll
        for (int q = 0; q < VEC / 4; ++q)
          sts_f4(my_w(i * (VEC / 4) + q), make_float4(wf[4 * q], wf[4 * q + 1], wf[4 * q + 2], wf[4 * q + 3]));
      }
    }
  }
  // This CTA's (cluster's) row blocks: every step-th from first, below
  // p.row_blocks (shifted: of its class's blocks, the class's CTAs -- or
  // clusters -- in turn).
  // (The aligned clusters' forms as they were: through the shifted ones',
  // the bf16 / fp16 64-register clustered tiles spilled 8 bytes, ptxas -v.)
  const int lg = kShift ? p.shift_log2 : 0;
  const int64_t first = !kCluster ? int64_t(blockIdx.x >> lg) : kShift ? int64_t(cluster_index() >> lg) : cluster_index();
  const int64_t step = !kCluster ? int64_t(RowClasses::step(gridDim.x, lg))
                       : kShift  ? int64_t(RowClasses::step(unsigned(cluster_count()), lg))
                                 : cluster_count();
  for (int s = 0; s < stages - 1; ++s) issue(first + s * step, uint32_t(s) * stage_bytes);

  float aw[E], ab[kRegSums ? E : 1];
#pragma unroll
  for (int e = 0; e < E; ++e) aw[e] = 0.0f;
#pragma unroll
  for (int e = 0; e < (kRegSums ? E : 1); ++e) ab[e] = 0.0f;
  static_assert(E % 4 == 0, "db sums in float4s");
  if (db && !kRegSums) {
#pragma unroll
    for (int q = 0; q < E / 4; ++q) sts_f4(my_db(q), make_float4(0.f, 0.f, 0.f, 0.f));
  }
  DT* scratch = reinterpret_cast<DT*>(smem);
  int parity = 0;
  uint32_t cur = 0;  // this row block's stage offset
  const uint32_t wrap = uint32_t(stages) * stage_bytes;
  // g = dy * (w + weight_offset) of vector i, in place.
  auto scale = [&](int i, float (&gf)[VEC]) {
    if constexpr (kWeight && kBigCta) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) gf[j] *= wr[i * VEC + j];
    } else if constexpr (kWeight) {
#pragma unroll
      for (int q = 0; q < VEC / 4; ++q) {
        const float4 wv = lds_f4(my_w(i * (VEC / 4) + q));
        gf[4 * q] *= wv.x;
        gf[4 * q + 1] *= wv.y;
        gf[4 * q + 2] *= wv.z;
        gf[4 * q + 3] *= wv.w;
      }
    }
  };
  for (int64_t blk = first; blk < p.row_blocks; blk += step) {
    // The stage this thread read in the last iteration takes the block
    // stages - 1 ahead.
    issue(blk + int64_t(stages - 1) * step, cur == 0 ? wrap - stage_bytes : cur - stage_bytes);
    wait();
    const auto g = geom();
    const int64_t row = class_row(blk * g.teams + g.team_id);
    const bool active = row < p.rows;
    float rstd = 0.0f, mean = 0.0f, dot = 0.0f, gsum = 0.0f;
    // (kBigCta) this row's h and dy vectors, read once.
    RawVec<T, VEC> hk[kBigCta ? VPT : 1], dk[kBigCta ? VPT : 1];
    // Adds vector i's terms to the row's sums.
    auto dot_vec = [&](int i, const float (&hf)[VEC], float (&gf)[VEC]) {
      scale(i, gf);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        dot = fmaf(gf[j], hf[j] - mean, dot);  // (times rstd after the reduction)
        if constexpr (kCentre) gsum += gf[j];
      }
    };
    if (active && copies_stats()) {
      asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(rstd) : "r"(my_stat() + cur));
      if constexpr (kCentre) asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(mean) : "r"(my_stat() + cur + 4));
    }
    if (p.lead_stats) {  // (the whole warp, converged here; a team's lanes share its `active`)
      const int leader = int(threadIdx.x & 31u & ~lead_mask());
      rstd = __shfl_sync(0xffffffffu, rstd, leader);
      if constexpr (kCentre) mean = __shfl_sync(0xffffffffu, mean, leader);
    }
    if (active) {
      if constexpr (kBigCta) {
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
          if (g.col(i) >= g.cols) break;  // (past the row: never copied, never read below)
          lds<16>(my0 + cur + uint32_t(i) * vstride, hk[i].w);
          lds<16>(my0 + cur + uint32_t(VPT + i) * vstride, dk[i].w);
          float hf[VEC], gf[VEC];
          hk[i].widen(hf);
          dk[i].widen(gf);
          dot_vec(i, hf, gf);
        }
      }
      // (Not unrolled: the vectors' loads hoisted together spilled the
      // 16-bit tiles; the data is in shared memory, a few cycles away.)
#pragma unroll 1
      for (int i = 0; i < (kBigCta ? 0 : VPT); ++i) {
        if (g.col(i) >= g.cols) break;  // (past the row: never copied)
        float hf[VEC], gf[VEC];
        if constexpr (kShift) {
          // A shifted row's head (what precedes the row in its first
          // 16-byte piece: any bits) zeroed, so that it adds nothing to the
          // sums; its dx is not stored.
          RawVec<T, VEC> hv, dv;
          lds<16>(my0 + cur + uint32_t(i) * vstride, hv.w);
          lds<16>(my0 + cur + uint32_t(VPT + i) * vstride, dv.w);
          const int lo = i == 0 ? g.lo(0) : 0;
          hv.fill_head(lo, 0u);
          dv.fill_head(lo, 0u);
          hv.widen(hf);
          dv.widen(gf);
        } else {
          lds_vec<T, VEC>(my0 + cur + uint32_t(i) * vstride, hf);
          lds_vec<T, VEC>(my0 + cur + uint32_t(VPT + i) * vstride, gf);
        }
        dot_vec(i, hf, gf);
      }
    }
    // The partial vector's zero-filled tail adds nothing to the sums.
    DT dots = team_reduce<typename Dots::Op>(Dots::make(dot, gsum), g.team, scratch + 32 * parity);
    if constexpr (kCluster) dots = cx.reduce(dots, p.cluster, crank);
    parity ^= 1;
    if (active) {
      // (1 / N from the host: a division a row is ~15 instructions, a slow
      // path and a call; a register held across the loop spilled.)
      const float c = Dots::gh(dots) * rstd * p.inv_cols, gm = kCentre ? Dots::g_mean(dots, 1.0f) * p.inv_cols : 0.0f;
      const int s = shift();
      T* dxrow = static_cast<T*>(p.dx) + row * p.dx_stride - s;
      T* dresrow = p.dres != nullptr ? static_cast<T*>(p.dres) + row * p.dres_stride - s : nullptr;
      asm volatile("" : "+l"(dxrow), "+l"(dresrow));  // (as in issue)
      // Vector i's dx (and dresidual) and its sums; kWhole: the vector lies
      // inside the row -- straight 16-byte stores (the checked stores, with
      // the element count recomputed for each, cost ~10 instructions a
      // vector a row, SASS of the fp32 LayerNorm tile, CUDA 13.0). Tested
      // a vector, not for the thread's whole tile: a thread short of its
      // last vector (the power-of-two CTAs' threads past the row's end,
      // 3/4 of fp32 5120's) takes the fast path for the vectors it holds.
      // Not in the 16-bit 64-register tiles nor the 4-vector one, where
      // the second copy of the body spilled 4-8 bytes (ptxas -v, CUDA 13.0).
      constexpr bool kSplitOut = sizeof(T) == 4 || (kRegSums && VPT == 2);
      auto emit = [&](int i, auto whole) {
        constexpr bool kWhole = decltype(whole)::value;
        float hf[VEC], df[VEC], out[VEC];
        if constexpr (kBigCta) {
          hk[i].widen(hf);
          dk[i].widen(df);
        } else {
          lds_vec<T, VEC>(my0 + cur + uint32_t(i) * vstride, hf);
          lds_vec<T, VEC>(my0 + cur + uint32_t(VPT + i) * vstride, df);
        }
        if (ntens == 3) {
          lds_vec<T, VEC>(my0 + cur + uint32_t(2 * VPT + i) * vstride, out);
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) out[j] = 0.0f;
        }
        // Four elements at a time (their weights one float4).
#pragma unroll
        for (int q = 0; q < VEC / 4; ++q) {
          float wq[4] = {1.0f, 1.0f, 1.0f, 1.0f};
          if constexpr (kWeight && kBigCta) {
#pragma unroll
            for (int u = 0; u < 4; ++u) wq[u] = wr[i * VEC + 4 * q + u];
          } else if constexpr (kWeight) {
            const float4 wv = lds_f4(my_w(i * (VEC / 4) + q));
            wq[0] = wv.x;
            wq[1] = wv.y;
            wq[2] = wv.z;
            wq[3] = wv.w;
          }
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int j = 4 * q + u;
            const float xh = (hf[j] - mean) * rstd;
            const float gj = kWeight ? df[j] * wq[u] : df[j];
            out[j] = fmaf(rstd, fmaf(-xh, c, gj - gm), out[j]);
            aw[i * VEC + j] = fmaf(df[j], xh, aw[i * VEC + j]);
          }
        }
        if constexpr (kRegSums) {
          if (db) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) ab[i * VEC + j] += df[j];
          }
        } else if (db) {
#pragma unroll
          for (int q = 0; q < VEC / 4; ++q) {
            float4 b = lds_f4(my_db(i * (VEC / 4) + q));
            b.x += df[4 * q];
            b.y += df[4 * q + 1];
            b.z += df[4 * q + 2];
            b.w += df[4 * q + 3];
            sts_f4(my_db(i * (VEC / 4) + q), b);
          }
        }
        RawVec<T, VEC> o;
        o.narrow(out);
        if constexpr (kWhole) {
          o.store(dxrow + g.col(i));
          if (dresrow != nullptr) o.store(dresrow + g.col(i));
        } else {
          g.store(o, dxrow, i);
          if (dresrow != nullptr) g.store(o, dresrow, i);
        }
      };
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        if (kSplitOut && g.inside(i) && g.lo(i) == 0) emit(i, std::true_type{});
        else if (g.valid(i) > g.lo(i)) emit(i, std::false_type{});
      }
    }
    cur = cur + stage_bytes == wrap ? 0 : cur + stage_bytes;
  }
  cp_async_wait_all();
  if constexpr (kCluster) cx.finish();
  if (!grads) return;
  const auto g = geom();
  // This CTA's (cluster's) partial row (shifted: its element c - s for
  // column c).
  const int64_t part = !kShift ? first : kCluster ? int64_t(cluster_index()) : int64_t(blockIdx.x);
  float2* out = p.partial + part * p.cols - shift();
  // dw and db of this thread's element e.
  auto sums = [&](int e, float& w, float& b) {
    w = aw[e];
    if constexpr (kRegSums) {
      b = ab[e];
    } else {
      const float4 v = db ? lds_f4(my_db(e / 4)) : make_float4(0.f, 0.f, 0.f, 0.f);
      b = e % 4 == 0 ? v.x : e % 4 == 1 ? v.y : e % 4 == 2 ? v.z : v.w;
    }
  };
  if (g.teams == 1) {
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      const int n = g.valid(i), lo = g.lo(i);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float w, b;
        sums(i * VEC + j, w, b);
        if (j >= lo && j < n) out[g.col(i) + j] = make_float2(w, b);
      }
    }
    return;
  }
  // Several teams own the same columns: their sums, through the stages
  // ([E][threads] pairs), added in team order by team 0.
  __syncthreads();  // every thread is past its last stage read
  const uint32_t acc0 = smem_addr(smem) + kRMSNormBwdScratchBytes;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    float w, b;
    sums(e, w, b);
    const uint32_t a = acc0 + (uint32_t(e) * nthr + threadIdx.x) * 8;
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(w), "f"(b) : "memory");
  }
  __syncthreads();
  if (g.team_id != 0) return;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int n = g.valid(i), lo = g.lo(i);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if (j < lo || j >= n) continue;
      float2 sum = make_float2(0.0f, 0.0f);
      for (int k = 0; k < g.teams; ++k) {
        float v[2];
        lds<8>(acc0 + (uint32_t(i * VEC + j) * nthr + uint32_t(k * g.team + g.t)) * 8, v);
        sum.x += v[0];
        sum.y += v[1];
      }
      out[g.col(i) + j] = sum;
    }
  }
}

// ---------------------------------------------------------------------------
// Element i of a run-time-dtype array.
__device__ __forceinline__ float load_elem(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::kFloat32: return core::ldg_elem(static_cast<const float*>(base) + i);
    case DType::kFloat16: return core::to_float(core::ldg_elem(static_cast<const __half*>(base) + i));
    default: return core::to_float(core::ldg_elem(static_cast<const __nv_bfloat16*>(base) + i));
  }
}
__device__ __forceinline__ void store_elem(void* base, DType dt, int64_t i, float v) {
  switch (dt) {
    case DType::kFloat32: core::stg_elem(static_cast<float*>(base) + i, v); break;
    case DType::kFloat16: core::stg_elem(static_cast<__half*>(base) + i, core::from_float<__half>(v)); break;
    default: core::stg_elem(static_cast<__nv_bfloat16*>(base) + i, core::from_float<__nv_bfloat16>(v)); break;
  }
}

// ---------------------------------------------------------------------------
// 2. General rows: element-wise, any dtypes, one CTA per row at a time
// (persistent grid), two passes. Column c of a row is handled by thread
// c % blockDim.x, which alone updates column c of its CTA's partial row.
// (Instantiated in src/rmsnorm_bwd.cu.)
template <bool kCentre>
__global__ void __launch_bounds__(256) rmsnorm_bwd_general_kernel(const RMSNormBwdParams p) {
  using namespace core;
  using Dots = NormBwdDots<kCentre>;
  extern __shared__ __align__(16) unsigned char smem[];
  RowReducer<typename Dots::Op> red(smem, int(blockDim.x), 1);
  const int tid = int(threadIdx.x), nthr = int(blockDim.x);
  const int64_t cols = p.cols;
  float2* part = p.partial != nullptr ? p.partial + int64_t(blockIdx.x) * cols : nullptr;
  if (part != nullptr)
    for (int64_t c = tid; c < cols; c += nthr) part[c] = make_float2(0.0f, 0.0f);
  auto weight = [&](int64_t c) { return p.w != nullptr ? load_elem(p.w, p.w_dtype, c) + p.weight_offset : 1.0f; };

  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const float rstd = p.rstd[row], mean = kCentre ? p.mean[row] : 0.0f;
    const int64_t h0 = row * p.h_stride, dy0 = row * p.dy_stride;
    float dot = 0.0f, gsum = 0.0f;
    for (int64_t c = tid; c < cols; c += nthr) {
      const float xh = (load_elem(p.h, p.h_dtype, h0 + c) - mean) * rstd, d = load_elem(p.dy, p.dy_dtype, dy0 + c);
      const float gv = d * weight(c);
      dot = fmaf(gv, xh, dot);
      gsum += gv;
      if (part != nullptr) {
        float2 a = part[c];
        a.x = fmaf(d, xh, a.x);
        a.y += d;
        part[c] = a;
      }
    }
    const auto dots = red.reduce(Dots::make(dot, gsum));
    const float cmean = Dots::gh(dots) / float(cols), gm = Dots::g_mean(dots, float(cols));
    for (int64_t c = tid; c < cols; c += nthr) {
      const float xh = (load_elem(p.h, p.h_dtype, h0 + c) - mean) * rstd, d = load_elem(p.dy, p.dy_dtype, dy0 + c);
      float v = rstd * fmaf(-xh, cmean, d * weight(c) - gm);
      if (p.dres_out != nullptr) v += load_elem(p.dres_out, p.dres_out_dtype, row * p.dres_out_stride + c);
      store_elem(p.dx, p.dx_dtype, row * p.dx_stride + c, v);
      if (p.dres != nullptr) store_elem(p.dres, p.dres_dtype, row * p.dres_stride + c, v);
    }
  }
}

// ---------------------------------------------------------------------------
// 2'. Long general rows (N > kRMSNormBwdSplitMinCols), in two kernels, so
// that neither the grid nor the workspace depends on N:
//   a. rmsnorm_bwd_dot_kernel: dot[row] = sum_c dy * (w + offset) * h, one
//      CTA per row (persistent grid), a fixed-order CTA reduction (LayerNorm:
//      the pair (sum g * (h - mean), sum g) at dot[2 row]);
//   b. rmsnorm_bwd_split_kernel: a CTA owns kRMSNormBwdSplitCols columns and
//      a group of rows; it writes dx for them and holds its columns' dw / db
//      sums in registers, then writes them as one partial row (group g's).
// h and dy are read twice (10 bytes an element for 16-bit rows where the
// single-pass kernels move 6): the price of no N-sized state per CTA.
// The general kernel's grid is capped by its workspace (256 MB of partial
// rows, src/rmsnorm_bwd.cu): past N = 128K that is under 2 CTAs an SM (N = 1M:
// 32 CTAs, 0.5% of copy, bench/results/2026-11-30-rmsnorm-bwd-359f60f.md).
constexpr int64_t kRMSNormBwdSplitMinCols = int64_t(128) << 10;
constexpr int kRMSNormBwdSplitThreads = 256;
constexpr int kRMSNormBwdSplitPerThread = 4;
constexpr int64_t kRMSNormBwdSplitCols = int64_t(kRMSNormBwdSplitThreads) * kRMSNormBwdSplitPerThread;

template <bool kCentre>
__global__ void __launch_bounds__(512) rmsnorm_bwd_dot_kernel(const RMSNormBwdParams p, float* dot) {
  using namespace core;
  using Dots = NormBwdDots<kCentre>;
  extern __shared__ __align__(16) unsigned char smem[];
  RowReducer<typename Dots::Op> red(smem, int(blockDim.x), 1);
  const int64_t tid = threadIdx.x, nthr = blockDim.x;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t h0 = row * p.h_stride, dy0 = row * p.dy_stride;
    const float mean = kCentre ? p.mean[row] : 0.0f;
    float acc[4] = {0.f, 0.f, 0.f, 0.f}, gs[4] = {0.f, 0.f, 0.f, 0.f};
    int64_t c = tid;
    for (; c + 3 * nthr < p.cols; c += 4 * nthr) {
      float hv[4], dv[4], wv[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        hv[u] = load_elem(p.h, p.h_dtype, h0 + c + u * nthr);
        dv[u] = load_elem(p.dy, p.dy_dtype, dy0 + c + u * nthr);
        wv[u] = p.w != nullptr ? load_elem(p.w, p.w_dtype, c + u * nthr) + p.weight_offset : 1.0f;
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        acc[u] = fmaf(dv[u] * wv[u], hv[u] - mean, acc[u]);
        if constexpr (kCentre) gs[u] = fmaf(dv[u], wv[u], gs[u]);
      }
    }
    for (; c < p.cols; c += nthr) {
      const float w = p.w != nullptr ? load_elem(p.w, p.w_dtype, c) + p.weight_offset : 1.0f;
      const float gv = load_elem(p.dy, p.dy_dtype, dy0 + c) * w;
      acc[0] = fmaf(gv, load_elem(p.h, p.h_dtype, h0 + c) - mean, acc[0]);
      gs[0] += gv;
    }
    const auto d = red.reduce(Dots::make((acc[0] + acc[1]) + (acc[2] + acc[3]), (gs[0] + gs[1]) + (gs[2] + gs[3])));
    if (tid == 0) {
      if constexpr (kCentre) reinterpret_cast<float2*>(dot)[row] = d;
      else dot[row] = d;
    }
  }
}

// grid = splits x groups (blockIdx.x = group * splits + split); group g
// covers rows [g * rows_per_group, (g + 1) * rows_per_group).
template <bool kCentre>
__global__ void __launch_bounds__(kRMSNormBwdSplitThreads, 4) rmsnorm_bwd_split_kernel(const RMSNormBwdParams p,
                                                                                    const float* dot,
                                                                                    int64_t splits,
                                                                                    int64_t rows_per_group) {
  constexpr int K = kRMSNormBwdSplitPerThread;
  const int64_t split = blockIdx.x % splits, group = blockIdx.x / splits;
  const int64_t c0 = split * kRMSNormBwdSplitCols + threadIdx.x;  // this thread's columns: c0 + k * threads
  float w[K], aw[K], ab[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t c = c0 + k * kRMSNormBwdSplitThreads;
    w[k] = c < p.cols && p.w != nullptr ? load_elem(p.w, p.w_dtype, c) + p.weight_offset : 1.0f;
    aw[k] = ab[k] = 0.0f;
  }
  const int64_t r1 = min(p.rows, (group + 1) * rows_per_group);
  for (int64_t row = group * rows_per_group; row < r1; ++row) {
    const float rstd = p.rstd[row], mean = kCentre ? p.mean[row] : 0.0f;
    const float cm = (kCentre ? dot[2 * row] : dot[row]) * rstd / float(p.cols);
    const float gm = kCentre ? dot[2 * row + 1] / float(p.cols) : 0.0f;
    float hv[K], dv[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c = c0 + k * kRMSNormBwdSplitThreads;
      hv[k] = c < p.cols ? load_elem(p.h, p.h_dtype, row * p.h_stride + c) : 0.0f;
      dv[k] = c < p.cols ? load_elem(p.dy, p.dy_dtype, row * p.dy_stride + c) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c = c0 + k * kRMSNormBwdSplitThreads;
      if (c >= p.cols) continue;
      const float xh = (hv[k] - mean) * rstd;
      float v = rstd * fmaf(-xh, cm, dv[k] * w[k] - gm);
      if (p.dres_out != nullptr) v += load_elem(p.dres_out, p.dres_out_dtype, row * p.dres_out_stride + c);
      store_elem(p.dx, p.dx_dtype, row * p.dx_stride + c, v);
      if (p.dres != nullptr) store_elem(p.dres, p.dres_dtype, row * p.dres_stride + c, v);
      aw[k] = fmaf(dv[k], xh, aw[k]);
      ab[k] += dv[k];
    }
  }
  if (p.partial == nullptr) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t c = c0 + k * kRMSNormBwdSplitThreads;
    if (c < p.cols) p.partial[group * p.cols + c] = make_float2(aw[k], ab[k]);
  }
}

// ---------------------------------------------------------------------------
// 2''. Rows past a cluster's capacity, read once (h, dy in one dtype, 16-byte
// aligned; rmsnorm_bwd_grid_kernel). A cooperative grid of `groups` groups
// of `ranks` CTAs, one CTA an SM: rank r of every group owns the same tile
// of columns (grid_tile_vecs vectors, at most kNormBwdGridElems elements a
// thread), holds its weight and its dw / db sums in registers, and group g
// takes rows g, g + groups, ... in order, R of its rows a step (R = 1, or 2
// for 16-bit rows: the step's barriers and exchange paid once for both).
// Step i of a group:
//   A. the tiles of h and dy of its R rows arrive by bulk copy in a ring of
//      `stages` shared-memory stages, a row a stage (each issued `stages`
//      rows ahead); each CTA reduces its tiles' dots (R rows' in one block
//      reduction) and publishes them (core::GridExchange, one word a dot);
//   B. `lag` steps later it collects the step's dots (by then every rank
//      has usually published them), writes dx from the same stages and adds
//      the tiles' dy * xhat and dy to its sums, then refills the stages.
// h and dy cross HBM once (6 bytes an element for 16-bit rows, against the
// split path's 10); the exchange costs a 64-bit store a CTA and a dot (R
// or 2R a step) and as many loads a rank, from L2, spread over the CTA. At the end each CTA writes its tile of its group's
// partial row, which kernel 3 adds up.
// Layout constants: core/config.hpp (kNormGridCta*, kNormGridHeader).
constexpr int kNormBwdGridThreads = kNormGridCtaThreads;
constexpr int kNormBwdGridElems = kNormGridCtaElems;  // elements a thread of a row
constexpr uint32_t kNormBwdGridBarOffset = kNormGridBarOffset;
constexpr uint32_t kNormBwdGridValsOffset = kNormGridValsOffset;
constexpr uint32_t kNormBwdGridHeaderBytes = uint32_t(kNormGridHeader);  // then the stages
// The last thread publishes; every thread loads one collected word
// (kNormBwdGridMaxStepWords: the chooser keeps a step's words within it).
constexpr int kNormBwdGridPublisher = kNormBwdGridThreads - 1;
constexpr int kNormBwdGridLoaders = kNormBwdGridThreads;
static_assert(kNormBwdGridMaxStepWords + kNormBwdGridThreads / 32 * 4 <= kNormGridMaxRanks * 4,
              "grid backward header: the collected words, then a warp's copy of a step's dots");
static_assert(kNormBwdGridMaxStepWords <= kNormBwdGridLoaders && 2 * kNormGridMaxRanks <= kNormBwdGridMaxStepWords,
              "grid backward: a word a loader, and a LayerNorm row a step of the most ranks within it");
static_assert(kNormGridScratchBytes == kRMSNormBwdScratchBytes && 8 * kNormGridStagesMax <= 128,
              "grid kernel header: scratch, the mbarriers, the collected words");
static_assert(2 * 32 * sizeof(float4) <= kRMSNormBwdScratchBytes, "grid kernel scratch: block_reduce's [2][32] partials");

// A step's dots: (sum g * xhat-numerator, sum g) of R rows -- one word a dot
// for RMSNorm's R, two a row for LayerNorm -- as one reduction's value.
template <bool kCentre, int R>
struct GridStepDots {
  static constexpr int kPer = kCentre ? 2 : 1, kWords = kPer * R;
  using Op = std::conditional_t<kWords == 1, core::SumOp,
                                std::conditional_t<kWords == 2, core::SumPairOp, core::SumQuadOp>>;
  using T = typename Op::T;
  using Words = core::GridWords<T>;
  static_assert(Words::kWords == kWords, "a word a dot");
  // Row r's dots into v, and out of it (the second 0 for RMSNorm). r is a
  // run-time index (the kernel keeps its row loop rolled: unrolled, the
  // second row's loads are hoisted over the first row's arithmetic and the
  // fp32-weight instances spill), so these select rather than index.
  __device__ __forceinline__ static void set(T& v, int r, float gh, float g) {
    float w[kWords];
    Words::put(v, w);
#pragma unroll
    for (int q = 0; q < R; ++q)
      if (q == r) {
        w[q * kPer] = gh;
        if constexpr (kCentre) w[q * kPer + 1] = g;
      }
    v = Words::get(w);
  }
  __device__ __forceinline__ static float2 row(T v, int r) {
    float w[kWords];
    Words::put(v, w);
    float2 out = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int q = 0; q < R; ++q)
      if (q == r) out = make_float2(w[q * kPer], kCentre ? w[q * kPer + kPer - 1] : 0.0f);
    return out;
  }
};

template <typename T, typename Tw, bool kCentre, int R>
__global__ void __launch_bounds__(kNormBwdGridThreads, 1) rmsnorm_bwd_grid_kernel(const RMSNormBwdParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  constexpr int KV = kNormBwdGridElems / VEC;  // vectors a thread
  constexpr bool kWeight = !std::is_void_v<Tw>;
  using Dots = GridStepDots<kCentre, R>;
  using DT = typename Dots::T;
  using Op = typename Dots::Op;
  using V = RawVec<T, VEC>;
  extern __shared__ __align__(128) unsigned char smem[];
  DT* scratch = reinterpret_cast<DT*>(smem);  // [2][32] block partials
  float* vals = reinterpret_cast<float*>(smem + kNormBwdGridValsOffset);  // collected words
  const uint32_t bar0 = smem_addr(smem) + kNormBwdGridBarOffset;
  const uint32_t stage0 = smem_addr(smem) + kNormBwdGridHeaderBytes;

  // A 2-D grid (launch_rmsnorm_bwd_grid): rank in x, group in y.
  const int ranks = p.grid_ranks, rank = int(blockIdx.x), tid = int(threadIdx.x);
  const int64_t group = int64_t(blockIdx.y), groups = p.grid_groups, cols = p.cols;
  const int64_t nvec = (cols + VEC - 1) / VEC, nfull = cols / VEC;
  const int64_t vb = int64_t(rank) * p.grid_tile_vecs, ve = min(nvec, vb + p.grid_tile_vecs);
  const int64_t bulk_vecs = max(int64_t(0), min(ve, nfull) - vb);  // whole vectors, copied in bulk
  const uint32_t tile_bytes = uint32_t(p.grid_tile_vecs) * 16, bulk_bytes = uint32_t(bulk_vecs) * 16;
  const int stages = p.stages, lag = p.grid_lag;
  // Rows of this group (fewer than 2^31: choose_norm_bwd_grid_config).
  const int rows_here = group < p.rows ? int((p.rows - group + groups - 1) / groups) : 0;
  const GridExchange<Op> ex{p.exchange + group * GridExchange<Op>::words(ranks, p.grid_steps), ranks, rank};
  const T* h = static_cast<const T*>(p.h);
  const T* dy = static_cast<const T*>(p.dy);

  // This thread's vectors of the tile (core::GridTileVecs; past the tile:
  // zero). Every thread of every rank but the last has all KV in the stage
  // (`full`): the hot path, with no test a vector and every address a
  // fixed offset from a row's base. (The first version tested and rebuilt
  // each vector's 64-bit address a row and divided by cols: ~1310
  // instructions a warp a step for 32 elements, the step issue-bound at
  // 0.58 a scheduler-cycle and DRAM 55.8%; bf16 RMSNorm 1M, ncu, H200,
  // cf54ee3.)
  constexpr int TH = kNormBwdGridThreads;
  const auto tv = GridTileVecs<KV, TH>::make(tid, int(bulk_vecs), int(ve - vb), int(cols - nfull * VEC));
  const int nin = tv.nin, nval = tv.nval, part = tv.part;
  const bool full = nin == KV;
  // (Vector k is whole for k < nin, the partial one for nin <= k < nval.
  // Tested as such at each use: a per-k count of valid elements, kept for
  // the partial paths, spilled; ptxas -v.)
  const int c0 = int(vb + tid) * VEC;  // this thread's first column (a grid row has fewer than 2^31)

  float w[KV][VEC], aw[KV][VEC], ab[KV][VEC];
#pragma unroll
  for (int k = 0; k < KV; ++k) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) aw[k][e] = ab[k][e] = 0.0f;
    if constexpr (kWeight) {
      RawVec<Tw, VEC> wv;
      wv.zero();
      const Tw* wp = static_cast<const Tw*>(p.w) + c0 + k * TH * VEC;
      if (k < nval) {
        if (k < nin) wv.load(wp);
        else wv.load_partial(wp, part);
      }
      wv.widen(w[k]);
#pragma unroll
      for (int e = 0; e < VEC; ++e) w[k][e] += p.weight_offset;
    }
  }
  // g = dy * (w + weight_offset); dy alone without a weight.
  auto gval = [&](int k, int e, float d) {
    if constexpr (kWeight) return d * w[k][e];
    else return (void)k, (void)e, d;
  };

  // Row j of this group into stage s = j % stages (thread 0).
  auto issue = [&](int j, int s) {
    const int64_t row = fresh_i64(group) + int64_t(j) * groups;
    const int64_t c = vb * VEC;
    const uint32_t bar = bar0 + 8 * uint32_t(s), xs = stage0 + uint32_t(s) * 2 * tile_bytes;
    mbar_arrive_expect_tx(bar, 2 * bulk_bytes);
    if (bulk_bytes > 0) {
      bulk_g2s(xs, h + row * p.h_stride + c, bulk_bytes, bar);
      bulk_g2s(xs + tile_bytes, dy + row * p.dy_stride + c, bulk_bytes, bar);
    }
  };
  // Vector k of this thread in row `row` (stage s; zero past the tile).
  // whole: this thread's vectors all lie in the stage.
  auto load_vec = [&](bool whole, int s, int64_t row, int k, V& xv, V& dv) {
    const uint32_t a = stage0 + uint32_t(s) * 2 * tile_bytes + uint32_t(tid) * 16u + uint32_t(k * TH * 16);
    const auto t = whole ? tv : tv.fresh();
    if (whole || k < t.nin) {
      lds<16>(a, xv.w);
      lds<16>(a + tile_bytes, dv.w);
    } else {
      xv.zero();
      dv.zero();
      if (k < t.nval) {
        const int64_t r = fresh_i64(row);
        xv.load_partial(h + r * p.h_stride + nfull * VEC, part);
        dv.load_partial(dy + r * p.dy_stride + nfull * VEC, part);
      }
    }
  };

  grid_ring_start(tid, stages, rows_here, bar0, issue);

  // Phase A's stage and its parity; phase B's stage. Rows j of the group
  // go to stages j % stages in order, one each.
  // Packed in one register, bits 0-7 phase A's stage, 8-15 phase B's,
  // 16 phase A's parity (three registers held over the loop spilled in the
  // 16-bit instances; ptxas -v).
  uint32_t ring = 0;
  const int steps = (rows_here + R - 1) / R;
  // dres_out, the residual gradient added to dx: a step's lines are
  // prefetched into L1 before the collect (no register held: two rows'
  // vectors held over the collect spilled, ptxas -v) and each vector is
  // loaded where it is added.
  const T* res = static_cast<const T*>(p.dres_out);
  auto prefetch_res = [&](int64_t row) {
    const T* rp = res + fresh_i64(row) * p.dres_out_stride + c0;
#pragma unroll
    for (int k = 0; k < KV; ++k)
      if (k < nval) prefetch_l1(rp + k * TH * VEC);
  };
  // The collect's word a thread takes (every rank's of a step among the
  // CTA: kNormBwdGridMaxStepWords), issued before phase A so that its L2
  // round trip overlaps phase A, as the grid forward's: bf16 RMSNorm 1M dx
  // 494-500 us against 563 with the loads at the top of phase B, LayerNorm
  // 573-587 against 604, fp32 RMSNorm 841-858 against 883 (rmsnorm_bwd_sweep,
  // H200, f7d0703 built both ways, the same run;
  // bench/results/2026-12-03-norm-bwd-grid-diet.md). fp16 rows load it at
  // the top of phase B: held over phase A, the word spilled in their
  // instances (ptxas -v, sm_90a, CUDA 13.0; bf16 and fp32 spill-free).
  constexpr int kGather = 1;
  constexpr bool kEarlyCollect = !std::is_same_v<T, __half>;
  for (int i = 0; i < steps + lag && rows_here > 0; ++i) {
    const int q = i - lag;
    uint64_t pending[kGather];
    if (kEarlyCollect && q >= 0) ex.template gather_issue<kGather>(q, kNormBwdGridLoaders, pending);
    // The step's per-row scalars, prefetched into L1 first so that their
    // round trips overlap phase A's work and the collect instead of
    // following them (after the collect, 24d0feb's rows=1 kernel lost
    // 0c39bc9's 77.4% -- fp32 RMSNorm 1M -- to 68.9%), and loaded where
    // used: held in registers over phase A, they spilled (ptxas -v).
    if (tid == 32) {
      const int64_t g = fresh_i64(group);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int ja = i * R + r, jb = q * R + r;
        if (kCentre && i < steps && ja < rows_here) prefetch_l1(p.mean + g + int64_t(ja) * groups);
        if (q >= 0 && jb < rows_here) {
          prefetch_l1(p.rstd + g + int64_t(jb) * groups);
          if constexpr (kCentre) prefetch_l1(p.mean + g + int64_t(jb) * groups);
        }
      }
    }
    if (i < steps) {  // A: publish step i's dots
      DT step_dots = Op::identity();
#pragma unroll 1
      for (int r = 0; r < R; ++r) {
        const int j = i * R + r;
        if (R > 1 && j >= rows_here) break;  // the group's last step: fewer rows
        const int64_t row = group + int64_t(j) * groups;
        const int s = int(ring & 0xffu);
        mbar_wait(bar0 + 8 * uint32_t(s), (ring >> 16) & 1u);
        ring = s + 1 == stages ? (ring & ~0xffu) ^ (1u << 16) : ring + 1u;
        const float mean = kCentre ? __ldg(p.mean + row) : 0.0f;
        constexpr int CH = VEC;  // independent chains, then a fixed tree (the same bits every run)
        float gh[CH], gs[CH];
#pragma unroll
        for (int e = 0; e < CH; ++e) gh[e] = gs[e] = 0.0f;
        auto dots = [&](bool whole) {
#pragma unroll
          for (int k = 0; k < KV; ++k) {
            V xv, dv;
            load_vec(whole, s, row, k, xv, dv);
            float x[VEC], d[VEC];
            xv.widen(x);
            dv.widen(d);
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
              const float g = gval(k, e, d[e]);
              gh[e % CH] = fmaf(g, kCentre ? x[e] - mean : x[e], gh[e % CH]);
              if constexpr (kCentre) gs[e % CH] += g;
            }
          }
        };
        if (full) dots(true);
        else dots(false);
        for (int hh = CH / 2; hh > 0; hh /= 2)
          for (int e = 0; e < hh; ++e) gh[e] += gh[e + hh], gs[e] += gs[e + hh];
        Dots::set(step_dots, r, gh[0], kCentre ? gs[0] : 0.0f);
      }
      const DT dots = block_reduce<Op>(step_dots, scratch + 32 * (i & 1));
      if (tid == kNormBwdGridPublisher) ex.publish(i, dots);
    }
    if (q >= 0) {  // B: step q's dx and weight-gradient terms
      if (res != nullptr)
        for (int r = 0; r < R; ++r)
          if (q * R + r < rows_here) prefetch_res(group + int64_t(q * R + r) * groups);
      if (!kEarlyCollect) ex.template gather_issue<kGather>(q, kNormBwdGridLoaders, pending);
      ex.template gather_finish<kGather>(q, pending, vals, kNormBwdGridLoaders);  // one barrier
      const DT t = ex.combine(vals);
      // A multi-row step's dots wait in shared memory, a copy a warp after
      // the collected words, each row's read where it is used (held in
      // registers over the rows, LayerNorm's four spilled; ptxas -v).
      const uint32_t t_at = smem_addr(vals) + 4u * uint32_t(kNormBwdGridMaxStepWords + (tid >> 5) * Dots::kWords);
      if (R > 1) {
        float tw[Dots::kWords];
        Dots::Words::put(t, tw);
        if ((tid & 31) == 0)
#pragma unroll
          for (int k = 0; k < Dots::kWords; ++k) sts_f32(t_at + 4u * k, tw[k]);
        __syncwarp();
      }
#pragma unroll 1
      for (int r = 0; r < R; ++r) {
        const int j = q * R + r;
        if (R > 1 && j >= rows_here) break;
        const int64_t row = group + int64_t(j) * groups;
        const int s = int((ring >> 8) & 0xffu);
        ring = s + 1 == stages ? ring & ~0xff00u : ring + 0x100u;
        const float rstd = __ldg(p.rstd + row), mean = kCentre ? __ldg(p.mean + row) : 0.0f;
        const float2 rt = R == 1 ? Dots::row(t, r)
                                 : make_float2(lds_f32(t_at + 4u * uint32_t(r * Dots::kPer)),
                                               kCentre ? lds_f32(t_at + 4u * uint32_t(r * Dots::kPer + 1)) : 0.0f);
        // dx = rstd * (g - gm - xhat * cm): cm = mean(g * xhat), gm = mean(g).
        const float cm = rt.x * rstd * p.inv_cols, gm = kCentre ? rt.y * p.inv_cols : 0.0f;
        const float nmr = -mean * rstd;  // xhat = x * rstd + nmr
        T* dxp = static_cast<T*>(p.dx) + row * p.dx_stride + c0;
        T* drp = p.dres != nullptr ? static_cast<T*>(p.dres) + row * p.dres_stride + c0 : nullptr;
        auto write = [&](bool whole) {
#pragma unroll
          for (int k = 0; k < KV; ++k) {
            V xv, dv;
            load_vec(whole, s, row, k, xv, dv);
            float x[VEC], d[VEC], o[VEC];
            xv.widen(x);
            dv.widen(d);
            const auto t = whole ? tv : tv.fresh();
            if (res != nullptr) {
              const T* rp = res + row * p.dres_out_stride + c0 + k * TH * VEC;
              V rv;
              rv.zero();
              if (whole || k < t.nin) rv.load(rp);
              else if (k < t.nval) rv.load_partial(rp, part);
              rv.widen(o);
            }
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
              const float xh = kCentre ? fmaf(x[e], rstd, nmr) : x[e] * rstd;
              const float g = kCentre ? gval(k, e, d[e]) - gm : gval(k, e, d[e]);
              const float v = rstd * fmaf(-xh, cm, g);
              o[e] = res != nullptr ? v + o[e] : v;
              aw[k][e] = fmaf(d[e], xh, aw[k][e]);
              ab[k][e] += d[e];
            }
            V out;
            out.narrow(o);
            if (whole || k < t.nin) {
              out.store(dxp + k * TH * VEC);
              if (drp != nullptr) out.store(drp + k * TH * VEC);
            } else if (k < t.nval) {
              out.store_partial(dxp + k * TH * VEC, part);
              if (drp != nullptr) out.store_partial(drp + k * TH * VEC, part);
            }
          }
        };
        if (full) write(true);
        else write(false);
      }
      __syncthreads();  // every thread has read the step's stages
      if (tid == 0 && q * R + stages < rows_here) {
        fence_proxy_async_smem();
        // Row j sat in stage j % stages: it takes row j + stages.
        for (int r = 0; r < R; ++r) {
          const int j = q * R + r;
          if (j + stages < rows_here) issue(j + stages, j % stages);
        }
      }
    }
  }
  if (p.partial == nullptr) return;
  float2* out = p.partial + group * cols + c0;
#pragma unroll
  for (int k = 0; k < KV; ++k) {
    if (k >= nval) continue;
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      if (k < nin || e < part) out[k * TH * VEC + e] = make_float2(aw[k][e], ab[k][e]);
  }
}

// ---------------------------------------------------------------------------
// 3. dweight / dbias: column c is the sum over partial rows k = 0, 1, ... in
// that order, split into kSlices fixed strided slices added in slice order.
// A CTA of 32 x kSlices threads covers 32 columns.
constexpr int kRMSNormBwdReduceSlices = 8;

template <int = 0>
__global__ void __launch_bounds__(32 * kRMSNormBwdReduceSlices) rmsnorm_bwd_reduce_kernel(
    const float2* partial, int64_t parts, int64_t cols, void* dw, DType dw_dtype, void* db, DType db_dtype) {
  using namespace core;
  __shared__ float2 slice_sum[kRMSNormBwdReduceSlices][32];
  const int lane = int(threadIdx.x) & 31, slice = int(threadIdx.x) >> 5;
  const int64_t c = int64_t(blockIdx.x) * 32 + lane;
  float2 s = make_float2(0.0f, 0.0f);
  if (c < cols) {
#pragma unroll 4
    for (int64_t k = slice; k < parts; k += kRMSNormBwdReduceSlices) {
      const float2 a = partial[k * cols + c];
      s.x += a.x;
      s.y += a.y;
    }
  }
  slice_sum[slice][lane] = s;
  __syncthreads();
  if (slice != 0 || c >= cols) return;
  float2 t = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int k = 0; k < kRMSNormBwdReduceSlices; ++k) {
    t.x += slice_sum[k][lane].x;
    t.y += slice_sum[k][lane].y;
  }
  if (dw != nullptr) store_elem(dw, dw_dtype, c, t.x);
  if (db != nullptr) store_elem(db, db_dtype, c, t.y);
}

// ---------------------------------------------------------------------------
// Launchers; launch_rmsnorm_bwd_reg is instantiated once per dtype
// (src/ops/rmsnorm_bwd_<dt>.cu), the others in src/rmsnorm_bwd.cu.

// *launched: the CTAs launched. Clustered grids are clamped to the clusters
// that can be resident at once (cfg.grid assumes one per SM group, but the
// GPCs bound them: bf16 N = 64K asked for 33 clusters of 4 where 30 fit, and
// the other 3 ran their rows after the rest, at 32% of copy,
// bench/results/2026-11-30-rmsnorm-bwd-359f60f.md); the workspace holds
// cfg.grid / cfg.cluster partial rows, at least as many as are written.
template <typename T, typename Tw, int VPT, bool kCentre>
Status launch_rmsnorm_bwd_reg_tile(const RMSNormBwdParams& p, const RegRowConfig& cfg, int device,
                                   cudaStream_t stream, int64_t* launched) {
  const core::LaunchShape shape{cfg.grid, cfg.threads, cfg.smem_bytes, cfg.cluster, cfg.cluster > 1, launched};
  if (cfg.cluster > 1) {
    return core::launch_cached<rmsnorm_bwd_reg_kernel<T, Tw, VPT, true, kCentre>>(device, shape, stream, p);
  }
  return core::launch_cached<rmsnorm_bwd_reg_kernel<T, Tw, VPT, false, kCentre>>(device, shape, stream, p);
}

using core::TypeTag;

template <DType kX, bool kCentre>
Status launch_rmsnorm_bwd_reg(const RMSNormBwdParams& p, const RegRowConfig& cfg, bool w_f32, int device,
                              cudaStream_t stream, int64_t* launched) {
  using T = typename core::TypeOf<kX>::type;
  constexpr int kMax = rmsnorm_bwd_max_vpt(int(sizeof(T)));
  auto run = [&](auto tw) -> Status {
    using Tw = typename decltype(tw)::type;
    switch (cfg.vpt) {
      case 1: return launch_rmsnorm_bwd_reg_tile<T, Tw, 1, kCentre>(p, cfg, device, stream, launched);
      case 2: return launch_rmsnorm_bwd_reg_tile<T, Tw, 2, kCentre>(p, cfg, device, stream, launched);
      case 4:
        if constexpr (kMax >= 4) return launch_rmsnorm_bwd_reg_tile<T, Tw, 4, kCentre>(p, cfg, device, stream, launched);
        break;
    }
    return {Code::kUnsupported, "rmsnorm backward: no register-resident kernel with " +
                                    std::to_string(cfg.vpt) + " vectors per thread"};
  };
  if (p.w == nullptr) return run(TypeTag<void>{});
  if (w_f32 && !std::is_same_v<T, float>) return run(TypeTag<float>{});
  return run(TypeTag<T>{});
}

// The pipelined kernel's largest tile (vectors a thread) that compiles
// without spilling under its 64-register budget (ptxas -v, CUDA 13.0): 2 for
// every dtype, RMSNorm and LayerNorm; 4 spilled everywhere (24-160 bytes),
// and is built only in small CTAs (rmsnorm_bwd_pipe_max_vpt).
// (LayerNorm's 16-bit rows spilled 8-16 bytes at 2 until the eighteenth
// session's cuts -- 1 / N from the host, bf16 widened by shift and mask,
// opaque row pointers -- and took 1 until then. The weight's dtype does not
// matter: it is fp32 in shared memory in any case.)
constexpr int kRMSNormBwdPipeMaxVpt = 2;

// Whether the pipelined kernel is built for small CTAs (kSmallCta: the db
// sums in registers) for x of this dtype: every instance but fp16
// LayerNorm's, whose one-CTA tiles with a weight spill 4 bytes at the 80
// registers of kNormBwdPipeSmallCtaThreadsPerSm threads an SM (ptxas -v,
// CUDA 13.0; bf16's fit).
constexpr bool rmsnorm_bwd_pipe_small_cta(DType x, bool centre) { return !(x == DType::kFloat16 && centre); }

// The pipelined kernel's largest tile for x of this dtype: 4 vectors for
// 16-bit x in small CTAs (kNormBwdPipeWideVpt, a 128-register budget: every
// such instance compiles at 128 registers with no spill, ptxas -v, CUDA
// 13.0), else kRMSNormBwdPipeMaxVpt.
constexpr int rmsnorm_bwd_pipe_max_vpt(DType x, bool centre) {
  return x != DType::kFloat32 && rmsnorm_bwd_pipe_small_cta(x, centre) ? kNormBwdPipeWideVpt : kRMSNormBwdPipeMaxVpt;
}

// The pipelined kernel (cfg.stages > 0): a persistent grid of cfg.grid CTAs
// (the resident ones); rows past one CTA (cfg.cluster > 1) at 2 vectors a
// thread, or 4 in small CTAs (kNormBwdPipeWideVpt), in clusters, clamped at
// launch to the clusters that fit. shifted: the rows start inside a
// 16-byte vector (kShift; p.shift_log2), the clusters clamped to whole
// classes (a multiple of 1 << p.shift_log2, at least one of each).
template <DType kX, bool kCentre>
Status launch_rmsnorm_bwd_pipe(const RMSNormBwdParams& p, const RegRowConfig& cfg, bool w_f32, bool shifted,
                               int device, cudaStream_t stream, int64_t* launched) {
  using T = typename core::TypeOf<kX>::type;
  core::LaunchShape shape{cfg.grid, cfg.threads, cfg.smem_bytes, cfg.cluster, cfg.cluster > 1, launched};
  if (shifted) shape.cluster_multiple = int64_t(1) << p.shift_log2;
  // The tiles of shifted rows.
  auto shifted_tile = [&](auto tw, auto small_cta) -> Status {
    using Tw = typename decltype(tw)::type;
    constexpr bool kSmallCta = decltype(small_cta)::value;
    constexpr int kWide = kSmallCta && rmsnorm_bwd_pipe_max_vpt(kX, kCentre) == kNormBwdPipeWideVpt
                              ? kNormBwdPipeWideVpt
                              : kRMSNormBwdPipeMaxVpt;
    if (cfg.cluster > 1) {  // (small CTAs only: NormBwdPipeProblem::shifted)
      if constexpr (kSmallCta) {
        if (cfg.vpt == 2) {
          return core::launch_cached<rmsnorm_bwd_pipe_kernel<T, Tw, 2, kCentre, true, true, true>>(
              device, shape, stream, p);
        }
        if constexpr (kWide == kNormBwdPipeWideVpt) {
          if (cfg.vpt == kWide) {
            return core::launch_cached<rmsnorm_bwd_pipe_kernel<T, Tw, kWide, kCentre, true, true, true>>(
                device, shape, stream, p);
          }
        }
      }
      return {Code::kUnsupported, "rmsnorm backward: no clustered pipelined kernel of shifted rows with " +
                                      std::to_string(cfg.vpt) + " vectors per thread" +
                                      (kSmallCta ? "" : " outside small CTAs")};
    }
    if (cfg.vpt == 1) {
      return core::launch_cached<rmsnorm_bwd_pipe_kernel<T, Tw, 1, kCentre, false, kSmallCta, true>>(
          device, shape, stream, p);
    }
    if (cfg.vpt == 2) {
      return core::launch_cached<rmsnorm_bwd_pipe_kernel<T, Tw, 2, kCentre, false, kSmallCta, true>>(
          device, shape, stream, p);
    }
    if constexpr (kWide == kNormBwdPipeWideVpt) {
      if (cfg.vpt == kWide) {
        return core::launch_cached<rmsnorm_bwd_pipe_kernel<T, Tw, kWide, kCentre, false, true, true>>(
            device, shape, stream, p);
      }
    }
    return {Code::kUnsupported, "rmsnorm backward: no pipelined kernel of shifted rows with " +
                                    std::to_string(cfg.vpt) + " vectors per thread"};
  };
  auto tile = [&](auto tw, auto small_cta) -> Status {
    using Tw = typename decltype(tw)::type;
    constexpr bool kSmallCta = decltype(small_cta)::value;
    if (shifted) return shifted_tile(tw, small_cta);
    if (cfg.vpt == 1 && cfg.cluster == 1) {
      return core::launch_cached<rmsnorm_bwd_pipe_kernel<T, Tw, 1, kCentre, false, kSmallCta>>(
          device, shape, stream, p);
    }
    if (cfg.vpt == 2 && cfg.cluster == 1) {
      return core::launch_cached<rmsnorm_bwd_pipe_kernel<T, Tw, 2, kCentre, false, kSmallCta>>(
          device, shape, stream, p);
    }
    if (cfg.vpt == 2) {
      return core::launch_cached<rmsnorm_bwd_pipe_kernel<T, Tw, 2, kCentre, true, kSmallCta>>(device, shape, stream, p);
    }
    if constexpr (kSmallCta && rmsnorm_bwd_pipe_max_vpt(kX, kCentre) == kNormBwdPipeWideVpt) {
      constexpr int kW = kNormBwdPipeWideVpt;
      if (cfg.vpt == kW && cfg.cluster == 1) {
        return core::launch_cached<rmsnorm_bwd_pipe_kernel<T, Tw, kW, kCentre, false, true>>(device, shape, stream, p);
      }
      if (cfg.vpt == kW) {
        return core::launch_cached<rmsnorm_bwd_pipe_kernel<T, Tw, kW, kCentre, true, true>>(device, shape, stream, p);
      }
    }
    return {Code::kUnsupported, "rmsnorm backward: no pipelined kernel with " + std::to_string(cfg.vpt) +
                                    " vectors per thread in clusters of " + std::to_string(cfg.cluster)};
  };
  auto run = [&](auto tw) -> Status {
    using Tw = typename decltype(tw)::type;
    if (cfg.big_cta) {
      if (shifted || cfg.vpt != 2 || cfg.cluster != 1 || cfg.small_cta)
        return {Code::kUnsupported, "rmsnorm backward: the big-CTA kernel takes aligned rows of one CTA at 2 vectors"};
      return core::launch_cached<rmsnorm_bwd_pipe_kernel<T, Tw, 2, kCentre, false, false, false, true>>(device, shape,
                                                                                                        stream, p);
    }
    if (!cfg.small_cta) return tile(tw, std::false_type{});
    if constexpr (rmsnorm_bwd_pipe_small_cta(kX, kCentre)) return tile(tw, std::true_type{});
    return {Code::kUnsupported, "rmsnorm backward: no small-CTA pipelined kernel for this dtype"};
  };
  if (p.w == nullptr) return run(TypeTag<void>{});
  if (w_f32 && !std::is_same_v<T, float>) return run(TypeTag<float>{});
  return run(TypeTag<T>{});
}

// The grid kernel (2''; cfg from choose_norm_bwd_grid_config), a
// cooperative launch after the exchange logs at p.exchange
// (cfg.exchange_bytes) are zeroed. *not_resident: set when the grid cannot
// be resident at once (nothing launched; the caller takes the split path).
template <DType kX, bool kCentre>
Status launch_rmsnorm_bwd_grid(const RMSNormBwdParams& p, const NormGridConfig& cfg, bool w_f32, int device,
                               cudaStream_t stream, bool* not_resident) {
  using T = typename core::TypeOf<kX>::type;
  if (norm_grid_step_words(cfg.ranks, cfg.rows, kCentre) > kNormBwdGridMaxStepWords)
    return {Code::kUnsupported, "rmsnorm backward: grid config with more exchange words a step than kNormBwdGridMaxStepWords"};
  core::LaunchShape shape;
  Status st = core::grid_launch_prologue(cfg, kNormBwdGridThreads, p.exchange, stream, not_resident,
                                         "rmsnorm backward exchange reset", &shape);
  if (!st.ok()) return st;
  shape.grid_y = cfg.groups;
  auto run = [&](auto tw) -> Status {
    using Tw = typename decltype(tw)::type;
    if constexpr (sizeof(T) == 2) {
      if (cfg.rows == 2) {
        return core::launch_cached<rmsnorm_bwd_grid_kernel<T, Tw, kCentre, 2>>(device, shape, stream, p);
      }
    }
    if (cfg.rows != 1) return {Code::kUnsupported, "rmsnorm backward: grid rows a step outside the built kernels"};
    return core::launch_cached<rmsnorm_bwd_grid_kernel<T, Tw, kCentre, 1>>(device, shape, stream, p);
  };
  if (p.w == nullptr) return run(TypeTag<void>{});
  if (w_f32 && !std::is_same_v<T, float>) return run(TypeTag<float>{});
  return run(TypeTag<T>{});
}

#define QUACK_RMSNORM_BWD_INSTANTIATION(EXTERN, DT, CENTRE)                                                        \
  EXTERN template Status launch_rmsnorm_bwd_reg<DT, CENTRE>(const RMSNormBwdParams&, const RegRowConfig&, bool, int, \
                                                            cudaStream_t, int64_t*);                              \
  EXTERN template Status launch_rmsnorm_bwd_pipe<DT, CENTRE>(const RMSNormBwdParams&, const RegRowConfig&, bool, bool, \
                                                             int, cudaStream_t, int64_t*);                        \
  EXTERN template Status launch_rmsnorm_bwd_grid<DT, CENTRE>(const RMSNormBwdParams&, const NormGridConfig&, bool, \
                                                             int, cudaStream_t, bool*);
#ifndef QUACK_RMSNORM_BWD_TU
QUACK_RMSNORM_BWD_INSTANTIATION(extern, DType::kFloat32, false)
QUACK_RMSNORM_BWD_INSTANTIATION(extern, DType::kFloat16, false)
QUACK_RMSNORM_BWD_INSTANTIATION(extern, DType::kBFloat16, false)
QUACK_RMSNORM_BWD_INSTANTIATION(extern, DType::kFloat32, true)
QUACK_RMSNORM_BWD_INSTANTIATION(extern, DType::kFloat16, true)
QUACK_RMSNORM_BWD_INSTANTIATION(extern, DType::kBFloat16, true)
#endif

}  // namespace ops
}  // namespace quack
