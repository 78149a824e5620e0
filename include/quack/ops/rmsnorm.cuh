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
// The grid is persistent: a CTA (a cluster, for clustered rows) walks row
// blocks with a stride of the grid, and with two staging buffers it issues
// the next block's loads before working on the current one, so loads stay in
// flight while it reduces, waits at barriers and stores.
//
// Shared memory per CTA:
//   [reducer scratch][buffer 0][buffer 1]
//   buffer = [x: teams][R][vpt][team] x 16 B][residual: same, VEC*res bytes]
// A thread only ever touches its own staging slots, so staging needs no
// barrier beyond the thread's own cp.async waits.
#pragma once

#include <cstdint>
#include <type_traits>

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
  int team, cluster, vpt, rows_per_team, chunks, buffers;
  int64_t seg_vecs, row_blocks;
  uint32_t stage_bytes;
};

constexpr uint32_t kReducerScratchBytes = 512;  // >= RowReducer<SumOp>::scratch_bytes(), 16-B multiple
constexpr int kMaxThreads = kRowKernelMaxThreads;
// Elements a thread handles as one straight-line group, all their loads
// issued before the first use: 4 fp32 or 2 16-bit vectors.
constexpr int kGroupElems = 16;
// <= 128 registers: two 256-thread CTAs per SM. Three (<= 80 registers)
// measured 4-10 points better for fp32 but the 16-bit kernels spill there
// (bench/results/2026-11-30-rmsnorm-fwd-tuning.md, last section).
constexpr int kMinBlocks = 2;
constexpr int kMinBlocksUniform = 2;

