// Softmax and log-softmax, forward and backward.
//
// Two kernel families, one dispatch (src/softmax.cu):
// 1. Register-resident (the common case: 16-byte-aligned rows that fit the
//    register tiles of a 16-CTA cluster): a thread loads its share of the row
//    into registers, the row's online-softmax pair (max, sum of exp) -- or,
//    backward, its dot product -- is reduced over the team and the cluster in
//    one round (core/row_tile.cuh), and the outputs are written from the same
//    registers. x is read from HBM once. Long forward rows may instead be
//    staged: the same kernel with x in shared memory (cp.async), 8 or 16
//    vectors a thread in 256-thread CTAs, one cluster a row.
// 2. Streaming (everything else: misaligned rows or strides, rows beyond the
//    register tiles): one CTA per row walks the row twice, first for the
//    reduction, then for the outputs (x read twice; the second pass often
//    hits L2).
//
// Arithmetic in fp32. The streaming and chunked kernels: the pair is
// (m, s) = (max x, sum exp(x - m)), exp as exp2((x - m) * log2 e) after the
// subtraction; softmax = exp(x - m) / s and log_softmax = x - m - log2(s) ln 2
// (core/reduce.cuh MaxSumOp). The register and staged forwards take each
// thread's exponentials in log2 units (core::log2_base: one FFMA and one
// MUFU.EX2 an element for the sum, one or two FFMAs and the EX2 for the
// output, SoftmaxRowLog2), reduce the pair in natural units max first
// (MaxSumMaxFirstOp), and take rows whose max is 2^24 or more in magnitude
// in natural units throughout (core::log2_units_ok). Any finite input gives
// torch's answer; NaN and +inf propagate to the whole row, an all -inf row
// gives NaN, as torch.
#pragma once

#include <cstdint>
#include <type_traits>

#include "quack/core/config.hpp"
#include "quack/core/launch.cuh"
#include "quack/core/reduce.cuh"
#include "quack/core/row_tile.cuh"
#include "quack/core/vec.cuh"
#include "quack/quack.hpp"

