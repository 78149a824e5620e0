// RMSNorm forward: two kernels, one dispatch (src/rmsnorm.cu).
//
// 1. The register-resident kernel (rmsnorm_fwd_reg_kernel, below the general
//    one) serves the common layouts: a thread loads its share of the row
//    straight into registers, reduces, and writes from the same registers;
//    long rows without a residual (16-bit, and RMSNorm's fp32 ones, which
//    load the weight while x is in flight) stage x in shared memory
//    instead, and rows longer than a CTA are split over a cluster. Measured
//    (RMSNorm) at 94-99% of copy bandwidth for N <= 128K, 87-92% at 256K
//    (bench/results/2026-11-30-rmsnorm-fwd-reg.md, runs 12 and 16).
// 2. The general staged kernel (rmsnorm_fwd_kernel) serves every layout and
//    any N: misaligned operands, any mix of dtypes, rows beyond the register
//    kernels' capacity.
//
// The general kernel. Each CTA (or each team of a CTA) stages
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
#include "quack/core/row_tile.cuh"
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
  float* mean;  // nullable (LayerNorm)
  float eps, weight_offset;
  DType res_dtype, w_dtype, b_dtype, out_dtype, res_out_dtype;
  // Layout (from RowConfig).
  int team, cluster, vpt, rows_per_team, chunks, buffers;
  int64_t seg_vecs, row_blocks;
  uint32_t stage_bytes;
  // Host dispatch only (no kernel reads it): staged register rows with
  // weights in x's dtype take the kernel that loads the weight early
  // (kStagedEarlyW).
  bool staged_early_w;
  // Host dispatch only: 8-vector tiles of 16-bit x with an fp32 weight in
  // CTAs of up to kRegSmallCtaThreads take the small-CTA instance
  // (RowTuning::reg_small_cta).
  bool small_cta;
  // Staged rows, weight late: the thread's weight (and bias) vectors issued
  // together (RowTuning::reg_w_batch). Clustered rows: end with a cluster
  // barrier even after an exchange (RowTuning::cluster_end_sync).
  int w_batch, end_sync;
  // ceil(log2(team)) (register kernels: teams are powers of two, or own
  // their CTA) and 1 / cols.
  int team_shift;
  float inv_cols;
  // The grid kernel (ops/norm_fwd_grid.cuh; NormGridConfig): the groups'
  // exchange logs (the caller's workspace) of grid_steps steps each, the
  // layout, RowTuning::fwd_grid_prefetch.
  uint64_t* exchange;
  int grid_ranks, grid_groups, grid_lag, grid_stages, grid_prefetch;
  int64_t grid_tile_vecs, grid_steps;
};

