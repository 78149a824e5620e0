// Softmax and log-softmax, forward and backward.
//
// Two kernel families, one dispatch (src/softmax.cu):
// 1. Register-resident (the common case: 16-byte-aligned rows that fit the
//    register tiles of a 16-CTA cluster): a thread loads its share of the row
//    into registers, the row's online-softmax pair (max, sum of exp) -- or,
//    backward, its dot product -- is reduced over the team and the cluster in
//    one round (core/row_tile.cuh), and the outputs are written from the same
//    registers. x is read from HBM once.
// 2. Streaming (everything else: misaligned rows or strides, rows beyond the
//    register tiles): one CTA per row walks the row twice, first for the
//    reduction, then for the outputs (x read twice; the second pass often
//    hits L2).
//
// Arithmetic in fp32: the pair is (m, s) = (max x, sum exp(x - m)), exp as
// exp2((x - m) * log2 e) after the subtraction; softmax = exp(x - m) / s and
// log_softmax = x - m - log2(s) ln 2. NaN and +inf propagate to the whole
// row, an all -inf row gives NaN, as torch (core/reduce.cuh MaxSumOp).
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
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shared memory of every softmax kernel: the row reduction's scratch (the
// larger of the two ops', clustered).
constexpr uint32_t kSoftmaxScratchBytes = 1024;
static_assert(core::RowReduce<core::MaxSumOp, true>::scratch_bytes() <= kSoftmaxScratchBytes &&
                  core::RowReduce<core::SumOp, true>::scratch_bytes() <= kSoftmaxScratchBytes,
              "softmax scratch");

// Register tiles (16-byte vectors of the row per thread) that compile within
// 64 registers without spilling (ptxas -v, CUDA 13.0): forward holds x (up to
// 8 vectors = 32 registers; 4 in the clustered kernel, whose loop and
// exchange state made 8 spill), backward y and dy (up to 4 each).
constexpr int softmax_fwd_max_vpt() { return 8; }
constexpr int softmax_fwd_cluster_vpt() { return 4; }
constexpr int softmax_bwd_max_vpt() { return 4; }

// Folds VEC elements x[], the first n of them valid, into the per-thread
// online-softmax partial (m, s) (core::MaxSum: natural units). Streaming
// kernels; the register kernel takes the thread's max first and needs no
// rescaling.
template <int VEC>
__device__ __forceinline__ void fold_max_sum(const float (&x)[VEC], int n, float& m, float& s) {
  float vm = -INFINITY;
#pragma unroll
  for (int j = 0; j < VEC; ++j)
    if (j < n) vm = fmaxf(vm, x[j]);
  const float nm = fmaxf(m, vm);
  // Rescale the running sum; while the max is -inf the sum is 0 (or NaN
  // after a NaN), kept as such by the multiplication by 0.
  s = m == -INFINITY ? s * 0.0f : s * core::fast_exp2((m - nm) * kLog2e);
  const float base = nm == -INFINITY ? 0.0f : nm;
#pragma unroll
  for (int j = 0; j < VEC; ++j)
    if (j < n) s += core::fast_exp2((x[j] - base) * kLog2e);
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

// The max of a thread's vectors (NaN skipped, as fmaxf: the sum of
// exponentials carries it). 16-bit elements are compared in pairs (HMNMX2:
// exact, half the instructions, no widening).
template <typename T, int VEC, int VPT>
__device__ __forceinline__ float max_of(const core::RawVec<T, VEC> (&v)[VPT]) {
  constexpr int W = core::RawVec<T, VEC>::kWords;
  if constexpr (sizeof(T) == 4) {
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < VPT; ++i)
#pragma unroll
      for (int k = 0; k < W; ++k) m = fmaxf(m, __uint_as_float(v[i].w[k]));
    return m;
  } else {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    T2 m2 = *reinterpret_cast<const T2*>(&v[0].w[0]);
#pragma unroll
    for (int i = 0; i < VPT; ++i)
#pragma unroll
      for (int k = 0; k < W; ++k) m2 = __hmax2(m2, *reinterpret_cast<const T2*>(&v[i].w[k]));
    return fmaxf(core::to_float(m2.x), core::to_float(m2.y));
  }
}

// -inf in T's bits: the fill for padding, which then drops out of the max and
// the sum of exponentials with no per-element mask.
template <typename T>
constexpr uint32_t neg_inf_bits() {
  return sizeof(T) == 4 ? 0xff800000u : std::is_same_v<T, __half> ? 0xfc00u : 0xff80u;
}

