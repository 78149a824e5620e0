// A row's reduction across a group of CTAs that is larger than a cluster:
// the CTAs of a cooperative launch (all resident at once) exchange one value
// each per row through global memory. The third level of the reduction
// stack, after the block (shared memory) and the cluster (distributed shared
// memory): what rows longer than a 16-CTA cluster holds use.
//
// Protocol. A group of S CTAs (ranks 0..S-1) reduces a sequence of rows
// j = 0, 1, 2, ... in order. For each, every rank publishes its partial once
// (one thread, relaxed stores), and any rank may then collect the S
// partials (the whole CTA: one thread a word, every load in
// flight at once, so a collect costs one L2 round trip however many ranks),
// which every warp combines in rank order from shared memory: the same bits
// in every CTA, every warp and every run. (The first version collected with
// one warp, each lane's words one after another: 4 serial round trips a row
// at 128 ranks, 8 for LayerNorm's pairs -- a 1M-column bf16 row ran at 40%
// of copy bandwidth, RMSNorm, and 28%, LayerNorm; H200, 2026-12-01.)
// A partial is kWords 64-bit words, each {32-bit tag, the float's bits}; the
// tag of row j is j + 1, so a word is ready once its tag matches. The words
// live in a log of a slot a row ([rows][S][kWords] per group), zeroed (tag 0:
// nothing ready) by the launcher before each launch, each slot written once.
// (A "row" here is one reduction of the sequence: the grid kernels reduce a
// step of one, two or four rows of the tensor in each.)
//
// No fence. A word carries its own readiness (the tag and the value are one
// single-copy-atomic 64-bit store), nothing else a collector reads is
// published, and no slot is reused: a relaxed store publishes, a relaxed
// load (at gpu scope: from L2, never a stale L1 line) collects. The first
// version kept a ring of 16 rows, reused, which needed a release fence
// before each publication (so that the collectors' reads of a slot were
// ordered before its overwrite) and acquire loads: ptxas lowers that fence
// to MEMBAR.ALL.GPU, which waits until every store the SM has issued is
// acknowledged -- the step's whole output, just written -- so each step
// paid its writes' drain serially with its reduction (fp32 RMSNorm 1M
// forward: a fixed ~1.1 us a step on top of its traffic, 65.6% of copy;
// H200, 9256e1a, bench/results/2026-12-02-norm-fwd-grid.md). The log costs
// a 64-bit word a rank a reduced value a row: 1/1024 of a 16-bit row's
// bytes at 8192 columns a rank, zeroed with the launch.
//
// A collect that waits for more than kGridExchangeTimeoutNs traps (an
// error reported by the launch, not a hang): only a group whose CTAs are
// not all resident -- which a cooperative launch rules out -- could wait
// that long.
#pragma once

#include <cstdint>

#include "quack/core/config.hpp"
#include "quack/core/reduce.cuh"