// Reducer scratch: [RowReducer<SumOp>][ClusterExchange<SumOp> at kClusterScratchOffset];
// the register kernel's LayerNorm rows exchange a pair (SumPairOp) and take
// reg_scratch_bytes(true). Staged clusters of two rows (the kernel's kRows)
// exchange twice the values: a pair for RMSNorm, two pairs (SumQuadOp) for
// LayerNorm; their CTA reductions take 128-byte halves of the first 256
// bytes (32 floats or 16 pairs each).
constexpr uint32_t kReducerScratchBytes = 512;  // 16-B multiple
constexpr uint32_t kClusterScratchOffset = 272;
constexpr uint32_t reg_scratch_bytes(bool centre, int rows = 1) {
  return rows == 2 ? (centre ? 800 : 544) : centre ? 640 : kReducerScratchBytes;
}
static_assert(core::RowReducer<core::SumOp>::scratch_bytes() <= kClusterScratchOffset &&
                  kClusterScratchOffset % 8 == 0 &&
                  kClusterScratchOffset + core::ClusterExchange<core::SumOp>::scratch_bytes() <= kReducerScratchBytes &&
                  kClusterScratchOffset + core::ClusterExchange<core::SumPairOp>::scratch_bytes() <= reg_scratch_bytes(true) &&
                  kClusterScratchOffset + core::ClusterExchange<core::SumPairOp>::scratch_bytes() <=
                      reg_scratch_bytes(false, 2) &&
                  kClusterScratchOffset + core::ClusterExchange<core::SumQuadOp>::scratch_bytes() <=
                      reg_scratch_bytes(true, 2) &&
                  reg_scratch_bytes(true, 2) % 16 == 0 && reg_scratch_bytes(false, 2) % 16 == 0 &&
                  256 <= kClusterScratchOffset,
              "reducer scratch layout");
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
// kCentre: LayerNorm (see rmsnorm_fwd_reg_kernel): pass 1 sums h, a second
// pass over the staged values sums the squared deviations from the mean
// (chunked rows re-stage their chunks for it: one more read of the row).
template <typename Tx, bool kVecIO, bool kUniform, bool kCentre = false>
__global__ void __launch_bounds__(kMaxThreads, kUniform ? kMinBlocksUniform : kMinBlocks) rmsnorm_fwd_kernel(const RMSNormFwdParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(Tx);
  // Vectors per group (one on the element-wise path).
  constexpr int U = kVecIO ? kGroupElems / VEC : 1;
  // Vectors a group of the passes over staged values: LayerNorm's mixed-dtype
  // kernel holds one more value (the mean) across them and spills with
  // groups of U (ptxas -v, CUDA 13.0), so it takes one vector at a time.
  constexpr int UP = kCentre && !kUniform ? 1 : U;
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
    for (; i0 + UP <= nv; i0 += UP) body(std::integral_constant<int, UP>{}, i0);
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
              for (int j = 0; j < VEC; ++j) acc = kCentre ? acc + h[u][j] : fmaf(h[u][j], h[u][j], acc);
          });
        }
      }
      acc = red.reduce(acc);  // every thread of the CTA (and cluster) takes part
      // The chunk left in the staging buffer.
      int resident = p.chunks - 1;
      float mean = 0.0f;
      if constexpr (kCentre) {
        // Pass 1b: squared deviations from the mean over the valid columns
        // (padding slots hold zeros, not the mean), last chunk first.
        mean = acc / float(p.cols);
        acc = 0.0f;
        for (int k = p.chunks - 1; k >= 0; --k) {
          if (k != resident) {
            stage(blk, 0, r, k);
            cp_async_commit();
            cp_async_wait_all();
            resident = k;
          }
          if (!active) continue;
          const int col0 = first_col + k * chunk_cols;
          auto deviations = [&](auto g, int i0) {
            constexpr int G = decltype(g)::value;
            float h[G][VEC];
            staged_h(g, buf, r, i0, h);
#pragma unroll
            for (int u = 0; u < G; ++u) {
              const int valid = seg_col1 - (col0 + (i0 + u) * col_step);
#pragma unroll
              for (int j = 0; j < VEC; ++j) {
                const float d = j < valid ? h[u][j] - mean : 0.0f;
                acc = fmaf(d, d, acc);
              }
            }
          };
          for_groups(vectors_in(col0), deviations);
        }
        acc = red.reduce(acc);
      }
      const float rstd = rsqrtf(fmaf(acc, p.inv_cols, p.eps));
      if (!active) continue;
      if (t == 0 && crank == 0) {
        if (p.rstd != nullptr) p.rstd[row] = rstd;
        if (kCentre && p.mean != nullptr) p.mean[row] = mean;
      }

      // Pass 2: normalise and write (the resident chunk first).
      using IO = SecondaryIO<Tx, VEC, kVecIO, kUniform>;
      void* orow = IO::ptr(p.out, p.out_dtype, row * p.out_stride);
      void* rorow = p.res_out ? IO::ptr(p.res_out, p.res_out_dtype, row * p.res_out_stride) : nullptr;
      for (int kk = p.chunks - 1; kk >= 0; --kk) {
        // (resident is the last chunk, or chunk 0 after pass 1b)
        const int k = resident == 0 ? p.chunks - 1 - kk : kk;
        if (k != resident) {
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
            if constexpr (kCentre) {
#pragma unroll
              for (int j = 0; j < VEC; ++j) h[u][j] -= mean;
            }
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

// ---------------------------------------------------------------------------
// Register-resident kernel (core::RegRowConfig): the fast path for the common
// layouts. A thread loads its VPT vectors of the row straight into registers
// (all loads issued before the first use), reduces, and writes from the same
// registers; no staging, small CTAs, many per SM. Served when
//   - out has x's dtype; weight and bias (when given) share one dtype Tw, x's
//     or fp32; residual and residual_out (when given) share one dtype Tr, x's
//     or fp32 (Tr = void: neither is given);
//   - every operand allows 16-byte vectors of x (aligned pointers and pitches);
//   - the row fits the register tiles of a 16-CTA cluster (config.hpp).
// Everything else takes the staged kernel above, which serves any layout.
//
// Without a residual stream the kernel holds x raw (up to 8 vectors = 32
// registers); with one, h = x + residual in fp32 (up to 4 vectors: 32 fp32
// values for 16-bit x, 16 for fp32 x, whose wider residual and weight words
// need the rest), and 2 vectors for 16-bit x with fp32 weights. These are the
// largest tiles that compile within 64 registers without spilling (ptxas -v,
// CUDA 13.0), the budget for 1024-thread CTAs.
constexpr int rmsnorm_reg_max_vpt(int x_bytes, int res_bytes, int w_bytes) {
  return res_bytes == 0 ? 8 : (x_bytes == 2 && w_bytes == 4 ? 2 : 4);
}
// Shifted rows (kShift) of 16-bit x with a residual stream: 2 vectors (at 4
// the head's masks and the weight's shifted words spilled 4-16 bytes, ptxas
// -v, CUDA 13.0: f16 and bf16, RMSNorm and LayerNorm, either residual
// dtype).
constexpr int rmsnorm_reg_shift_max_vpt(int x_bytes, int res_bytes, int w_bytes) {
  return x_bytes == 2 && res_bytes > 0 ? 2 : rmsnorm_reg_max_vpt(x_bytes, res_bytes, w_bytes);
}
// Staged clustered rows (no residual stream): 8 vectors (16 B of x) a
// thread. 16 lost 20-30 points in both dtypes where 8 fit too (rmsnorm_sweep
// at 8881e2b, H200; bench/results/2026-11-30-rmsnorm-fwd-reg.md, fifteenth
// session; three CTAs an SM instead of six, and then one L2 round trip a
// weight vector after the reduction).
constexpr int kRMSNormStagedVpt = 8;
// Rows longer than a 16-CTA cluster holds at 8 take 16 or 32 (64 / 128 KB a
// CTA; config.cpp cites where each wins), the weight after the reduction.
constexpr int kRMSNormStagedVptMax = 32;
// The clustered kernels also carry their loop and exchange state: for 16-bit
// x with a residual stream or fp32 weights the largest tile spills there, so
// they take the next smaller one.
constexpr int rmsnorm_reg_cluster_vpt(int x_bytes, int res_bytes, int w_bytes) {
  return x_bytes == 2 && (res_bytes > 0 || w_bytes == 4) ? (res_bytes > 0 ? 2 : 4)
                                                           : rmsnorm_reg_max_vpt(x_bytes, res_bytes, w_bytes);
}

// The staged kernels are built for CTAs of at most this many threads: six
// an SM (<= 40 registers) at the 8-vector tile with the weight loaded after
// the reduction; three (<= 80 registers) for the 16- and 32-vector tiles
// (whose shared memory allows no more) and for the kernel that loads the
// weight early (x's dtype only: fp32 weights of 16-bit x take twice the
// registers) and holds it through the reduction (under the 64 registers of
// 1024-thread CTAs it spills, ptxas -v).
constexpr int kStagedThreads = 256;
// Two rows a cluster (kRows = 2) stage twice the bytes a CTA: three an SM.
constexpr int staged_min_blocks(bool early_w, int vpt, int rows = 1) { return early_w || vpt > 8 || rows > 1 ? 3 : 6; }
// The staged output loop's next weight (and bias) batch issued before the
// current batch's writes (p.w_batch == 2, RowTuning::reg_w_batch): a batch's
// registers more (16 for an fp32 weight and bias beside 16-bit x), which
// only the three-CTAs-an-SM instances have: the six-CTA ones (40 registers)
// spilled 276-304 bytes with it (ptxas -v, CUDA 13.0). Why: ncu of the
// LayerNorm bf16 256K pair kernel (H100, 4ad49f3; bench/results/logs/
// 2026-12-07-ncu-ln-fwd-256k-4ad49f3-h100.txt) spent 8.2 of a warp's 14.8
// cycles an instruction waiting on global loads, one L2 round trip a batch.
constexpr bool staged_w_ahead(int vpt, int rows) { return staged_min_blocks(false, vpt, rows) <= 3; }
// Every staged CTA's warp partials fit a 128-byte half of the reducer
// scratch as pairs (two rows a cluster).
static_assert(kStagedThreads / 32 * sizeof(float2) <= 128, "staged reduction scratch");
// The register kernel's small-CTA instances (kSmallCta): 8-vector tiles of
// 16-bit x with an fp32 weight in CTAs of up to 256 threads, three CTAs an SM
// (65536 / (3 * 256) = 85 registers, 80 in allocation units; 72 used).
constexpr int kRegSmallCtaThreads = 256;
constexpr int kRegSmallCtaMinBlocks = 3;

// kCluster: rows split over a cluster of p.cluster CTAs (one row per CTA,
// VPT the family's clustered tile); the grid is then persistent.
// kStaged (clustered rows without a residual stream): x goes to shared memory
// with cp.async instead of registers, so a thread can own a larger share
// (VPT = kRMSNormStagedVpt, or 2x / 4x it for longer rows) in a small,
// register-light CTA; several CTAs share an SM, and the grid is one cluster
// per row (not persistent). The weight comes after the reduction, a batch of
// vectors at a time (p.w_batch), or for the 8-vector tile in x's dtype while
// x is in flight (kStagedEarlyW).
// kCentre: LayerNorm. The row's mean comes off first and the variance is
// taken about it from the held values (two passes over registers, no
// sum(h^2) - mean^2 cancellation): team / CTA reductions of the sum, then of
// the squared deviations from the CTA's own mean; clustered rows then
// exchange one (sum, deviations) pair per CTA and combine the moments
// (core::combine_moments), so a row still costs one cluster round. Staged
// rows of 16-bit x read x from shared memory, where a second pass costs the
// L1 pipe a wavefront per 16 bytes: each thread takes its own moments in the
// first pass (core::ShiftedMoments), and the CTA's deviations are the
// threads' combined (sum_t m2_t + n_t (mean_t - mean)^2).
// kRows = 2 (staged 16-bit rows, weight late): a cluster takes two rows at
// once, both staged, their sums reduced and exchanged together, and each
// weight and bias vector read once for both. LayerNorm's fp32 weight and
// bias (8 bytes an element of L2 reads against x's 2 of HBM), not the
// arithmetic, hold its staged rows at 70-81% of copy (95-97% without them);
// pairs gain 2-4 points at clusters of 8-16 and lose 2-6 where the
// parameters are light (three CTAs an SM instead of six):
// bench/results/2026-12-03-norm-fwd-pairs.md.
// kShift (unclustered register rows, RowTuning::shifted_rows bit 2): rows
// whose first element lies inside a 16-byte vector, every operand's row at
// the same offset in elements (x's; the launch checks), walked from that
// vector -- core::RowGeom::shift's layout: the row covers cols + s columns
// (the plan sized for N + VEC - 1), the first s of them, the head of the
// thread at column 0, neither read nor written -- and the weight and bias,
// column-indexed, read s elements early (RawVec::load_shifted).
// kLean (decode-sized rows, RowTuning::reg_lean): an unclustered row that is
// one team owning its CTA (grid = rows) and exactly the tile, N = VPT *
// team * VEC, so every vector of every thread lies inside the row. The
// row is blockIdx.x, the tile's bounds and tails are compiled away and the
// reductions are the CTA's: the kernel's start to x's load and its
// reductions to the store are the latency a one-row call waits on.
template <typename Tx, typename Tw, typename Tr, int VPT, bool kCluster, bool kStaged = false, bool kCentre = false,
          bool kStagedEarlyW = false, bool kSmallCta = false, int kRows = 1, bool kShift = false, bool kLean = false>
__global__ void __launch_bounds__(kStaged ? kStagedThreads : kSmallCta ? kRegSmallCtaThreads : kRegRowMaxThreads,
                                  kStaged ? staged_min_blocks(kStagedEarlyW, VPT, kRows)
                                          : kSmallCta ? kRegSmallCtaMinBlocks : 1)
    rmsnorm_fwd_reg_kernel(const RMSNormFwdParams p) {
  using namespace core;
  constexpr int VEC = 16 / sizeof(Tx);
  constexpr bool kRes = !std::is_void_v<Tr>;
  using TrOrX = std::conditional_t<kRes, Tr, Tx>;
  static_assert(kStaged || VPT <= rmsnorm_reg_max_vpt(sizeof(Tx), kRes ? sizeof(TrOrX) : 0, sizeof(Tw)),
                "register tile");
  // Short tiles (decode-sized batches) load weight and bias before the
  // reduction, off the critical path; larger ones load each vector's just
  // before its use (holding them all would not fit 64 registers: with a
  // residual stream even 2 vectors spill). kStagedEarlyW: staged rows load
  // the weight while x is in flight.
  constexpr bool kEarlyW = kStaged ? kStagedEarlyW : !kCluster && (kRes ? VPT == 1 : VPT <= 2);
  static_assert(!kStaged || (kCluster && !kRes), "staged rows: clustered, no residual stream");
  static_assert(!kStagedEarlyW || kStaged, "early weights: staged rows only");
  static_assert(kRows == 1 || (kRows == 2 && kStaged && !kStagedEarlyW && sizeof(Tx) == 2),
                "two rows a cluster: staged 16-bit rows, weight late");
  static_assert(!kShift || (!kCluster && !kStaged && kRows == 1), "shifted rows: unclustered register rows");
  static_assert(!kLean || (!kCluster && !kStaged && !kShift && !kSmallCta && kRows == 1),
                "lean rows: unclustered, unshifted register rows");
  // Loops over a thread's vectors unroll fully where they index registers;
  // staged rows index shared memory, and their wide tiles (16, 32 vectors)
  // unrolled whole hoist every address out of the loop and spill (ptxas -v).
  constexpr int kUnrollVec = kStaged && VPT > 8 ? 8 : VPT;
  static_assert(RowReducer<SumOp>::scratch_bytes() <= kReducerScratchBytes, "scratch");
  extern __shared__ __align__(16) unsigned char smem[];

  // Cluster exchange (st.async + mbarrier) when clustered: a row's sum, or
  // LayerNorm's (sum, deviations) pair, for each of the kRows rows.
  using ExchangeOp = std::conditional_t<kCentre, std::conditional_t<kRows == 2, SumQuadOp, SumPairOp>,
                                        std::conditional_t<kRows == 2, SumPairOp, SumOp>>;
  ClusterExchange<ExchangeOp> cl;
  if constexpr (kCluster) cl.start(smem + kClusterScratchOffset);

  // One row block: load, reduce, write. Everything here is derived afresh
  // from the parameters and from values made opaque to the optimiser: in the
  // persistent loop below it would otherwise keep every row-invariant
  // address and predicate live across rows, and spill.
  auto do_rows = [&](int64_t blk) {
    int team = p.team, tid = int(threadIdx.x), shift = p.team_shift;
    asm volatile("" : "+r"(team), "+r"(tid), "+r"(shift));
    // Teams are powers of two, 1 << shift threads, but a team that owns
    // its CTA may be fitted to the row (core::TeamSlot: the masks and
    // shifts by 1 << shift hold for both). A staged row's CTA is one team.
    // (Register-held clusters keep the shifts: with team_id and teams
    // constant, the persistent fp32 LayerNorm cluster spilled 8 bytes,
    // ptxas -v.)
    // (kLean: the CTA is the team, and the grid one CTA a row)
    const TeamSlot slot = kLean ? TeamSlot{0, tid, 1} : TeamSlot::of(tid, shift, blockDim.x);
    const int team_id = kStaged ? 0 : slot.team_id, t = kStaged ? tid : slot.t;
    const int crank = kCluster ? int(blockIdx.x % unsigned(p.cluster)) : 0;
    const int teams = kStaged ? 1 : slot.teams;
    // This team's (first) row; kRows = 2: the cluster's rows row, row + 1.
    const int64_t row = (blk * teams + team_id) * kRows;
    const bool active = kLean || row < p.rows;
    // kShift: the row's elements before it in the vector that holds its
    // first, where its pointers start (x's pointer made opaque, as the
    // columns: a persistent loop would hold it).
    int sh = 0;
    if constexpr (kShift) {
      if (active) {
        const Tx* r0 = static_cast<const Tx*>(p.x) + row * p.x_stride;
        asm volatile("" : "+l"(r0));
        sh = row_shift(r0);
      }
    }
    const int cols = int(p.cols) + sh;
    const int col_step = team * VEC;                  // between a thread's vectors
    const int col0 = (crank * VPT * team + t) * VEC;  // this thread's first column
    const int head = kShift && col0 == 0 ? sh : 0;    // elements before the row in vector 0
    // Every vector of this thread lies inside the row: no per-vector checks.
    const bool whole = kLean || (head == 0 && col0 + (VPT - 1) * col_step + VEC <= cols);
    // Runs f(std::true_type{}) where `whole` holds: straight-line code with
    // every vector's bounds, tails and predicates compiled away (LayerNorm
    // bf16 N = 4K executed 997 instructions a thread with them, ncu), and
    // f(std::false_type{}) otherwise. No barrier may sit inside f.
    auto by_whole = [&](auto&& f) {
      if constexpr (kLean) f(std::true_type{});
      else if (whole) f(std::true_type{});
      else f(std::false_type{});
    };
    // The loads and the output loop take the straight-line copy too, except
    // in register-held clusters and tiles whose weight takes more than 32
    // registers (fp32 weights of 16-bit x at 8 vectors): there the extra
    // copy spilled 4-40 bytes (ptxas -v; LayerNorm bf16 4-vector clusters,
    // RMSNorm bf16 8 vectors with an fp32 weight).
    // kSmallCta: CTAs of at most kRegSmallCtaThreads, up to 80 registers a
    // thread, where the 8-vector fp32-weight tile's straight-line copy fits
    // (72 registers, no spill: ptxas -v).
    constexpr bool kStraightIo = !(kCluster && !kStaged) && (kSmallCta || VPT * VEC * int(sizeof(Tw)) <= 128);
    auto by_whole_io = [&](auto&& f) {
      if constexpr (kStraightIo) by_whole(f);
      else f(std::false_type{});
    };

    // Elements of vector i before the row (a shifted row's head).
    auto lo_at = [&](int i) { return kShift && i == 0 ? head : 0; };
    // Loads this thread's vectors of a row (zeros outside it).
    auto load_row = [&](auto (&v)[VPT], const auto* row_ptr, auto whole_c) {
      constexpr bool kWhole = decltype(whole_c)::value;
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        const int c = col0 + i * col_step;
        if (kWhole || c + VEC <= cols) {
          // (32-byte vectors -- an fp32 residual of 16-bit x -- whose head
          // holds 4 or more elements: its first 16 bytes lie wholly before
          // the row, perhaps before the operand's allocation: only the row's
          // elements are read)
          if constexpr (kShift && !kWhole && sizeof(v[i]) > 16) {
            if (lo_at(i) >= 16 / int(sizeof(v[i]) / VEC)) {
              v[i].load_range(row_ptr + c, lo_at(i), VEC);
              continue;
            }
          }
          v[i].load(row_ptr + c);
          if constexpr (kShift && !kWhole) {
            if (lo_at(i) > 0) v[i].fill_head(lo_at(i), 0u);
          }
        } else if (c < cols) {
          v[i].load_range(row_ptr + c, lo_at(i), cols - c);
        } else {
          v[i].zero();
        }
      }
    };

    // Row r of the block is there (the second of two may be past the end).
    auto row_on = [&](int r) { return r == 0 || row + r < p.rows; };
    float acc[kRows] = {};
    // Staged LayerNorm of 16-bit x: this thread's element count, mean and
    // squared deviations from it (pass 1). (fp32 rows keep the second pass:
    // their late-weight instance, 40 registers for six CTAs an SM, spilled
    // 4 bytes with it, ptxas -v; LayerNorm's fp32 rows are not staged by
    // default, RowTuning::ln_staged.)
    constexpr bool kOnePassMoments = kStaged && kCentre && sizeof(Tx) == 2;
    int own_n[kRows] = {};
    float own_mean[kRows] = {}, own_m2[kRows] = {};
    // x (and the residual) of this thread's share, and sum of squares.
    RawVec<Tx, VEC> xv[kRes || kStaged ? 1 : VPT] = {};
    // Staging slot of vector i of row r (kStaged): consecutive threads,
    // consecutive 16 B; a row's share after the other's.
    const uint32_t x_slot0 = smem_addr(smem) + reg_scratch_bytes(kCentre, kRows) + uint32_t(t) * 16;
    const uint32_t row_slots = uint32_t(VPT * team) * 16;
    auto x_at = [&](int i, int r = 0) {
      if constexpr (kStaged) {
        RawVec<Tx, VEC> v;
        lds<16>(x_slot0 + uint32_t(r) * row_slots + uint32_t(i * team) * 16, v.w);
        return v;
      } else {
        return xv[kRes || kStaged ? 0 : i];
      }
    };
    // Elements of vector i this thread holds (0 past the row's end).
    auto valid_at = [&](int i, auto whole_c) {
      const int c = col0 + i * col_step;
      return decltype(whole_c)::value ? VEC : (c >= cols ? 0 : (cols - c < VEC ? cols - c : VEC));
    };
    const Tw* w = static_cast<const Tw*>(p.w);
    const Tw* b = static_cast<const Tw*>(p.b);
    asm volatile("" : "+l"(w), "+l"(b));  // (opaque, as the columns above)
    // Vector i of weight (or bias) into v, when given; the output loop's
    // loads stay after the previous vector's stores (RawVec::load_ordered).
    auto load_wb = [&](const Tw* src, int i, RawVec<Tw, VEC>& v, auto whole_c, auto ordered_c) {
      const int c = col0 + i * col_step, valid = valid_at(i, whole_c);
      if constexpr (kShift) {
        if (sh > 0) {  // (columns c - sh ..: zeros outside the operand's p.cols)
          if (src != nullptr && valid > 0) v.load_shifted(src, c, sh, int(p.cols));
          return;
        }
      }
      if (src != nullptr) {
        if (valid == VEC) {
          if constexpr (decltype(ordered_c)::value) v.load_ordered(src + c);
          else v.load(src + c);
        } else if (valid > 0) {
          v.load_partial(src + c, valid);
        }
      }
    };
    // Early: the weight, and the bias too unless staged (staged rows hold
    // only the weight through the reduction: with the bias they spill).
    constexpr bool kEarlyB = kEarlyW && !kStaged;
    RawVec<Tw, VEC> w_early[kEarlyW ? VPT : 1], b_early[kEarlyB ? VPT : 1];
    auto load_w_early = [&]() {
      by_whole([&](auto wc) {
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
          load_wb(w, i, w_early[kEarlyW ? i : 0], wc, std::false_type{});
          if constexpr (kEarlyB) load_wb(b, i, b_early[i], wc, std::false_type{});
        }
      });
    };
    // Register rows' early weight (and bias): issued right after the row's
    // own loads, before anything waits on them. Issued after the sum of
    // squares (as it was to dd5bc91), its loads waited for x's: nvcc keeps
    // them behind the FFMAs that consume x, a second memory round trip in
    // series on a decode-sized call (SASS of the 1-vector bf16 kernel).
    auto load_w_early_reg = [&]() {
      if constexpr (kEarlyW && !kStaged) load_w_early();
    };
    float h[kRes ? VPT : 1][VEC];
    if (active) {
      const Tx* xrow = static_cast<const Tx*>(p.x) + row * p.x_stride - sh;
      if constexpr (kRes) {
        RawVec<Tx, VEC> xr[VPT];
        by_whole_io([&](auto wc) { load_row(xr, xrow, wc); });
        if (p.res != nullptr) {
          RawVec<Tr, VEC> rr[VPT];
          const Tr* rrow = static_cast<const Tr*>(p.res) + row * p.res_stride - sh;
          by_whole_io([&](auto wc) { load_row(rr, rrow, wc); });
          load_w_early_reg();
#pragma unroll
          for (int i = 0; i < VPT; ++i) {
            float rf[VEC];
            xr[i].widen(h[i]);
            rr[i].widen(rf);
#pragma unroll
            for (int j = 0; j < VEC; ++j) h[i][j] += rf[j];
          }
        } else {
          load_w_early_reg();
#pragma unroll
          for (int i = 0; i < VPT; ++i) xr[i].widen(h[i]);
        }
#pragma unroll
        for (int i = 0; i < VPT; ++i)
#pragma unroll
          for (int j = 0; j < VEC; ++j) acc[0] = kCentre ? acc[0] + h[i][j] : fmaf(h[i][j], h[i][j], acc[0]);
      } else {
        if constexpr (kStaged) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            // (A row past the end stages zeros from the first row's address.)
            const bool on = row_on(r);
            const Tx* src = on ? xrow + r * p.x_stride : xrow;
#pragma unroll kUnrollVec
            for (int i = 0; i < VPT; ++i) {
              const int c = col0 + i * col_step;
              const int n = !on || c >= cols ? 0 : (cols - c < VEC ? cols - c : VEC);
              cp_async_zfill<16>(x_slot0 + uint32_t(r) * row_slots + uint32_t(i * team) * 16, src + (n > 0 ? c : 0),
                                 n * int(sizeof(Tx)));
            }
          }
          cp_async_commit();
          if constexpr (kEarlyW) load_w_early();
          cp_async_wait_all();
        } else {
          by_whole_io([&](auto wc) { load_row(xv, xrow, wc); });
          load_w_early_reg();
        }
        if constexpr (kOnePassMoments) {
          // Staged LayerNorm: the thread's own moments in this one pass over
          // shared memory (core::ShiftedMoments about its first element,
          // n <= 256 values: at most ~n ulps lost), which the CTA then
          // combines (below), instead of a second pass over the row for the
          // deviations from the CTA's mean.
          by_whole([&](auto wc) {
            constexpr bool kW = decltype(wc)::value;
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              ShiftedMoments m;
              int n = 0;
#pragma unroll kUnrollVec
              for (int i = 0; i < VPT; ++i) {
                float f[VEC];
                x_at(i, r).widen(f);
                if (i == 0) m.k = f[0];  // (0 in a thread that holds nothing: a zero-filled slot)
                const int valid = valid_at(i, wc);
                n += valid;
#pragma unroll
                for (int j = 0; j < VEC; ++j) m.add(f[j], kW || j < valid);
              }
              const float inv_n = kW ? 1.0f / float(VPT * VEC) : (n > 0 ? 1.0f / float(n) : 0.0f);
              own_n[r] = n;
              own_mean[r] = m.mean(inv_n);
              own_m2[r] = m.m2(inv_n);
              acc[r] = m.sum(n);
            }
          });
        } else {
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
#pragma unroll kUnrollVec
            for (int i = 0; i < VPT; ++i) {
              float f[VEC];
              x_at(i, r).widen(f);
#pragma unroll
              for (int j = 0; j < VEC; ++j) acc[r] = kCentre ? acc[r] + f[j] : fmaf(f[j], f[j], acc[r]);
            }
          }
        }
      }
    }
    // h of vector i (fp32).
    auto h_at = [&](int i, float (&f)[VEC], int r = 0) {
      if constexpr (kRes) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] = h[i][j];
      } else {
        x_at(i, r).widen(f);
      }
    };
    // One value a row of the block, summed over the CTA together (a float,
    // or a pair for two rows) in 128-byte half `half` of the scratch.
    auto cta_sum = [&](float (&v)[kRows], uint32_t half) {
      unsigned char* const s = smem + 128 * half;
      if constexpr (kRows == 2) {
        const float2 r2 = block_reduce<SumPairOp>(make_float2(v[0], v[1]), reinterpret_cast<float2*>(s));
        v[0] = r2.x;
        v[1] = r2.y;
      } else {
        v[0] = block_reduce<SumOp>(v[0], reinterpret_cast<float*>(s));
      }
    };
    // Every thread of the CTA (and cluster) takes part.
    float mean[kRows] = {};
    if constexpr (kCentre) {
      // Sum, then squared deviations from this CTA's mean (its n elements);
      // two block reductions a row block, always scratch halves 0 then 1.
      RowReducer<SumOp> red(smem, team, 1);
      float sum[kRows], cta_mean[kRows];
      if constexpr (kCluster) {
        // The exact quotient: combine_moments takes the deviations as taken
        // about sum / n, which it divides again.
        const int n = min(VPT * team * VEC, max(0, cols - crank * VPT * team * VEC));
#pragma unroll
        for (int r = 0; r < kRows; ++r) sum[r] = acc[r];
        cta_sum(sum, 0);
#pragma unroll
        for (int r = 0; r < kRows; ++r) cta_mean[r] = n > 0 ? sum[r] / float(n) : 0.0f;
      } else {
        sum[0] = kLean ? red.reduce_cta(acc[0]) : red.reduce(acc[0]);
        cta_mean[0] = sum[0] * p.inv_cols;
      }
      float dev[kRows] = {};
      if constexpr (kOnePassMoments) {
        // Chan's update over the threads: sum_t m2_t + n_t (mean_t - mean)^2.
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (own_n[r] > 0) {
            const float d = own_mean[r] - cta_mean[r];
            dev[r] = fmaf(float(own_n[r]) * d, d, own_m2[r]);
          }
        }
      } else if (active) {
        static_assert(kRows == 1 || kOnePassMoments, "two rows: one-pass moments");
        by_whole([&](auto wc) {
#pragma unroll kUnrollVec
          for (int i = 0; i < VPT; ++i) {
            float f[VEC];
            h_at(i, f);
            const int valid = valid_at(i, wc);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
              const float d = decltype(wc)::value || (j < valid && j >= lo_at(i)) ? f[j] - cta_mean[0] : 0.0f;
              dev[0] = fmaf(d, d, dev[0]);
            }
          }
        });
      }
      if constexpr (kCluster) {
        cta_sum(dev, 1);
        // Lane r: CTA r's (sum, deviations) of each row and element count.
        const int lane = int(threadIdx.x) & 31;
        const int lane_n = lane < p.cluster ? min(VPT * team * VEC, max(0, cols - lane * VPT * team * VEC)) : 0;
        if constexpr (kRows == 2) {
          const float4 part = cl.gather(make_float4(sum[0], dev[0], sum[1], dev[1]), p.cluster, crank);
          const float2 m0 = combine_moments(make_float2(part.x, part.y), lane_n, float(cols));
          const float2 m1 = combine_moments(make_float2(part.z, part.w), lane_n, float(cols));
          mean[0] = m0.x;
          acc[0] = m0.y;
          mean[1] = m1.x;
          acc[1] = m1.y;
        } else {
          const float2 part = cl.gather(make_float2(sum[0], dev[0]), p.cluster, crank);
          const float2 mom = combine_moments(part, lane_n, float(cols));
          mean[0] = mom.x;
          acc[0] = mom.y;
        }
      } else {
        mean[0] = cta_mean[0];
        acc[0] = kLean ? red.reduce_cta(dev[0]) : red.reduce(dev[0]);
      }
    } else if constexpr (kCluster) {
      // One team per CTA; the exchange's count alternates the scratch.
      cta_sum(acc, cl.count & 1);
      if constexpr (kRows == 2) {
        const float2 r2 = cl.reduce(make_float2(acc[0], acc[1]), p.cluster, crank);
        acc[0] = r2.x;
        acc[1] = r2.y;
      } else {
        acc[0] = cl.reduce(acc[0], p.cluster, crank);
      }
    } else {
      RowReducer<SumOp> red(smem, team, 1);
      acc[0] = kLean ? red.reduce_cta(acc[0]) : red.reduce(acc[0]);
    }
    float rstd[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) rstd[r] = rsqrtf(fmaf(acc[r], p.inv_cols, p.eps));
    if (!active) return;  // (clustered rows are always active: one row block per cluster)
    if (t == 0 && crank == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (!row_on(r)) continue;
        if (p.rstd != nullptr) p.rstd[row + r] = rstd[r];
        if (kCentre && p.mean != nullptr) p.mean[row + r] = mean[r];
      }
    }

    Tx* orow = static_cast<Tx*>(p.out) + row * p.out_stride - sh;
    TrOrX* rorow =
        kRes && p.res_out != nullptr ? static_cast<TrOrX*>(p.res_out) + row * p.res_out_stride - sh : nullptr;
    // Writes vector i of row r (its first `valid` elements) from its weight
    // and bias.
    auto write_vec = [&](int r, int i, int valid, const RawVec<Tw, VEC>& wv, const RawVec<Tw, VEC>& bv) {
      const int c = col0 + i * col_step, lo = lo_at(i);
      float f[VEC];
      h_at(i, f, r);
      if constexpr (kRes) {
        if (rorow != nullptr) {
          RawVec<TrOrX, VEC> o;
          o.narrow(f);
          if (valid == VEC && lo == 0) o.store(rorow + c);
          else o.store_range(rorow + c, lo, valid);
        }
      }
      if constexpr (kCentre) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] -= mean[r];
      }
      if (w != nullptr) {
        float wf[VEC];
        wv.widen(wf);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float hr = f[j] * rstd[r];
          f[j] = fmaf(hr, wf[j], hr * p.weight_offset);
        }
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] *= rstd[r];
      }
      if (b != nullptr) {
        float bf[VEC];
        bv.widen(bf);
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] += bf[j];
      }
      RawVec<Tx, VEC> o;
      o.narrow(f);
      Tx* const dst = r == 0 ? orow : orow + r * p.out_stride;
      if (valid == VEC && lo == 0) o.store(dst + c);
      else o.store_range(dst + c, lo, valid);
    };
    if constexpr (kStaged && !kEarlyW) {
      // Staged rows hold x in shared memory, so the registers are free here:
      // a thread whose vectors all lie inside the row issues its weight and
      // bias vectors a batch at a time (16 registers: 4 vectors in x's dtype,
      // 2 in fp32 for 16-bit x; half as many with a bias), one L2 round trip
      // a batch instead of one a vector. (Register-held rows spill with it.)
      // With kAhead (staged_w_ahead), the next batch is in flight while
      // this one's outputs are written.
      if (whole && p.w_batch) {
        constexpr int kVecRegs = int(sizeof(Tw) * VEC) / 4;
        constexpr int kBatchW = VPT < 16 / kVecRegs ? VPT : 16 / kVecRegs;
        auto batched = [&](auto batch, auto with_b, auto ahead) {
          constexpr int kB = decltype(batch)::value;
          constexpr bool kWithB = decltype(with_b)::value, kAhead = decltype(ahead)::value;
          constexpr int kUnrollB = kUnrollVec / kB > 0 ? kUnrollVec / kB : 1;
          RawVec<Tw, VEC> wn[kB], bn[kWithB ? kB : 1];
          auto load_batch = [&](int i0) {
#pragma unroll
            for (int g = 0; g < kB; ++g) {
              const int c = col0 + (i0 + g) * col_step;
              if (w != nullptr) wn[g].load(w + c);
              if constexpr (kWithB) bn[g].load(b + c);
            }
          };
          if constexpr (kAhead) load_batch(0);
#pragma unroll kUnrollB
          for (int i0 = 0; i0 < VPT; i0 += kB) {
            if constexpr (!kAhead) load_batch(i0);
            RawVec<Tw, VEC> wv[kB], bv[kWithB ? kB : 1];
#pragma unroll
            for (int g = 0; g < kB; ++g) wv[g] = wn[g];
#pragma unroll
            for (int g = 0; g < (kWithB ? kB : 1); ++g) bv[g] = bn[g];
            if constexpr (kAhead) {
              if (i0 + kB < VPT) load_batch(i0 + kB);
            }
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              if (!row_on(r)) continue;
#pragma unroll
              for (int g = 0; g < kB; ++g) write_vec(r, i0 + g, VEC, wv[g], bv[kWithB ? g : 0]);
            }
          }
        };
        auto run = [&](auto ahead) {
          if (b == nullptr) batched(std::integral_constant<int, kBatchW>{}, std::false_type{}, ahead);
          else batched(std::integral_constant<int, (kBatchW > 1 ? kBatchW / 2 : 1)>{}, std::true_type{}, ahead);
        };
        if constexpr (staged_w_ahead(VPT, kRows)) {
          if (p.w_batch == 2) run(std::true_type{});
          else run(std::false_type{});
        } else {
          run(std::false_type{});
        }
        return;
      }
    }
    auto write_row = [&](auto wc) {
#pragma unroll kUnrollVec
      for (int i = 0; i < VPT; ++i) {
        const int valid = valid_at(i, wc);
        if (valid == 0) continue;
        RawVec<Tw, VEC> w_late, b_late;
        if constexpr (!kEarlyW) load_wb(w, i, w_late, wc, std::true_type{});
        if constexpr (!kEarlyB) load_wb(b, i, b_late, wc, std::true_type{});
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (!row_on(r)) continue;
          write_vec(r, i, valid, kEarlyW ? w_early[kEarlyW ? i : 0] : w_late, kEarlyB ? b_early[kEarlyB ? i : 0] : b_late);
        }
      }
    };
    by_whole_io(write_row);
  };

  if constexpr (kCluster && !kStaged) {
    // Persistent: the launch holds only the clusters that fit at once, and
    // each walks row blocks. A cluster is scheduled only when all its CTAs
    // find room in one GPC at the same moment; relaunching one per row left
    // SMs idle (bf16, clusters of 2..16: 88% falling to 79% of copy,
    // bench/results/2026-11-30-rmsnorm-fwd-reg.md).
    const int64_t grid_blocks = gridDim.x / unsigned(p.cluster);
    for (int64_t blk = blockIdx.x / unsigned(p.cluster); blk < p.row_blocks; blk += grid_blocks) do_rows(blk);
    cl.finish(p.end_sync);
  } else {
    do_rows(kCluster ? blockIdx.x / unsigned(p.cluster) : blockIdx.x);
    if constexpr (kCluster) cl.finish(p.end_sync);
  }
}