namespace quack {
namespace ops {

struct SoftmaxParams {
  int64_t rows, cols;
  const void* a;  // forward: x; backward: y
  int64_t a_stride;
  const void* b;  // backward: dy (forward: unused)
  int64_t b_stride;
  void* out;  // forward: out; backward: dx
  int64_t out_stride;
  bool log;
  int team, cluster;
  int64_t row_blocks;
  // Chunked kernels: vectors of the row per CTA, and how many of them a CTA
  // keeps in shared memory between its two passes.
  int64_t chunk_vecs;
  int stage_vecs;
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shared memory of every softmax kernel: the row reduction's scratch (the
// larger of the two ops', clustered).
constexpr uint32_t kSoftmaxScratchBytes = 1024;
static_assert(core::RowReduce<core::MaxSumOp, true>::scratch_bytes() <= kSoftmaxScratchBytes &&
                  core::RowReduce<core::MaxSumMaxFirstOp, true>::scratch_bytes() <= kSoftmaxScratchBytes &&
                  core::RowReduce<core::SumOp, true>::scratch_bytes() <= kSoftmaxScratchBytes,
              "softmax scratch");

// Register tiles (16-byte vectors of the row per thread) that compile within
// 64 registers without spilling (ptxas -v, CUDA 13.0): forward holds x (up to
// 8 vectors = 32 registers; 4 in the clustered kernel, whose loop and
// exchange state made 8 spill), backward y and dy (up to 4 each).
constexpr int softmax_fwd_max_vpt() { return 8; }
constexpr int softmax_fwd_cluster_vpt() { return 4; }
constexpr int softmax_bwd_max_vpt() { return 4; }
// Staged clustered forward rows: the tiles (16-byte vectors of x a thread,
// in shared memory, so they cost no registers for the data) the kernel is
// built with; RowTuning::softmax_staged_vpt picks one.
constexpr bool softmax_fwd_staged_tile(int vpt) { return vpt == 8 || vpt == 16; }
// The forward's split tile (the wide staged geometry, RowTuning::
// softmax_staged_fwd_wide): 16 vectors of x a thread, the last 4 in
// registers. ptxas -v (CUDA 13.0, 64 registers): 8 in registers spilled
// the 16-bit kernels (4-16 bytes at any unroll of the staged loops); 4 with
// the staged loops unrolled by 2 spill none (by 4: 8 bytes).
constexpr int kSoftmaxFwdSplitVpt = 16;
constexpr int kSoftmaxFwdSplitRegs = 4;
// Staged clustered backward rows: y and dy in shared memory, the same tiles
// (vectors of each a thread); RowTuning::softmax_staged_bwd_vpt picks one.
constexpr bool softmax_bwd_staged_tile(int vpt) { return vpt == 8 || vpt == 16; }
// The backward's wide tile (RowTuning::softmax_staged_bwd_wide): 8 vectors
// of y a thread staged, 8 of dy in registers.
constexpr int kSoftmaxBwdWideVpt = 8;

// Folds VEC elements x[], those in [lo, hi) valid, into the per-thread
// online-softmax partial (m, s) (core::MaxSum: natural units). Streaming
// kernels; the register kernel takes the thread's max first and needs no
// rescaling.
template <int VEC>
__device__ __forceinline__ void fold_max_sum(const float (&x)[VEC], int lo, int hi, float& m, float& s) {
  float vm = -INFINITY;
#pragma unroll
  for (int j = 0; j < VEC; ++j)
    if (j >= lo && j < hi) vm = fmaxf(vm, x[j]);
  const float nm = fmaxf(m, vm);
  // Rescale the running sum; while the max is -inf the sum is 0 (or NaN
  // after a NaN), kept as such by the multiplication by 0.
  s = m == -INFINITY ? s * 0.0f : s * core::fast_exp2((m - nm) * kLog2e);
  const float base = nm == -INFINITY ? 0.0f : nm;
#pragma unroll
  for (int j = 0; j < VEC; ++j)
    if (j >= lo && j < hi) s += core::fast_exp2((x[j] - base) * kLog2e);
  m = nm;
}

// The row's constants for the outputs, from its (m, s): softmax is
// exp2((x - m) log2 e - log2 s) -- an FADD, an FFMA and one MUFU per element,
// with the division folded into the exponent -- and log_softmax is
// x - m - ln s.
struct SoftmaxRow {
  float m, log2_s, ln_s;
  __device__ __forceinline__ explicit SoftmaxRow(core::MaxSum r)
      : m(r.m), log2_s(core::fast_log2(r.s)), ln_s(log2_s * kLn2) {}
  __device__ __forceinline__ float out(float x, bool log) const {
    const float d = x - m;
    return log ? d - ln_s : core::fast_exp2(fmaf(d, kLog2e, -log2_s));
  }
};

// The register and staged forwards' row constants, from the row's pair in
// natural units (m = max x, s = sum e^(x - m)), for outputs in log2 units:
// with b = log2_base(m), r = m log2 e - b (exact, |r| <= 1) and t =
// x log2 e - b (one FFMA, x log2 e exact inside it), softmax is 2^(t - L)
// and log_softmax t ln 2 - L ln 2 (one more FFMA), L = log2 s + r: the
// rounding of b cancels and L's own (an ulp of log2 N + 1 or so) is what
// reaches the outputs. Softmax's rows whose offset c = b + L is `near` 0
// take 2^(x log2 e - c), one FFMA and the MUFU.EX2: rounding c moves every
// output of the row by at most |c| 2^-24 ln 2 relative -- under 16-bit
// rows' bound of 256, 5e-6 (bf16 and fp16 round at 2e-3 / 2.4e-4); fp32
// rows' bound of 16, 7e-7 (ex2.approx's own error is ~2.4e-7). Rows whose
// max is 2^24 or more in magnitude (or +inf, or NaN: core::log2_units_ok)
// take natural units, x - m first (out_natural: a cold path).
struct SoftmaxRowLog2 {
  float m, b, log2_s, L, ln_L, c;
  bool natural, near;
  __device__ __forceinline__ SoftmaxRowLog2(core::MaxSum r, float near_bound)
      : m(r.m),
        b(core::log2_base(r.m)),
        log2_s(core::fast_log2(r.s)),
        L(log2_s + fmaf(r.m, kLog2e, -b)),
        ln_L(L * kLn2),
        c(b + L),
        natural(!core::log2_units_ok(r.m)),
        near(fabsf(c) < near_bound) {}
  __device__ __forceinline__ float out(float x, bool log) const {
    const float t = fmaf(x, kLog2e, -b);
    return log ? fmaf(t, kLn2, -ln_L) : core::fast_exp2(t - L);
  }
  __device__ __forceinline__ float out_near(float x) const { return core::fast_exp2(fmaf(x, kLog2e, -c)); }
  __device__ __forceinline__ float out_natural(float x, bool log) const {
    const float d = x - m;
    return log ? fmaf(-log2_s, kLn2, d) : core::fast_exp2(fmaf(d, kLog2e, -log2_s));
  }
};
template <typename T>
constexpr float softmax_near_bound() {
  return sizeof(T) == 4 ? 16.0f : 256.0f;
}

// The max of a thread's vectors at(0) .. at(VPT - 1) (NaN skipped, as fmaxf:
// the sum of exponentials carries it). 16-bit elements are compared in pairs
// (HMNMX2: exact, half the instructions, no widening).
template <typename T, int VEC, int VPT, int kUnroll = VPT, class At>
__device__ __forceinline__ float max_of_each(At&& at) {
  constexpr int W = core::RawVec<T, VEC>::kWords;
  if constexpr (sizeof(T) == 4) {
    float m = -INFINITY;
#pragma unroll kUnroll
    for (int i = 0; i < VPT; ++i) {
      const core::RawVec<T, VEC> v = at(i);
#pragma unroll
      for (int k = 0; k < W; ++k) m = fmaxf(m, __uint_as_float(v.w[k]));
    }
    return m;
  } else {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    T2 m2;
#pragma unroll kUnroll
    for (int i = 0; i < VPT; ++i) {
      const core::RawVec<T, VEC> v = at(i);
      if (i == 0) m2 = *reinterpret_cast<const T2*>(&v.w[0]);
#pragma unroll
      for (int k = 0; k < W; ++k) m2 = __hmax2(m2, *reinterpret_cast<const T2*>(&v.w[k]));
    }
    return fmaxf(core::to_float(m2.x), core::to_float(m2.y));
  }
}
// The max of at(0) .. at(n - 1), n at run time (-inf for n = 0): the staged
// rows' loops over shared memory, as max_of_each.
template <typename T, int VEC, int kUnroll, class At>
__device__ __forceinline__ float max_of_first(int n, At&& at) {
  constexpr int W = core::RawVec<T, VEC>::kWords;
  if constexpr (sizeof(T) == 4) {
    float m = -INFINITY;
#pragma unroll kUnroll
    for (int i = 0; i < n; ++i) {
      const core::RawVec<T, VEC> v = at(i);
#pragma unroll
      for (int k = 0; k < W; ++k) m = fmaxf(m, __uint_as_float(v.w[k]));
    }
    return m;
  } else {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    const uint32_t ninf2 = std::is_same_v<T, __half> ? 0xfc00fc00u : 0xff80ff80u;
    T2 m2 = *reinterpret_cast<const T2*>(&ninf2);
#pragma unroll kUnroll
    for (int i = 0; i < n; ++i) {
      const core::RawVec<T, VEC> v = at(i);
#pragma unroll
      for (int k = 0; k < W; ++k) m2 = __hmax2(m2, *reinterpret_cast<const T2*>(&v.w[k]));
    }
    return fmaxf(core::to_float(m2.x), core::to_float(m2.y));
  }
}
template <typename T, int VEC, int VPT>
__device__ __forceinline__ float max_of(const core::RawVec<T, VEC> (&v)[VPT]) {
  return max_of_each<T, VEC, VPT>([&](int i) { return v[i]; });
}

// -inf in T's bits: the fill for padding, which then drops out of the max and
// the sum of exponentials with no per-element mask.
template <typename T>
constexpr uint32_t neg_inf_bits() {
  return sizeof(T) == 4 ? 0xff800000u : std::is_same_v<T, __half> ? 0xfc00u : 0xff80u;
}

using core::row_shift;

// A shifted row's geometry (the register kernels' kShift): g shifted by
// the row's row_shift, which is returned. The row pointer is made opaque so
// that a second call (after the row's reduction) recomputes the shift
// rather than holding it and the geometry in registers across it. The
// backward and the split forward do (held, the 16-bit wide backward and
// split forward spilled 16-24 bytes; ptxas -v, CUDA 13.0); the other
// forwards hold it (recomputed, the 16-bit staged 8-vector one spilled 4).
template <typename T, int VEC, int VPT>
__device__ __forceinline__ int shift_row(core::RowGeom<VEC, VPT>& g, const void* base, int64_t row, int64_t stride) {
  const T* r = static_cast<const T*>(base) + row * stride;
  asm volatile("" : "+l"(r));
  const int sh = row_shift<T, true>(r);
  g.shift(sh);
  return sh;
}

// ---------------------------------------------------------------------------
// Register-resident forward. kCluster: one row per cluster of p.cluster CTAs,
// persistent grid (see rmsnorm_fwd_reg_kernel for why). kStaged (clustered
// only): x goes to shared memory with cp.async (after the reduction scratch;
// a thread's vector i at (i * team + t) * 16 bytes, written and read by that
// thread alone) instead of registers, so a thread holds VPT = 8 or 16
// vectors in a small, register-light CTA and every byte of the row is in
// flight at once; many CTAs share an SM, one cluster a row (not persistent).
// kRegVecs (staged only; the wide geometry): the thread's last kRegVecs
// vectors are loaded into registers while the first VPT - kRegVecs are
// copied to shared memory (512-thread CTAs at 12 + 4 vectors: 96 KB of x
// staged and 32 KB in registers a CTA, two CTAs an SM, 16 of them a 2 MB
// row -- 16-bit 1M, fp32 512K).
// kShift: rows whose first element may lie inside a 16-byte vector (x and
// out at the same offset in one, row by row: row_shift), walked from that
// vector (core::RowGeom::shift; the plan sized for N + VEC - 1 columns).
// kLean (decode-sized rows, RowTuning::reg_lean bit 1): an unclustered row
// that is one team owning its CTA and exactly the tile (RowGeom::make_lean:
// the row is blockIdx.x, every vector whole), reduced by the CTA with no
// test of the team's size -- the norms' lean rows (rmsnorm_fwd_reg_kernel).
template <typename T, int VPT, bool kCluster, bool kStaged = false, int kRegVecs = 0, bool kShift = false,
          bool kLean = false>
__global__ void __launch_bounds__(kRegRowMaxThreads, 1) softmax_fwd_reg_kernel(const SoftmaxParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  static_assert(!kStaged || kCluster, "staged rows are clustered");
  static_assert(!kLean || (!kCluster && !kShift), "lean rows: unclustered, unshifted");
  static_assert(kRegVecs == 0 || (kStaged && kRegVecs < VPT), "a split tile is staged, with some vectors staged");
  constexpr int kSmemVecs = VPT - kRegVecs;  // staged rows: the vectors in shared memory
  // Staged vectors are read from shared memory as they are used: loops over
  // more than 8 of them unroll by 4 (a split tile's by 2: kSoftmaxFwdSplitRegs),
  // or the 16 addresses of the tile stay live through the three passes and
  // spill (ptxas -v, CUDA 13.0). Register tiles unroll fully (they index
  // registers), as does a split tile's register part (each_vec).
  constexpr int kUnroll = kStaged && VPT > 8 ? (kRegVecs > 0 ? 2 : 4) : VPT;
  extern __shared__ __align__(16) unsigned char smem[];
  RowReduce<MaxSumMaxFirstOp, kCluster> red;
  red.start(smem);

  auto do_rows = [&](int64_t blk) {
    auto g = kLean ? RowGeom<VEC, VPT>::make_lean(p.team, p.cols)
                   : RowGeom<VEC, VPT>::make(p.team, p.cluster, p.cols, kCluster);
    const int64_t row = blk * g.teams + g.team_id;
    const bool active = kLean || row < p.rows;
    // kShift: the row's elements before it in its first 16-byte vector,
    // where its pointers start (0 otherwise, folded away).
    int sh = 0;
    if constexpr (kShift) sh = shift_row<T>(g, p.a, row, p.a_stride);
    RawVec<T, VEC> xv[kStaged ? (kRegVecs > 0 ? kRegVecs : 1) : VPT] = {};
    const uint32_t slot0 = smem_addr(smem) + kSoftmaxScratchBytes + uint32_t(g.t) * 16;
    // Staged threads whose vectors all lie in the row (g.whole: every thread
    // of a row but those at its end) run straight-line copies of the passes,
    // f(std::true_type{}): no per-vector counts, tails, partial stores or
    // their branches (the static SASS of the 16-vector bf16 kernel at
    // 7bb3129 spent ~30 of ~67 instructions an output vector on them;
    // docs/KERNELS.md). Register tiles keep one copy: a second copy of a
    // register-held cluster spilled in rmsnorm_fwd_reg_kernel, and the
    // unclustered tiles' copy (no spills) measured mixed, thirty-seventh
    // session: +0.6-1.5% where a CTA holds several teams, -1.7-2.5% where
    // it holds one (docs/KERNELS.md). No barrier may sit inside f.
    auto by_whole = [&](auto&& f) {
      if constexpr (kStaged) {
        if (g.whole) f(std::true_type{});
        else f(std::false_type{});
      } else if constexpr (kLean) {
        f(std::true_type{});
      } else {
        f(std::false_type{});
      }
    };
    // Vector i of x, -inf past the row's end.
    auto x_at = [&](int i, auto whole_c) {
      if constexpr (kStaged) {
        RawVec<T, VEC> v;
        lds<16>(g.slot(slot0, i), v.w);
        if constexpr (!decltype(whole_c)::value) {
          if (!g.whole) {
            v.fill_tail(g.valid(i), neg_inf_bits<T>());
            if constexpr (kShift) v.fill_head(g.lo(i), neg_inf_bits<T>());
          }
        }
        return v;
      } else {
        return xv[i];
      }
    };
    // f(i, get) for the thread's vectors i in order, get() giving vector i
    // (x_at): one loop unrolled by kUnroll; a split tile's staged part so,
    // then its register part fully unrolled (tails filled at the load).
    auto each_vec = [&](auto whole_c, auto&& f) {
      if constexpr (kRegVecs > 0) {
#pragma unroll kUnroll
        for (int i = 0; i < kSmemVecs; ++i) f(i, [&] { return x_at(i, whole_c); });
#pragma unroll
        for (int k = 0; k < kRegVecs; ++k) f(kSmemVecs + k, [&] { return xv[k]; });
      } else {
#pragma unroll kUnroll
        for (int i = 0; i < VPT; ++i) f(i, [&] { return x_at(i, whole_c); });
      }
    };
    float m = -INFINITY, s = 0.0f;
    // kLean: the thread's exponentials 2^(x log2 e - bt) against its own
    // base bt, kept for the softmax outputs (keep: computed, in log2 units).
    float ev[kLean ? VPT : 1][kLean ? VEC : 1];
    float bt = 0.0f;
    bool keep = false;
    if (active) {
      const T* xrow = static_cast<const T*>(p.a) + row * p.a_stride - sh;
      if constexpr (kStaged) {
        by_whole([&](auto wc) { g.template stage_async<decltype(wc)::value, kUnroll, kSmemVecs>(slot0, xrow); });
        cp_async_commit();
        if constexpr (kRegVecs > 0) {
          g.template load_vecs<kSmemVecs>(xv, xrow);
          if (!g.whole) {
#pragma unroll
            for (int k = 0; k < kRegVecs; ++k) xv[k].fill_tail(g.valid(kSmemVecs + k), neg_inf_bits<T>());
          }
        }
        cp_async_wait_all();
      } else {
#pragma unroll
        for (int i = 0; i < VPT; ++i) g.load(xv[i], xrow, i);
        if (!g.whole) {
#pragma unroll
          for (int i = 0; i < VPT; ++i) xv[i].fill_tail(g.valid(i), neg_inf_bits<T>());
          if constexpr (kShift) xv[0].fill_head(g.head, neg_inf_bits<T>());
        }
      }
      // The thread's max first (the elements are on chip), then one
      // exponential per element against it (one FFMA and the MUFU.EX2, in
      // log2 units: core::log2_base), no online rescaling; the sum back in
      // natural units once. A thread with only -inf (or padding) has sum 0.
      bool log2_ok = true;
      by_whole([&](auto wc) {
        if constexpr (kRegVecs > 0) {
          m = fmaxf(max_of_each<T, VEC, kSmemVecs, kUnroll>([&](int i) { return x_at(i, wc); }),
                    max_of_each<T, VEC, kRegVecs>([&](int k) { return xv[k]; }));
        } else {
          m = max_of_each<T, VEC, VPT, kUnroll>([&](int i) { return x_at(i, wc); });
        }
        log2_ok = log2_units_ok(m);
        if (log2_ok) {
          const float b = log2_base(m);
          each_vec(wc, [&](int i, auto get) {
            float f[VEC];
            get().widen(f);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
              const float e = fast_exp2(fmaf(f[j], kLog2e, -b));
              if constexpr (kLean) ev[i][j] = e;
              s += e;
            }
          });
          s = from_log2_units(s, m, b);
          bt = b;
        }
      });
      keep = log2_ok;
      if (!log2_ok) {
        // |m| >= 2^24 (or +inf, NaN): natural units, a cold path (unrolled
        // as the other: register tiles are indexed by constants only).
        each_vec(std::false_type{}, [&](int, auto get) {
          float f[VEC];
          get().widen(f);
#pragma unroll
          for (int j = 0; j < VEC; ++j) s += fast_exp2((f[j] - m) * kLog2e);
        });
      }
    }
    auto row_reduce = [&](MaxSum v) {
      if constexpr (kLean) return red.reduce_cta(v);
      else return red.reduce(v, g.team, p.cluster, g.crank);
    };
    const MaxSum rs = row_reduce(MaxSum{m, s});
    if (!active) return;
    if constexpr (kLean) {
      // Softmax's outputs from the kept exponentials: y = e 2^(bt - M log2
      // e) / S, one EX2 (the exponent in one FFMA) beside one RCP a thread,
      // then an FMUL an element -- not the LG2 of S and an FFMA and an EX2
      // an element (SoftmaxRowLog2), Liger's 9 MUFU a thread against 20
      // (docs/KERNELS.md, sixty-second session). Its rounding: the two
      // exponents' (|x log2 e - bt| and |bt - M log2 e| in ulps, whose sum
      // is the one exponent's of out()) and ~4 ulp of MUFU and products.
      // A row of -inf gives 0 inf = NaN and a NaN sum NaN, as out(); rows
      // past log2 units (+inf, |M| >= 2^24) and threads that were take
      // the paths below.
      if (!p.log && keep && log2_units_ok(rs.m)) {
        const float k = __fmul_rn(fast_exp2(fmaf(-rs.m, kLog2e, bt)), fast_rcp(rs.s));
        T* const o0 = static_cast<T*>(p.out) + row * p.out_stride + g.col0;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
          float f[VEC];
#pragma unroll
          for (int j = 0; j < VEC; ++j) f[j] = __fmul_rn(ev[i][j], k);
          RawVec<T, VEC> o;
          o.narrow(f);
          o.store(o0 + i * g.col_step);
        }
        return;
      }
    }
    const SoftmaxRowLog2 r(rs, softmax_near_bound<T>());
    if constexpr (kShift && kRegVecs > 0) {  // (the geometry afresh: shift_row)
      g = RowGeom<VEC, VPT>::make(p.team, p.cluster, p.cols, kCluster);
      sh = shift_row<T>(g, p.a, row, p.a_stride);
    }
    T* orow = static_cast<T*>(p.out) + row * p.out_stride - sh;
    // The output pass, one instantiation per form of the output (log, near,
    // plain: no run-time choice inside the loop); whole threads store
    // through the row pointer formed once, vector i at i * col_step.
    auto write = [&](auto whole_c, auto&& out) {
      constexpr bool kW = decltype(whole_c)::value;
      T* o0 = orow + g.col0;
      each_vec(whole_c, [&](int i, auto get) {
        if constexpr (!kW) {
          if (g.valid(i) == 0) return;
        }
        float f[VEC];
        get().widen(f);
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] = out(f[j]);
        RawVec<T, VEC> o;
        o.narrow(f);
        if constexpr (kW) o.store(o0 + i * g.col_step);
        else g.store(o, orow, i);
      });
    };
    if (r.natural) {
      write(std::false_type{}, [&](float x) { return r.out_natural(x, p.log); });
    } else {
      by_whole([&](auto wc) {
        if (p.log) write(wc, [&](float x) { return r.out(x, true); });
        else if (r.near) write(wc, [&](float x) { return r.out_near(x); });
        else write(wc, [&](float x) { return r.out(x, false); });
      });
    }
  };

