// Cross-entropy over rows of logits, forward and backward in one kernel.
//
// Per row (logits x, target t, class weights w, V = cols; x' = softcap(x)
// = c tanh(x / c) when a softcap c is set, else x):
//   lse   = log sum_c exp(x'_c)
//   ce    = (1 - eps) w_t (lse - x'_t) + (eps / V) sum_c w_c (lse - x'_c)
//   z     = z_loss lse^2
// (w = 1 without class weights). A row whose target is ignore_index counts
// nothing (loss 0, gradient 0); a target outside [0, V) gives NaN loss and
// gradient for its row and is never used as an address.
// Reduction: 'none' writes ce + z per row; 'sum' the sum over rows; 'mean'
// sum(ce) / W + sum(z) / R, W = sum of w_t over counted rows (torch's
// denominator), R = the number of counted rows.
// Gradient of the row's loss with upstream factor g (g / W and g / R for
// mean), p_c = exp(x'_c - lse):
//   a = g_ce (1 - eps) w_t,  b = g_ce eps / V,  A = a + b sum_c w_c + 2 g_z z_loss lse
//   dL/dx'_c = A p_c - b w_c - a [c == t]
//   dx_c = dL/dx'_c (1 - (x'_c / c)^2)  with a softcap
//
// Kernels (host dispatch: src/cross_entropy.cu):
// 1. ce_prepare_kernel: one CTA; W, R and sum_c w_c in a fixed order (the
//    mean's denominators and the smoothing's weight sum), read by 2. on the
//    device: no host synchronisation.
// 2. The row kernels: register-resident (a team, a CTA or a cluster of up to
//    16 CTAs per row, core/row_tile.cuh; logits read from HBM once, the
//    gradient written from the same registers), or streaming (one CTA per
//    row; the gradient pass re-reads the row, mostly from L2) for misaligned
//    or very long rows. Each writes its row's loss (or its share of the
//    total), lse, and optionally dx.
// 3. ce_finish_kernel: one CTA sums the rows' shares in a fixed order
//    (deterministic, no atomics).
// 4. ce_scale_kernel: dx *= g per row, for a gradient written for a unit
//    upstream factor; rows whose factor is exactly 1 are not touched.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "quack/core/bulk.cuh"
#include "quack/core/config.hpp"
#include "quack/core/launch.cuh"
#include "quack/core/reduce.cuh"
#include "quack/core/row_tile.cuh"
#include "quack/core/vec.cuh"
#include "quack/ops/softmax.cuh"
#include "quack/quack.hpp"

namespace quack {
namespace ops {

struct CEParams {
  int64_t rows, cols;
  // Vocabulary sharding: the logits' columns are classes class_offset.. of
  // num_classes (= cols unsharded); cwc = cw + class_offset (the columns'
  // weights), cw indexed by the (global) target.
  int64_t num_classes, class_offset;
  const float* cwc;
  float4* stats;  // [rows]: the statistics mode (no loss, no lse), or null
  const float* lse_src;  // [rows]: the gradient passes' lse (a forward's, or the caller's lse_in)
  const void* x;
  int64_t x_stride;
  const void* target;
  int64_t target_stride;
  bool target64;
  const float* cw;  // class weights [cols] or null
  int64_t ignore_index;
  float smoothing;  // eps
  float z_loss;
  float softcap;  // 0: none
  int reduction;  // 0 none, 1 mean, 2 sum
  bool wsmooth;   // class weights with eps > 0: d is sum_c w_c x'_c
  const float* totals;  // [W, R, sum w] from ce_prepare_kernel, or null
  // [rows] or null: 'none' the loss; 'sum' the row's loss; 'mean' its
  // cross-entropy term and (row_z) its z-loss term, undivided (the finish
  // kernel divides the sums by W and R).
  float* row_loss;
  float* row_z;
  // One row ('mean' or 'sum', rows == 1; row_loss and row_z then null): the
  // reduced loss itself, the bits ce_finish_kernel would write
  // (ce_write_row), so that no finish kernel runs and no shares are needed
  // (RowTuning::ce_one_row_loss); else null.
  // rows_cluster (2 .. 16 rows, a reduced loss, no gradient): the rows'
  // CTAs, one a row, are one cluster; each row's terms go to its CTA's
  // shared slot and rank 0 writes the reduced loss to loss_out, the finish
  // kernel's bits (ce_cluster_finish; RowTuning::ce_cluster_rows). 0: off.
  float* loss_out;
  int rows_cluster;
  // A rows cluster's one-way finish (ce_cluster_finish_oneway;
  // RowTuning::ce_cluster_oneway): each CTA sends its slot into rank 0's
  // shared memory with st.async and leaves; false: ce_cluster_finish's two
  // cluster barriers and rank 0's reads of its peers' slots.
  bool rows_oneway;
  float* lse;           // [rows] or null
  void* dx;             // null: no gradient
  int64_t dx_stride;
  const float* dloss;  // upstream gradient, null: 1
  bool dloss_per_row;
  int team, cluster;
  int64_t row_blocks;
  // The plain forward's whole-batch loops (RowTuning::ce_fwd_whole): bit 0
  // ce_fwd_bulk_kernel's, bit 1 ce_fwd_stream_kernel's.
  int fwd_whole;
};

// Shared memory of the row kernels: the MaxSumDot reduction's scratch,
// clustered.
constexpr uint32_t kCEScratchBytes = 1600;
static_assert(core::RowReduce<core::MaxSumDotOp, true>::scratch_bytes() <= kCEScratchBytes, "ce scratch");

// Register tiles (16-byte vectors of logits per thread) that compile within
// 64 registers without spilling (ptxas -v, CUDA 13.0). 8, the softmax
// forward's best 16-bit tile, fits only the plain flavour's forward (`wide`:
// no gradient, no softcap, no weighted smoothing); with the general options
// it spilled 24-56 bytes, and the fp16 plain gradient 16.
constexpr int ce_max_vpt(bool wide) { return wide ? 8 : 4; }
constexpr int ce_cluster_vpt() { return 4; }
// Staged gradient rows (ce_staged_kernel): the tiles built (8 and 16);
// RowTuning::ce_staged_vpt picks one; rows past 16 CTAs of 8 take 16, rows
// that one CTA of 16 holds take 8 (src/cross_entropy.cu).
constexpr bool ce_staged_tile(int vpt) { return vpt == 8 || vpt == 16; }
constexpr int kCEStagedVptMin = 8;
constexpr int kCEStagedVptMax = 16;
// The staged kernels are built for CTAs of at most kCEStagedThreads threads
// (RowTuning::reg_staged_team): four an SM at the plain 16-bit 8-vector
// tile (64 registers; 34 KB of shared memory each), three otherwise (80
// registers: at 64 the general flavour spilled 16 bytes and fp32's plain
// one 8, ptxas -v; the 16-vector tile's 66 KB allow three).
constexpr int kCEStagedThreads = 256;
constexpr int ce_staged_min_blocks(int vpt, int elem_bytes, bool general) {
  return vpt > 8 || elem_bytes == 4 || general ? 3 : 4;
}

// softcap(x) = c tanh(x / c) as c (1 - 2 / (1 + e^(2x/c))): one MUFU.EX2 and
// one MUFU.RCP, absolute error ~1e-7 c (tanh.approx's 2^-11 relative error
// would move a loss by 1e-2 at c = 30). k2 = 2 log2(e) / c.
__device__ __forceinline__ float softcap_of(float x, float c, float k2) {
  return c - __fdividef(2.0f * c, 1.0f + core::fast_exp2(x * k2));
}

// One row's scalars, computed by every thread of its team (the target and its
// weight are broadcast loads).
struct CERow {
  int64_t t;
  int64_t tl;         // the target's column in these logits, -1 when none (not counted, or another shard's)
  bool ignored, bad;  // bad: target outside [0, V) and not ignored
  float wt;           // w_t (1 without class weights; 0 when not counted)

  __device__ __forceinline__ static int64_t target_of(const CEParams& p, int64_t row) {
    return p.target64 ? static_cast<const int64_t*>(p.target)[row * p.target_stride]
                      : int64_t(static_cast<const int32_t*>(p.target)[row * p.target_stride]);
  }
  __device__ __forceinline__ static CERow make(const CEParams& p, int64_t row) { return of(p, target_of(p, row)); }
  // From the row's target t, already loaded.
  __device__ __forceinline__ static CERow of(const CEParams& p, int64_t t) {
    CERow r;
    r.t = t;
    r.ignored = r.t == p.ignore_index;
    r.bad = !r.ignored && (r.t < 0 || r.t >= p.num_classes);
    r.wt = (r.ignored || r.bad) ? 0.0f : (p.cw ? __ldg(p.cw + r.t) : 1.0f);
    const int64_t tl = r.t - p.class_offset;
    r.tl = (r.ignored || r.bad || tl < 0 || tl >= p.cols) ? -1 : tl;
    return r;
  }
};

// lse of a row from its statistics.
__device__ __forceinline__ float ce_lse(const core::MaxSumDot& st) { return st.m + core::fast_log2(st.s) * kLn2; }

// The row-invariant scalars of the loss and its gradient: the mean's
// denominators W and R and the smoothing's weight sum (ce_prepare_kernel's
// totals; V without class weights), which a persistent kernel loads once.
struct CETotals {
  float w, r, wsum;
  __device__ __forceinline__ static CETotals load(const CEParams& p) {
    CETotals t{1.0f, 1.0f, float(p.num_classes)};
    if (p.reduction == 1) {
      t.w = __ldg(p.totals);
      t.r = __ldg(p.totals + 1);
    }
    if (p.wsmooth) t.wsum = __ldg(p.totals + 2);
    return t;
  }
};

// The row's upstream gradient (1 without one).
__device__ __forceinline__ float ce_dloss(const CEParams& p, int64_t row) {
  return p.dloss ? __ldg(p.dloss + (p.dloss_per_row ? row : 0)) : 1.0f;
}

// The row's gradient coefficients, from its statistics or its lse.
struct CECoef {
  float lse;
  float A, a, b;  // dL/dx'_c = A p_c - b w_c - a [c == t]
  int tcol;       // the target's column (-1 when it has none)
  bool zero;      // an ignored row: the gradient is exactly 0

