// The one reduction stack: warp (or sub-warp team) -> CTA -> cluster.
//
// Every level is a butterfly or a fixed-order combine, so every thread of a
// row ends with the same, bit-reproducible value (the ops are commutative, so
// both partners of a butterfly step compute the identical result).
//
// Ops: Sum, Max, and MaxSum (online softmax: a (max, sum-of-exp2) pair, so
// softmax and cross-entropy need a single reduction round).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "quack/core/bulk.cuh"  // mbar_wait

namespace quack {
namespace core {

struct SumOp {
  using T = float;
  __device__ __forceinline__ static float identity() { return 0.0f; }
  __device__ __forceinline__ static float combine(float a, float b) { return a + b; }
};

struct MaxOp {
  using T = float;
  __device__ __forceinline__ static float identity() { return -INFINITY; }
  __device__ __forceinline__ static float combine(float a, float b) { return fmaxf(a, b); }
};

// Online-softmax partial over the elements seen: their max m and
// s = sum(exp(x - m)) (natural units; exp is computed as exp2 of a product
// with log2(e) after the subtraction, so x - m keeps full precision even for
// large |x|). Empty partial: (-inf, 0). m ignores NaN (fmaxf); a NaN element
// makes s NaN.
// 2^x and log2(x) in one MUFU instruction each (ex2/lg2.approx.ftz: about
// 2 ulp; results below 2^-126 flush to zero). exp2f / log2f add range
// fix-ups around the same instruction.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// 1 / x in one MUFU instruction (rcp.approx.ftz: about 1 ulp; 1 / 0 = inf,
// 1 / NaN = NaN).
__device__ __forceinline__ float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

struct MaxSum {
  float m;
  float s;
};

struct MaxSumOp {
  using T = MaxSum;
  __device__ __forceinline__ static MaxSum identity() { return {-INFINITY, 0.0f}; }
  __device__ __forceinline__ static MaxSum combine(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.m, b.m);
    // A side whose max is -inf (it saw nothing, only -inf, or only NaN)
    // contributes s * 0: 0, or NaN when it saw a NaN (s = NaN), so that NaN
    // reaches the whole row as in torch. Guards -inf - -inf.
    // The products are rounded on their own (__fmul_rn: no fused multiply-add
    // with the sum), so combine(a, b) and combine(b, a) agree to the bit and
    // both lanes of a butterfly step hold the same pair.
    constexpr float kLog2e = 1.4426950408889634f;
    const float sa = a.m == -INFINITY ? __fmul_rn(a.s, 0.0f) : __fmul_rn(a.s, exp2f((a.m - m) * kLog2e));
    const float sb = b.m == -INFINITY ? __fmul_rn(b.s, 0.0f) : __fmul_rn(b.s, exp2f((b.m - m) * kLog2e));
    return {m, sa + sb};
  }
};

// Two sums in one reduction round (LayerNorm backward: sum g * xhat and sum g).
struct SumPairOp {
  using T = float2;
  __device__ __forceinline__ static float2 identity() { return make_float2(0.0f, 0.0f); }
  __device__ __forceinline__ static float2 combine(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
};

// Four plain sums (the grid backward's two rows a step, LayerNorm's pair
// for each).
struct SumQuadOp {
  using T = float4;
  __device__ __forceinline__ static float4 identity() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
  __device__ __forceinline__ static float4 combine(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
  }
};

// Cross-entropy's row statistics: the online-softmax pair, a plain sum (the
// row's logits, or their class-weighted sum, for label smoothing) and a
// second plain sum x (the target's logit: one thread of the row holds it,
// the others 0). 16 bytes: one st.async.v4 in a cluster exchange.
struct alignas(16) MaxSumDot {
  float m;
  float s;
  float d;
  float x;
};

struct MaxSumDotOp {
  using T = MaxSumDot;
  __device__ __forceinline__ static MaxSumDot identity() { return {-INFINITY, 0.0f, 0.0f, 0.0f}; }
  __device__ __forceinline__ static MaxSumDot combine(MaxSumDot a, MaxSumDot b) {
    const MaxSum ms = MaxSumOp::combine({a.m, a.s}, {b.m, b.s});
    return {ms.m, ms.s, a.d + b.d, a.x + b.x};
  }
};

__device__ __forceinline__ float shfl_xor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
__device__ __forceinline__ float2 shfl_xor(float2 v, int mask) {
  return make_float2(__shfl_xor_sync(0xffffffffu, v.x, mask), __shfl_xor_sync(0xffffffffu, v.y, mask));
}
__device__ __forceinline__ float4 shfl_xor(float4 v, int mask) {
  return make_float4(__shfl_xor_sync(0xffffffffu, v.x, mask), __shfl_xor_sync(0xffffffffu, v.y, mask),
                     __shfl_xor_sync(0xffffffffu, v.z, mask), __shfl_xor_sync(0xffffffffu, v.w, mask));
}
__device__ __forceinline__ MaxSum shfl_xor(MaxSum v, int mask) {
  return {__shfl_xor_sync(0xffffffffu, v.m, mask), __shfl_xor_sync(0xffffffffu, v.s, mask)};
}
__device__ __forceinline__ MaxSumDot shfl_xor(MaxSumDot v, int mask) {
  return {__shfl_xor_sync(0xffffffffu, v.m, mask), __shfl_xor_sync(0xffffffffu, v.s, mask),
          __shfl_xor_sync(0xffffffffu, v.d, mask), __shfl_xor_sync(0xffffffffu, v.x, mask)};
}

// Butterfly over aligned groups of `width` lanes (power of two <= 32). Every
// lane of the warp must call it. All lanes of a group end with the result.
template <class Op>
__device__ __forceinline__ typename Op::T warp_reduce(typename Op::T v, int width = 32) {
#pragma unroll
  for (int mask = 16; mask >= 1; mask >>= 1)
    if (mask < width) v = Op::combine(v, shfl_xor(v, mask));
  return v;
}

// Max-first warp reductions (warp_reduce's specialisations below): the
// group's max by a butterfly of FMNMX, each lane's sum of exponentials
// rescaled to it once (s * 0 for a lane whose max is -inf, as
// MaxSumOp::combine), then plain sums -- about 45 instructions a lane for
// cross-entropy's four values, where the online combine at every level
// took ~120 (two accurate exp2f a level; ncu source counters, bf16 128256
// staged gradient, 00bb1fa, H200: the row's reductions 22% of its
// instructions). The max is exact and the sums' tree is the same in every
// lane: every lane of a group ends with the same bits. Natural units: the
// rescale is e^(m_lane - m), as 2^((m_lane - m) log2 e), at any magnitude
// (m_lane - m is -inf or exact where it matters).
__device__ __forceinline__ float max_first_rescale(float m_lane, float s_lane, int width, float& m) {
  constexpr float kLog2e = 1.4426950408889634f;
  m = m_lane;
#pragma unroll
  for (int mask = 16; mask >= 1; mask >>= 1)
    if (mask < width) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, mask));
  const float d = (m_lane - m) * kLog2e;
  return m_lane == -INFINITY ? __fmul_rn(s_lane, 0.0f) : __fmul_rn(s_lane, fast_exp2(d));
}