  for_row_blocks<kCluster>(p.row_blocks, p.cluster, do_rows);
  red.finish();
}

// Register-resident backward: dx from y and dy (both held in registers).
// kStaged (clustered only): y and dy go to shared memory with cp.async
// instead (after the reduction scratch: y's vector i of thread t at (i *
// team + t) * 16 bytes, dy's VPT * team * 16 bytes further; each slot
// written and read by its thread alone), VPT = 8 or 16 vectors of each a
// thread in a 256-thread CTA: many CTAs an SM, every byte of the row in
// flight at once, one cluster a row (the staged forward's layout).
// kDyRegs (staged only): y alone goes to shared memory; dy is loaded into
// registers while y's copies are in flight (the wide geometry: 512-thread
// CTAs at 8 vectors, 64 KB of y and 32 registers of dy a thread, two CTAs
// an SM, 16 of them a 1 MB row -- fp32 256K, 16-bit 512K).
// kShift: shifted rows, as the forward's (y, dy and dx at one offset).
template <typename T, int VPT, bool kCluster, bool kStaged = false, bool kDyRegs = false, bool kShift = false>
__global__ void __launch_bounds__(kRegRowMaxThreads, 1) softmax_bwd_reg_kernel(const SoftmaxParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  static_assert(!kStaged || kCluster, "staged rows are clustered");
  static_assert(!kDyRegs || kStaged, "dy in registers beside a staged y only");
  constexpr bool kDySmem = kStaged && !kDyRegs;
  // Staged loops over more than 8 vectors unroll by 4 (the forward's
  // reason: 16 live shared-memory addresses spill).
  constexpr int kUnroll = kStaged && VPT > 8 ? 4 : VPT;
  extern __shared__ __align__(16) unsigned char smem[];
  RowReduce<SumOp, kCluster> red;
  red.start(smem);

  auto do_rows = [&](int64_t blk) {
    auto g = RowGeom<VEC, VPT>::make(p.team, p.cluster, p.cols, kCluster);
    const int64_t row = blk * g.teams + g.team_id;
    const bool active = row < p.rows;
    int sh = 0;
    if constexpr (kShift) sh = shift_row<T>(g, p.a, row, p.a_stride);
    RawVec<T, VEC> yv[kStaged ? 1 : VPT], dyv[kDySmem ? 1 : VPT];
    const uint32_t yslot0 = smem_addr(smem) + kSoftmaxScratchBytes + uint32_t(g.t) * 16;
    const uint32_t dyslot0 = yslot0 + uint32_t(VPT * g.team) * 16;
    float acc = 0.0f;
    if (active) {
      const T* yrow = static_cast<const T*>(p.a) + row * p.a_stride - sh;
      const T* dyrow = static_cast<const T*>(p.b) + row * p.b_stride - sh;
      if constexpr (kStaged) {
        // Whole threads (all vectors inside the row) copy without zero
        // fill or counts; the others fill past the row's end with zeros.
        auto copy = [&](const T* src, uint32_t slot0) {
          if (g.whole) g.template stage_async<true, kUnroll>(slot0, src);
          else g.template stage_async<false, kUnroll>(slot0, src);
        };
        copy(yrow, yslot0);
        if constexpr (kDySmem) copy(dyrow, dyslot0);
        cp_async_commit();
        if constexpr (kDyRegs) g.template load_vecs<0>(dyv, dyrow);
        cp_async_wait_all();
      } else {
#pragma unroll
        for (int i = 0; i < VPT; ++i) g.load(yv[i], yrow, i);
#pragma unroll
        for (int i = 0; i < VPT; ++i) g.load(dyv[i], dyrow, i);
      }
    }
    // Vector i of y and of dy (zeros past the row's end; defined after the
    // loads, or the front end warns that the register tiles are read unset).
    auto tile_at = [&](auto in_smem, const auto& regs, uint32_t slot0, int i) {
      if constexpr (decltype(in_smem)::value) {
        RawVec<T, VEC> v;
        lds<16>(g.slot(slot0, i), v.w);
        return v;
      } else {
        return regs[i];
      }
    };
    auto y_at = [&](int i) { return tile_at(std::bool_constant<kStaged>{}, yv, yslot0, i); };
    auto dy_at = [&](int i) { return tile_at(std::bool_constant<kDySmem>{}, dyv, dyslot0, i); };
    if (active) {
      // Padding holds zeros: no masking needed in the sums. kForm 0: y . dy,
      // 1: the log form's sum of dy (y not read), 2: the choice inside.
      auto sum = [&](auto form_c) {
        constexpr int kForm = decltype(form_c)::value;
#pragma unroll kUnroll
        for (int i = 0; i < VPT; ++i) {
          float y[VEC], dy[VEC];
          if constexpr (kForm != 1) y_at(i).widen(y);
          dy_at(i).widen(dy);
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            if constexpr (kForm == 0) acc = fmaf(dy[j], y[j], acc);
            else if constexpr (kForm == 1) acc += dy[j];
            else acc = p.log ? acc + dy[j] : fmaf(dy[j], y[j], acc);
          }
        }
      };
      // dy in registers: one loop a form (the log form reads no shared
      // memory; one loop with the choice inside spilled the fp16 kernel, 8
      // bytes at 64 registers, ptxas -v). The others keep the one loop.
      if constexpr (kDyRegs) {
        if (p.log) sum(std::integral_constant<int, 1>{});
        else sum(std::integral_constant<int, 0>{});
      } else {
        sum(std::integral_constant<int, 2>{});
      }
    }
    const float dot = red.reduce(acc, g.team, p.cluster, g.crank);
    if (!active) return;
    if constexpr (kShift) {  // (the geometry afresh: shift_row)
      g = RowGeom<VEC, VPT>::make(p.team, p.cluster, p.cols, kCluster);
      sh = shift_row<T>(g, p.a, row, p.a_stride);
    }
    T* dxrow = static_cast<T*>(p.out) + row * p.out_stride - sh;
    // The output pass. Staged rows: one instantiation per form (log or not:
    // no choice inside the loop), and threads whose vectors all lie in the
    // row store straight through the row pointer formed once (the staged
    // forward's by_whole). Register tiles keep one loop with the choice
    // inside, as measured before the staged kernel (the split doubled
    // their code: bf16 4-vector 1432 -> 1760 instructions, unmeasured).
    auto write = [&](auto whole_c, auto&& out) {
      constexpr bool kW = decltype(whole_c)::value;
      T* d0 = dxrow + g.col0;
#pragma unroll kUnroll
      for (int i = 0; i < VPT; ++i) {
        if constexpr (!kW) {
          if (g.valid(i) == 0) continue;
        }
        float y[VEC], dy[VEC];
        y_at(i).widen(y);
        dy_at(i).widen(dy);
#pragma unroll
        for (int j = 0; j < VEC; ++j) y[j] = out(y[j], dy[j]);
        RawVec<T, VEC> o;
        o.narrow(y);
        if constexpr (kW) o.store(d0 + i * g.col_step);
        else g.store(o, dxrow, i);
      }
    };
    auto write_form = [&](auto whole_c) {
      if (p.log) write(whole_c, [&](float y, float dy) { return dy - __expf(y) * dot; });
      else write(whole_c, [&](float y, float dy) { return y * (dy - dot); });
    };
    if constexpr (kStaged) {
      if (g.whole) write_form(std::true_type{});
      else write_form(std::false_type{});
    } else {
      write(std::false_type{},
            [&](float y, float dy) { return p.log ? dy - __expf(y) * dot : y * (dy - dot); });
    }
  };

  for_row_blocks<kCluster>(p.row_blocks, p.cluster, do_rows);
  red.finish();
}