// Launches the kernel for x's element type; kCentre: LayerNorm. Defined
// here, explicitly instantiated once per dtype and norm in
// src/ops/{rms,layer}norm_fwd_<dtype>.cu.
template <DType kX, bool kCentre>
Status launch_rmsnorm_fwd(const RMSNormFwdParams& p, const RowConfig& cfg, bool vec_io, bool uniform,
                          int device, cudaStream_t stream) {
  using Tx = typename core::TypeOf<kX>::type;
  const auto shape = core::launch_shape(cfg);
  if (uniform) {
    if (vec_io) return core::launch_cached<rmsnorm_fwd_kernel<Tx, true, true, kCentre>>(device, shape, stream, p);
    return core::launch_cached<rmsnorm_fwd_kernel<Tx, false, true, kCentre>>(device, shape, stream, p);
  }
  if (vec_io) return core::launch_cached<rmsnorm_fwd_kernel<Tx, true, false, kCentre>>(device, shape, stream, p);
  return core::launch_cached<rmsnorm_fwd_kernel<Tx, false, false, kCentre>>(device, shape, stream, p);
}

// Residual stream of the register-resident kernel: none, in x's dtype, or fp32.
enum class RegRes { kNone, kSameAsX, kFloat32 };

template <typename Tx, typename Tw, typename Tr, bool kCentre, int VPT, bool kCluster = false, bool kStaged = false,
          bool kStagedEarlyW = false, bool kSmallCta = false, int kRows = 1, bool kShift = false, bool kLean = false>
