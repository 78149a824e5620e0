// RMSNorm forward.
//
// Design. One row kernel for every N. Each CTA (or each team of a CTA) stages
// its share of the row -- x, and the residual when given -- in shared memory
// with cp.async (every load of the share issued before the first use), then
//   1. sums h^2 over its staged vectors (h = x + residual, fp32),
//   2. reduces the sum over the team, the CTA and the cluster (core/reduce),
//   3. re-reads h from shared memory and writes out (and residual_out).
// So x is read from HBM once, unless the CTA's share does not fit on chip
// (cfg.chunks > 1): then pass 1 streams the chunks, and pass 2 walks them
// backwards, re-reading all but the last one still in shared memory.
//
// Shared memory per CTA:
//   [reducer scratch][x: teams][R][vpt][team] x 16 B][residual: same, res vec bytes]
// A thread only ever touches its own staging slots, so staging needs no
// barrier beyond the thread's own cp.async.wait_all.
#pragma once

#include <cstdint>

#include "quack/core/config.hpp"
#include "quack/core/launch.cuh"
#include "quack/core/reduce.cuh"
#include "quack/core/vec.cuh"
#include "quack/quack.hpp"

namespace quack {
namespace ops {

struct RMSNormFwdParams {
  int64_t rows, cols;
  const void* x;
  int64_t x_stride;
  const void* res;  // nullable
  int64_t res_stride;
  const void* w;  // nullable
  const void* b;  // nullable
  void* out;
  int64_t out_stride;
  void* res_out;  // nullable
  int64_t res_out_stride;
  float* rstd;  // nullable
  float eps, weight_offset;
  DType res_dtype, w_dtype, b_dtype, out_dtype, res_out_dtype;
  // Layout (from RowConfig).
  int team, cluster, vpt, rows_per_team, chunks;
  int64_t seg_vecs;
};

constexpr size_t kReducerScratchBytes = 512;  // >= RowReducer<SumOp>::scratch_bytes(), 16-B multiple

template <typename Tx, bool kVecIO>
__global__ void __launch_bounds__(1024) rmsnorm_fwd_kernel(const RMSNormFwdParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(Tx);
  static_assert(RowReducer<SumOp>::scratch_bytes() <= kReducerScratchBytes, "scratch");
  extern __shared__ __align__(16) unsigned char smem[];

  const int team = p.team, vpt = p.vpt, R = p.rows_per_team;
  const int tid = threadIdx.x;
  const int team_id = tid / team, t = tid % team;
  const int crank = p.cluster > 1 ? int(blockIdx.x % unsigned(p.cluster)) : 0;
  const int64_t block_row = blockIdx.x / unsigned(p.cluster);
  const int teams = blockDim.x / team;
  const int64_t row0 = (block_row * teams + team_id) * R;
  const int64_t nvec = (p.cols + VEC - 1) / VEC;
  const int64_t seg_begin = int64_t(crank) * p.seg_vecs;
  const int64_t seg_end = nvec < seg_begin + p.seg_vecs ? nvec : seg_begin + p.seg_vecs;
  const int64_t chunk_vecs = int64_t(team) * vpt;
  const bool has_res = p.res != nullptr;
  const int res_es = dtype_size(p.res_dtype);

  RowReducer<SumOp> red(smem, team, p.cluster);
  unsigned char* xs = smem + kReducerScratchBytes;                    // 16 B per slot
  unsigned char* rs = xs + size_t(blockDim.x) * R * vpt * 16;         // VEC*res_es per slot
  auto slot = [&](int r, int i) { return (size_t(team_id * R + r) * vpt + i) * team + t; };

  // Stages chunk k of row r (this thread's vectors only) and commits it.
  auto stage = [&](int r, int k) {
    const int64_t row = row0 + r;
    if (row >= p.rows) return;
    const Tx* xrow = static_cast<const Tx*>(p.x) + row * p.x_stride;
    for (int i = 0; i < vpt; ++i) {
      const int64_t v = seg_begin + k * chunk_vecs + int64_t(i) * team + t;
      if (v >= seg_end) break;
      const int64_t col = v * VEC;
      const int valid = int(p.cols - col < VEC ? p.cols - col : VEC);
      stage_vec<sizeof(Tx), VEC, kVecIO>(xs + slot(r, i) * 16, xrow + col, valid);
      if (has_res)
        stage_vec<VEC, kVecIO>(rs + slot(r, i) * VEC * res_es,
                               elem_ptr(p.res, p.res_dtype, row * p.res_stride + col), p.res_dtype, valid);
    }
  };
  // h = x + residual for staged vector (r, i).
  auto staged_h = [&](int r, int i, float (&h)[VEC]) {
    smem_vec_to_float<Tx, VEC>(reinterpret_cast<const Tx*>(xs + slot(r, i) * 16), h);
    if (has_res) {
      float rv[VEC];
      smem_vec_to_float<VEC>(rs + slot(r, i) * VEC * res_es, p.res_dtype, rv);
#pragma unroll
      for (int j = 0; j < VEC; ++j) h[j] += rv[j];
    }
  };

  if (p.chunks == 1) {
    for (int r = 0; r < R; ++r) stage(r, 0);
    cp_async_commit();
    cp_async_wait_all();
  }

  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r;
    const bool active = row < p.rows;

    // Pass 1: sum of squares over this thread's vectors of the row.
    float acc = 0.0f;
    for (int k = 0; k < p.chunks; ++k) {
      if (p.chunks > 1) {
        stage(r, k);
        cp_async_commit();
        cp_async_wait_all();
      }
      if (active) {
#pragma unroll 4
        for (int i = 0; i < vpt; ++i) {
          const int64_t v = seg_begin + k * chunk_vecs + int64_t(i) * team + t;
          if (v >= seg_end) break;
          float h[VEC];
          staged_h(r, i, h);
#pragma unroll
          for (int j = 0; j < VEC; ++j) acc = fmaf(h[j], h[j], acc);
        }
      }
    }
    acc = red.reduce(acc);  // every thread of the CTA (and cluster) takes part
    if (p.cluster > 1 && r == R - 1) cluster_arrive();  // done reading peers' slots
    const float rstd = rsqrtf(acc / float(p.cols) + p.eps);
    if (!active) continue;
    if (p.rstd != nullptr && t == 0 && crank == 0) p.rstd[row] = rstd;

    // Pass 2: normalise and write (last chunk first: it is still staged).
    for (int k = p.chunks - 1; k >= 0; --k) {
      if (p.chunks > 1 && k != p.chunks - 1) {
        stage(r, k);
        cp_async_commit();
        cp_async_wait_all();
      }
#pragma unroll 2
      for (int i = 0; i < vpt; ++i) {
        const int64_t v = seg_begin + k * chunk_vecs + int64_t(i) * team + t;
        if (v >= seg_end) break;
        const int64_t col = v * VEC;
        const int valid = int(p.cols - col < VEC ? p.cols - col : VEC);
        float h[VEC];
        staged_h(r, i, h);
        if (p.res_out != nullptr)
          store_vec<VEC, kVecIO>(elem_ptr(p.res_out, p.res_out_dtype, row * p.res_out_stride + col),
                                 p.res_out_dtype, valid, h);
        float y[VEC];
        if (p.w != nullptr) {
          float w[VEC];
          load_vec<VEC, kVecIO>(elem_ptr(p.w, p.w_dtype, col), p.w_dtype, valid, w);
#pragma unroll
          for (int j = 0; j < VEC; ++j) y[j] = h[j] * rstd * (w[j] + p.weight_offset);
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) y[j] = h[j] * rstd;
        }
        if (p.b != nullptr) {
          float b[VEC];
          load_vec<VEC, kVecIO>(elem_ptr(p.b, p.b_dtype, col), p.b_dtype, valid, b);
#pragma unroll
          for (int j = 0; j < VEC; ++j) y[j] += b[j];
        }
        store_vec<VEC, kVecIO>(elem_ptr(p.out, p.out_dtype, row * p.out_stride + col), p.out_dtype,
                               valid, y);
      }
    }
  }
  if (p.cluster > 1) cluster_wait();  // no CTA leaves while a peer reads its slot
}