// kUniform: every tensor present has x's dtype (the common case), so every
// access is compile-time typed; otherwise secondary tensors dispatch on their
// run-time dtype (mixed precision, e.g. an fp32 residual stream).
template <typename Tx, bool kVecIO, bool kUniform>
__global__ void __launch_bounds__(kMaxThreads, kUniform ? kMinBlocksUniform : kMinBlocks) rmsnorm_fwd_kernel(const RMSNormFwdParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(Tx);
  // Vectors per group (one on the element-wise path).
  constexpr int U = kVecIO ? kGroupElems / VEC : 1;
  // The element-wise (misaligned) staging is too wide to unroll in 128 registers.
  constexpr int kStageUnroll = kVecIO ? U : 1;
  static_assert(RowReducer<SumOp>::scratch_bytes() <= kReducerScratchBytes, "scratch");
  extern __shared__ __align__(16) unsigned char smem[];

  // Column indices are 32-bit (N <= kRowMaxCols, checked by can_implement);
  // row offsets are 64-bit.
  const int team = p.team, vpt = p.vpt, R = p.rows_per_team;
  const int team_id = threadIdx.x / team, t = threadIdx.x % team;
  const int crank = p.cluster > 1 ? int(blockIdx.x % unsigned(p.cluster)) : 0;
  const int teams = blockDim.x / team;
  const int cols = int(p.cols);
  // This CTA's share of the row is columns [seg_col0, seg_col1).
  const int seg_col0 = crank * int(p.seg_vecs) * VEC;
  const int seg_col1 = min(cols, seg_col0 + int(p.seg_vecs) * VEC);
  const int col_step = team * VEC;          // between a thread's consecutive vectors
  const int chunk_cols = vpt * col_step;    // columns of one chunk of the segment
  const int first_col = seg_col0 + t * VEC; // this thread's first column (chunk 0)
  const bool has_res = p.res != nullptr;
  const int res_es = kUniform ? int(sizeof(Tx)) : elem_bytes(p.res_dtype);
  const int res_vec_bytes = VEC * res_es;
  const int64_t grid_blocks = gridDim.x / unsigned(p.cluster);

  RowReducer<SumOp> red(smem, team, p.cluster);
  // Staging slot of this thread's i-th vector of row r in buffer buf:
  // consecutive threads own consecutive slots (conflict-free warps).
  const uint32_t x_base = smem_addr(smem) + kReducerScratchBytes + uint32_t(team_id * R * vpt * team + t) * 16;
  const uint32_t res_base = x_base + uint32_t(blockDim.x) * R * vpt * 16 +
                            uint32_t(team_id * R * vpt * team + t) * (res_vec_bytes - 16);
  auto x_addr = [&](int buf, int r, int i) { return x_base + buf * p.stage_bytes + uint32_t((r * vpt + i) * team) * 16; };
  auto res_addr = [&](int buf, int r, int i) {
    return res_base + buf * p.stage_bytes + uint32_t((r * vpt + i) * team) * res_vec_bytes;
  };
  auto row_of = [&](int64_t blk, int r) { return (blk * teams + team_id) * R + r; };

  // Issues the cp.async of chunk k of row r of row block blk (this thread's
  // vectors only) into buffer buf; slots past the segment are zero-filled
  // without reading, so the sum below needs no bounds checks. Does not commit.
  auto stage = [&](int64_t blk, int buf, int r, int k) {
    const int64_t row = row_of(blk, r);
    if (row >= p.rows) return;
    const char* xrow = static_cast<const char*>(p.x) + row * p.x_stride * int64_t(sizeof(Tx));
    const char* rrow = has_res ? static_cast<const char*>(p.res) + row * p.res_stride * res_es : nullptr;
    int col = first_col + k * chunk_cols;
#pragma unroll kStageUnroll
    for (int i = 0; i < vpt; ++i, col += col_step) {
      const int rem = seg_col1 - col;  // valid elements from col on (<= 0: none)
      const int n = rem <= 0 ? 0 : (rem < VEC ? rem : VEC);
      if constexpr (kVecIO) {
        cp_async_zfill<16>(x_addr(buf, r, i), xrow + (n > 0 ? int64_t(col) * sizeof(Tx) : 0), n * int(sizeof(Tx)));
        if (has_res) {
          if constexpr (kUniform)
            cp_async_zfill<16>(res_addr(buf, r, i), rrow + (n > 0 ? int64_t(col) * sizeof(Tx) : 0), n * int(sizeof(Tx)));
          else
            cp_async_zfill(res_addr(buf, r, i), rrow + (n > 0 ? int64_t(col) * res_es : 0), n * res_es, res_vec_bytes);
        }
      } else {
        stage_elems<sizeof(Tx), VEC>(x_addr(buf, r, i), xrow + int64_t(col) * sizeof(Tx), n);
        if (has_res) {
          if constexpr (kUniform) stage_elems<sizeof(Tx), VEC>(res_addr(buf, r, i), rrow + int64_t(col) * sizeof(Tx), n);
          else stage_elems<VEC>(res_addr(buf, r, i), rrow + int64_t(col) * res_es, p.res_dtype, n);
        }
      }
    }
  };
  auto stage_block = [&](int64_t blk, int buf) {
    for (int r = 0; r < R; ++r) stage(blk, buf, r, 0);
    cp_async_commit();
  };
  // h = x + residual for the G staged vectors i0 .. i0 + G - 1 of row r.
  auto staged_h = [&](auto g, int buf, int r, int i0, auto& h) {
    constexpr int G = decltype(g)::value;
#pragma unroll
    for (int u = 0; u < G; ++u) lds_vec<Tx, VEC>(x_addr(buf, r, i0 + u), h[u]);
    if (has_res) {
#pragma unroll
      for (int u = 0; u < G; ++u) {
        float rv[VEC];
        if constexpr (kUniform) lds_vec<Tx, VEC>(res_addr(buf, r, i0 + u), rv);
        else lds_vec<VEC>(res_addr(buf, r, i0 + u), p.res_dtype, rv);
#pragma unroll
        for (int j = 0; j < VEC; ++j) h[u][j] += rv[j];
      }
    }
  };
  // Vectors of chunk k (starting at column col0) this thread holds data for.
  auto vectors_in = [&](int col0) {
    if (col0 >= seg_col1) return 0;
    const int n = (seg_col1 - col0 + col_step - 1) / col_step;
    return n < vpt ? n : vpt;
  };
  // Runs body(group size, first vector) over nv vectors: groups of U, then
  // single vectors, so every group is straight-line code.
  auto for_groups = [&](int nv, auto&& body) {
    int i0 = 0;
#pragma unroll 1
    for (; i0 + U <= nv; i0 += U) body(std::integral_constant<int, U>{}, i0);
#pragma unroll 1
    for (; i0 < nv; ++i0) body(std::integral_constant<int, 1>{}, i0);
  };

  int64_t blk = blockIdx.x / unsigned(p.cluster);
  int buf = 0;
  if (p.chunks == 1 && p.buffers == 2 && blk < p.row_blocks) stage_block(blk, 0);

  for (; blk < p.row_blocks; blk += grid_blocks) {
    if (p.chunks == 1) {
      if (p.buffers == 2) {
        // Prefetch the next block into the other buffer, then wait for this one.
        if (blk + grid_blocks < p.row_blocks) {
          stage_block(blk + grid_blocks, buf ^ 1);
          cp_async_wait_group<1>();
        } else {
          cp_async_wait_all();
        }
      } else {
        stage_block(blk, 0);
        cp_async_wait_all();
      }
    }

    for (int r = 0; r < R; ++r) {
      const int64_t row = row_of(blk, r);
      const bool active = row < p.rows;

      // Pass 1: sum of squares over this thread's vectors of the row (padding
      // slots hold zeros).
      float acc = 0.0f;
      for (int k = 0; k < p.chunks; ++k) {
        if (p.chunks > 1) {
          stage(blk, 0, r, k);
          cp_async_commit();
          cp_async_wait_all();
        }
        if (active) {
          for_groups(vectors_in(first_col + k * chunk_cols), [&](auto g, int i0) {
            constexpr int G = decltype(g)::value;
            float h[G][VEC];
            staged_h(g, buf, r, i0, h);
#pragma unroll
            for (int u = 0; u < G; ++u)
#pragma unroll
              for (int j = 0; j < VEC; ++j) acc = fmaf(h[u][j], h[u][j], acc);
          });
        }
      }
      acc = red.reduce(acc);  // every thread of the CTA (and cluster) takes part
      const float rstd = rsqrtf(acc / float(p.cols) + p.eps);
      if (!active) continue;
      if (p.rstd != nullptr && t == 0 && crank == 0) p.rstd[row] = rstd;

      // Pass 2: normalise and write (last chunk first: it is still staged).
      using IO = SecondaryIO<Tx, VEC, kVecIO, kUniform>;
      void* orow = IO::ptr(p.out, p.out_dtype, row * p.out_stride);
      void* rorow = p.res_out ? IO::ptr(p.res_out, p.res_out_dtype, row * p.res_out_stride) : nullptr;
      for (int k = p.chunks - 1; k >= 0; --k) {
        if (p.chunks > 1 && k != p.chunks - 1) {
          stage(blk, 0, r, k);
          cp_async_commit();
          cp_async_wait_all();
        }
        const int col0 = first_col + k * chunk_cols;
        for_groups(vectors_in(col0), [&](auto g, int i0) {
          constexpr int G = decltype(g)::value;
          float h[G][VEC], w[G][VEC];
          staged_h(g, buf, r, i0, h);
          if (p.w != nullptr) {
#pragma unroll
            for (int u = 0; u < G; ++u) {
              const int col = col0 + (i0 + u) * col_step, rem = seg_col1 - col;
              IO::load(IO::ptr(p.w, p.w_dtype, col), p.w_dtype, rem < VEC ? rem : VEC, w[u]);
            }
          }
#pragma unroll
          for (int u = 0; u < G; ++u) {
            const int col = col0 + (i0 + u) * col_step, rem = seg_col1 - col;
            const int valid = rem < VEC ? rem : VEC;
            if (rorow != nullptr)
              IO::store(IO::ptr(rorow, p.res_out_dtype, col), p.res_out_dtype, valid, h[u]);
            if (p.w != nullptr) {
#pragma unroll
              for (int j = 0; j < VEC; ++j) {
                const float hr = h[u][j] * rstd;
                h[u][j] = fmaf(hr, w[u][j], hr * p.weight_offset);
              }
            } else {
#pragma unroll
              for (int j = 0; j < VEC; ++j) h[u][j] = h[u][j] * rstd;
            }
            if (p.b != nullptr) {
              float b[VEC];
              IO::load(IO::ptr(p.b, p.b_dtype, col), p.b_dtype, valid, b);
#pragma unroll
              for (int j = 0; j < VEC; ++j) h[u][j] += b[j];
            }
            IO::store(IO::ptr(orow, p.out_dtype, col), p.out_dtype, valid, h[u]);
          }
        });
      }
    }
    buf ^= p.buffers - 1;
  }
  if (p.cluster > 1) {  // no CTA leaves while a peer may still read its slot
    cluster_arrive();
    cluster_wait();
  }
}