  __device__ __forceinline__ CECoef(const CEParams& p, const CERow& r, const core::MaxSumDot& st, int64_t row)
      : CECoef(p, r, ce_lse(st), ce_dloss(p, row), CETotals::load(p)) {}
  __device__ __forceinline__ CECoef(const CEParams& p, const CERow& r, float row_lse, int64_t row)
      : CECoef(p, r, row_lse, ce_dloss(p, row), CETotals::load(p)) {}
  // From the row's upstream gradient g and the totals, already loaded.
  __device__ __forceinline__ CECoef(const CEParams& p, const CERow& r, float row_lse, float g, const CETotals& tot) {
    lse = row_lse;
    zero = r.ignored;
    tcol = int(r.tl);
    float gce = g, gz = g;
    if (p.reduction == 1) {
      gce = __fdiv_rn(g, tot.w);
      gz = __fdiv_rn(g, tot.r);
    }
    const float V = float(p.num_classes);
    a = gce * (1.0f - p.smoothing) * r.wt;
    b = gce * p.smoothing / V;
    A = a + b * tot.wsum + 2.0f * gz * p.z_loss * lse;
    if (r.bad) A = a = b = __int_as_float(0x7fc00000);
  }
};

// The reduced loss from the sums: 'sum' sce + sz (sz = 0), 'mean' sce / W +
// sz / R; a mean with W = 0 (every row ignored, or zero weights) is NaN, as
// torch's 0 / 0 (W != 0 means a counted row: R >= 1). The finish and combine
// kernels, one row's own loss and a rows cluster's rank 0 all end here: the
// same arithmetic, the same bits.
// kOneRow: R = 1, whose division (sz / 1 = sz, exact) is left out: ptxas
// does not fold a __fdiv_rn by 1, and one row's own loss paid for it
// (+0.13 us a call at M = 1, decode_sweep bf16, H100: 3.06 -> 3.19 at
// N = 2048, 3.34 -> 3.47 at 4096, 3.57 -> 3.70 at 8192, b2f9841 against
// 0638829, two rounds). Without it, 0.07-0.15 us less again (3.19 / 3.47 /
// 3.71 -> 3.10 / 3.39 / 3.57, one call, two rounds, H100, sixtieth
// session: bench/results/2026-12-06-ce-decode-rows-pack-h100.md).
template <bool kOneRow = false>
__device__ __forceinline__ float ce_reduced_loss(int reduction, float w, float r, float sce, float sz) {
  if (reduction != 1) return sce + sz;
  if (!(w != 0.0f)) return __int_as_float(0x7fc00000);
  // One row of weight 1 (no class weights): sce / 1 is sce exactly, so the
  // writer skips the division's dozen instructions (the finish kernel's
  // bits all the same).
  if (kOneRow && w == 1.0f) return sce + sz;
  return __fdiv_rn(sce, w) + (kOneRow ? sz : __fdiv_rn(sz, r));
}

// The row's loss (or its share of the total) from its statistics and target
// logit x'_t; written by one thread per row (tot: the totals, if loaded;
// slot: the CTA's shared slot of a rows cluster, p.rows_cluster).
__device__ __forceinline__ void ce_write_row(const CEParams& p, const CERow& r, const core::MaxSumDot& st,
                                             float xt, int64_t row, const CETotals* tot = nullptr,
                                             float4* slot = nullptr) {
  if (p.stats) {  // a shard's statistics, combined across shards by the caller
    p.stats[row] = make_float4(st.m, st.s, st.d, xt);
    return;
  }
  const float lse = ce_lse(st);
  if (p.lse) p.lse[row] = lse;
  if (!p.row_loss && !p.loss_out) return;
  float ce = 0.0f, z = 0.0f;
  if (r.bad) {
    ce = __int_as_float(0x7fc00000);
  } else if (!r.ignored) {
    const float V = float(p.num_classes);
    // sum_c w_c (lse - x'_c) = lse sum_c w_c - d.
    const float wsum = tot ? tot->wsum : p.wsmooth ? __ldg(p.totals + 2) : V;
    ce = (1.0f - p.smoothing) * r.wt * (lse - xt);
    if (p.smoothing != 0.0f) ce += p.smoothing / V * (lse * wsum - st.d);
    z = p.z_loss * lse * lse;
  }
  // A rows cluster: what the finish kernel would read of this row -- its
  // share(s) -- and count -- w_t and 1 where counted -- for rank 0.
  if (slot != nullptr) {
    const bool counted = !r.ignored && !r.bad;
    *slot = p.reduction == 1 ? make_float4(ce, z, r.wt, counted ? 1.0f : 0.0f)
                             : make_float4(ce + z, 0.0f, 0.0f, 0.0f);
    return;
  }
  // One row: the finish kernel's value from its sums of one term each. Its
  // sums start at 0 and add zeros (0 + v: -0 becomes +0, nothing else
  // changes), W is w_t of a counted row (else 0: NaN, as torch's 0 / 0)
  // and R is 1 (where W = 0 it is never read); 'sum' adds no z-loss sum (0).
  if (p.loss_out) {
    const bool mean = p.reduction == 1;
    *p.loss_out = ce_reduced_loss<true>(p.reduction, 0.0f + r.wt, 1.0f, mean ? 0.0f + ce : 0.0f + (ce + z),
                                  mean ? 0.0f + z : 0.0f);
  } else if (p.reduction == 1) {
    p.row_loss[row] = ce;
    p.row_z[row] = z;
  } else {
    p.row_loss[row] = ce + z;
  }
}

// x'_t, loaded by the thread that writes the row's loss (the load's latency
// hides under the row's reduction).
template <typename T>
__device__ __forceinline__ float ce_target_logit(const CEParams& p, const CERow& r, int64_t row, float k2) {
  if (r.tl < 0) return 0.0f;
  const float x = core::to_float(static_cast<const T*>(p.x)[row * p.x_stride + r.tl]);
  return p.softcap != 0.0f ? softcap_of(x, p.softcap, k2) : x;
}

// Per-element helpers. kGeneral: the softcap and class-weighted smoothing
// (run-time options) are compiled in; without them (the common case) an
// element costs the forward a widening, an FADD, an FMUL, one MUFU.EX2 and two
// FADDs, and the gradient about as much again (ncu, ba84dd7, H200: with both
// options always compiled in, predicated per element, the bf16 forward issued
// ~40 instructions per element and ran at 28% of DRAM bandwidth, SM 74% busy).

// dx of VEC elements at columns c0.. (those in [lo, n) valid: a shifted
// row's first vector starts before the row, c0 < 0) from their logits f[]
// (x', with a softcap applied). Class weights are read for valid lanes only.
template <bool kGeneral, int VEC>
__device__ __forceinline__ void ce_grad(const CEParams& p, const CECoef& k, int c0, int lo, int n,
                                        float (&f)[VEC]) {
  if (k.zero) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) f[j] = 0.0f;
    return;
  }
  const int jt = k.tcol - c0;  // the target's place in this vector, if any
  [[maybe_unused]] const float inv_c = kGeneral && p.softcap != 0.0f ? 1.0f / p.softcap : 0.0f;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float pc = core::fast_exp2((f[j] - k.lse) * kLog2e);
    float g;
    if constexpr (kGeneral) {
      float wc = 1.0f;
      if (p.wsmooth && j >= lo && j < n) wc = __ldg(p.cwc + c0 + j);
      g = fmaf(k.A, pc, -k.b * wc);
    } else {
      g = fmaf(k.A, pc, -k.b);
    }
    if (j == jt) g -= k.a;
    if constexpr (kGeneral) {
      if (p.softcap != 0.0f) {
        const float u = f[j] * inv_c;
        g *= fmaf(-u, u, 1.0f);
      }
    }
    f[j] = g;
  }
}
template <bool kGeneral, int VEC>
__device__ __forceinline__ void ce_grad(const CEParams& p, const CECoef& k, int c0, int n, float (&f)[VEC]) {
  ce_grad<kGeneral>(p, k, c0, 0, n, f);
}

// Widens a vector and (kGeneral) applies the softcap.
template <bool kGeneral, typename T, int VEC>
__device__ __forceinline__ void ce_widen(const core::RawVec<T, VEC>& v, float (&f)[VEC], float c, float k2) {
  v.widen(f);
  if constexpr (kGeneral) {
    if (c != 0.0f) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) f[j] = softcap_of(f[j], c, k2);
    }
  }
}

// exp(f - base) as 2^(f log2e - b) 2^-r, b = core::log2_base(base): one
// FFMA and the MUFU.EX2 an element instead of an FADD, an FMUL and the
// MUFU.EX2; the caller applies 2^-r once (core::from_log2_units, or a
// gradient's coefficient), so that no rounding of b reaches the results,
// and takes |base| >= 2^24 in natural units (core::log2_units_ok: there
// 2^r leaves the float range).
__device__ __forceinline__ float ce_exp_from(float f, float b) {
  return core::fast_exp2(fmaf(f, kLog2e, -b));
}

// Adds VEC logits at columns c0.. (kMasked: those in [lo, n), as ce_grad)
// into the thread's (s, d) against the max `base`.
template <bool kGeneral, bool kMasked, int VEC>
__device__ __forceinline__ void ce_accumulate(const CEParams& p, const float (&f)[VEC], int c0, int lo, int n,
                                              float base, float& s, float& d) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    if (!kMasked || (j >= lo && j < n)) {
      // (Not ce_exp_from: with it the 16-bit register forward of 8 vectors
      // a thread spilled 12 bytes, ptxas -v.)
      s += core::fast_exp2((f[j] - base) * kLog2e);
      if constexpr (kGeneral) d = p.wsmooth ? fmaf(__ldg(p.cwc + c0 + j), f[j], d) : d + f[j];
      else d += f[j];
    }
  }
}
template <bool kGeneral, bool kMasked, int VEC>
__device__ __forceinline__ void ce_accumulate(const CEParams& p, const float (&f)[VEC], int c0, int n,
                                              float base, float& s, float& d) {
  ce_accumulate<kGeneral, kMasked>(p, f, c0, 0, n, base, s, d);
}

// x'_t into `xt` when the target's column lies in this vector (k = its index
// in it); a branch taken by one thread a row, around a select chain (an
// indexed register array would go to local memory).
template <int VEC>
__device__ __forceinline__ void ce_pick_target(const float (&f)[VEC], int k, float& xt) {
  if (static_cast<unsigned>(k) < static_cast<unsigned>(VEC)) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) xt = j == k ? f[j] : xt;
  }
}

// Rank 0's first warp (lane `lane`) adds a rows cluster's slots, rank k's
// at(k), as the finish kernel adds the shares -- lane l the float4 group of
// rows 4l .. 4l + 3 as (a + b) + (c + d) after 0, then the tail row
// 4 * (M / 4) + l, then the butterfly (a one-warp block_reduce; the finish
// kernel's wider CTAs add only zero partials at M <= 16) -- and counts W and
// R as its ce_counted_rows (lane l row l): the same bits. Lane 0 writes the
// loss.
template <class At>
__device__ __forceinline__ void ce_cluster_add_slots(const CEParams& p, int lane, At at) {
  const int m = p.rows_cluster, groups = m / 4;
  float2 s = make_float2(0.0f, 0.0f), wr = make_float2(0.0f, 0.0f);
  if (lane < groups) {
    const float4 a = at(4 * lane), b = at(4 * lane + 1), c = at(4 * lane + 2), d = at(4 * lane + 3);
    s.x += (a.x + b.x) + (c.x + d.x);
    s.y += (a.y + b.y) + (c.y + d.y);
  }
  if (4 * groups + lane < m) {
    const float4 e = at(4 * groups + lane);
    s.x += e.x;
    s.y += e.y;
  }
  if (lane < m) {
    const float4 e = at(lane);
    wr.x += e.z;
    wr.y += e.w;
  }
  s = core::warp_reduce<core::SumPairOp>(s);
  wr = core::warp_reduce<core::SumPairOp>(wr);
  if (lane == 0) *p.loss_out = ce_reduced_loss(p.reduction, wr.x, wr.y, s.x, s.y);
}

// A rows cluster's reduced loss (p.rows_cluster = M rows, CTA r of the one
// cluster holding row r's terms in its `slot`): every thread of every CTA
// calls it once, after its rows. Rank 0's first warp reads the slots
// through distributed shared memory and adds them (ce_cluster_add_slots).
// The second barrier keeps every CTA until rank 0 has read its slot.
__device__ __forceinline__ void ce_cluster_finish(const CEParams& p, float4* slot) {
  core::cluster_arrive();  // (release: the slot's store)
  core::cluster_wait();
  if (core::cluster_cta_rank() == 0 && threadIdx.x < 32) {
    const int lane = int(threadIdx.x);
    const uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(slot));
    // Rank k's slot through distributed shared memory.
    auto at = [&](int k) {
      uint32_t remote;
      float4 v;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(k));
      asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                   : "r"(remote)
                   : "memory");
      return v;
    };
    ce_cluster_add_slots(p, lane, at);
  }
  core::cluster_arrive();
  core::cluster_wait();
}

// The rows cluster's slots in rank 0 (slot r from rank r) and the mbarrier
// that counts their bytes, for the one-way finish.
struct CERowsInbox {
  float4 slots[16];
  uint64_t bar;
};

// At kernel start, every thread of every CTA of a one-way rows cluster:
// rank 0's mbarrier initialised (every CTA initialises its own; only rank
// 0's is used) and made visible to the cluster, then the barrier's relaxed
// arrival, whose wait (ce_cluster_finish_oneway, at the end: long since
// complete) lets the peers send.
__device__ __forceinline__ void ce_cluster_oneway_start(CERowsInbox& in) {
  if (threadIdx.x == 0) {
    core::mbar_init(core::smem_addr(&in.bar), 1);
    core::mbar_init_fence();
  }
  core::cluster_arrive_relaxed();
}