// Shared memory the kernel needs for a config.
inline size_t rmsnorm_fwd_scratch_bytes() { return kReducerScratchBytes; }

// Launches the kernel for x's element type. Defined here, explicitly
// instantiated once per dtype in src/ops/rmsnorm_fwd_<dtype>.cu.
template <DType kX>
Status launch_rmsnorm_fwd(const RMSNormFwdParams& p, const RowConfig& cfg, bool vec_io, int device,
                          cudaStream_t stream) {
  using Tx = typename core::TypeOf<kX>::type;
  static core::KernelAttrCache cache[2];
  if (vec_io)
    return core::launch_row_kernel(rmsnorm_fwd_kernel<Tx, true>, cache[1], device, cfg, stream, p);
  return core::launch_row_kernel(rmsnorm_fwd_kernel<Tx, false>, cache[0], device, cfg, stream, p);
}

#define QUACK_RMSNORM_FWD_INSTANTIATION(EXTERN, DT)                                             \
  EXTERN template Status launch_rmsnorm_fwd<DT>(const RMSNormFwdParams&, const RowConfig&, bool, \
                                                int, cudaStream_t);
#ifndef QUACK_RMSNORM_FWD_TU
QUACK_RMSNORM_FWD_INSTANTIATION(extern, DType::kFloat32)
QUACK_RMSNORM_FWD_INSTANTIATION(extern, DType::kFloat16)
QUACK_RMSNORM_FWD_INSTANTIATION(extern, DType::kBFloat16)
#endif

}  // namespace ops
}  // namespace quack