// Shared memory the kernel needs for a config.
inline size_t rmsnorm_fwd_scratch_bytes() { return kReducerScratchBytes; }

// Launches the kernel for x's element type. Defined here, explicitly
// instantiated once per dtype in src/ops/rmsnorm_fwd_<dtype>.cu.
template <DType kX>
Status launch_rmsnorm_fwd(const RMSNormFwdParams& p, const RowConfig& cfg, bool vec_io, bool uniform,
                          int device, cudaStream_t stream) {
  using Tx = typename core::TypeOf<kX>::type;
  static core::KernelAttrCache cache[4];
  if (uniform) {
    if (vec_io) return core::launch_row_kernel(rmsnorm_fwd_kernel<Tx, true, true>, cache[3], device, cfg, stream, p);
    return core::launch_row_kernel(rmsnorm_fwd_kernel<Tx, false, true>, cache[2], device, cfg, stream, p);
  }
  if (vec_io) return core::launch_row_kernel(rmsnorm_fwd_kernel<Tx, true, false>, cache[1], device, cfg, stream, p);
  return core::launch_row_kernel(rmsnorm_fwd_kernel<Tx, false, false>, cache[0], device, cfg, stream, p);
}

#define QUACK_RMSNORM_FWD_INSTANTIATION(EXTERN, DT)                                             \
  EXTERN template Status launch_rmsnorm_fwd<DT>(const RMSNormFwdParams&, const RowConfig&, bool, bool, \
                                                int, cudaStream_t);
#ifndef QUACK_RMSNORM_FWD_TU
QUACK_RMSNORM_FWD_INSTANTIATION(extern, DType::kFloat32)
QUACK_RMSNORM_FWD_INSTANTIATION(extern, DType::kFloat16)
QUACK_RMSNORM_FWD_INSTANTIATION(extern, DType::kBFloat16)
#endif

}  // namespace ops
}  // namespace quack