// ce_cluster_finish without its barriers (RowTuning::ce_cluster_oneway):
// every thread of every CTA calls it once, after its rows; `sender` is the
// thread that wrote `slot`. It sends the slot into rank 0's inbox with
// st.async (completing 16 bytes on rank 0's mbarrier) and leaves; rank 0's
// first warp waits for M * 16 bytes and adds the slots exactly as
// ce_cluster_finish adds them (the same bits). No CTA reads a peer's shared
// memory, and rank 0 -- the only one written to -- stays until every slot
// has landed, so no barrier is needed before exit.
__device__ __forceinline__ void ce_cluster_finish_oneway(const CEParams& p, const float4* slot, bool sender,
                                                         CERowsInbox& in) {
  core::cluster_wait_plain();  // every CTA's mbarrier initialised
  const int rank = core::cluster_cta_rank();
  const uint32_t bar = core::smem_addr(&in.bar), slots = core::smem_addr(&in.slots[0]);
  if (sender)
    core::st_async_v4(core::cluster_map(slots + 16 * uint32_t(rank), 0), *reinterpret_cast<const uint4*>(slot),
                      core::cluster_map(bar, 0));
  if (rank != 0 || threadIdx.x >= 32) return;
  const int lane = int(threadIdx.x);
  if (lane == 0) core::mbar_arrive_expect_tx(bar, 16 * uint32_t(p.rows_cluster));
  core::mbar_wait(bar, 0);
  ce_cluster_add_slots(p, lane, [&](int k) { return in.slots[k]; });
}

// ---------------------------------------------------------------------------
// Register-resident rows. kGrad: dx is written (from the registers).
// kShift: rows whose first logit may lie inside a 16-byte vector (x and dx
// at the same offset in one, row by row), walked from that vector as the
// softmax register kernels' (core::RowGeom::shift; the plan sized for
// V + VEC - 1 columns); the per-element helpers take the vectors' real
// columns (g.col(i) - sh) and their valid lanes [g.lo(i), g.valid(i)).
// kLean (decode-sized forwards, RowTuning::reg_lean bit 2): a plain
// forward's unclustered row that is one team owning its CTA and exactly the
// tile (RowGeom::make_lean: the row is the row block, every vector whole),
// reduced by the CTA with no test of the team's size (block_reduce_narrow:
// 3 butterfly levels over 8 warps' partials, not 5) -- softmax's and the
// norms' lean rows.
template <typename T, int VPT, bool kCluster, bool kGrad, bool kGeneral, bool kShift = false, bool kLean = false,
          bool kRows = false>
__global__ void __launch_bounds__(kRegRowMaxThreads, 1) ce_reg_kernel(const CEParams p) {
  core::pdl_launch_dependents();  // (the finish kernel: ops::ce_finish_kernel)
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  static_assert(!kLean || (!kCluster && !kGrad && !kGeneral && !kShift), "lean rows: a plain, unclustered forward");
  extern __shared__ __align__(16) unsigned char smem[];
  // Up to 4 vectors a thread, the row's statistics reduce max first (the
  // staged gradient's MaxSumDotMaxFirstOp: one exponential a lane, then
  // plain sums), not by the online combine's two exponentials (with -inf
  // tests) at every level of the warp's and the CTA's butterflies. At
  // decode sizes the kernel is bound by its instructions' latency: at M =
  // 1, N = 2048 bf16 it issued 4,781 warp instructions for 8 warps (~600 a
  // warp, softmax's register kernel 205) and its busiest SMSP was active
  // 5,300-5,800 cycles against softmax's 2,800 (ncu, H100, sixtieth
  // session: bench/results/2026-12-06-ce-decode-rows-pack-h100.md).
  // Measured (predicted 0.1-0.2 us): decode_sweep bf16, H100, against
  // d249a62 in one call, lean rows off: 0.68-1.28 us less a call where
  // these tiles run (2048 M = 1 3.02 -> 2.32, 4096 M = 4 4.83 -> 4.15, 8192
  // M = 256 6.96 -> 5.99); fp32 0.69-1.00 (bench/results/2026-12-06-ce-decode-lean-
  // maxfirst-h100.md). Each level of the online combine kept a shuffle
  // waiting on two exponentials and a branch: latency the instruction
  // count (static SASS 1512 -> 1144, bf16 1 vector) understated. (The
  // 8-vector forward spilled 8 bytes with it at 00bb1fa, ptxas -v.)
  using RedOp = std::conditional_t<(VPT <= 4), MaxSumDotMaxFirstOp, MaxSumDotOp>;
  RowReduce<RedOp, kCluster> red;
  red.start(smem);
  const float k2 = p.softcap != 0.0f ? 2.0f * kLog2e / p.softcap : 0.0f;
  // A rows cluster (kRows: p.rows_cluster > 1, unclustered rows without a
  // gradient; launch_ce_reg_rows) -- its own flavour, so that no other
  // launch carries its code: without it the unclustered forwards are ~340
  // instructions shorter (static SASS, bf16: the lean 1-vector tile 1048 ->
  // 528, the 1-vector tile 1336 -> 808, the 8-vector 3424 -> 2888).
  // Predicted M = 1 and M >= 64 0.05-0.15 us less a call (the one-way
  // finish's code had cost them +0.00 .. +0.13); measured 0.04-0.10 less at
  // M = 1, 0.04-0.17 at M = 64 / 256, M = 4 / 16 within 0.03 (ab_decode
  // against fdcb02a, H100,
  // bench/results/2026-12-07-ce-rows-flavour-softmax-keep-h100.md).
  static_assert(!kRows || (!kCluster && !kGrad), "a rows cluster: unclustered rows without a gradient");
  __shared__ float4 rows_slot;
  float4* const slot = kRows ? &rows_slot : nullptr;
  __shared__ CERowsInbox rows_inbox;  // (the one-way finish's)
  const bool oneway = kRows && p.rows_oneway;
  if (oneway) ce_cluster_oneway_start(rows_inbox);
  bool sender = false;  // this thread wrote `slot`

  auto do_rows = [&](int64_t blk) {
    auto g = kLean ? RowGeom<VEC, VPT>::make_lean(p.team, p.cols)
                   : RowGeom<VEC, VPT>::make(p.team, p.cluster, p.cols, kCluster);
    const int64_t row = blk * g.teams + g.team_id;
    const bool active = kLean || row < p.rows;
    const bool writer = active && g.t == 0 && g.crank == 0;
    int sh = 0;  // kShift: the row's elements before it in its first vector
    if constexpr (kShift) sh = shift_row<T>(g, p.x, row, p.x_stride);
    RawVec<T, VEC> xv[VPT];
    MaxSumDot st{-INFINITY, 0.0f, 0.0f, 0.0f};
    int64_t t = 0;  // the row's target (kept over the reduction by lean rows)
    if (active) {
      const T* xrow = static_cast<const T*>(p.x) + row * p.x_stride - sh;
#pragma unroll
      for (int i = 0; i < VPT; ++i) g.load(xv[i], xrow, i);
      // Every thread loads the target (a broadcast, in flight with the row);
      // the thread whose vector holds the target's column contributes x'_t
      // to the reduction (st.x). A writer loading the target and then its
      // logit would hold the row for two DRAM latencies in series.
      t = CERow::target_of(p, row);
      if (!g.whole) {
#pragma unroll
        for (int i = 0; i < VPT; ++i) xv[i].fill_tail(g.valid(i), neg_inf_bits<T>());
        if constexpr (kShift) xv[0].fill_head(g.head, neg_inf_bits<T>());
      }
      // The max of the raw logits (softcap is monotonic), then one
      // exponential per element against it.
      float m = max_of(xv);
      if (kGeneral && p.softcap != 0.0f && m != -INFINITY) m = softcap_of(m, p.softcap, k2);
      const float base = m == -INFINITY ? 0.0f : m;
      // (The general flavour keeps one masked loop: the split spilled its
      // fp16 tile of 4, ptxas -v.)
      // The target's column in these logits, -1 when none.
      const int64_t tl = t - p.class_offset;
      const int tcol = (t == p.ignore_index || t < 0 || t >= p.num_classes || tl < 0 || tl >= p.cols) ? -1 : int(tl);
      // ... and in the walked columns (kShift: sh further; none stays -1,
      // which a shifted head's padding lanes -- columns -sh .. -1 -- must
      // not match).
      const int tcs = kShift && tcol >= 0 ? tcol + sh : tcol;
      if (!kGeneral && g.whole) {
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
          float f[VEC];
          ce_widen<kGeneral>(xv[i], f, p.softcap, k2);
          ce_pick_target(f, tcs - g.col(i), st.x);
          ce_accumulate<kGeneral, false>(p, f, g.col(i) - sh, VEC, base, st.s, st.d);
        }
      } else {
        // The thread holding the row's end (or, shifted, its start): padding
        // excluded element by element.
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
          float f[VEC];
          ce_widen<kGeneral>(xv[i], f, p.softcap, k2);
          ce_pick_target(f, tcs - g.col(i), st.x);
          ce_accumulate<kGeneral, true>(p, f, g.col(i) - sh, g.lo(i), g.valid(i), base, st.s, st.d);
        }
      }
      st.m = m;
    }
    if constexpr (kLean) st = red.reduce_cta(st);
    else st = red.reduce(st, g.team, p.cluster, g.crank);
    if (!active) return;
    // The row's scalars again, when fewer registers are live: the target
    // from L1 again, or, in a lean row (1-2 vectors a thread, registers to
    // spare), the one loaded before the reduction, so that the writer's
    // path after it has no load of the target (an L1 round trip).
    const CERow r = kLean ? CERow::of(p, t) : CERow::make(p, row);
    if (writer) ce_write_row(p, r, st, st.x, row, nullptr, slot);
    sender = writer;
    if constexpr (kGrad) {
      const CECoef k(p, r, st, row);
      T* orow = static_cast<T*>(p.dx) + row * p.dx_stride - sh;
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        const int n = g.valid(i);
        if (n == 0) continue;
        float f[VEC];
        ce_widen<kGeneral>(xv[i], f, p.softcap, k2);
        ce_grad<kGeneral>(p, k, g.col(i) - sh, g.lo(i), n, f);
        RawVec<T, VEC> o;
        o.narrow(f);
        g.store(o, orow, i);
      }
    }
  };

  for_row_blocks<kCluster>(p.row_blocks, p.cluster, do_rows);
  red.finish();
  if constexpr (kRows) {
    if (oneway) ce_cluster_finish_oneway(p, slot, sender, rows_inbox);
    else ce_cluster_finish(p, slot);
  }
}