// ---------------------------------------------------------------------------
// Streaming kernels: one CTA per row (grid-stride over rows), two passes.
// kVecIO: every operand's rows start at the same offset inside a 16-byte
// vector (row_shift; the host checks it: detail::same_vector_offsets), so a
// row is read and written as the 16-byte vectors that cover it, from the
// one that holds its first element -- whole vectors 16 bytes at a time, the
// first and the last element by element over the row's part of them. A row
// whose pitch is not a whole number of vectors (bf16 N = 50257) keeps its
// vectors so. Otherwise element by element.

// Elements [lo, hi) of the vector at p (aligned when kVecIO).
template <typename T, int VEC, bool kVecIO>
__device__ __forceinline__ void stream_load(core::RawVec<T, VEC>& v, const T* p, int lo, int hi) {
  if (kVecIO && lo == 0 && hi == VEC) v.load(p);
  else v.load_range(p, lo, hi);
}
template <typename T, int VEC, bool kVecIO>
__device__ __forceinline__ void stream_store(const core::RawVec<T, VEC>& v, T* p, int lo, int hi) {
  if (kVecIO && lo == 0 && hi == VEC) v.store(p);
  else v.store_range(p, lo, hi);
}

// Elements [0, n) (the cross-entropy kernels' aligned rows).
template <typename T, int VEC, bool kVecIO>
__device__ __forceinline__ void stream_load(core::RawVec<T, VEC>& v, const T* p, int n) {
  stream_load<T, VEC, kVecIO>(v, p, 0, n);
}
template <typename T, int VEC, bool kVecIO>
__device__ __forceinline__ void stream_store(const core::RawVec<T, VEC>& v, T* p, int n) {
  stream_store<T, VEC, kVecIO>(v, p, 0, n);
}