// MaxSumDotOp's values and combination, reduced max first in a warp: the
// staged cross-entropy gradient's reductions (at 00bb1fa the plain register
// forward of 8 bf16 vectors a thread spilled 8 bytes with it, ptxas -v: the
// other cross-entropy kernels keep the online combine).
struct MaxSumDotMaxFirstOp : MaxSumDotOp {};

template <>
__device__ __forceinline__ MaxSumDot warp_reduce<MaxSumDotMaxFirstOp>(MaxSumDot v, int width) {
  float m;
  float s = max_first_rescale(v.m, v.s, width, m);
  float d = v.d, x = v.x;
#pragma unroll
  for (int mask = 16; mask >= 1; mask >>= 1) {
    if (mask < width) {
      s += __shfl_xor_sync(0xffffffffu, s, mask);
      d += __shfl_xor_sync(0xffffffffu, d, mask);
      x += __shfl_xor_sync(0xffffffffu, x, mask);
    }
  }
  return {m, s, d, x};
}

// MaxSumOp's pair (natural units: m = max x, s = sum e^(x - m)) reduced max
// first in a warp (the softmax register and staged forwards).
struct MaxSumMaxFirstOp : MaxSumOp {};

template <>
__device__ __forceinline__ MaxSum warp_reduce<MaxSumMaxFirstOp>(MaxSum v, int width) {
  float m;
  float s = max_first_rescale(v.m, v.s, width, m);
#pragma unroll
  for (int mask = 16; mask >= 1; mask >>= 1)
    if (mask < width) s += __shfl_xor_sync(0xffffffffu, s, mask);
  return {m, s};
}