// ---------------------------------------------------------------------------
// The fused gradient of rows staged in shared memory: clusters of p.cluster
// CTAs of p.team threads (RegRowConfig with `staged`), cluster c walking
// rows c, c + clusters, ... -- by default one cluster a row (the grid holds
// every row's cluster), or persistent (RowTuning::ce_staged_clusters: as
// many clusters as are resident, core::launch_row_kernel). CTA r owns
// vectors [r, r + 1) * VPT * team of a row, thread t vectors i * team + t
// (i < VPT) at (i * team + t) * 16 bytes after the reduction's scratch,
// written by cp.async and read by that thread alone. A row: wait for its
// staged copy, reduce it (max, sum of exponentials, the target's logit)
// over the cluster, max first (MaxSumDotMaxFirstOp), then the gradient
// pass; a cluster with a next row refills each slot with it right after
// reading it, so that the next row's reads are in flight with this row's
// writes. (% of the two-sweep ideal, bf16: 66-78% at e299386; the walk
// 69-79%, 942e0d4; the reductions max first 79-82% walking, 80-88% one
// cluster a row, 8be4e96: the default went back to one a row.) Small,
// register-light CTAs, several an SM: the training step reads the logits
// once and writes dx once.
// A thread's whole vectors are a prefix of its VPT (the row's end cuts them
// once): the passes walk that prefix with no per-vector tests, then at most
// one partial vector (kSum: the sum of logits, for label smoothing's loss),
// loaded into registers a row ahead with the target.
// kShift: rows whose first logit may lie inside a 16-byte vector (x and dx
// at the same offset in one, row by row), walked from that vector
// (core::RowGeom::shift, per row: the geometry, the whole prefix and the
// partial vector change with the row's offset). The thread at column 0
// keeps its vector 0 apart (`first` = 1): it is loaded by the thread
// ([head, VEC), zeros before) and stored to its slot, and the passes take
// its lanes [head, VEC) after the whole prefix, as the partial vector's.
// Each row is staged when its turn comes (no refill a row ahead).
template <typename T, int VPT, bool kGeneral, bool kSum, bool kShift = false>
__global__ void __launch_bounds__(kCEStagedThreads, ce_staged_min_blocks(VPT, int(sizeof(T)), kGeneral))
    ce_staged_kernel(const CEParams p) {
  core::pdl_launch_dependents();  // (the finish kernel: ops::ce_finish_kernel)
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  using V = RawVec<T, VEC>;
  // Loops over the tile unroll by 4: fully unrolled, the tile's addresses
  // stay live through the passes (as the softmax forward's staged rows).
  constexpr int kUnroll = 4;
  extern __shared__ __align__(16) unsigned char smem[];
  RowReduce<MaxSumDotMaxFirstOp, true> red;
  red.start(smem);
  const float k2 = kGeneral && p.softcap != 0.0f ? 2.0f * kLog2e / p.softcap : 0.0f;
  auto g = RowGeom<VEC, VPT>::make(p.team, p.cluster, p.cols, true);
  const int64_t row_step = int64_t(gridDim.x / unsigned(p.cluster));
  // Whole vectors of this thread: i < nw; vector nw holds `part` elements
  // (0 < part < VEC) when the row ends inside it. kShift: the row's offset
  // sh; vectors [first, nw) are whole (first = 1 at the head, vector 0 of
  // the thread at column 0, whose lanes [head, VEC) are the row's); the
  // partial vector's lanes are [plo, part) (plo = head where the head
  // vector is the partial one: a row shorter than a vector).
  int sh = 0, nw = 0, part = 0, first = 0, plo = 0;
  auto geometry = [&]() {
    const int rest = g.cols - g.col0;
    nw = g.whole ? VPT : (rest < VEC ? 0 : min(VPT, (rest - VEC) / g.col_step + 1));
    part = nw < VPT ? max(0, min(VEC - 1, g.cols - g.col(nw))) : 0;
    if constexpr (kShift) {
      first = g.head > 0 && nw > 0 ? 1 : 0;
      plo = nw == 0 ? g.head : 0;
    }
  };
  geometry();
  const uint32_t slot0 = smem_addr(smem) + kCEScratchBytes + uint32_t(g.t) * 16;
  auto x_at = [&](int i) {
    V v;
    lds<16>(g.slot(slot0, i), v.w);
    return v;
  };
  auto stage = [&](const T* xrow, int i) { cp_async16(g.slot(slot0, i), xrow + g.col(i)); };
  // The partial vector by element loads into registers, not a partial
  // cp.async: in place (dx over the logits), the row's partial last
  // vector staged by cp.async with its zero fill read back wrong values
  // (fp32 65537 / 65541, bf16 131073 with padded strides, H200, 466bcfc
  // and 5e84b6d; out of place it read right). -inf past the row's end (out
  // of the max and the sum of exponentials). With it the row's target (a
  // broadcast load) and upstream gradient, in flight with the row; the
  // totals once (no dependent load between the reduction and the gradient).
  const CETotals tot = CETotals::load(p);
  const float g_all = p.dloss_per_row ? 1.0f : ce_dloss(p, 0);
  V tail;
  tail.zero();
  int64_t t = 0;
  float gr = g_all;
  auto fetch = [&](int64_t r) {
    if (part > 0) {
      tail.load_range(static_cast<const T*>(p.x) + r * p.x_stride - sh + g.col(nw), plo, part);
      tail.fill_tail(part, neg_inf_bits<T>());
      if constexpr (kShift) tail.fill_head(plo, neg_inf_bits<T>());
    }
    t = CERow::target_of(p, r);
    if (p.dloss_per_row) gr = ce_dloss(p, r);
  };
  // Row r's whole vectors to their slots (kShift: the head vector by the
  // thread, after the copies are issued), then its partial vector and
  // target (fetch).
  auto stage_row = [&](int64_t r) {
    const T* xrow = static_cast<const T*>(p.x) + r * p.x_stride - sh;
#pragma unroll kUnroll
    for (int i = first; i < nw; ++i) stage(xrow, i);
    cp_async_commit();
    if constexpr (kShift) {
      if (first) {
        V v;
        v.load_range(xrow, g.head, VEC);
        sts16(g.slot(slot0, 0), v.w);
      }
    }
    fetch(r);
  };
  int64_t row = int64_t(blockIdx.x / unsigned(p.cluster));
  if (!kShift && row < p.rows) stage_row(row);
  // (Every CTA of a cluster takes the same rows: the reductions match.)
  for (; row < p.rows; row += row_step) {
    const int64_t next = row + row_step;
    const bool more = !kShift && next < p.rows;
    if constexpr (kShift) {
      g = RowGeom<VEC, VPT>::make(p.team, p.cluster, p.cols, true);
      sh = shift_row<T>(g, p.x, row, p.x_stride);
      geometry();
      stage_row(row);
    }
    cp_async_wait_all();
    MaxSumDot st{-INFINITY, 0.0f, 0.0f, 0.0f};
    float m = max_of_first<T, VEC, kUnroll>(nw - first, [&](int i) { return x_at(i + first); });
    if (part > 0) m = fmaxf(m, max_of_first<T, VEC, 1>(1, [&](int) { return tail; }));
    // The head vector's lanes [head, VEC) (its slot holds zeros before
    // them; read again where used, not held: held through the sums, the
    // 16-bit general 16-vector kernel spilled 8 bytes, ptxas -v).
    if constexpr (kShift) {
      if (first) {
        V hv = x_at(0);
        hv.fill_head(g.head, neg_inf_bits<T>());
        m = fmaxf(m, max_of_first<T, VEC, 1>(1, [&](int) { return hv; }));
      }
    }
    if (kGeneral && p.softcap != 0.0f && m != -INFINITY) m = softcap_of(m, p.softcap, k2);
    const float base = m == -INFINITY ? 0.0f : m;
    const int64_t tl = t - p.class_offset;
    const int tcol = (t == p.ignore_index || t < 0 || t >= p.num_classes || tl < 0 || tl >= p.cols) ? -1 : int(tl);
    // The target's column from the vector before the row (kShift).
    const int tcs = tcol >= 0 ? tcol + sh : -1;
    if (kGeneral || !log2_units_ok(m)) {
      // The general options, and |m| >= 2^24 (a cold path): natural units.
#pragma unroll kUnroll
      for (int i = first; i < nw; ++i) {
        float f[VEC];
        ce_widen<kGeneral>(x_at(i), f, p.softcap, k2);
        ce_accumulate<kGeneral, false>(p, f, g.col(i) - sh, VEC, base, st.s, st.d);
      }
    } else {
      // exp(f - m) as one FFMA and the MUFU.EX2 (ce_exp_from), the sum back
      // in natural units once.
      const float b = log2_base(m);
#pragma unroll kUnroll
      for (int i = first; i < nw; ++i) {
        float f[VEC];
        x_at(i).widen(f);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          st.s += ce_exp_from(f[j], b);
          if constexpr (kSum) st.d += f[j];
        }
      }
      st.s = from_log2_units(st.s, m, b);
    }
    // x'_t from the whole vector that holds the target's column, if this
    // thread's (one test a thread, not one a vector; the head vector's
    // lanes from head on are the row's).
    {
      const int off = tcs - g.col0;
      if (tcs >= 0 && off >= 0 && off / g.col_step < nw && off % g.col_step < VEC) {
        float f[VEC];
        ce_widen<kGeneral>(x_at(off / g.col_step), f, p.softcap, k2);
        ce_pick_target(f, off % g.col_step, st.x);
      }
    }
    if (part > 0) {
      float f[VEC];
      ce_widen<kGeneral>(tail, f, p.softcap, k2);
      ce_pick_target(f, tcs - g.col(nw), st.x);
      ce_accumulate<kGeneral, true>(p, f, g.col(nw) - sh, plo, part, base, st.s, st.d);
    }
    if constexpr (kShift) {
      if (first) {
        float f[VEC];
        ce_widen<kGeneral>(x_at(0), f, p.softcap, k2);
        ce_accumulate<kGeneral, true>(p, f, -sh, g.head, VEC, base, st.s, st.d);
      }
    }
    st.m = m;
    // st.x is now x'_t in every thread (one thread's value plus zeros).
    st = red.reduce(st, g.team, p.cluster, g.crank);
    const CERow r = CERow::of(p, t);
    if (g.t == 0 && g.crank == 0) ce_write_row(p, r, st, st.x, row, &tot);
    const CECoef k(p, r, ce_lse(st), gr, tot);
    T* orow = static_cast<T*>(p.dx) + row * p.dx_stride - sh;
    // The partial vector first: its registers then take the next row's.
    if (part > 0) {
      float f[VEC];
      ce_widen<kGeneral>(tail, f, p.softcap, k2);
      ce_grad<kGeneral>(p, k, g.col(nw) - sh, plo, part, f);
      V o;
      o.narrow(f);
      o.store_range(orow + g.col(nw), plo, part);
    }
    // The head vector's lanes [head, VEC) (before the target's own store
    // below, which may rewrite one of them).
    if constexpr (kShift) {
      if (first) {
        float f[VEC];
        ce_widen<kGeneral>(x_at(0), f, p.softcap, k2);
        ce_grad<kGeneral>(p, k, -sh, g.head, VEC, f);
        V o;
        o.narrow(f);
        o.store_range(orow, g.head, VEC);
      }
    }
    const T* nrow = static_cast<const T*>(p.x) + (more ? next : row) * p.x_stride;
    if (more) fetch(next);
    // Each slot is refilled with the next row after its vector is read and
    // its gradient stored (the store depends on the read).
    if (kGeneral || k.zero || !log2_units_ok(k.lse)) {
      // (An ignored row's gradient is exactly 0: ce_grad. |lse| >= 2^24, a
      // cold path: natural units.)
#pragma unroll kUnroll
      for (int i = first; i < nw; ++i) {
        float f[VEC];
        ce_widen<kGeneral>(x_at(i), f, p.softcap, k2);
        ce_grad<kGeneral>(p, k, g.col(i) - sh, VEC, f);
        V o;
        o.narrow(f);
        o.store(orow + g.col(i));
        if (more) stage(nrow, i);
      }
    } else {
      // dx = A p_c - b an element; the target's own (less a) is stored
      // again below by the thread that holds it, which a select an element
      // would cost every thread (an ISETP and an FSEL: SASS). p_c =
      // exp(f - lse) as one FFMA and the MUFU.EX2 (ce_exp_from), with A
      // times 2^-r (the rounding of lse log2 e) once a row.
      const float lse_log2 = log2_base(k.lse);
      const float A = from_log2_units(k.A, k.lse, lse_log2);
#pragma unroll kUnroll
      for (int i = first; i < nw; ++i) {
        float f[VEC];
        x_at(i).widen(f);
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] = fmaf(A, ce_exp_from(f[j], lse_log2), -k.b);
        V o;
        o.narrow(f);
        o.store(orow + g.col(i));
        if (more) stage(nrow, i);
      }
      // The target's column in a whole vector of this thread: i * col_step
      // = tcol - col0 - jt, 0 <= jt < VEC, i < nw. Its logit is st.x (its
      // slot holds the next row by now; in place, dx has overwritten x).
      const int off = k.tcol + sh - g.col0;
      if (k.tcol >= 0 && off >= 0 && off / g.col_step < nw && off % g.col_step < VEC)
        orow[k.tcol + sh] = from_float<T>(fmaf(A, ce_exp_from(st.x, lse_log2), -k.b) - k.a);
    }
    cp_async_commit();
  }
  red.finish();
}