// The row's part [lo, hi) of the vector at column c (c < 0 for the first
// vector of a shifted row).
struct StreamLanes {
  int lo, hi;
  template <int VEC>
  static __device__ __forceinline__ StreamLanes at(int c, int cols) {
    return {c < 0 ? -c : 0, cols - c < VEC ? cols - c : VEC};
  }
};

template <typename T, bool kVecIO>
__global__ void __launch_bounds__(kRegRowMaxThreads, 1) softmax_fwd_stream_kernel(const SoftmaxParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char smem[];
  const int cols = int(p.cols), step = int(blockDim.x) * VEC;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* xrow = static_cast<const T*>(p.a) + row * p.a_stride;
    const int first = int(threadIdx.x) * VEC - row_shift<T, kVecIO>(xrow);
    float m = -INFINITY, s = 0.0f;
    for (int c = first; c < cols; c += step) {
      const StreamLanes l = StreamLanes::at<VEC>(c, cols);
      RawVec<T, VEC> v;
      stream_load<T, VEC, kVecIO>(v, xrow + c, l.lo, l.hi);
      float f[VEC];
      v.widen(f);
      fold_max_sum(f, l.lo, l.hi, m, s);
    }
    RowReducer<MaxSumOp> red(smem, int(blockDim.x), 1);
    // Consecutive rows alternate the scratch (one reducer per row: parity by row).
    red.parity = int(((row - blockIdx.x) / gridDim.x) & 1);
    const SoftmaxRow r(red.reduce(MaxSum{m, s}));
    T* orow = static_cast<T*>(p.out) + row * p.out_stride;
    for (int c = first; c < cols; c += step) {
      const StreamLanes l = StreamLanes::at<VEC>(c, cols);
      RawVec<T, VEC> v;
      stream_load<T, VEC, kVecIO>(v, xrow + c, l.lo, l.hi);
      float f[VEC];
      v.widen(f);
#pragma unroll
      for (int j = 0; j < VEC; ++j) f[j] = r.out(f[j], p.log);
      v.narrow(f);
      stream_store<T, VEC, kVecIO>(v, orow + c, l.lo, l.hi);
    }
  }
}