// A thread's exponentials against its max m in log2 units: e^(x - m) =
// 2^(x log2 e - b) 2^-r, with b = log2_base(m) = RN(m log2 e) and r =
// m log2 e - b, the rounding's residual, exact in one FFMA
// (from_log2_units). x log2 e - b is one FFMA (x log2 e exact inside it)
// and 2^ of it the MUFU.EX2: one FFMA and one EX2 an element, where natural
// units take an FADD, an FMUL and the EX2. A sum of such terms is taken
// back to natural units once, s 2^-r (from_log2_units).
// That holds while |m| < 2^24 (log2_units_ok): b < 2^25, so |r| <= 1 and
// 2^r neither overflows nor underflows a sum. Larger |m| loses it: at 1e9
// |r| reaches 64, at 1e12 65536 (2^r is 0 or inf: the row's sum with it),
// and past FLT_MAX / log2 e = 2.36e38 b is no float at all. Such rows take
// natural units, 2^((x - m) log2 e), whose x - m is exact near m and -inf or
// exact enough where e^(x - m) is 0. -inf (a thread that saw nothing but
// -inf or padding) stays in log2 units: its sum is 0 either way, and a
// branch per thread would split warps at a row's end.
// b's floor of -2^25 (reached only by m = -inf, or by |m| >= 2^24 below
// zero) keeps x log2 e - b finite or -inf: an online fold whose early
// batches saw only such values adds finite terms, which a later max's
// rescale 2^(b_old - b_new) takes to 0, or which a thread whose own max
// stays there replaces by its natural-units sum.
constexpr float kLog2UnitsMax = 0x1p24f;
constexpr float kLog2BaseFloor = -0x1p25f;  // log2_base(-inf)
__host__ __device__ __forceinline__ bool log2_units_ok(float m) {
  return fabsf(m) < kLog2UnitsMax || m == -INFINITY;
}
// (Host and device: a CPU test holds |m log2 e - log2_base(m)| <= 1 below
// 2^24, reduce_test.cu.)
__host__ __device__ __forceinline__ float log2_base(float m) {
  constexpr float kLog2e = 1.4426950408889634f;
#ifdef __CUDA_ARCH__
  return fmaxf(__fmul_rn(m, kLog2e), kLog2BaseFloor);  // (no FMA contraction into a caller's sum)
#else
  return fmaxf(m * kLog2e, kLog2BaseFloor);
#endif
}
// s (a sum of 2^(x log2 e - b)) in natural units against m: s 2^-r, with
// -r = b - m log2 e exact in one FFMA; capped at 2^1 so that m = -inf (s = 0,
// -r = +inf) stays 0 and a NaN -r (m = +inf: s is NaN) keeps s NaN.
__device__ __forceinline__ float from_log2_units(float s, float m, float b) {
  constexpr float kLog2e = 1.4426950408889634f;
  return __fmul_rn(s, fast_exp2(fminf(fmaf(-m, kLog2e, b), 1.0f)));
}

// Row moments from parts: lane r holds part r's (sum, sum of squared
// deviations from the part's own mean) and n, its element count (0: an empty
// part, or a lane past the parts). Returns (mean, sum of squared deviations
// from it) of the whole, in every lane: Chan, Golub and LeVeque's update,
// m2 = sum_r m2_r + n_r (mean_r - mean)^2, free of the cancellation in
// sum(x^2) - n mean^2. Butterflies in a fixed order: bit-identical in every
// lane and run after run.
__device__ __forceinline__ float2 combine_moments(float2 part, int n, float total) {
  const float mean = warp_reduce<SumOp>(part.x) / total;
  float m2 = 0.0f;
  if (n > 0) {
    const float d = part.x / float(n) - mean;
    m2 = fmaf(float(n) * d, d, part.y);
  }
  return make_float2(mean, warp_reduce<SumOp>(m2));
}