// The plain forward's online fold of a batch of vectors into (max m, sum
// of exp in log2 units against b = core::log2_base(m), and with kSum the
// sum): one rescale for the batch, 2^(b_old - b_new) (the bases' exact
// difference); v[u] counts when valid(u) (the others hold -inf padding).
// Start from (-inf, kLog2BaseFloor, 0); ce_fold_finish takes s to natural
// units. The sum of logits only serves label smoothing and a shard's
// statistics (ce_sums_logits): without them an element costs a widening, an
// FFMA, the MUFU.EX2 and one FADD.
template <bool kSum, typename T, int VEC, int U, class Valid>
__device__ __forceinline__ void ce_fold_batch(const core::RawVec<T, VEC> (&v)[U], Valid valid, float& m, float& b,
                                              float& s, float& d) {
  using namespace core;
  const float nm = fmaxf(m, max_of(v));
  const float nb = log2_base(nm);
  s = __fmul_rn(s, fast_exp2(b - nb));
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (valid(u)) {
      float f[VEC];
      v[u].widen(f);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        s += ce_exp_from(f[j], nb);
        if constexpr (kSum) d += f[j];
      }
    }
  }
  m = nm;
  b = nb;
}

// A fold's sum (ce_fold_batch) in natural units against the thread's max m:
// s 2^-r (core::from_log2_units); where |m| >= 2^24 (core::log2_units_ok:
// 2^r left the float range) the sum is taken again in natural units, each
// of the thread's vectors from `at(k)` for k = 0, 1, ... while it returns
// true (a cold path: the row is read again).
template <typename T, int VEC, class At>
__device__ __forceinline__ float ce_fold_finish(float m, float b, float s, At&& at) {
  using namespace core;
  if (log2_units_ok(m)) return from_log2_units(s, m, b);
  s = 0.0f;
  RawVec<T, VEC> v;
#pragma unroll 1
  for (int k = 0; at(k, v); ++k) {
    float f[VEC];
    v.widen(f);
#pragma unroll
    for (int j = 0; j < VEC; ++j) s += fast_exp2((f[j] - m) * kLog2e);
  }
  return s;
}

// Whether a plain forward needs the sum of its logits: uniform label
// smoothing's loss, or a shard's statistics (combined later, maybe with
// smoothing).
inline bool ce_sums_logits(const CEParams& p) { return p.stats != nullptr || p.smoothing != 0.0f; }

// ---------------------------------------------------------------------------
// The plain forward of long aligned rows (no gradient, softcap or weighted
// smoothing): it only reads the logits, so it need not hold a row. Small
// persistent CTAs (kCEFwdStreamThreads, four to an SM within 64 registers)
// walk rows; each thread keeps kCEFwdStreamU 16-byte loads in flight and
// folds each batch into its online (max, sum of exp, sum) with one rescale per
// batch; the CTA reduces the row while the SM's other CTAs keep loading.
// Whole vectors in the loop; the row's partial last vector (N % VEC) by
// thread 0. kShift: rows whose first logit may lie inside a 16-byte vector
// (row_shift): the whole vectors from the first 16-byte boundary in the
// row, the elements before it (the head: the rest of the vector that holds
// the first) by thread 0 as the partial last vector's.
constexpr int kCEFwdStreamThreads = 256;
constexpr int kCEFwdStreamU = 8;

template <typename T, bool kSum, bool kShift = false>
__global__ void __launch_bounds__(kCEFwdStreamThreads, 4) ce_fwd_stream_kernel(const CEParams p) {
  core::pdl_launch_dependents();  // (the finish kernel: ops::ce_finish_kernel)
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  constexpr int U = kCEFwdStreamU;
  using V = RawVec<T, VEC>;
  __shared__ __align__(16) unsigned char smem[RowReducer<MaxSumDotOp>::scratch_bytes()];
  int64_t nfull = p.cols / VEC;
  int tail = int(p.cols - nfull * VEC);
  // kShift: row r's offset in its first vector (sh) and the head's
  // elements (hsz), from its pointer made opaque: computed where used, not
  // held through the row's loads (held, the 16-bit kernels spilled 8-20
  // bytes at 64 registers, ptxas -v).
  [[maybe_unused]] auto head_of = [&](int64_t r, int& sh, int& hsz) {
    const T* r0 = static_cast<const T*>(p.x) + r * p.x_stride;
    asm volatile("" : "+l"(r0));
    sh = row_shift<T, true>(r0);
    hsz = sh == 0 ? 0 : int(min(int64_t(VEC - sh), p.cols));
  };
  int rowi = 0;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x, ++rowi) {
    int tid = int(threadIdx.x), nthr = int(blockDim.x);
    asm volatile("" : "+r"(tid), "+r"(nthr));
    const T* xrow = static_cast<const T*>(p.x) + row * p.x_stride;
    // kShift: the whole vectors from the row's first 16-byte boundary.
    if constexpr (kShift) {
      int sh, hsz;
      head_of(row, sh, hsz);
      nfull = (p.cols - hsz) / VEC;
      xrow += hsz;  // (16-byte aligned now)
    }
    const bool writer = threadIdx.x == 0;
    // The writer's target first: its logit's load then overlaps the row's.
    CERow r{};
    if (writer) r = CERow::make(p, row);
    float m = -INFINITY, b = kLog2BaseFloor, s = 0.0f, d = 0.0f;
    int64_t k0 = tid;
    // p.fwd_whole bit 1 (RowTuning::ce_fwd_whole): first the batches whose
    // U vectors all lie in the row, their loads unpredicated and with no
    // padding or test a vector (the same fold, the same bits), then the
    // checked loop for the row's last batch. Aligned rows only: in the
    // kShift instances (16-bit) the second loop spilled 70 bytes at 64
    // registers (ptxas -v, sm_90a, CUDA 13.0).
    if (!kShift && (p.fwd_whole & 2)) {
#pragma unroll 1
      for (; k0 + int64_t(U - 1) * nthr < nfull; k0 += int64_t(U) * nthr) {
        V v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u].load(xrow + (k0 + int64_t(u) * nthr) * VEC);
        ce_fold_batch<kSum>(v, [](int) { return true; }, m, b, s, d);
      }
    }
#pragma unroll 1
    for (; k0 < nfull; k0 += int64_t(U) * nthr) {
      V v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k = k0 + int64_t(u) * nthr;
        if (k < nfull) v[u].load(xrow + k * VEC);
        else v[u].fill_tail(0, neg_inf_bits<T>());
      }
      ce_fold_batch<kSum>(v, [&](int u) { return k0 + int64_t(u) * nthr < nfull; }, m, b, s, d);
    }
    s = ce_fold_finish<T, VEC>(m, b, s, [&](int k, V& v) {
      const int64_t kk = tid + int64_t(k) * nthr;
      if (kk >= nfull) return false;
      v.load(xrow + kk * VEC);
      return true;
    });
    float xt = 0.0f;
    if (writer) {
      xt = ce_target_logit<T>(p, r, row, 0.0f);
      // Lanes [lo, hi) of the vector at vp (-inf elsewhere) into (m, s, d).
      auto fold_part = [&](const T* vp, int lo, int hi) {
        V v[1];
        asm volatile("" : "+l"(vp));
        v[0].load_range(vp, lo, hi);
        v[0].fill_tail(hi, neg_inf_bits<T>());
        if constexpr (kShift) v[0].fill_head(lo, neg_inf_bits<T>());
        float f[VEC];
        v[0].widen(f);
        const float nm = fmaxf(m, max_of(v));
        s = m == -INFINITY ? s * 0.0f : s * fast_exp2((m - nm) * kLog2e);
        ce_accumulate<false, true>(p, f, 0, lo, hi, nm == -INFINITY ? 0.0f : nm, s, d);
        m = nm;
      };
      if constexpr (kShift) {
        int sh, hsz;
        head_of(row, sh, hsz);
        tail = int(p.cols - hsz - nfull * VEC);
        if (tail > 0) fold_part(xrow + nfull * VEC, 0, tail);
        if (hsz > 0) fold_part(xrow - hsz - sh, sh, sh + hsz);
      } else {
        if (tail > 0) fold_part(xrow + nfull * VEC, 0, tail);
      }
    }
    RowReducer<MaxSumDotOp> red(smem, nthr, 1);
    red.parity = rowi & 1;  // consecutive rows alternate the scratch
    const MaxSumDot st = red.reduce(MaxSumDot{m, s, kSum ? d : 0.0f, 0.0f});
    if (writer) ce_write_row(p, r, st, xt, row);
  }
}

// ---------------------------------------------------------------------------
// The plain forward of many aligned rows, a warp a row, the rows streamed
// into shared memory by bulk copies (core/bulk.cuh). Each warp owns a ring of
// `stages` slots of `slot_bytes` and the rows wid, wid + nw, ... (wid its
// global warp index, nw the grid's warps); a row's whole vectors arrive in
// chunks of up to slot_bytes, chunk q of the warp's sequence in slot
// q % stages. Lane 0 keeps every free slot loading the warp's next chunk, so
// the warp's bytes in flight are its ring (stages * slot_bytes), whatever its
// registers; the lanes fold each chunk into their online (max, sum of exp,
// sum) kCEBulkBatch vectors at a time, lane 0 adds the row's partial last
// vector (cols % VEC elements) from global memory, and the warp reduces the
// row with shuffles: no CTA-wide barrier anywhere. The targets arrive 32 rows
// at a time, a group ahead, and x'_t is read from the row's bytes in shared
// memory: no row waits on a dependent pair of global loads (target, then
// its logit), which would take two DRAM latencies a row. Rows of any length; at
// least one whole vector a row (the dispatch asks for 1 KB).
// (Written against the hypothesis in docs/KERNELS.md: a read-only row kernel
// needs twice the bytes in flight of softmax's register kernel.)
// kShift (RowTuning::shifted_rows bit 3): rows whose first logit lies s
// elements into a 16-byte vector (odd V, a misaligned base) copy the same
// V / VEC whole vectors from that vector on -- row elements -s .. V - s -
// 1, inside the row's own 16-byte segments -- so every row still has the
// same chunks; the first vector (its s head lanes before the row) is left
// out of the chunk folds, and lane 0 folds its row lanes, and the row's
// last V % VEC + s elements (up to two vectors), from global memory at the
// end of the row.
constexpr int kCEBulkWarps = 8;
constexpr int kCEBulkThreads = 32 * kCEBulkWarps;
constexpr int kCEBulkMaxStages = 16;
constexpr int kCEBulkBatch = 4;
constexpr int kCEBulkSlotBytes = 4 << 10;  // a chunk at most
constexpr int kCEBulkBarBytes = kCEBulkWarps * kCEBulkMaxStages * 8;
// A warp's ring at `ctas` CTAs an SM (RowTuning::ce_fwd_bulk_ctas): two
// CTAs of 1 KB + 8 x 12 KB, or three of 1 KB + 8 x 8 KB -- the same 192 KB
// of logits in flight an SM either way.
constexpr int ce_bulk_ring_bytes(int ctas) { return ctas == 3 ? 8 << 10 : 12 << 10; }
constexpr int ce_bulk_ctas(int tuned) { return tuned == 3 ? 3 : 2; }
static_assert(3 * (kCEBulkBarBytes + kCEBulkWarps * ce_bulk_ring_bytes(3) + 1024) <= 228 << 10,
              "three bulk CTAs (and the 1 KB the driver keeps a CTA) fit an SM's shared memory");