template <typename T, bool kVecIO>
__global__ void __launch_bounds__(kRegRowMaxThreads, 1) softmax_bwd_stream_kernel(const SoftmaxParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char smem[];
  const int cols = int(p.cols), step = int(blockDim.x) * VEC;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* yrow = static_cast<const T*>(p.a) + row * p.a_stride;
    const T* dyrow = static_cast<const T*>(p.b) + row * p.b_stride;
    const int first = int(threadIdx.x) * VEC - row_shift<T, kVecIO>(yrow);
    float acc = 0.0f;
    // (Lanes outside the row load as 0: they add nothing to the dot.)
    for (int c = first; c < cols; c += step) {
      const StreamLanes l = StreamLanes::at<VEC>(c, cols);
      RawVec<T, VEC> yv, dyv;
      stream_load<T, VEC, kVecIO>(yv, yrow + c, l.lo, l.hi);
      stream_load<T, VEC, kVecIO>(dyv, dyrow + c, l.lo, l.hi);
      float y[VEC], dy[VEC];
      yv.widen(y);
      dyv.widen(dy);
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc = p.log ? acc + dy[j] : fmaf(dy[j], y[j], acc);
    }
    RowReducer<SumOp> red(smem, int(blockDim.x), 1);
    red.parity = int(((row - blockIdx.x) / gridDim.x) & 1);
    const float dot = red.reduce(acc);
    T* dxrow = static_cast<T*>(p.out) + row * p.out_stride;
    for (int c = first; c < cols; c += step) {
      const StreamLanes l = StreamLanes::at<VEC>(c, cols);
      RawVec<T, VEC> yv, dyv;
      stream_load<T, VEC, kVecIO>(yv, yrow + c, l.lo, l.hi);
      stream_load<T, VEC, kVecIO>(dyv, dyrow + c, l.lo, l.hi);
      float y[VEC], dy[VEC];
      yv.widen(y);
      dyv.widen(dy);
#pragma unroll
      for (int j = 0; j < VEC; ++j) y[j] = p.log ? dy[j] - __expf(y[j]) * dot : y[j] * (dy[j] - dot);
      yv.narrow(y);
      stream_store<T, VEC, kVecIO>(yv, dxrow + c, l.lo, l.hi);
    }
  }
}