// One thread's moments in one pass over its values, for a combine_moments
// -style update over threads: sums of d = h - k about a shift k that is one
// of its own values (the first, say: set k before the first add). Then
// q <= n * m2 (k lies within the values: the deviation of k from the mean
// is at most the whole spread), so m2 = q - s^2 / n loses at most about n
// ulps to the subtraction, where sum(h^2) - n mean^2 loses (mean / sd)^2.
// Host and device (a CPU test holds it to that bound).
struct ShiftedMoments {
  float k = 0.0f, s = 0.0f, q = 0.0f;
  // h counts only where `on` (a select, not a branch: padding adds 0).
  __host__ __device__ __forceinline__ void add(float h, bool on = true) {
    const float d = on ? h - k : 0.0f;
    s += d;
    q = fmaf(d, d, q);
  }
  // Of n > 0 values, inv_n = 1 / n.
  __host__ __device__ __forceinline__ float sum(int n) const { return fmaf(float(n), k, s); }
  __host__ __device__ __forceinline__ float mean(float inv_n) const { return k + s * inv_n; }
  __host__ __device__ __forceinline__ float m2(float inv_n) const { return fmaxf(fmaf(-s, s * inv_n, q), 0.0f); }
};

// Whole-CTA reduction (the CTA is one team of `blockDim.x` threads, a multiple
// of 32). `scratch` holds 32 values in shared memory. Contains one
// __syncthreads. Two consecutive calls must use different scratch buffers
// (ping-pong); the barrier inside the second call then protects the first.
//
// Narrow (block_reduce_narrow): the warp partials combined over the power of
// two of lanes at or above their count (8 warps: 3 butterfly levels, not 5),
// every aligned group of that many lanes reading all of them in the same
// order: the same value in every lane, and the same as the full butterfly's
// (its levels past the partials add identities). A decode-sized row waits on
// each level. (A template flag, not a test of the width in every
// block_reduce: that test spilled 4-20 bytes in the f16 norm backward's grid
// kernel, ptxas -v, CUDA 13.0; a shared helper taking v by reference spilled
// 8 bytes in the f16 softmax backward's register kernel.)
template <class Op, bool Narrow = false>
__device__ __forceinline__ typename Op::T block_reduce(typename Op::T v, typename Op::T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_reduce<Op>(v);
  if (nwarps == 1) return v;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  // Every warp reads all warp partials in the same order: same result everywhere.
  if constexpr (Narrow) {
    const int width = 1 << (32 - __clz(nwarps - 1));  // (nwarps >= 2)
    const int k = lane & (width - 1);
    v = k < nwarps ? scratch[k] : Op::identity();
    return warp_reduce<Op>(v, width);
  } else {
    v = lane < nwarps ? scratch[lane] : Op::identity();
    return warp_reduce<Op>(v);
  }
}

template <class Op>
__device__ __forceinline__ typename Op::T block_reduce_narrow(typename Op::T v, typename Op::T* scratch) {
  return block_reduce<Op, true>(v, scratch);
}