// The ring of rows of `row_bytes` (whole vectors): chunks of at most
// kCEBulkSlotBytes, as many slots as fit ce_bulk_ring_bytes(ctas) (<= 16).
struct CEBulkRing {
  int slot_bytes = 0, stages = 0;
  static CEBulkRing of(int64_t row_bytes, int ctas) {
    CEBulkRing r;
    r.slot_bytes = int(std::min<int64_t>(row_bytes, kCEBulkSlotBytes));
    r.stages = std::min(kCEBulkMaxStages, ce_bulk_ring_bytes(ctas) / std::max(r.slot_bytes, 16));
    return r;
  }
  size_t smem_bytes() const { return size_t(kCEBulkBarBytes) + size_t(kCEBulkWarps) * stages * slot_bytes; }
};

template <typename T, bool kSum, bool kShift = false, int kCtas = 2>
__global__ void __launch_bounds__(kCEBulkThreads, kCtas)
    ce_fwd_bulk_kernel(const CEParams p, const int stages, const int slot_bytes) {
  core::pdl_launch_dependents();  // (the finish kernel: ops::ce_finish_kernel)
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  constexpr int B = kCEBulkBatch;
  using V = RawVec<T, VEC>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const uint32_t bars = smem_addr(smem) + uint32_t(warp * kCEBulkMaxStages * 8);
  const uint32_t ring = smem_addr(smem) + uint32_t(kCEBulkBarBytes) + uint32_t(warp * stages * slot_bytes);
  const int64_t nfull = p.cols / VEC;
  const int tail = int(p.cols - nfull * VEC);
  const int64_t row_bytes = nfull * 16;
  const int64_t nch = (row_bytes + slot_bytes - 1) / slot_bytes;
  const int64_t wid = int64_t(blockIdx.x) * kCEBulkWarps + warp, nw = int64_t(gridDim.x) * kCEBulkWarps;
  const int64_t total = (wid < p.rows ? (p.rows - 1 - wid) / nw + 1 : 0) * nch;  // the warp's chunks
  if (lane == 0) {
    for (int k = 0; k < stages; ++k) mbar_init(bars + 8 * k, 1);
    mbar_init_fence();
  }
  __syncwarp();
  // Lane 0's producer: the warp's next chunk to load (row prow, chunk pc of
  // it, into slot pslot), pq of the total issued. Counters, not q / nch and
  // q % stages: 64-bit divisions by runtime values (a call each in SASS)
  // made the loop issue-bound, ~3 us a row at any row length on a1348ca
  // (bf16 364 us, fp32 378 us at 1024 columns: the same time a row).
  int64_t prow = wid, pc = 0, pq = 0;
  int pslot = 0;
  // Row `row`'s first element's offset in its 16-byte vector (kShift; else
  // 0), and the row's vectors' start.
  auto shift_of = [&](int64_t row_i) {
    return kShift ? int((reinterpret_cast<uintptr_t>(static_cast<const T*>(p.x) + row_i * p.x_stride) & 15u) /
                        sizeof(T))
                  : 0;
  };
  auto row_vecs = [&](int64_t row_i) { return static_cast<const T*>(p.x) + row_i * p.x_stride - shift_of(row_i); };
  // The copied vectors a row's folds start from: 1 where its head vector is
  // lane 0's (kShift, s > 0), else 0.
  auto k_first_of = [](int s_row) { return kShift && s_row > 0 ? 1 : 0; };
  auto issue_next = [&]() {
    const uint32_t bar = bars + 8 * uint32_t(pslot);
    const int64_t off = pc * slot_bytes;
    const uint32_t bytes = uint32_t(min(int64_t(slot_bytes), row_bytes - off));
    const char* src = reinterpret_cast<const char*>(row_vecs(prow)) + off;
    mbar_arrive_expect_tx(bar, bytes);
    bulk_g2s(ring + uint32_t(pslot) * uint32_t(slot_bytes), src, bytes, bar);
    if (++pslot == stages) pslot = 0;
    if (++pc == nch) {
      pc = 0;
      prow += nw;
    }
    ++pq;
  };
  if (lane == 0)
    while (pq < min(int64_t(stages), total)) issue_next();
  // The targets, 32 rows at a time: lane l holds the target of the warp's
  // row g * 32 + l of the current group g and has the next group's in
  // flight, so that no row waits for a target load and then for its logit's
  // (x'_t comes from the row's bytes in shared memory).
  auto group_target = [&](int64_t ri) -> int64_t {
    const int64_t row = wid + ri * nw;
    return row < p.rows ? CERow::target_of(p, row) : p.ignore_index;
  };
  int64_t t_cur = group_target(lane), t_next = group_target(32 + lane);
  const int64_t slot_elems = slot_bytes / int(sizeof(T));
  float m = -INFINITY, b = kLog2BaseFloor, s = 0.0f, d = 0.0f, xt = 0.0f;
  CERow r{};
  // The consumer: chunk c of the warp's row ri (global row `row`) in slot
  // `slot_i`, whose barrier completes phase `phase` for it.
  int64_t c = 0, ri = 0, row = wid;
  int slot_i = 0, sh = 0;
  uint32_t phase = 0;
  for (int64_t q = 0; q < total; ++q) {
    if (c == 0) {
      sh = shift_of(row);
      m = -INFINITY;
      b = kLog2BaseFloor;
      s = 0.0f;
      d = 0.0f;
      xt = 0.0f;
      if (ri > 0 && (ri & 31) == 0) {
        t_cur = t_next;
        t_next = group_target(ri + 32 + lane);
      }
      const int64_t t = __shfl_sync(0xffffffffu, static_cast<long long>(t_cur), int(ri & 31));
      if (lane == 0) r = CERow::of(p, t);
    }
    const int nv = int(min(int64_t(slot_bytes), row_bytes - c * slot_bytes) / 16);
    const uint32_t slot = ring + uint32_t(slot_i) * uint32_t(slot_bytes);
    mbar_wait(bars + 8 * uint32_t(slot_i), phase);
    // x'_t, when this chunk holds it (kShift: sh further in).
    const int64_t tls = !kShift ? r.tl : r.tl >= 0 ? r.tl + sh : -1;
    if (lane == 0 && tls >= c * slot_elems && tls < c * slot_elems + int64_t(nv) * VEC) {
      V v{};
      v.w[0] = lds_bits<sizeof(T)>(slot + uint32_t(tls - c * slot_elems) * uint32_t(sizeof(T)));
      float f[VEC];
      v.widen(f);
      xt = f[0];
    }
    // (kShift: the row's first vector, its head before the row, is lane 0's
    // at the end of the row)
    const int k_first = c == 0 ? k_first_of(sh) : 0;
    // Vector k of the chunk: one the lane folds (in the chunk, not the
    // shifted head), and its 16 bytes from the slot.
    auto folded = [&](int k) { return k < nv && (!kShift || k >= k_first); };
    auto slot_vec = [&](int k, V& v) {
      const uint4 w = lds128(slot + uint32_t(k) * 16);
      v.w[0] = w.x;
      v.w[1] = w.y;
      v.w[2] = w.z;
      v.w[3] = w.w;
    };
    int k0 = lane;
    // p.fwd_whole bit 0 (RowTuning::ce_fwd_whole): first the lane's batches
    // whose B vectors all lie in the chunk -- every batch of a whole 4 KB
    // chunk -- as straight-line loads at fixed offsets with no padding and
    // no test a vector (the same fold, the same bits), then the checked
    // loop for the rest. The checked loop alone spends ~60 of its ~192
    // instructions a batch of 32 bf16 logits on the tests, the -inf
    // padding and a branch a vector (SASS, sm_90a, CUDA 13.0).
    if (p.fwd_whole & 1) {
      for (; k0 + (B - 1) * 32 < nv && (!kShift || k0 >= k_first); k0 += B * 32) {
        V v[B];
#pragma unroll
        for (int u = 0; u < B; ++u) slot_vec(k0 + u * 32, v[u]);
        ce_fold_batch<kSum>(v, [](int) { return true; }, m, b, s, d);
      }
    }
    for (; k0 < nv; k0 += B * 32) {
      V v[B];
#pragma unroll
      for (int u = 0; u < B; ++u) {
        if (folded(k0 + u * 32)) slot_vec(k0 + u * 32, v[u]);
        else v[u].fill_tail(0, neg_inf_bits<T>());
      }
      ce_fold_batch<kSum>(v, [&](int u) { return folded(k0 + u * 32); }, m, b, s, d);
    }
    __syncwarp();  // every lane has read the slot: it may be refilled
    if (lane == 0 && pq < total) {  // the next chunk into the slot just read
      fence_proxy_async_smem();
      issue_next();
    }
    if (++slot_i == stages) {
      slot_i = 0;
      phase ^= 1u;
    }
    if (c == nch - 1) {
      // The lane's vectors again, from global memory, where its max is out
      // of log2 units' range: chunk k / per of the row, its vector
      // lane + 32 (k % per).
      const int64_t per = (slot_bytes / 16 + 31) / 32;
      const T* const xa = row_vecs(row);
      s = ce_fold_finish<T, VEC>(m, b, s, [&](int k, V& v) {
        const int64_t ck = k / per, kk = lane + 32 * (k % per);
        if (ck >= nch) return false;
        if (kk < min(int64_t(slot_bytes), row_bytes - ck * slot_bytes) / 16 && !(kShift && ck == 0 && kk < k_first_of(sh)))
          v.load(xa + (ck * (slot_bytes / 16) + kk) * VEC);
        else
          v.fill_tail(0, neg_inf_bits<T>());
        return true;
      });
      // Lane 0: the row's lanes [lo, hi) of the vector at xa + e (row
      // columns e - sh ..), from global memory, in natural units as the
      // fold's sum now is.
      auto fold_vec = [&](int64_t e, int lo, int hi) {
        V v[1];
        v[0].load_range(xa + e, lo, hi);
        v[0].fill_tail(hi, neg_inf_bits<T>());
        v[0].fill_head(lo, neg_inf_bits<T>());
        float f[VEC];
        v[0].widen(f);
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          if (e - sh + j == r.tl) xt = f[j];  // the target here (lanes outside [lo, hi) are no column of the row)
        const float nm = fmaxf(m, max_of(v));
        s = m == -INFINITY ? s * 0.0f : s * fast_exp2((m - nm) * kLog2e);
        ce_accumulate<false, true>(p, f, 0, lo, hi, nm == -INFINITY ? 0.0f : nm, s, d);
        m = nm;
      };
      if constexpr (kShift) {
        if (lane == 0) {
          if (sh > 0) fold_vec(0, sh, int(min(int64_t(VEC), sh + p.cols)));  // the head vector's row lanes
          const int rest = tail + sh;                                         // after the copied vectors
          if (rest > 0) fold_vec(nfull * VEC, 0, min(rest, VEC));
          if (rest > VEC) fold_vec((nfull + 1) * VEC, 0, rest - VEC);
        }
      } else if (lane == 0 && tail > 0) {
        fold_vec(nfull * VEC, 0, tail);  // the aligned rows' partial last vector
      }
      const MaxSumDot st = warp_reduce<MaxSumDotOp>(MaxSumDot{m, s, kSum ? d : 0.0f, 0.0f});
      if (lane == 0) ce_write_row(p, r, st, xt, row);
    }
    if (++c == nch) {
      c = 0;
      ++ri;
      row += nw;
    }
  }
}

// ---------------------------------------------------------------------------
// The gradient pass of two-pass plain rows: the forward wrote every row's lse
// (p.lse) and loss; dx = A p_c - b - a [c == t] element by element from x and
// lse alone. Persistent CTAs as ce_fwd_stream_kernel; a thread loads
// kCEGradStreamU vectors, then computes and stores them; the row's partial
// last vector by thread 0. dx may be x (in place): each element is read
// before the same thread writes it.
constexpr int kCEGradStreamU = 4;