// ---------------------------------------------------------------------------
// Register-resident forward. kCluster: one row per cluster of p.cluster CTAs,
// persistent grid (see rmsnorm_fwd_reg_kernel for why).
template <typename T, int VPT, bool kCluster>
__global__ void __launch_bounds__(kRegRowMaxThreads, 1) softmax_fwd_reg_kernel(const SoftmaxParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char smem[];
  RowReduce<MaxSumOp, kCluster> red;
  red.start(smem);

  auto do_rows = [&](int64_t blk) {
    const auto g = RowGeom<VEC, VPT>::make(p.team, p.cluster, p.cols, kCluster);
    const int64_t row = blk * g.teams + g.team_id;
    const bool active = row < p.rows;
    RawVec<T, VEC> xv[VPT];
    float m = -INFINITY, s = 0.0f;
    if (active) {
      const T* xrow = static_cast<const T*>(p.a) + row * p.a_stride;
#pragma unroll
      for (int i = 0; i < VPT; ++i) g.load(xv[i], xrow, i);
      if (!g.whole) {
#pragma unroll
        for (int i = 0; i < VPT; ++i) xv[i].fill_tail(g.valid(i), neg_inf_bits<T>());
      }
      // The thread's max first (the elements are in registers), then one
      // exponential per element against it: no online rescaling.
      m = max_of(xv);
      // A thread with only -inf (or padding) has sum 0: exp2(-inf) = 0.
      const float base = m == -INFINITY ? 0.0f : m;
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        float f[VEC];
        xv[i].widen(f);
#pragma unroll
        for (int j = 0; j < VEC; ++j) s += fast_exp2((f[j] - base) * kLog2e);
      }
    }
    const SoftmaxRow r(red.reduce(MaxSum{m, s}, g.team, p.cluster, g.crank));
    if (!active) return;
    T* orow = static_cast<T*>(p.out) + row * p.out_stride;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (g.valid(i) == 0) continue;
      float f[VEC];
      xv[i].widen(f);
#pragma unroll
      for (int j = 0; j < VEC; ++j) f[j] = r.out(f[j], p.log);
      RawVec<T, VEC> o;
      o.narrow(f);
      g.store(o, orow, i);
    }
  };

  for_row_blocks<kCluster>(p.row_blocks, p.cluster, do_rows);
  red.finish();
}

// Register-resident backward: dx from y and dy (both held in registers).
template <typename T, int VPT, bool kCluster>
__global__ void __launch_bounds__(kRegRowMaxThreads, 1) softmax_bwd_reg_kernel(const SoftmaxParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char smem[];
  RowReduce<SumOp, kCluster> red;
  red.start(smem);

  auto do_rows = [&](int64_t blk) {
    const auto g = RowGeom<VEC, VPT>::make(p.team, p.cluster, p.cols, kCluster);
    const int64_t row = blk * g.teams + g.team_id;
    const bool active = row < p.rows;
    RawVec<T, VEC> yv[VPT], dyv[VPT];
    float acc = 0.0f;
    if (active) {
      const T* yrow = static_cast<const T*>(p.a) + row * p.a_stride;
      const T* dyrow = static_cast<const T*>(p.b) + row * p.b_stride;
#pragma unroll
      for (int i = 0; i < VPT; ++i) g.load(yv[i], yrow, i);
#pragma unroll
      for (int i = 0; i < VPT; ++i) g.load(dyv[i], dyrow, i);
      // Padding holds zeros: no masking needed in the sums.
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        float y[VEC], dy[VEC];
        yv[i].widen(y);
        dyv[i].widen(dy);
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc = p.log ? acc + dy[j] : fmaf(dy[j], y[j], acc);
      }
    }
    const float dot = red.reduce(acc, g.team, p.cluster, g.crank);
    if (!active) return;
    T* dxrow = static_cast<T*>(p.out) + row * p.out_stride;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (g.valid(i) == 0) continue;
      float y[VEC], dy[VEC];
      yv[i].widen(y);
      dyv[i].widen(dy);
#pragma unroll
      for (int j = 0; j < VEC; ++j) y[j] = p.log ? dy[j] - __expf(y[j]) * dot : y[j] * (dy[j] - dot);
      RawVec<T, VEC> o;
      o.narrow(y);
      g.store(o, dxrow, i);
    }
  };

  for_row_blocks<kCluster>(p.row_blocks, p.cluster, do_rows);
  red.finish();
}

// ---------------------------------------------------------------------------
// Streaming kernels: one CTA per row (grid-stride over rows), two passes.
// kVecIO: whole vectors are loaded and stored 16 bytes at a time (aligned
// rows); otherwise element by element.

template <typename T, int VEC, bool kVecIO>
__device__ __forceinline__ void stream_load(core::RawVec<T, VEC>& v, const T* p, int n) {
  if (kVecIO && n == VEC) v.load(p);
  else v.load_partial(p, n);
}
template <typename T, int VEC, bool kVecIO>
__device__ __forceinline__ void stream_store(const core::RawVec<T, VEC>& v, T* p, int n) {
  if (kVecIO && n == VEC) v.store(p);
  else v.store_partial(p, n);
}