// ---------------------------------------------------------------------------
// Chunked kernels for long 16-byte-aligned rows: a row is split over a
// cluster of p.cluster CTAs (1..16); CTA r owns vectors [r, r + 1) *
// p.chunk_vecs of it. Pass 1 reads the chunk from HBM, 64 bytes a thread in
// flight (4 vectors forward, 2 of y and 2 of dy backward), folds it into the row's reduction and keeps its first
// p.stage_vecs vectors in shared memory. After the reduction over the CTA and
// the cluster, pass 2 walks the chunk backwards -- the most recently read
// lines first -- taking the staged vectors from shared memory and the rest
// from global memory again, where pass 1 left them in L2. HBM traffic stays
// one read and one write while the chunk's L2 tail is small against L2.
// Persistent: a cluster walks rows first, first + clusters, ...
// kLogDy (log-softmax's backward, RowTuning::softmax_chunk_log_dy): pass 1
// reads dy alone -- its sum is all the row's reduction needs -- 4 vectors a
// thread in flight, and stages the first 2 * p.stage_vecs of them in the
// whole staging area (y's half and dy's); pass 2 reads y from global memory
// once and dy from shared memory or L2. Against y and dy both read twice
// past the staged vectors, one read of y saved and twice the dy staged:
// fp32 1M (cluster 16, 3072 of 16384 vectors a tensor staged) moves ~3.6
// tensors against ~4.6.
template <typename T, bool kBackward, bool kCluster, bool kLogDy = false>
__global__ void __launch_bounds__(kRegRowMaxThreads, 1) softmax_chunk_kernel(const SoftmaxParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  constexpr int U = kBackward ? 2 : 4;
  using V = RawVec<T, VEC>;
  using Op = std::conditional_t<kBackward, SumOp, MaxSumOp>;
  extern __shared__ __align__(16) unsigned char smem[];
  // The row reduction: over the CTA, then the cluster (ClusterExchange); an
  // unclustered CTA alternates RowReducer's two scratch halves row by row.
  RowReduce<Op, kCluster> cred;
  cred.start(smem);
  [[maybe_unused]] RowReducer<Op> bred(smem, int(blockDim.x), 1);
  uint4* stage_a = reinterpret_cast<uint4*>(smem + kSoftmaxScratchBytes);
  uint4* stage_b = stage_a + p.stage_vecs;  // backward: dy

  const int crank = kCluster ? int(blockIdx.x % unsigned(p.cluster)) : 0;
  // This CTA's vectors: nfull whole ones, then (in the CTA holding the row's
  // end, when N is not a multiple of VEC) one partial vector of `tail`
  // elements, handled by thread 0 outside the unrolled loops.
  const int64_t v0 = int64_t(crank) * p.chunk_vecs;
  const int64_t full_row = p.cols / VEC;
  const int nfull = int(v0 >= full_row ? 0 : (full_row - v0 < p.chunk_vecs ? full_row - v0 : p.chunk_vecs));
  const int tail = (v0 + nfull == full_row && nfull < p.chunk_vecs) ? int(p.cols - full_row * VEC) : 0;
  static_assert(!kLogDy || kBackward, "kLogDy: the backward's");
  const int stage_cap = kLogDy ? 2 * p.stage_vecs : p.stage_vecs;  // (kLogDy: dy in both halves)
  const int nstage = nfull < stage_cap ? nfull : stage_cap;

  // Forward: folds vectors into the thread's online (m, s), one rescale per
  // call (padding must hold -inf).
  auto fold = [](auto& vs, float& m, float& s) {
    const float nm = fmaxf(m, max_of(vs));
    s = m == -INFINITY ? s * 0.0f : s * fast_exp2((m - nm) * kLog2e);
    const float base = nm == -INFINITY ? 0.0f : nm;
#pragma unroll
    for (auto& v : vs) {
      float f[VEC];
      v.widen(f);
#pragma unroll
      for (int j = 0; j < VEC; ++j) s += fast_exp2((f[j] - base) * kLog2e);
    }
    m = nm;
  };
  // Backward: the dot product's terms (padding holds zeros).
  auto dot = [&](const V& y, const V& dy, float& acc) {
    float fy[VEC], fdy[VEC];
    y.widen(fy);
    dy.widen(fdy);
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc = p.log ? acc + fdy[j] : fmaf(fdy[j], fy[j], acc);
  };

  const int64_t clusters = gridDim.x / unsigned(p.cluster);
  for (int64_t row = blockIdx.x / unsigned(p.cluster); row < p.rows; row += clusters) {
    // Opaque per row: otherwise ptxas precomputes every unrolled step's
    // offsets once, keeps them live across the row loop and spills (as in the
    // register kernels).
    int nfull_r = nfull, nstage_r = nstage, tail_r = tail, tid = int(threadIdx.x), nthr = int(blockDim.x);
    asm volatile("" : "+r"(nfull_r), "+r"(nstage_r), "+r"(tail_r), "+r"(tid), "+r"(nthr));
    const T* a = static_cast<const T*>(p.a) + row * p.a_stride + v0 * VEC;
    const T* b = kBackward ? static_cast<const T*>(p.b) + row * p.b_stride + v0 * VEC : nullptr;
    T* o = static_cast<T*>(p.out) + row * p.out_stride + v0 * VEC;
    // Opaque too: otherwise ptxas rebuilds each load's address from the
    // parameters (two LDC.64 and ~12 integer instructions a vector, every
    // trip) instead of keeping three pointers.
    asm volatile("" : "+l"(a), "+l"(o));
    if constexpr (kBackward) asm volatile("" : "+l"(b));

    // Pass 1.
    float m = -INFINITY, s = 0.0f, acc = 0.0f;
    if constexpr (kLogDy) {
      // dy alone, 2U vectors a thread in flight (vb the first U, va the
      // next), staged at stage_a[k] for k < nstage_r.
      auto sum = [&](const V& v) {
        float f[VEC];
        v.widen(f);
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc += f[j];
      };
#pragma unroll 1
      for (int k0 = tid; k0 < nfull_r; k0 += 2 * U * nthr) {
        V vb[U], va[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int k = k0 + u * nthr, k2 = k0 + (U + u) * nthr;
          if (k < nfull_r) vb[u].load(b + int64_t(k) * VEC);
          else vb[u].zero();
          if (k2 < nfull_r) va[u].load(b + int64_t(k2) * VEC);
          else va[u].zero();
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int k = k0 + u * nthr, k2 = k0 + (U + u) * nthr;
          if (k < nstage_r) stage_a[k] = *reinterpret_cast<const uint4*>(vb[u].w);
          if (k2 < nstage_r) stage_a[k2] = *reinterpret_cast<const uint4*>(va[u].w);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          sum(vb[u]);
          sum(va[u]);
        }
      }
    } else {
#pragma unroll 1
      for (int k0 = tid; k0 < nfull_r; k0 += U * nthr) {
        V va[U], vb[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int k = k0 + u * nthr;
          if (k < nfull_r) {
            va[u].load(a + int64_t(k) * VEC);
            if constexpr (kBackward) vb[u].load(b + int64_t(k) * VEC);
          } else if constexpr (kBackward) {
            va[u].zero();
            vb[u].zero();
          } else {
            va[u].fill_tail(0, neg_inf_bits<T>());
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int k = k0 + u * nthr;
          if (k < nstage_r) {
            stage_a[k] = *reinterpret_cast<const uint4*>(va[u].w);
            if constexpr (kBackward) stage_b[k] = *reinterpret_cast<const uint4*>(vb[u].w);
          }
        }
        if constexpr (kBackward) {
#pragma unroll
          for (int u = 0; u < U; ++u) dot(va[u], vb[u], acc);
        } else {
          fold(va, m, s);
        }
      }
    }
    // The row's partial last vector. Its addresses are made opaque, or ptxas
    // precomputes its per-element addresses outside the row loop and spills.
    auto tail_ptr = [&](auto* base) {
      auto* t = base + int64_t(nfull_r) * VEC;
      asm volatile("" : "+l"(t));
      return t;
    };
    if (tail_r > 0 && tid == 0) {
      V va[1], vb;
      if constexpr (kLogDy) va[0].zero();  // (dy's sum alone)
      else va[0].load_partial(tail_ptr(a), tail_r);
      if constexpr (kBackward) {
        vb.load_partial(tail_ptr(b), tail_r);
        dot(va[0], vb, acc);
      } else {
        va[0].fill_tail(tail_r, neg_inf_bits<T>());
        fold(va, m, s);
      }
    }

    // The reduction's __syncthreads also orders pass 1's staging stores
    // before pass 2's loads of other threads' vectors (CTAs >= 64 threads).
    typename Op::T part;
    if constexpr (kBackward) part = acc;
    else part = MaxSum{m, s};
    if constexpr (kCluster) part = cred.reduce(part, nthr, p.cluster, crank);
    else part = bred.reduce(part);
    // Backward: the row's dot product; forward: the output constants.
    const std::conditional_t<kBackward, float, SoftmaxRow> rc(part);
    auto out = [&](const V& va, const V& vb, V& o) {
      float f[VEC];
      va.widen(f);
      if constexpr (kBackward) {
        float dy[VEC];
        vb.widen(dy);
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] = p.log ? dy[j] - __expf(f[j]) * rc : f[j] * (dy[j] - rc);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] = rc.out(f[j], p.log);
      }
      o.narrow(f);
    };

    // Pass 2, backwards over the chunk: first the vectors pass 1 left in
    // global memory (read last, so the likeliest still in L2), then the
    // staged ones. Two loops, so that no vector branches between shared and
    // global memory (25 branches a trip in one loop).
    auto pass2 = [&](auto staged, int lo, int hi) {  // vectors [lo, hi), backwards
      constexpr bool kStaged = decltype(staged)::value;
#pragma unroll 1
      for (int j0 = tid; j0 < hi - lo; j0 += U * nthr) {
        V va[U], vb[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int k = hi - 1 - (j0 + u * nthr);
          if (k < lo) continue;
          if constexpr (kStaged && kLogDy) {
            va[u].load(a + int64_t(k) * VEC);
            *reinterpret_cast<uint4*>(vb[u].w) = stage_a[k];
          } else if constexpr (kStaged) {
            *reinterpret_cast<uint4*>(va[u].w) = stage_a[k];
            if constexpr (kBackward) *reinterpret_cast<uint4*>(vb[u].w) = stage_b[k];
          } else {
            va[u].load(a + int64_t(k) * VEC);
            if constexpr (kBackward) vb[u].load(b + int64_t(k) * VEC);
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int k = hi - 1 - (j0 + u * nthr);
          if (k < lo) continue;
          V vo;
          out(va[u], vb[u], vo);
          vo.store(o + int64_t(k) * VEC);
        }
      }
    };
    pass2(std::false_type{}, nstage_r, nfull_r);
    pass2(std::true_type{}, 0, nstage_r);
    if (tail_r > 0 && tid == 0) {
      V va, vb, vo;
      va.load_partial(tail_ptr(a), tail_r);
      if constexpr (kBackward) vb.load_partial(tail_ptr(b), tail_r);
      out(va, vb, vo);
      vo.store_partial(tail_ptr(o), tail_r);
    }
    // The next row's pass 1 overwrites the staged vectors: every thread must
    // be done reading them.
    __syncthreads();
  }
  cred.finish();
}

// ---------------------------------------------------------------------------
// Launchers, explicitly instantiated once per dtype (src/ops/softmax_<dt>.cu).

template <auto kKernel>
Status launch_softmax_kernel(const SoftmaxParams& p, const core::LaunchShape& shape, int device, cudaStream_t stream) {
  return core::launch_cached<kKernel>(device, shape, stream, p);
}