template <typename T>
__global__ void __launch_bounds__(kCEFwdStreamThreads, 4) ce_grad_stream_kernel(const CEParams p) {
  core::pdl_launch_dependents();  // (the finish kernel: ops::ce_finish_kernel)
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  constexpr int U = kCEGradStreamU;
  using V = RawVec<T, VEC>;
  const int64_t nfull = p.cols / VEC;
  const int tail = int(p.cols - nfull * VEC);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    int tid = int(threadIdx.x), nthr = int(blockDim.x);
    asm volatile("" : "+r"(tid), "+r"(nthr));
    const T* xrow = static_cast<const T*>(p.x) + row * p.x_stride;
    T* orow = static_cast<T*>(p.dx) + row * p.dx_stride;
    const CERow r = CERow::make(p, row);
    const CECoef k(p, r, __ldg(p.lse_src + row), row);
#pragma unroll 1
    for (int64_t k0 = tid; k0 < nfull; k0 += int64_t(U) * nthr) {
      V v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t kv = k0 + int64_t(u) * nthr;
        if (kv < nfull) v[u].load(xrow + kv * VEC);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t kv = k0 + int64_t(u) * nthr;
        if (kv < nfull) {
          float f[VEC];
          v[u].widen(f);
          ce_grad<false>(p, k, int(kv * VEC), VEC, f);
          v[u].narrow(f);
          v[u].store(orow + kv * VEC);
        }
      }
    }
    if (tail > 0 && tid == 0) {
      V v;
      const T* tp = xrow + nfull * VEC;
      asm volatile("" : "+l"(tp));
      v.load_partial(tp, tail);
      float f[VEC];
      v.widen(f);
      ce_grad<false>(p, k, int(nfull * VEC), tail, f);
      v.narrow(f);
      v.store_partial(orow + nfull * VEC, tail);
    }
  }
}

// ---------------------------------------------------------------------------
// One row's gradient by the whole CTA, VEC elements a thread a step, any
// options (kVecIO: 16-byte accesses; else element by element).
template <typename T, bool kVecIO>
__device__ __forceinline__ void ce_stream_grad_row(const CEParams& p, const CECoef& k, const T* xrow, int64_t row,
                                                   float k2) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  const int64_t cols = p.cols, step = int64_t(blockDim.x) * VEC;
  T* orow = static_cast<T*>(p.dx) + row * p.dx_stride;
  for (int64_t c = int64_t(threadIdx.x) * VEC; c < cols; c += step) {
    const int n = cols - c < VEC ? int(cols - c) : VEC;
    RawVec<T, VEC> v;
    stream_load<T, VEC, kVecIO>(v, xrow + c, n);
    float f[VEC];
    ce_widen<true>(v, f, p.softcap, k2);
    ce_grad<true>(p, k, int(c), n, f);
    v.narrow(f);
    stream_store<T, VEC, kVecIO>(v, orow + c, n);
  }
}

// ---------------------------------------------------------------------------
// Streaming rows: one CTA per row (grid-stride), the statistics in one pass
// with online rescaling, the gradient in a second. kVecIO: 16-byte accesses
// (aligned rows); otherwise element by element.
template <typename T, bool kVecIO, bool kGrad>
__global__ void __launch_bounds__(kRegRowMaxThreads, 1) ce_stream_kernel(const CEParams p) {
  core::pdl_launch_dependents();  // (the finish kernel: ops::ce_finish_kernel)
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char smem[];
  const float k2 = p.softcap != 0.0f ? 2.0f * kLog2e / p.softcap : 0.0f;
  const int64_t cols = p.cols, step = int64_t(blockDim.x) * VEC;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* xrow = static_cast<const T*>(p.x) + row * p.x_stride;
    const CERow r = CERow::make(p, row);
    const bool writer = threadIdx.x == 0;
    const float xt = writer ? ce_target_logit<T>(p, r, row, k2) : 0.0f;
    float m = -INFINITY, s = 0.0f, d = 0.0f;
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < cols; c += step) {
      const int n = cols - c < VEC ? int(cols - c) : VEC;
      RawVec<T, VEC> v;
      stream_load<T, VEC, kVecIO>(v, xrow + c, n);
      float f[VEC];
      ce_widen<true>(v, f, p.softcap, k2);
      float vm = -INFINITY;
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (j < n) vm = fmaxf(vm, f[j]);
      const float nm = fmaxf(m, vm);
      s = m == -INFINITY ? s * 0.0f : s * fast_exp2((m - nm) * kLog2e);
      ce_accumulate<true, true>(p, f, int(c), n, nm == -INFINITY ? 0.0f : nm, s, d);
      m = nm;
    }
    RowReducer<MaxSumDotOp> red(smem, int(blockDim.x), 1);
    // Consecutive rows alternate the scratch (one reducer per row: parity by row).
    red.parity = int(((row - blockIdx.x) / gridDim.x) & 1);
    const MaxSumDot st = red.reduce(MaxSumDot{m, s, d, 0.0f});
    if (writer) ce_write_row(p, r, st, xt, row);
    if constexpr (kGrad) ce_stream_grad_row<T, kVecIO>(p, CECoef(p, r, st, row), xrow, row, k2);
  }
}

// The gradient from a given lse (p.lse_src: the caller's lse_in), any
// options, any alignment: one CTA per row (grid-stride), as ce_stream_kernel's
// second pass.
template <typename T, bool kVecIO>
__global__ void __launch_bounds__(kRegRowMaxThreads, 1) ce_grad_row_kernel(const CEParams p) {
  core::pdl_launch_dependents();  // (the finish kernel: ops::ce_finish_kernel)
  const float k2 = p.softcap != 0.0f ? 2.0f * kLog2e / p.softcap : 0.0f;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* xrow = static_cast<const T*>(p.x) + row * p.x_stride;
    const CERow r = CERow::make(p, row);
    ce_stream_grad_row<T, kVecIO>(p, CECoef(p, r, __ldg(p.lse_src + row), row), xrow, row, k2);
  }
}

// ---------------------------------------------------------------------------
// Scalar kernels (src/cross_entropy.cu): ce_scalar_split(rows, cols).parts CTAs of
// up to kCEScalarThreads (ce_scalar_threads: sized to a part's share), each a
// fixed share of the rows (and classes), fixed summation orders; with more
// than one part, ce_combine_kernel adds the parts' float4s in order.
//   ce_prepare_kernel: W = sum of w_t and R = the count over counted rows;
//     sum_c w_c (what the rows need before their gradient or their
//     class-weighted smoothing).
//   ce_finish_kernel: 'sum': the sum of the rows' losses; 'mean': the sums
//     of the rows' cross-entropy and z-loss terms and W and R again (the same
//     code and order as prepare's), loss = sum ce / W + sum z / R; W = 0
//     (every row ignored, or zero weights) gives NaN, as torch's 0 / 0.
//     So a mean without a gradient takes two launches, not three.
constexpr int kCEScalarThreads = 1024;
// Rows (or classes) a part takes at least: one pass of its CTA, 16 loads a
// thread. At most kCEScalarThreads parts (one combine thread each).
constexpr int64_t kCEScalarShare = 16384;
constexpr int kCEScalarMaxParts = kCEScalarThreads;

// The scalar kernels' parts and each part's shares: a function of the shape
// alone, so the sums' order is the same on every device.
struct CEScalarSplit {
  int parts = 1;
  int64_t row_share = 0, col_share = 0;
};
inline CEScalarSplit ce_scalar_split(int64_t rows, int64_t cols) {
  auto parts_for = [](int64_t n) {
    return std::min<int64_t>((n + kCEScalarShare - 1) / kCEScalarShare, kCEScalarMaxParts);
  };
  CEScalarSplit s;
  s.parts = int(std::max<int64_t>(1, std::max(parts_for(rows), parts_for(cols))));
  // Multiples of 4: each part's shares start 16-byte aligned (float4 loads).
  s.row_share = ((rows + s.parts - 1) / s.parts + 3) / 4 * 4;
  s.col_share = (cols + s.parts - 1) / s.parts;
  return s;
}

struct CEScalarParams {
  int64_t rows, cols;
  const void* target;
  int64_t target_stride;
  bool target64;
  const float* cw;
  int64_t ignore_index;
  float* totals;          // prepare: out [W, R, sum w]
  const float* row_loss;  // finish: the rows' losses ('sum') or cross-entropy terms ('mean')
  const float* row_z;     // finish, 'mean': the rows' z-loss terms
  float* loss;            // finish: out [1]
  int reduction;
  float4* parts;          // one per CTA when more than one part (else null)
  int64_t row_share, col_share;
};

// ---------------------------------------------------------------------------
// dx *= g (g[row], or g[0] for every row), skipping rows whose factor is
// exactly 1: a gradient written for a unit upstream factor costs nothing more
// when the factor is 1, read on the device. One CTA per row (grid-stride).
// kShift (dx's rows not whole vectors: odd V): each row in the 16-byte
// vectors that cover it, from the one holding its first element (one
// operand: its rows always share their own offsets), the first and the
// last vector over the row's lanes only (softmax's streaming rows).
template <typename T, bool kVecIO, bool kShift = false>
__global__ void __launch_bounds__(256) ce_scale_kernel(int64_t rows, int64_t cols, void* dx, int64_t stride,
                                                       const float* g, bool per_row) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  constexpr bool kVec = kVecIO || kShift;  // whole vectors 16 bytes at a time
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float f = __ldg(g + (per_row ? row : 0));
    if (f == 1.0f) {
      if (!per_row) return;
      continue;
    }
    T* xr = static_cast<T*>(dx) + row * stride;
    const int sh = row_shift<T, kShift>(xr);
    for (int64_t c = int64_t(threadIdx.x) * VEC - sh; c < cols; c += int64_t(blockDim.x) * VEC) {
      int lo = 0, n = cols - c < VEC ? int(cols - c) : VEC;
      if constexpr (kShift) lo = c < 0 ? int(-c) : 0;
      RawVec<T, VEC> v;
      // Plain (coherent) loads: dx may have been written by this stream's
      // previous kernel only, but .nc is reserved for data no kernel writes.
      if (kVec && lo == 0 && n == VEC) *reinterpret_cast<uint4*>(v.w) = *reinterpret_cast<const uint4*>(xr + c);
      else v.load_range(xr + c, lo, n);
      float e[VEC];
      v.widen(e);
#pragma unroll
      for (int j = 0; j < VEC; ++j) e[j] *= f;
      v.narrow(e);
      stream_store<T, VEC, kVec>(v, xr + c, lo, n);
    }
  }
}

// ---------------------------------------------------------------------------
// Launchers, explicitly instantiated once per dtype (src/ops/cross_entropy_<dt>.cu).

template <auto kKernel, typename... Args>
Status launch_ce_kernel(const core::LaunchShape& shape, int device, cudaStream_t stream, Args&&... args) {
  return core::launch_cached<kKernel>(device, shape, stream, std::forward<Args>(args)...);
}

// An unclustered forward (no gradient): the rows cluster's flavour where
// p.rows_cluster > 1 (ce_reg_kernel's kRows), else the plain one.
template <typename T, int VPT, bool kGeneral, bool kShift, bool kLean = false>
Status launch_ce_reg_rows(const CEParams& p, const core::LaunchShape& shape, int device, cudaStream_t stream) {
  if (p.rows_cluster > 1)
    return launch_ce_kernel<ce_reg_kernel<T, VPT, false, false, kGeneral, kShift, kLean, true>>(shape, device, stream,
                                                                                               p);
  return launch_ce_kernel<ce_reg_kernel<T, VPT, false, false, kGeneral, kShift, kLean>>(shape, device, stream, p);
}