// Reduction over one team of a CTA that holds several: a sub-warp team
// (team < 32, a power of two: a butterfly over aligned groups of `team`
// lanes, no shared memory), or a team of whole warps -- a power of two
// dividing blockDim.x, or any number of warps that owns the CTA
// (RowTuning::bwd_pipe_fit_team): warp partials through `scratch`, 32
// values, then every warp reads its own team's partials in warp order from
// its team's first warp (a mask where the team is a power of two, 0 where
// it owns the CTA: no division, whose modulo took ~20 instructions).
// block_reduce is the case team == blockDim.x. Every thread of the CTA
// must call it; consecutive calls ping-pong between two scratch buffers,
// as for block_reduce. (The pipelined norm backward reduces every row
// here: its fixed cost a warp a row, docs/KERNELS.md. Its first level's
// butterflies without a test a level, for teams of whole warps, spilled
// its f16 64-register tiles 8-12 bytes: ptxas -v, CUDA 13.0.)
template <class Op>
__device__ __forceinline__ typename Op::T team_reduce(typename Op::T v, int team, typename Op::T* scratch) {
  v = warp_reduce<Op>(v, team < 32 ? team : 32);
  if (team <= 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpt = team >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int first_warp = team == int(blockDim.x) ? 0 : warp & -wpt;
  v = lane < wpt ? scratch[first_warp + lane] : Op::identity();
  return warp_reduce<Op>(v);
}

// A one-dimensional clustered grid: this CTA's rank in its cluster, its
// cluster's index in the grid, and the grid's clusters (special registers,
// no division).
__device__ __forceinline__ int cluster_cta_rank() {
  uint32_t r;
  asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return int(r);
}
__device__ __forceinline__ int cluster_index() {
  uint32_t r;
  asm("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
  return int(r);
}
__device__ __forceinline__ int cluster_count() {
  uint32_t r;
  asm("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
  return int(r);
}

// Cluster barrier halves (all threads of every CTA of the cluster).
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The cluster barrier's relaxed arrival (no release: for an arrival whose
// only purpose is to say "my mbarriers are initialised", made visible by
// mbar_init_fence) and its plain wait.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_plain() {
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// The shared::cluster address of `addr` (a shared::cta address of this
// CTA) in the CTA of rank `rank` of the cluster.
__device__ __forceinline__ uint32_t cluster_map(uint32_t addr, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  return remote;
}

// 16 bytes stored into a peer's shared memory at `remote` (cluster_map),
// completing 16 bytes on the peer's mbarrier at `remote_bar`: the receiver
// waits for its mbarrier, the sender for nothing.
__device__ __forceinline__ void st_async_v4(uint32_t remote, uint4 u, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   remote),
               "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w), "r"(remote_bar)
               : "memory");
}

// Cluster reduction of one value per CTA (`v` equal in all threads of a CTA)
// through distributed shared memory. `slot` is one value in this CTA's shared
// memory; consecutive calls must alternate between two slots. After the last
// call, the kernel must call cluster_arrive() then cluster_wait() before it
// exits, so that no CTA leaves while a peer still reads its slot.
template <class Op>
__device__ __forceinline__ typename Op::T cluster_reduce(typename Op::T v, typename Op::T* slot,
                                                         int cluster_size) {
  if (threadIdx.x == 0) *slot = v;
  cluster_arrive();
  cluster_wait();
  namespace cg = cooperative_groups;
  const int lane = threadIdx.x & 31;
  // Lane r reads rank r's slot; the butterfly combines them in a fixed order.
  typename Op::T p = Op::identity();
  if (lane < cluster_size) p = *cg::this_cluster().map_shared_rank(slot, lane);
  return warp_reduce<Op>(p);
}

// A row reducer for one team: sub-warp, whole CTA, or whole cluster.
// Shared scratch layout (caller provides `scratch_bytes()` of it):
//   [2][32] warp partials (ping-pong), [2] cluster slots (ping-pong).
template <class Op>
struct RowReducer {
  using T = typename Op::T;
  T* warp_scratch;   // [2][32]
  T* cluster_slot;   // [2]
  int team;          // threads per row inside the CTA
  int cluster;       // CTAs per row
  int parity = 0;

  __host__ __device__ static constexpr size_t scratch_bytes() { return sizeof(T) * (2 * 32 + 2); }

  __device__ __forceinline__ RowReducer(void* scratch, int team_, int cluster_)
      : warp_scratch(static_cast<T*>(scratch)),
        cluster_slot(static_cast<T*>(scratch) + 64),
        team(team_),
        cluster(cluster_) {}

  // The reduction of a team that is the whole CTA (block_reduce_narrow),
  // with no test of the team's size: kLean rows (ops/rmsnorm.cuh).
  __device__ __forceinline__ T reduce_cta(T v) {
    v = block_reduce_narrow<Op>(v, warp_scratch + 32 * parity);
    parity ^= 1;
    return v;
  }

  // Every thread of the CTA must call this (teams > 32 own the CTA).
  __device__ __forceinline__ T reduce(T v) {
    if (team <= 32) {
      v = warp_reduce<Op>(v, team);
    } else {
      v = block_reduce<Op>(v, warp_scratch + 32 * parity);
    }
    if (cluster > 1) v = cluster_reduce<Op>(v, cluster_slot + parity, cluster);
    parity ^= 1;
    return v;
  }
};

// Cluster-wide reductions without a cluster-wide barrier on the critical
// path: every CTA sends its value into each peer's shared memory with
// st.async, which completes bytes on the receiver's mbarrier; a CTA waits
// only for its own mbarrier (all values present), then combines the values in
// rank order (the same order in every CTA: bit-identical results).
//
// Any number of reductions in sequence (a persistent CTA's rows): two
// mbarriers and two slot sets alternate. A CTA is at most one reduction ahead
// of any peer (to finish reduction k it needs every peer's value of k, sent
// after that peer finished k - 1 and read its slots), so reduction k + 2 never
// lands in a slot set or a barrier phase still in use for k.
//
// Protocol (all threads of every CTA call each step):
//   start()   at kernel start: initialise the mbarriers, make them visible to
//             the cluster, and arrive (relaxed) on the cluster barrier;
//   reduce()  first call only: waits on that barrier (every peer's mbarriers
//             are initialised; by now long since); then sends, waits for the
//             values and combines them;
//   finish()  before exit: arrive and wait on the cluster barrier, so that no
//             CTA leaves while a peer may still write into its shared memory.
// Shared scratch: scratch_bytes(), 8-byte aligned.
template <class Op>
struct ClusterExchange {
  using T = typename Op::T;
  static_assert(sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16, "32-, 64- or 128-bit values");
  // Shared scratch: [2] mbarriers, then [2][16] values (slot r from rank r).
  uint32_t bar;        // shared::cta address of the scratch
  uint32_t count = 0;  // reductions done

  __host__ __device__ static constexpr size_t scratch_bytes() { return 16 + 2 * 16 * sizeof(T); }

  __device__ __forceinline__ void start(void* scratch) {
    bar = static_cast<uint32_t>(__cvta_generic_to_shared(scratch));
    if (threadIdx.x == 0) {
      mbar_init(bar, 1);
      mbar_init(bar + 8, 1);
      mbar_init_fence();
    }
    cluster_arrive_relaxed();
  }

  // `v` equal in all threads of the CTA; `size` CTAs in the cluster, this
  // one of rank `rank`. Returns the cluster's combination.
  __device__ __forceinline__ T reduce(T v, int size, int rank) { return warp_reduce<Op>(gather(v, size, rank)); }

  // The exchange without the combination: lane r of every warp receives
  // rank r's value (Op::identity() in lanes >= size), for combinations that
  // need to know whose value is whose (LayerNorm's per-CTA moments).
  __device__ __forceinline__ T gather(T v, int size, int rank) {
    if (count == 0) cluster_wait_plain();
    const uint32_t b = bar + 8 * (count & 1);
    const uint32_t set = bar + 16 + uint32_t((count & 1) * 16 * sizeof(T));
    const uint32_t parity = (count >> 1) & 1;
    if (threadIdx.x == 0) mbar_arrive_expect_tx(b, uint32_t(size * sizeof(T)));
    if (int(threadIdx.x) < size) {
      const uint32_t rbar = cluster_map(b, threadIdx.x);
      const uint32_t rslot = cluster_map(set + uint32_t(rank * sizeof(T)), threadIdx.x);
      if constexpr (sizeof(T) == 4) {
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(rslot),
                     "r"(*reinterpret_cast<const uint32_t*>(&v)), "r"(rbar)
                     : "memory");
      } else if constexpr (sizeof(T) == 8) {
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];\n" ::"r"(rslot),
                     "l"(*reinterpret_cast<const uint64_t*>(&v)), "r"(rbar)
                     : "memory");
      } else {
        st_async_v4(rslot, *reinterpret_cast<const uint4*>(&v), rbar);
      }
    }
    mbar_wait(b, parity);
    const int lane = threadIdx.x & 31;
    T p = Op::identity();
    if (lane < size) {
      if constexpr (sizeof(T) == 4) {
        uint32_t u;
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(u) : "r"(set + 4 * lane) : "memory");
        p = *reinterpret_cast<const T*>(&u);
      } else if constexpr (sizeof(T) == 8) {
        uint64_t u;
        asm volatile("ld.shared.b64 %0, [%1];\n" : "=l"(u) : "r"(set + 8 * lane) : "memory");
        p = *reinterpret_cast<const T*>(&u);
      } else {
        uint4 u;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                     : "r"(set + 16 * lane)
                     : "memory");
        p = *reinterpret_cast<const T*>(&u);
      }
    }
    ++count;
    return p;
  }

  // Before the CTA exits. `sync` false: no barrier where this CTA took part
  // in an exchange -- every CTA waits in every exchange for every peer's
  // value, so after its last one no peer writes into its shared memory, and
  // each of its own writes went to a peer that waits for it.
  __device__ __forceinline__ void finish(bool sync = true) {
    if (count == 0) cluster_wait_plain();
    if (!sync && count > 0) return;
    cluster_arrive_relaxed();
    cluster_wait_plain();
  }
};

}  // namespace core
}  // namespace quack