Status launch_rmsnorm_fwd_reg_tile(const RMSNormFwdParams& p, const RegRowConfig& cfg, int device, cudaStream_t stream) {
  return core::launch_cached<rmsnorm_fwd_reg_kernel<Tx, Tw, Tr, VPT, kCluster, kStaged, kCentre, kStagedEarlyW,
                                                    kSmallCta, kRows, kShift, kLean>>(device, core::launch_shape(cfg),
                                                                                      stream, p);
}

// The unclustered 1- and 2-vector tiles, lean where the plan says so
// (RegRowConfig::lean: kLean).
template <typename Tx, typename Tw, typename Tr, bool kCentre, int VPT, bool kShift>
Status launch_rmsnorm_fwd_reg_short(const RMSNormFwdParams& p, const RegRowConfig& cfg, int device,
                                    cudaStream_t stream) {
  if constexpr (!kShift) {
    if (cfg.lean)
      return launch_rmsnorm_fwd_reg_tile<Tx, Tw, Tr, kCentre, VPT, false, false, false, false, 1, false, true>(
          p, cfg, device, stream);
  }
  return launch_rmsnorm_fwd_reg_tile<Tx, Tw, Tr, kCentre, VPT, false, false, false, false, 1, kShift>(p, cfg, device,
                                                                                                  stream);
}