template <typename T, int VPT, bool kCluster, bool kShift>
Status launch_ce_reg_tile(const CEParams& p, const core::LaunchShape& shape, bool grad, int device,
                          cudaStream_t stream) {
  const bool general = p.softcap != 0.0f || p.wsmooth;
  if (grad) {
    if (general) return launch_ce_kernel<ce_reg_kernel<T, VPT, kCluster, true, true, kShift>>(shape, device, stream, p);
    return launch_ce_kernel<ce_reg_kernel<T, VPT, kCluster, true, false, kShift>>(shape, device, stream, p);
  }
  if constexpr (!kCluster) {
    if (general) return launch_ce_reg_rows<T, VPT, true, kShift>(p, shape, device, stream);
    return launch_ce_reg_rows<T, VPT, false, kShift>(p, shape, device, stream);
  } else {
    if (general) return launch_ce_kernel<ce_reg_kernel<T, VPT, kCluster, false, true, kShift>>(shape, device, stream, p);
    return launch_ce_kernel<ce_reg_kernel<T, VPT, kCluster, false, false, kShift>>(shape, device, stream, p);
  }
}

// No register-resident kernel for cfg: the error, in words.
inline Status ce_reg_unsupported(const RegRowConfig& cfg, bool grad, bool shift) {
  return {Code::kUnsupported, std::string("cross_entropy: no register-resident kernel") +
                                  (shift ? " of shifted rows" : "") + " with " + std::to_string(cfg.vpt) +
                                  " vectors per thread (cluster " + std::to_string(cfg.cluster) +
                                  (cfg.staged ? (grad ? ", staged" : ", staged without a gradient") : "") + ")"};
}

// The unstaged register tiles (kShift: shifted rows).
template <typename T, bool kShift>
Status launch_ce_reg_tiles(const CEParams& p, const RegRowConfig& cfg, const core::LaunchShape& shape, bool grad,
                           int device, cudaStream_t stream) {
  if (cfg.cluster > 1) {
    if (cfg.vpt == ce_cluster_vpt())
      return launch_ce_reg_tile<T, ce_cluster_vpt(), true, kShift>(p, shape, grad, device, stream);
  } else {
    if constexpr (!kShift) {  // lean rows (RegRowConfig::lean): a plain forward of 1 or 2 vectors a thread
      if (cfg.lean && !grad && p.softcap == 0.0f && !p.wsmooth) {
        if (cfg.vpt == 1) return launch_ce_reg_rows<T, 1, false, false, true>(p, shape, device, stream);
        if (cfg.vpt == 2) return launch_ce_reg_rows<T, 2, false, false, true>(p, shape, device, stream);
      }
    }
    switch (cfg.vpt) {
      case 1: return launch_ce_reg_tile<T, 1, false, kShift>(p, shape, grad, device, stream);
      case 2: return launch_ce_reg_tile<T, 2, false, kShift>(p, shape, grad, device, stream);
      case 4: return launch_ce_reg_tile<T, 4, false, kShift>(p, shape, grad, device, stream);
      case 8:
        if (!grad && p.softcap == 0.0f && !p.wsmooth) return launch_ce_reg_rows<T, 8, false, kShift>(p, shape, device, stream);
        break;
    }
  }
  return ce_reg_unsupported(cfg, grad, kShift);
}

// Register-resident: cfg from choose_reg_row_config (vpt a bucket <=
// ce_max_vpt(wide); clustered rows at ce_cluster_vpt()). shift: rows read
// from the vector that holds their first logit (ce_reg_kernel's kShift;
// cfg planned for V + VEC - 1 columns; ce_staged_kernel's kShift where
// staged).
template <DType kX>
Status launch_ce_reg(const CEParams& p, const RegRowConfig& cfg, bool grad, bool shift, int device,
                     cudaStream_t stream) {
  using T = typename core::TypeOf<kX>::type;
  core::LaunchShape shape = core::launch_shape(cfg);
  // A rows cluster: the rows' CTAs (one a row, unclustered rows) launched
  // as one cluster (ce_cluster_finish).
  if (p.rows_cluster > 1) shape.cluster = p.rows_cluster;
  if (!cfg.staged) {
    if (shift) return launch_ce_reg_tiles<T, true>(p, cfg, shape, grad, device, stream);
    return launch_ce_reg_tiles<T, false>(p, cfg, shape, grad, device, stream);
  }
  if (grad) {
    // ce_staged_kernel's grid (RowTuning::ce_staged_clusters): -1 one
    // cluster a row (the default), 0 as many as are resident (each walks
    // rows), n > 0 at most n.
    const int cap = current_row_tuning().ce_staged_clusters;
    shape.persistent = cap >= 0;
    if (cap > 0) shape.grid = std::min<int64_t>(shape.grid, int64_t(cap) * cfg.cluster);
    const bool general = p.softcap != 0.0f || p.wsmooth, sum = p.smoothing != 0.0f;
    auto tile = [&](auto vpt, auto shift_c) -> Status {
      constexpr int VPT = decltype(vpt)::value;
      constexpr bool kShift = decltype(shift_c)::value;
      if (general) return launch_ce_kernel<ce_staged_kernel<T, VPT, true, true, kShift>>(shape, device, stream, p);
      if (sum) return launch_ce_kernel<ce_staged_kernel<T, VPT, false, true, kShift>>(shape, device, stream, p);
      return launch_ce_kernel<ce_staged_kernel<T, VPT, false, false, kShift>>(shape, device, stream, p);
    };
    auto tiles = [&](auto shift_c) -> Status {
      if (cfg.vpt == 8) return tile(std::integral_constant<int, 8>{}, shift_c);
      if (cfg.vpt == 16) return tile(std::integral_constant<int, 16>{}, shift_c);
      return ce_reg_unsupported(cfg, grad, shift);
    };
    return shift ? tiles(std::true_type{}) : tiles(std::false_type{});
  }
  return ce_reg_unsupported(cfg, grad, shift);
}

// Streaming: one CTA of `threads` per row, `grid` CTAs; from_lse: the
// gradient alone from p.lse_src (ce_grad_row_kernel).
template <DType kX>
Status launch_ce_stream(const CEParams& p, int threads, int64_t grid, bool vec_io, bool grad, bool from_lse,
                        int device, cudaStream_t stream) {
  using T = typename core::TypeOf<kX>::type;
  const core::LaunchShape shape{grid, threads, kCEScratchBytes, 1, false};
  if (from_lse) {
    if (vec_io) return launch_ce_kernel<ce_grad_row_kernel<T, true>>(shape, device, stream, p);
    return launch_ce_kernel<ce_grad_row_kernel<T, false>>(shape, device, stream, p);
  }
  if (vec_io) {
    if (grad) return launch_ce_kernel<ce_stream_kernel<T, true, true>>(shape, device, stream, p);
    return launch_ce_kernel<ce_stream_kernel<T, true, false>>(shape, device, stream, p);
  }
  if (grad) return launch_ce_kernel<ce_stream_kernel<T, false, true>>(shape, device, stream, p);
  return launch_ce_kernel<ce_stream_kernel<T, false, false>>(shape, device, stream, p);
}

// The plain forward's streaming kernel, or (grad) the gradient pass of
// two-pass rows: `grid` persistent CTAs.
template <DType kX>
Status launch_ce_fwd_stream(const CEParams& p, int64_t grid, bool grad, int device, cudaStream_t stream) {
  using T = typename core::TypeOf<kX>::type;
  const core::LaunchShape shape{grid, kCEFwdStreamThreads, 0, 1, false};
  if (grad) return launch_ce_kernel<ce_grad_stream_kernel<T>>(shape, device, stream, p);
  if (ce_sums_logits(p)) return launch_ce_kernel<ce_fwd_stream_kernel<T, true>>(shape, device, stream, p);
  return launch_ce_kernel<ce_fwd_stream_kernel<T, false>>(shape, device, stream, p);
}

// The plain forward's streaming kernel for shifted rows (kShift): `grid`
// persistent CTAs.
template <DType kX>
Status launch_ce_fwd_stream_shifted(const CEParams& p, int64_t grid, int device, cudaStream_t stream) {
  using T = typename core::TypeOf<kX>::type;
  const core::LaunchShape shape{grid, kCEFwdStreamThreads, 0, 1, false};
  if (ce_sums_logits(p)) return launch_ce_kernel<ce_fwd_stream_kernel<T, true, true>>(shape, device, stream, p);
  return launch_ce_kernel<ce_fwd_stream_kernel<T, false, true>>(shape, device, stream, p);
}

// The plain forward's bulk-copy kernel: `grid` CTAs (persistent, `ctas` an
// SM at most: ce_bulk_ctas), the ring for rows of `row_bytes` whole vectors.
// shift: shifted rows (kShift).
template <DType kX>
Status launch_ce_fwd_bulk(const CEParams& p, int64_t grid, bool shift, int ctas, int device, cudaStream_t stream) {
  using T = typename core::TypeOf<kX>::type;
  const CEBulkRing ring = CEBulkRing::of((p.cols / (16 / int64_t(sizeof(T)))) * 16, ctas);
  const core::LaunchShape shape{grid, kCEBulkThreads, ring.smem_bytes(), 1, false};
  auto go = [&](auto sum, auto shifted, auto three) {
    constexpr int kCtas = decltype(three)::value ? 3 : 2;
    return launch_ce_kernel<ce_fwd_bulk_kernel<T, decltype(sum)::value, decltype(shifted)::value, kCtas>>(
        shape, device, stream, p, ring.stages, ring.slot_bytes);
  };
  auto by_ctas = [&](auto sum, auto shifted) {
    return ctas == 3 ? go(sum, shifted, std::true_type{}) : go(sum, shifted, std::false_type{});
  };
  auto by_shift = [&](auto sum) {
    return shift ? by_ctas(sum, std::true_type{}) : by_ctas(sum, std::false_type{});
  };
  return ce_sums_logits(p) ? by_shift(std::true_type{}) : by_shift(std::false_type{});
}

// vec_io: aligned rows; shift: rows in shifted vectors (kShift).
template <DType kX>
Status launch_ce_scale(int64_t rows, int64_t cols, void* dx, int64_t stride, const float* g, bool per_row,
                       bool vec_io, bool shift, int64_t grid, int device, cudaStream_t stream) {
  using T = typename core::TypeOf<kX>::type;
  const core::LaunchShape shape{grid, 256, 0, 1, false};
  if (vec_io) return launch_ce_kernel<ce_scale_kernel<T, true>>(shape, device, stream, rows, cols, dx, stride, g, per_row);
  if (shift)
    return launch_ce_kernel<ce_scale_kernel<T, false, true>>(shape, device, stream, rows, cols, dx, stride, g, per_row);
  return launch_ce_kernel<ce_scale_kernel<T, false>>(shape, device, stream, rows, cols, dx, stride, g, per_row);
}

#define QUACK_CE_INSTANTIATION(EXTERN, DT)                                                                      \
  EXTERN template Status launch_ce_reg<DT>(const CEParams&, const RegRowConfig&, bool, bool, int, cudaStream_t); \
  EXTERN template Status launch_ce_stream<DT>(const CEParams&, int, int64_t, bool, bool, bool, int,            \
                                              cudaStream_t);                                                    \
  EXTERN template Status launch_ce_fwd_stream<DT>(const CEParams&, int64_t, bool, int, cudaStream_t);           \
  EXTERN template Status launch_ce_fwd_stream_shifted<DT>(const CEParams&, int64_t, int, cudaStream_t);         \
  EXTERN template Status launch_ce_fwd_bulk<DT>(const CEParams&, int64_t, bool, int, int, cudaStream_t);        \
  EXTERN template Status launch_ce_scale<DT>(int64_t, int64_t, void*, int64_t, const float*, bool, bool, bool,  \
                                             int64_t, int, cudaStream_t);
#ifndef QUACK_CE_TU
QUACK_CE_INSTANTIATION(extern, DType::kFloat32)
QUACK_CE_INSTANTIATION(extern, DType::kFloat16)
QUACK_CE_INSTANTIATION(extern, DType::kBFloat16)
#endif

}  // namespace ops
}  // namespace quack