template <typename T, bool kVecIO>
__global__ void __launch_bounds__(kRegRowMaxThreads, 1) softmax_fwd_stream_kernel(const SoftmaxParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char smem[];
  const int cols = int(p.cols), step = int(blockDim.x) * VEC;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* xrow = static_cast<const T*>(p.a) + row * p.a_stride;
    float m = -INFINITY, s = 0.0f;
    for (int c = int(threadIdx.x) * VEC; c < cols; c += step) {
      const int n = cols - c < VEC ? cols - c : VEC;
      RawVec<T, VEC> v;
      stream_load<T, VEC, kVecIO>(v, xrow + c, n);
      float f[VEC];
      v.widen(f);
      fold_max_sum(f, n, m, s);
    }
    RowReducer<MaxSumOp> red(smem, int(blockDim.x), 1);
    // Consecutive rows alternate the scratch (one reducer per row: parity by row).
    red.parity = int(((row - blockIdx.x) / gridDim.x) & 1);
    const SoftmaxRow r(red.reduce(MaxSum{m, s}));
    T* orow = static_cast<T*>(p.out) + row * p.out_stride;
    for (int c = int(threadIdx.x) * VEC; c < cols; c += step) {
      const int n = cols - c < VEC ? cols - c : VEC;
      RawVec<T, VEC> v;
      stream_load<T, VEC, kVecIO>(v, xrow + c, n);
      float f[VEC];
      v.widen(f);
#pragma unroll
      for (int j = 0; j < VEC; ++j) f[j] = r.out(f[j], p.log);
      v.narrow(f);
      stream_store<T, VEC, kVecIO>(v, orow + c, n);
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
    float acc = 0.0f;
    for (int c = int(threadIdx.x) * VEC; c < cols; c += step) {
      const int n = cols - c < VEC ? cols - c : VEC;
      RawVec<T, VEC> yv, dyv;
      stream_load<T, VEC, kVecIO>(yv, yrow + c, n);
      stream_load<T, VEC, kVecIO>(dyv, dyrow + c, n);
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
    for (int c = int(threadIdx.x) * VEC; c < cols; c += step) {
      const int n = cols - c < VEC ? cols - c : VEC;
      RawVec<T, VEC> yv, dyv;
      stream_load<T, VEC, kVecIO>(yv, yrow + c, n);
      stream_load<T, VEC, kVecIO>(dyv, dyrow + c, n);
      float y[VEC], dy[VEC];
      yv.widen(y);
      dyv.widen(dy);
#pragma unroll
      for (int j = 0; j < VEC; ++j) y[j] = p.log ? dy[j] - __expf(y[j]) * dot : y[j] * (dy[j] - dot);
      yv.narrow(y);
      stream_store<T, VEC, kVecIO>(yv, dxrow + c, n);
    }
  }
}

// ---------------------------------------------------------------------------
// Launchers, explicitly instantiated once per dtype (src/ops/softmax_<dt>.cu).

template <auto kKernel>
Status launch_softmax_kernel(const SoftmaxParams& p, const core::LaunchShape& shape, int device, cudaStream_t stream) {
  static core::KernelAttrCache cache;
  return core::launch_row_kernel(kKernel, cache, device, shape, stream, p);
}

// Register-resident: cfg from choose_reg_row_config (vpt a bucket <= the
// direction's max; clustered rows at the max).
template <DType kX>
Status launch_softmax_reg(const SoftmaxParams& p, const RegRowConfig& cfg, bool backward, int device,
                          cudaStream_t stream) {
  using T = typename core::TypeOf<kX>::type;
  const core::LaunchShape shape = core::launch_shape(cfg);
  if (!backward) {
    if (cfg.cluster > 1) {
      if (cfg.vpt == softmax_fwd_cluster_vpt())
        return launch_softmax_kernel<softmax_fwd_reg_kernel<T, softmax_fwd_cluster_vpt(), true>>(p, shape, device,
                                                                                                  stream);
    } else {
      switch (cfg.vpt) {
        case 1: return launch_softmax_kernel<softmax_fwd_reg_kernel<T, 1, false>>(p, shape, device, stream);
        case 2: return launch_softmax_kernel<softmax_fwd_reg_kernel<T, 2, false>>(p, shape, device, stream);
        case 4: return launch_softmax_kernel<softmax_fwd_reg_kernel<T, 4, false>>(p, shape, device, stream);
        case 8: return launch_softmax_kernel<softmax_fwd_reg_kernel<T, 8, false>>(p, shape, device, stream);
      }
    }
  } else {
    if (cfg.cluster > 1) {
      if (cfg.vpt == softmax_bwd_max_vpt())
        return launch_softmax_kernel<softmax_bwd_reg_kernel<T, softmax_bwd_max_vpt(), true>>(p, shape, device, stream);
    } else {
      switch (cfg.vpt) {
        case 1: return launch_softmax_kernel<softmax_bwd_reg_kernel<T, 1, false>>(p, shape, device, stream);
        case 2: return launch_softmax_kernel<softmax_bwd_reg_kernel<T, 2, false>>(p, shape, device, stream);
        case 4: return launch_softmax_kernel<softmax_bwd_reg_kernel<T, 4, false>>(p, shape, device, stream);
      }
    }
  }
  return {Code::kUnsupported, "softmax: no register-resident kernel with " + std::to_string(cfg.vpt) +
                                  " vectors per thread (cluster " + std::to_string(cfg.cluster) + ")"};
}

// Streaming: one CTA of `threads` per row, `grid` CTAs.
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

#define QUACK_SOFTMAX_INSTANTIATION(EXTERN, DT)                                                              \
  EXTERN template Status launch_softmax_reg<DT>(const SoftmaxParams&, const RegRowConfig&, bool, int,        \
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