// kShift: shifted rows (rmsnorm_fwd_reg_kernel), unclustered register rows
// only.
template <typename Tx, typename Tw, typename Tr, bool kCentre, bool kShift = false>
Status launch_rmsnorm_fwd_reg_vpt(const RMSNormFwdParams& p, const RegRowConfig& cfg, int device, cudaStream_t stream) {
  constexpr int kResBytes = std::is_void_v<Tr> ? 0 : int(sizeof(std::conditional_t<std::is_void_v<Tr>, char, Tr>));
  constexpr int kMax = kShift ? rmsnorm_reg_shift_max_vpt(sizeof(Tx), kResBytes, sizeof(Tw))
                              : rmsnorm_reg_max_vpt(sizeof(Tx), kResBytes, sizeof(Tw));
  constexpr int kCl = rmsnorm_reg_cluster_vpt(sizeof(Tx), kResBytes, sizeof(Tw));
  if constexpr (kShift) {
    if (cfg.staged || cfg.cluster > 1)
      return {Code::kUnsupported, "rmsnorm: shifted rows take unclustered register tiles only"};
  } else if (cfg.staged) {  // clustered, no residual stream, a staged tile (config.cpp)
    if constexpr (std::is_void_v<Tr>) {
      constexpr int kSt = kRMSNormStagedVpt;
      if constexpr (std::is_same_v<Tw, Tx>) {
        if (cfg.vpt == kSt && p.staged_early_w)
          return launch_rmsnorm_fwd_reg_tile<Tx, Tw, Tr, kCentre, kSt, true, true, true>(p, cfg, device, stream);
      }
      // Two rows a cluster (config.cpp: RowTuning::reg_staged_pair).
      if constexpr (sizeof(Tx) == 2) {
        if (cfg.vpt == kSt && cfg.rows_per_cluster == 2)
          return launch_rmsnorm_fwd_reg_tile<Tx, Tw, Tr, kCentre, kSt, true, true, false, false, 2>(p, cfg, device,
                                                                                                   stream);
      }
      if (cfg.rows_per_cluster != 1) {
        return {Code::kUnsupported, "rmsnorm: no staged kernel takes " + std::to_string(cfg.rows_per_cluster) +
                                        " rows a cluster at " + std::to_string(cfg.vpt) + " vectors a thread"};
      }
      if (cfg.vpt == kSt) return launch_rmsnorm_fwd_reg_tile<Tx, Tw, Tr, kCentre, kSt, true, true>(p, cfg, device, stream);
      if (cfg.vpt == 2 * kSt)
        return launch_rmsnorm_fwd_reg_tile<Tx, Tw, Tr, kCentre, 2 * kSt, true, true>(p, cfg, device, stream);
      if (cfg.vpt == 4 * kSt)
        return launch_rmsnorm_fwd_reg_tile<Tx, Tw, Tr, kCentre, 4 * kSt, true, true>(p, cfg, device, stream);
      static_assert(4 * kSt == kRMSNormStagedVptMax, "the staged tiles dispatched");
    }
  } else if (cfg.cluster > 1) {  // always the clustered tile (config.cpp)
    if (cfg.vpt == kCl) return launch_rmsnorm_fwd_reg_tile<Tx, Tw, Tr, kCentre, kCl, true>(p, cfg, device, stream);
  }
  if (!cfg.staged && cfg.cluster == 1) {
    switch (cfg.vpt) {
      case 1: return launch_rmsnorm_fwd_reg_short<Tx, Tw, Tr, kCentre, 1, kShift>(p, cfg, device, stream);
      case 2:
        if constexpr (kMax >= 2) return launch_rmsnorm_fwd_reg_short<Tx, Tw, Tr, kCentre, 2, kShift>(p, cfg, device, stream);
        break;
      case 4:
        if constexpr (kMax >= 4)
          return launch_rmsnorm_fwd_reg_tile<Tx, Tw, Tr, kCentre, 4, false, false, false, false, 1, kShift>(p, cfg, device,
                                                                                                          stream);
        break;
      case 8:
        if constexpr (kMax >= 8) {
          // 16-bit x with an fp32 weight in a small CTA: the instance whose
          // loads and output loop are straight-line too (kSmallCta).
          if constexpr (sizeof(Tw) == 4 && sizeof(Tx) == 2) {
            if (cfg.threads <= kRegSmallCtaThreads && p.small_cta)
              return launch_rmsnorm_fwd_reg_tile<Tx, Tw, Tr, kCentre, 8, false, false, false, true, 1, kShift>(
                  p, cfg, device, stream);
            // (shifted: the small CTA only -- the 1024-thread instance spilled
            // 24 bytes, ptxas -v; the plan sends such rows elsewhere)
            if constexpr (kShift) break;
          }
          if constexpr (!(kShift && sizeof(Tw) == 4 && sizeof(Tx) == 2))
            return launch_rmsnorm_fwd_reg_tile<Tx, Tw, Tr, kCentre, 8, false, false, false, false, 1, kShift>(
                p, cfg, device, stream);
        }
        break;
    }
  }
  return {Code::kUnsupported, "rmsnorm: no register-resident kernel with " + std::to_string(cfg.vpt) +
                                  " vectors per thread (cluster " + std::to_string(cfg.cluster) +
                                  ") for this dtype combination"};
}