// Register-resident: cfg from choose_reg_row_config (vpt a bucket <= the
// direction's max; clustered rows at the clustered tile, staged forward rows
// at the staged one).
template <DType kX, bool kShift>
Status launch_softmax_reg_as(const SoftmaxParams& p, const RegRowConfig& cfg, bool backward, int device,
                             cudaStream_t stream) {
  using T = typename core::TypeOf<kX>::type;
  const core::LaunchShape shape = core::launch_shape(cfg);
  if (!backward) {
    if (cfg.staged && cfg.staged_smem_vpt < cfg.vpt) {  // x split between shared memory and registers
      if (cfg.vpt == kSoftmaxFwdSplitVpt && cfg.staged_smem_vpt == kSoftmaxFwdSplitVpt - kSoftmaxFwdSplitRegs)
        return launch_softmax_kernel<softmax_fwd_reg_kernel<T, kSoftmaxFwdSplitVpt, true, true, kSoftmaxFwdSplitRegs, kShift>>(
            p, shape, device, stream);
    } else if (cfg.staged) {
      if (cfg.vpt == 8) return launch_softmax_kernel<softmax_fwd_reg_kernel<T, 8, true, true, 0, kShift>>(p, shape, device, stream);
      if (cfg.vpt == 16) return launch_softmax_kernel<softmax_fwd_reg_kernel<T, 16, true, true, 0, kShift>>(p, shape, device, stream);
    } else if (cfg.cluster > 1) {
      if (cfg.vpt == softmax_fwd_cluster_vpt())
        return launch_softmax_kernel<softmax_fwd_reg_kernel<T, softmax_fwd_cluster_vpt(), true, false, 0, kShift>>(p, shape, device,
                                                                                                  stream);
    } else {
      if constexpr (!kShift) {  // lean rows (RegRowConfig::lean): 1 or 2 vectors a thread
        if (cfg.lean && cfg.vpt == 1)
          return launch_softmax_kernel<softmax_fwd_reg_kernel<T, 1, false, false, 0, false, true>>(p, shape, device, stream);
        if (cfg.lean && cfg.vpt == 2)
          return launch_softmax_kernel<softmax_fwd_reg_kernel<T, 2, false, false, 0, false, true>>(p, shape, device, stream);
      }
      switch (cfg.vpt) {
        case 1: return launch_softmax_kernel<softmax_fwd_reg_kernel<T, 1, false, false, 0, kShift>>(p, shape, device, stream);
        case 2: return launch_softmax_kernel<softmax_fwd_reg_kernel<T, 2, false, false, 0, kShift>>(p, shape, device, stream);
        case 4: return launch_softmax_kernel<softmax_fwd_reg_kernel<T, 4, false, false, 0, kShift>>(p, shape, device, stream);
        case 8: return launch_softmax_kernel<softmax_fwd_reg_kernel<T, 8, false, false, 0, kShift>>(p, shape, device, stream);
      }
    }
  } else {
    if (cfg.staged && cfg.staged_smem_vpt == cfg.vpt) {  // y staged, dy in registers (the wide geometry)
      if (cfg.vpt == kSoftmaxBwdWideVpt)
        return launch_softmax_kernel<softmax_bwd_reg_kernel<T, kSoftmaxBwdWideVpt, true, true, true, kShift>>(p, shape, device,
                                                                                                       stream);
    } else if (cfg.staged) {
      if (cfg.vpt == 8) return launch_softmax_kernel<softmax_bwd_reg_kernel<T, 8, true, true, false, kShift>>(p, shape, device, stream);
      if (cfg.vpt == 16) return launch_softmax_kernel<softmax_bwd_reg_kernel<T, 16, true, true, false, kShift>>(p, shape, device, stream);
    } else if (cfg.cluster > 1) {
      if (cfg.vpt == softmax_bwd_max_vpt())
        return launch_softmax_kernel<softmax_bwd_reg_kernel<T, softmax_bwd_max_vpt(), true, false, false, kShift>>(p, shape, device, stream);
    } else {
      switch (cfg.vpt) {
        case 1: return launch_softmax_kernel<softmax_bwd_reg_kernel<T, 1, false, false, false, kShift>>(p, shape, device, stream);
        case 2: return launch_softmax_kernel<softmax_bwd_reg_kernel<T, 2, false, false, false, kShift>>(p, shape, device, stream);
        case 4: return launch_softmax_kernel<softmax_bwd_reg_kernel<T, 4, false, false, false, kShift>>(p, shape, device, stream);
      }
    }
  }
  return {Code::kUnsupported, "softmax: no register-resident kernel with " + std::to_string(cfg.vpt) +
                                  " vectors per thread (cluster " + std::to_string(cfg.cluster) +
                                  (cfg.staged ? (cfg.staged_smem_vpt < (backward ? 2 : 1) * cfg.vpt ? ", staged in part" : ", staged") : "") +
                                  ")"};
}

// shift: rows walked from the 16-byte vector that holds their first
// element (the kernels' kShift; cfg planned for N + VEC - 1 columns).
template <DType kX>
Status launch_softmax_reg(const SoftmaxParams& p, const RegRowConfig& cfg, bool backward, bool shift, int device,
                          cudaStream_t stream) {
  if (shift) return launch_softmax_reg_as<kX, true>(p, cfg, backward, device, stream);
  return launch_softmax_reg_as<kX, false>(p, cfg, backward, device, stream);
}

// Streaming: one CTA of `threads` per row, `grid` CTAs; vec_io: in shifted
// 16-byte vectors (the operands share each row's offset in a vector).
template <DType kX>
Status launch_softmax_stream(const SoftmaxParams& p, int threads, int64_t grid, bool vec_io, bool backward,
                             int device, cudaStream_t stream) {
  using T = typename core::TypeOf<kX>::type;
  const core::LaunchShape shape{grid, threads, kSoftmaxScratchBytes, 1, false};
  if (!backward) {
    if (vec_io) return launch_softmax_kernel<softmax_fwd_stream_kernel<T, true>>(p, shape, device, stream);
    return launch_softmax_kernel<softmax_fwd_stream_kernel<T, false>>(p, shape, device, stream);
  }
  if (vec_io) return launch_softmax_kernel<softmax_bwd_stream_kernel<T, true>>(p, shape, device, stream);
  return launch_softmax_kernel<softmax_bwd_stream_kernel<T, false>>(p, shape, device, stream);
}

// Chunked: cfg from choose_chunk_row_config; log_dy: log-softmax's
// backward reading dy alone in pass 1 (the kernel's kLogDy; p.log set).
template <DType kX>
Status launch_softmax_chunk(const SoftmaxParams& p, const ChunkRowConfig& cfg, bool backward, bool log_dy,
                            int device, cudaStream_t stream) {
  using T = typename core::TypeOf<kX>::type;
  const core::LaunchShape shape{cfg.grid, cfg.threads, cfg.smem_bytes, cfg.cluster, true};
  if (backward && log_dy) {
    if (cfg.cluster > 1) return launch_softmax_kernel<softmax_chunk_kernel<T, true, true, true>>(p, shape, device, stream);
    return launch_softmax_kernel<softmax_chunk_kernel<T, true, false, true>>(p, shape, device, stream);
  }
  if (!backward) {
    if (cfg.cluster > 1) return launch_softmax_kernel<softmax_chunk_kernel<T, false, true>>(p, shape, device, stream);
    return launch_softmax_kernel<softmax_chunk_kernel<T, false, false>>(p, shape, device, stream);
  }
  if (cfg.cluster > 1) return launch_softmax_kernel<softmax_chunk_kernel<T, true, true>>(p, shape, device, stream);
  return launch_softmax_kernel<softmax_chunk_kernel<T, true, false>>(p, shape, device, stream);
}

#define QUACK_SOFTMAX_INSTANTIATION(EXTERN, DT)                                                              \
  EXTERN template Status launch_softmax_chunk<DT>(const SoftmaxParams&, const ChunkRowConfig&, bool, bool,   \
                                                  int, cudaStream_t);                                        \
  EXTERN template Status launch_softmax_reg<DT>(const SoftmaxParams&, const RegRowConfig&, bool, bool, int,  \
                                                cudaStream_t);                                               \
  EXTERN template Status launch_softmax_stream<DT>(const SoftmaxParams&, int, int64_t, bool, bool, int,      \
                                                   cudaStream_t);
#ifndef QUACK_SOFTMAX_TU
QUACK_SOFTMAX_INSTANTIATION(extern, DType::kFloat32)
QUACK_SOFTMAX_INSTANTIATION(extern, DType::kFloat16)
QUACK_SOFTMAX_INSTANTIATION(extern, DType::kBFloat16)
#endif

}  // namespace ops
}  // namespace quack