namespace quack {
namespace core {

constexpr uint64_t kGridExchangeTimeoutNs = uint64_t(60) * 1000 * 1000 * 1000;

__device__ __forceinline__ uint64_t ld_relaxed_gpu(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed_gpu(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// The words of a reduction's value type: float (SumOp), float2 (SumPairOp)
// or float4 (SumQuadOp).
template <class V>
struct GridWords;
template <>
struct GridWords<float> {
  static constexpr int kWords = 1;
  __device__ __forceinline__ static float get(const float (&w)[1]) { return w[0]; }
  __device__ __forceinline__ static void put(float v, float (&w)[1]) { w[0] = v; }
};
template <>
struct GridWords<float2> {
  static constexpr int kWords = 2;
  __device__ __forceinline__ static float2 get(const float (&w)[2]) { return make_float2(w[0], w[1]); }
  __device__ __forceinline__ static void put(float2 v, float (&w)[2]) { w[0] = v.x, w[1] = v.y; }
};
template <>
struct GridWords<float4> {
  static constexpr int kWords = 4;
  __device__ __forceinline__ static float4 get(const float (&w)[4]) { return make_float4(w[0], w[1], w[2], w[3]); }
  __device__ __forceinline__ static void put(float4 v, float (&w)[4]) { w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w; }
};

// Eight words (LayerNorm's four rows a step: sum and deviations a row): the
// exchange's value type where no reduction of it is needed.
struct GridWords8 {
  float v[8];
};
template <>
struct GridWords<GridWords8> {
  static constexpr int kWords = 8;
  __device__ __forceinline__ static GridWords8 get(const float (&w)[8]) {
    GridWords8 g;
#pragma unroll
    for (int k = 0; k < 8; ++k) g.v[k] = w[k];
    return g;
  }
  __device__ __forceinline__ static void put(const GridWords8& g, float (&w)[8]) {
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = g.v[k];
  }
};

// Rank r's K words of a collect in `vals` ([rank][word], 16-byte aligned:
// kNormGridValsOffset) in whole vector loads: one of 16 bytes for four words
// (two for eight), one of 8 for two. Word by word, the lanes of a
// warp, a rank each, read 4 (2) words apart: a 4-way (2-way) bank conflict
// a load (LayerNorm's two-row combine: 24 wavefronts a rank, where one
// 16-byte load takes 4, sm_90a). Inline PTX, volatile: from a float4 (or
// float2) that a loop reads only in part, nvcc loads just the words the
// loop reads, and ptxas does the same for a plain ld.shared (CUDA 13.0).
template <int K>
__device__ __forceinline__ void rank_words(const float* vals, int r, float (&w)[K]) {
  static_assert(K == 1 || K == 2 || K == 4 || K == 8, "a rank's words: 1, 2, 4 or 8");
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(vals)) + uint32_t(r) * uint32_t(K * 4);
  if constexpr (K >= 4) {
#pragma unroll
    for (int h = 0; h < K / 4; ++h)
      asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(w[4 * h]), "=f"(w[4 * h + 1]), "=f"(w[4 * h + 2]), "=f"(w[4 * h + 3])
                   : "r"(a + 16u * uint32_t(h)));
  } else if constexpr (K == 2) {
    asm volatile("ld.volatile.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(w[0]), "=f"(w[1]) : "r"(a));
  } else {
    w[0] = vals[r];
  }
}

// A lane's ranks in a combine (lane, lane + 32, ...): at most kGridLaneRanks.
constexpr int kGridLaneRanks = (kNormGridMaxRanks + 31) / 32;

// The lane's ranks' words (rank_words), read once for a combine's passes:
// w[it] holds rank lane + 32 it where that is below `ranks` (the rest are
// left unset: the passes test the same bound).
template <int K>
__device__ __forceinline__ void lane_rank_words(const float* vals, int lane, int ranks,
                                                float (&w)[kGridLaneRanks][K]) {
#pragma unroll
  for (int it = 0; it < kGridLaneRanks; ++it)
    if (lane + 32 * it < ranks) rank_words(vals, lane + 32 * it, w[it]);
}

template <class Op>
struct GridExchange {
  using T = typename Op::T;
  using Words = GridWords<T>;
  static constexpr int kWords = Words::kWords;
  uint64_t* log;  // this group's [rows][ranks][kWords]
  int ranks, rank;

  // Global words a group's log of `rows` rows takes.
  __host__ __device__ static constexpr int64_t words(int ranks, int64_t rows) { return rows * ranks * kWords; }

  __device__ __forceinline__ uint64_t* slot(int j, int r) const {
    // 32-bit: a group's log holds fewer than 2^31 words (the chooser's
    // limit; with 64-bit offsets the backward's 1-row instances spilled).
    return log + (uint32_t(j) * uint32_t(ranks) + uint32_t(r)) * uint32_t(kWords);
  }

  // One thread: this rank's partial of row j (relaxed stores: see above).
  __device__ __forceinline__ void publish(int j, T v) const {
    float w[kWords];
    Words::put(v, w);
    uint64_t* s = slot(j, rank);
    const uint64_t tag = uint64_t(uint32_t(j) + 1u) << 32;
#pragma unroll
    for (int k = 0; k < kWords; ++k) st_relaxed_gpu(s + k, tag | __float_as_uint(w[k]));
  }

  // Word t of row j once it is ready (its tag matches), from v, the word as
  // first loaded: spins on loads while it is not.
  __device__ __forceinline__ float ready_word(int j, int t, uint64_t v) const {
    const uint32_t tag = uint32_t(j) + 1u;
    uint64_t start = 0;
    while (uint32_t(v >> 32) != tag) {
      if (start == 0) start = global_timer_ns();
      else if (global_timer_ns() - start > kGridExchangeTimeoutNs) __trap();
      __nanosleep(64);
      v = ld_relaxed_gpu(slot(j, 0) + t);
    }
    return __uint_as_float(uint32_t(v));
  }

  // The whole CTA, in two halves around work to do while the loads are in
  // flight: gather_issue loads row j's words of the calling thread (t <
  // loaders: words t, t + loaders, ..., N of them, all in flight at once --
  // a loader's words one after another were one L2 round trip each; all of
  // the row's words when N * loaders >= ranks * kWords, which the caller
  // ensures), gather_finish waits for each to be ready and parks them in
  // `vals` (shared, at least ranks * kWords floats, [rank][word]), ending
  // in one barrier. `vals` may be reused once every thread has passed a
  // later barrier.
  template <int N>
  __device__ __forceinline__ void gather_issue(int j, int loaders, uint64_t (&w)[N]) const {
    const int tid = int(threadIdx.x), words = ranks * kWords;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int t = tid + k * loaders;
      w[k] = tid < loaders && t < words ? ld_relaxed_gpu(slot(j, 0) + t) : 0;
    }
  }
  template <int N>
  __device__ __forceinline__ void gather_finish(int j, const uint64_t (&w)[N], float* vals, int loaders) const {
    const int tid = int(threadIdx.x), words = ranks * kWords;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int t = tid + k * loaders;
      if (tid < loaders && t < words) vals[t] = ready_word(j, t, w[k]);
    }
    __syncthreads();
  }

  // The whole CTA, after gather_finish: the row's reduction over every
  // rank, returned to every thread: every lane of every warp combines ranks
  // lane, lane + 32, ... in order, then the butterfly -- the same bits in
  // every warp and every CTA.
  __device__ __forceinline__ T combine(const float* vals) const {
    const int lane = int(threadIdx.x) & 31;
    T acc = Op::identity();
    for (int r = lane; r < ranks; r += 32) {
      float w[kWords];
#pragma unroll
      for (int k = 0; k < kWords; ++k) w[k] = vals[r * kWords + k];
      acc = Op::combine(acc, Words::get(w));
    }
    return warp_reduce<Op>(acc);
  }
};

}  // namespace core
}  // namespace quack