template <typename Tx, typename Tw, bool kCentre, bool kShift>
Status launch_rmsnorm_fwd_reg_res(const RMSNormFwdParams& p, const RegRowConfig& cfg, RegRes res, int device,
                                  cudaStream_t stream) {
  switch (res) {
    case RegRes::kNone: return launch_rmsnorm_fwd_reg_vpt<Tx, Tw, void, kCentre, kShift>(p, cfg, device, stream);
    case RegRes::kSameAsX: return launch_rmsnorm_fwd_reg_vpt<Tx, Tw, Tx, kCentre, kShift>(p, cfg, device, stream);
    case RegRes::kFloat32: return launch_rmsnorm_fwd_reg_vpt<Tx, Tw, float, kCentre, kShift>(p, cfg, device, stream);
  }
  return {Code::kUnsupported, "rmsnorm: unknown residual mode"};
}

template <typename Tx, typename Tw, bool kCentre>
Status launch_rmsnorm_fwd_reg_shift(const RMSNormFwdParams& p, const RegRowConfig& cfg, RegRes res, bool shift,
                                    int device, cudaStream_t stream) {
  if (shift) return launch_rmsnorm_fwd_reg_res<Tx, Tw, kCentre, true>(p, cfg, res, device, stream);
  return launch_rmsnorm_fwd_reg_res<Tx, Tw, kCentre, false>(p, cfg, res, device, stream);
}

// Launches the register-resident kernel for x's element type; w_f32: weight
// and bias are fp32 (else x's dtype); shift: shifted rows (kShift).
// Instantiated with launch_rmsnorm_fwd.
template <DType kX, bool kCentre>
Status launch_rmsnorm_fwd_reg(const RMSNormFwdParams& p, const RegRowConfig& cfg, bool w_f32, RegRes res, bool shift,
                              int device, cudaStream_t stream) {
  using Tx = typename core::TypeOf<kX>::type;
  if (w_f32 && !std::is_same_v<Tx, float>)
    return launch_rmsnorm_fwd_reg_shift<Tx, float, kCentre>(p, cfg, res, shift, device, stream);
  return launch_rmsnorm_fwd_reg_shift<Tx, Tx, kCentre>(p, cfg, res, shift, device, stream);
}

#define QUACK_RMSNORM_FWD_INSTANTIATION(EXTERN, DT, CENTRE)                                                \
  EXTERN template Status launch_rmsnorm_fwd<DT, CENTRE>(const RMSNormFwdParams&, const RowConfig&, bool, bool,    \
                                                        int, cudaStream_t);                                       \
  EXTERN template Status launch_rmsnorm_fwd_reg<DT, CENTRE>(const RMSNormFwdParams&, const RegRowConfig&, bool, \
                                                            RegRes, bool, int, cudaStream_t);
#ifndef QUACK_RMSNORM_FWD_TU
QUACK_RMSNORM_FWD_INSTANTIATION(extern, DType::kFloat32, false)
QUACK_RMSNORM_FWD_INSTANTIATION(extern, DType::kFloat16, false)
QUACK_RMSNORM_FWD_INSTANTIATION(extern, DType::kBFloat16, false)
QUACK_RMSNORM_FWD_INSTANTIATION(extern, DType::kFloat32, true)
QUACK_RMSNORM_FWD_INSTANTIATION(extern, DType::kFloat16, true)
QUACK_RMSNORM_FWD_INSTANTIATION(extern, DType::kBFloat16, true)
#endif

}  // namespace ops
}  // namespace quack
