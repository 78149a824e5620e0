// Cross-entropy host entry points: validation, the workspace, the plan, and
// the scalar kernels (denominators, the fixed-order total); the row kernels
// are in ops/cross_entropy.cuh.
#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstdio>
#include <string>

#include "quack/core/config.hpp"
#include "quack/ops/cross_entropy.cuh"
#include "quack/quack.hpp"
#include "validate.hpp"

namespace quack {

using detail::invalid;

namespace ops {

// The scalar sums in a fixed order on any device: CTA b of
// ce_scalar_split(rows, cols).parts takes rows [b * row_share, (b + 1) * row_share)
// (and classes likewise); its thread i rows i + k * blockDim.x of that share, 16 at
// a time (their loads issued together: a loop of one dependent load per row
// cost 9-10 us at M = 16384 and grew linearly to ~110 us each at M = 262144,
// ncu and CUDA events on ba84dd7), then block_reduce's fixed tree. With more
// than one part, ce_combine_kernel adds the parts in order. One CTA for the
// whole batch cost 78 us at M = 262144 (a63c75a): one SM's bandwidth.
constexpr int kCEScalarUnroll = 16;

// The scalar kernels' CTA (prepare and finish alike: the same W and R, the
// same bits): a power of two in [32, kCEScalarThreads], at most 4 of a
// part's rows (and, with class weights, classes) a thread below the cap --
// strands no longer than 1024 threads' at a full share (16 rows), so the
// sums' rounding stays within the tests' gamma_m = (M / 1024 + 16) u. A
// decode-sized mean (M = 1) had finish run 1024 threads, 1023 of them idle,
// through two 32-warp block reductions: 9,600 cycles under ncu at M = 1,
// V = 8192 bf16 against torch's nll_loss 7,200
// (bench/results/logs/2026-12-06-decode-ncu-h100.txt); one warp needs no
// shared memory or barrier.
int ce_scalar_threads(const CEScalarSplit& s, bool class_weights) {
  const int64_t n = std::max<int64_t>(s.row_share, class_weights ? s.col_share : 0);
  int t = 32;
  while (t < kCEScalarThreads && int64_t(t) * 4 < n) t *= 2;
  return t;
}

__device__ __forceinline__ int64_t ce_target_at(const CEScalarParams& p, int64_t i) {
  return p.target64 ? static_cast<const int64_t*>(p.target)[i * p.target_stride]
                    : int64_t(static_cast<const int32_t*>(p.target)[i * p.target_stride]);
}

// This thread's share of (W, R) over rows [r0, r1) of its part: the sum of
// w_t and the count over the counted rows (a target that is not ignored and
// in [0, V)). Prepare and finish both call it: the same order, the same bits.
__device__ __forceinline__ float2 ce_counted_rows(const CEScalarParams& p, int64_t r0, int64_t r1) {
  constexpr int U = kCEScalarUnroll;
  const int64_t nthr = blockDim.x;
  float w = 0.0f, r = 0.0f;
  for (int64_t i0 = r0 + threadIdx.x; i0 < r1; i0 += U * nthr) {
    int64_t t[U];
#pragma unroll
    for (int u = 0; u < U; ++u) t[u] = i0 + u * nthr < r1 ? ce_target_at(p, i0 + u * nthr) : p.ignore_index;
    float wt[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool counted = t[u] != p.ignore_index && t[u] >= 0 && t[u] < p.cols;
      wt[u] = counted ? (p.cw ? p.cw[t[u]] : 1.0f) : 0.0f;
      r += counted ? 1.0f : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) w += wt[u];
  }
  return make_float2(w, r);
}

__global__ void __launch_bounds__(kCEScalarThreads) ce_prepare_kernel(const CEScalarParams p) {
  __shared__ float2 scratch2[64];
  __shared__ float scratch1[64];
  constexpr int U = kCEScalarUnroll;
  const int64_t nthr = blockDim.x;
  const int64_t r0 = int64_t(blockIdx.x) * p.row_share, r1 = min(p.rows, r0 + p.row_share);
  const float2 wr = core::block_reduce<core::SumPairOp>(ce_counted_rows(p, r0, r1), scratch2);
  float ws = 0.0f;
  if (p.cw) {
    const int64_t c0 = int64_t(blockIdx.x) * p.col_share, c1 = min(p.cols, c0 + p.col_share);
    for (int64_t i0 = c0 + threadIdx.x; i0 < c1; i0 += U * nthr) {
      float v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = i0 + u * nthr < c1 ? p.cw[i0 + u * nthr] : 0.0f;
#pragma unroll
      for (int u = 0; u < U; ++u) ws += v[u];
    }
  }
  ws = core::block_reduce<core::SumOp>(ws, scratch1);
  if (threadIdx.x == 0) {
    if (p.parts != nullptr) {
      p.parts[blockIdx.x] = make_float4(wr.x, wr.y, ws, 0.0f);
    } else {
      p.totals[0] = wr.x;
      p.totals[1] = wr.y;
      p.totals[2] = ws;
    }
  }
}

// This thread's share of the sum of v[r0, r1) (16-byte aligned: the
// workspace's layout; r0 a multiple of 4): float4 groups i + k * 1024, U / 2
// loads in flight, then the tail.
__device__ __forceinline__ float ce_sum_share(const float* v, int64_t r0, int64_t r1) {
  constexpr int U = kCEScalarUnroll;
  const int64_t nthr = blockDim.x;
  float s = 0.0f;
  const int64_t groups = max(int64_t(0), r1 - r0) / 4;
  const float4* g4 = reinterpret_cast<const float4*>(v + r0);
  for (int64_t i0 = threadIdx.x; i0 < groups; i0 += (U / 2) * nthr) {
    float4 x[U / 2];
#pragma unroll
    for (int u = 0; u < U / 2; ++u)
      x[u] = i0 + u * nthr < groups ? g4[i0 + u * nthr] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int u = 0; u < U / 2; ++u) s += (x[u].x + x[u].y) + (x[u].z + x[u].w);
  }
  if (r0 + groups * 4 + threadIdx.x < r1) s += v[r0 + groups * 4 + threadIdx.x];
  return s;
}

// The part's (W, R, sum of the cross-entropy terms, sum of the z-loss
// terms): into parts[b], or, one part, the loss itself. 'sum' reads the
// rows' losses alone (W = R = 0, sz = 0).
//
// After the rows' kernel it is launched programmatically dependent on it
// (RowTuning::ce_finish_pdl): set up while those rows run, it counts a
// mean's rows (from the targets and weights, inputs the rows' kernel does
// not write) and then waits for their shares.
__global__ void __launch_bounds__(kCEScalarThreads) ce_finish_kernel(const CEScalarParams p) {
  __shared__ float2 scratch_a[64], scratch_b[64];
  const int64_t r0 = int64_t(blockIdx.x) * p.row_share, r1 = min(p.rows, r0 + p.row_share);
  const bool mean = p.reduction == 1;
  const float2 wr =
      mean ? core::block_reduce<core::SumPairOp>(ce_counted_rows(p, r0, r1), scratch_b) : make_float2(0.0f, 0.0f);
  core::pdl_wait();
  float2 s = make_float2(ce_sum_share(p.row_loss, r0, r1), mean ? ce_sum_share(p.row_z, r0, r1) : 0.0f);
  s = core::block_reduce<core::SumPairOp>(s, scratch_a);
  if (threadIdx.x == 0) {
    if (p.parts != nullptr) p.parts[blockIdx.x] = make_float4(wr.x, wr.y, s.x, s.y);
    else *p.loss = ce_reduced_loss(p.reduction, wr.x, wr.y, s.x, s.y);
  }
}

// Adds the parts in order (thread i part i, then block_reduce's fixed tree):
// finish = false: prepare's totals (x, y, z); true: the loss from finish's
// (W, R, sum ce, sum z).
__global__ void __launch_bounds__(kCEScalarThreads) ce_combine_kernel(const CEScalarParams p, int nparts,
                                                                      bool finish) {
  __shared__ float2 scratch_a[64], scratch_b[64];
  const float4 v = int(threadIdx.x) < nparts ? p.parts[threadIdx.x] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const float2 xy = core::block_reduce<core::SumPairOp>(make_float2(v.x, v.y), scratch_a);
  const float2 zw = core::block_reduce<core::SumPairOp>(make_float2(v.z, v.w), scratch_b);
  if (threadIdx.x != 0) return;
  if (finish) {
    *p.loss = ce_reduced_loss(p.reduction, xy.x, xy.y, zw.x, zw.y);
  } else {
    p.totals[0] = xy.x;
    p.totals[1] = xy.y;
    p.totals[2] = zw.x;
  }
}

// The combine mode: a row's statistics merged from its shards in shard
// order (MaxSumDotOp's combine, as a cluster merges a row's parts), x'_t
// their sum (one shard holds it, the others wrote 0), then the row's loss and
// lse as a whole row's. One thread a row.
constexpr int kCECombineThreads = 256;
__global__ void __launch_bounds__(kCECombineThreads) ce_combine_shards_kernel(const CEParams p,
                                                                              const float4* __restrict__ in,
                                                                              int64_t shards) {
  core::pdl_launch_dependents();  // (the finish kernel)
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; row < p.rows; row += stride) {
    core::MaxSumDot st = core::MaxSumDotOp::identity();
    float xt = 0.0f;
    for (int64_t k = 0; k < shards; ++k) {
      const float4 v = __ldg(in + k * p.rows + row);
      st = core::MaxSumDotOp::combine(st, {v.x, v.y, v.z, 0.0f});
      xt += v.w;
    }
    ce_write_row(p, CERow::make(p, row), st, xt, row);
  }
}

}  // namespace ops

namespace {

// The plain options: no softcap, no class-weighted smoothing (the kernels'
// compile-time plain flavour).
bool ce_plain(const CrossEntropyArgs& a) {
  return a.softcap == 0.0f && !(a.weight != nullptr && a.label_smoothing != 0.0f);
}

// The gradient in two passes (the forward writes lse, ce_grad_stream_kernel
// reads it): plain rows of at least ce_grad_split_min_cols classes, aligned
// for 16-byte accesses (vec_io; the workspace is sized without it).
bool ce_two_pass(const CrossEntropyArgs& a, const RowTuning& tune) {
  return a.dlogits.ptr != nullptr && a.lse_in == nullptr && ce_plain(a) && a.cols >= tune.ce_grad_split_min_cols;
}

// V: the whole vocabulary (the logits may hold a shard of it).
int64_t ce_classes(const CrossEntropyArgs& a) { return a.num_classes > 0 ? a.num_classes : a.cols; }

// Workspace layout: [0, 16) the totals (W, R, sum w) when needed; the scalar
// kernels' parts (16 bytes each) when they have more than one; the rows'
// shares when the loss is reduced (a mean: their cross-entropy terms, then,
// 16-byte aligned, their z-loss terms); the rows' lse for a two-pass
// gradient when the caller asked for none.
struct CEWorkspace {
  bool totals = false;
  bool shares = false;
  // One row's reduced loss written by the row's kernel itself
  // (RowTuning::ce_one_row_loss): no shares, no finish kernel.
  bool one_row = false;
  bool lse = false;
  ops::CEScalarSplit split;
  size_t parts_offset = 0, shares_offset = 0, z_offset = 0, lse_offset = 0, bytes = 0;
};

CEWorkspace ce_workspace(const CrossEntropyArgs& a) {
  CEWorkspace w;
  // The statistics mode needs nothing: no loss, no gradient.
  const bool stats = a.shard_stats != nullptr;
  // W and R before the rows: a mean's gradient divides by them, class-weighted
  // smoothing needs sum w. (A mean's loss alone gets them in the finish
  // kernel: no prepare launch.)
  const bool grad = a.dlogits.ptr != nullptr;
  w.totals = !stats && ((a.reduction == Reduction::kMean && grad) || (a.weight != nullptr && a.label_smoothing != 0.0f));
  const bool reduced = !stats && a.lse_in == nullptr && a.reduction != Reduction::kNone && a.loss != nullptr;
  w.one_row = reduced && a.rows == 1 && current_row_tuning().ce_one_row_loss != 0;
  w.shares = reduced && !w.one_row;
  w.lse = !stats && a.lse == nullptr && ce_two_pass(a, current_row_tuning());
  w.split = ops::ce_scalar_split(a.rows, ce_classes(a));
  const bool parts = (w.totals || w.shares) && w.split.parts > 1;
  auto round16 = [](size_t b) { return (b + 15) / 16 * 16; };
  w.parts_offset = w.totals ? 16 : 0;
  w.shares_offset = w.parts_offset + (parts ? size_t(w.split.parts) * 16 : 0);
  // A mean's shares are two arrays (cross-entropy terms, z-loss terms), the
  // second 16-byte aligned.
  w.z_offset = round16(w.shares_offset + (w.shares ? size_t(a.rows) * 4 : 0));
  const bool z = w.shares && a.reduction == Reduction::kMean;
  w.lse_offset = z ? round16(w.z_offset + size_t(a.rows) * 4) : w.z_offset;
  w.bytes = round16(w.lse_offset + (w.lse ? size_t(a.rows) * 4 : 0));
  if (!parts) w.split.parts = 1;
  return w;
}

// The plain forward's bulk-copy kernel: aligned rows (`aligned_plain`) in
// the tuned window of bytes (never below the kernel's 1 KB), at least
// ce_fwd_bulk_min_rows of them.
bool ce_fwd_bulk(int64_t rows, int64_t cols, int es, bool aligned_plain, const RowTuning& tune) {
  const int64_t bytes = cols * es;
  const int64_t lo = std::max<int64_t>(1024, es == 4 ? tune.ce_fwd_bulk_min_bytes4 : tune.ce_fwd_bulk_min_bytes2);
  return aligned_plain && tune.ce_fwd_bulk_min_rows > 0 && rows >= tune.ce_fwd_bulk_min_rows && bytes >= lo &&
         bytes <= tune.ce_fwd_bulk_max_bytes;
}

struct Plan {
  bool reg = false;
  RegRowConfig cfg;
};

// Whether a fused gradient of aligned rows may be staged in shared memory
// (ce_staged_kernel; RowTuning::ce_staged_grad).
bool ce_staged_grad(int64_t cols, int es, const RowTuning& tune) {
  return (tune.ce_staged_grad & (es == 4 ? 2 : 1)) != 0 && cols >= tune.ce_staged_min_cols &&
         ops::ce_staged_tile(tune.ce_staged_vpt) && tune.reg_staged_team <= ops::kCEStagedThreads;
}

// wide: the plain forward (no gradient, no softcap, no weighted smoothing),
// whose kernel has the 8-vector tile. staged: a fused gradient, which may be
// staged (ce_staged_grad).
Plan plan_rows(int64_t rows, int64_t cols, int es, const DeviceLimits& lim, bool wide, bool staged = false) {
  Plan plan;
  RegRowProblem prob;
  prob.rows = rows;
  prob.cols = cols;
  prob.x_elem_bytes = es;
  prob.max_vpt = ops::ce_max_vpt(wide);
  prob.cluster_vpt = ops::ce_cluster_vpt();
  prob.scratch_bytes = ops::kCEScratchBytes;
  // As the softmax forward, whose 16-bit rows of 512..8K ran at 95.6-98.6%
  // of copy with 8 vectors a thread against 79.8-95.3% with 4 (softmax_sweep,
  // b0db224, H200). Cross-entropy's bf16 forward with 8: 60.1 / 60.8 / 68.8%
  // at V = 1K / 4K / 16K (cross_entropy_sweep, d46a4b2) against 44-48% with
  // 4 (bench_cross_entropy, a63c75a).
  if (wide && es == 2 && cols >= 512) prob.vpt_target = 8;
  const RowTuning tune = current_row_tuning();
  auto choose = [&]() {
    plan.reg = choose_reg_row_config(prob, lim, tune, &plan.cfg) &&
               check_reg_row_config(plan.cfg, prob, lim) == nullptr;
  };
  if (staged && !wide && ce_staged_grad(cols, es, tune)) {
    prob.staged_vpt = tune.ce_staged_vpt;
    prob.staged_vpt_max = ops::kCEStagedVptMax;
    choose();
    // A row that one CTA holds at the tuned tile is staged at a smaller one
    // in a cluster of two, where that tile is built.
    if (!(plan.reg && plan.cfg.staged) && tune.ce_staged_vpt > ops::kCEStagedVptMin) {
      prob.staged_vpt = ops::kCEStagedVptMin;
      choose();
    }
    return plan;
  }
  choose();
  // Lean forward rows (ce_reg_kernel's kLean, RowTuning::reg_lean bit 2):
  // the plain forward's unclustered 1- and 2-vector tiles whose row is one
  // team owning its CTA and exactly the tile (shifted_plan clears it).
  plan.cfg.lean = plan.reg && wide && (tune.reg_lean & 4) != 0 && lean_row(plan.cfg, cols);
  return plan;
}

// Shifted rows (every row's first logit inside a 16-byte vector, logits
// and dlogits at the same offset: odd V, a misaligned base): the plan of
// V + VEC - 1 columns, the register tiles (ce_reg_kernel's kShift) or, for
// a fused gradient (staged), ce_staged_kernel's kShift -- never the
// two-pass kernels (whole vectors), the bulk forward only under bit 3
// (shifted_fwd_bulk) -- where RowTuning::shifted_rows allows (bit 1); else
// none (the streaming kernel).
Plan shifted_plan(int64_t rows, int64_t cols, int es, const DeviceLimits& lim, bool wide, bool staged) {
  if (!(current_row_tuning().shifted_rows & 2)) return Plan{};
  Plan plan = plan_rows(rows, cols + 16 / es - 1, es, lim, wide, staged);
  plan.cfg.lean = false;  // (no kShift lean kernel)
  return plan;
}
// A plain forward (wide) of shifted rows that ce_fwd_stream_kernel's kShift
// takes: from ce_fwd_stream_min_bytes, as aligned rows (where the bulk
// kernel's kShift, bit 3, does not take them first).
bool shifted_fwd_stream(int64_t cols, int es, bool wide, const RowTuning& tune) {
  return wide && (tune.shifted_rows & 2) && cols * es >= tune.ce_fwd_stream_min_bytes;
}
// ... and the bulk kernel's kShift (bit 3, on since the forty-eighth
// session: config.cpp cites the sweep), where the
// aligned rows' rules (ce_fwd_bulk) would take it.
bool shifted_fwd_bulk(int64_t rows, int64_t cols, int es, bool wide, const RowTuning& tune) {
  return (tune.shifted_rows & 8) && ce_fwd_bulk(rows, cols, es, wide, tune);
}

// Whether a reduced loss of `rows` rows takes one cluster of its rows' CTAs
// (CEParams::rows_cluster, ops::ce_cluster_finish): 2 .. ce_cluster_rows
// rows (at most the device's cluster), no gradient, the loss written
// through shares (finish: not one row's own loss, not the statistics or the
// gradient-from-lse modes, not the shards' combine), and an unstaged,
// unclustered register plan whose CTAs each hold one row.
bool ce_cluster_rows(int64_t rows, const RegRowConfig& c, bool grad, bool shares, const DeviceLimits& lim,
                     const RowTuning& tune) {
  return !grad && shares && rows >= 2 && rows <= std::min(tune.ce_cluster_rows, lim.max_cluster) && !c.staged &&
         c.cluster == 1 && c.threads == c.team && c.row_blocks == rows;
}

Status cuda_check(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return {Code::kCudaError, std::string(what) + ": " + cudaGetErrorString(e)};
  return Status::success();
}

}  // namespace

std::string cross_entropy_plan_description(int64_t rows, int64_t cols, DType dtype, const DeviceLimits& lim,
                                          bool forward, bool general, bool shifted) {
  const RowTuning tune = current_row_tuning();
  // As cross_entropy() dispatches: wide, the plain forward's kernels; a
  // gradient fused in the row kernels (staged where they may) unless it
  // takes two passes.
  const bool wide = forward && !general, grad = !forward;
  const int es = dtype_size(dtype);
  auto describe = [](const Plan& plan) -> std::string {
    if (!plan.reg) return "stream";
    const RegRowConfig& c = plan.cfg;
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s team %4d thr %4d cl %2d vpt %d%s", c.staged ? "stage" : "reg  ", c.team,
                  c.threads, c.cluster, c.vpt, c.lean ? " lean" : "");
    return buf;
  };
  // (" whole": the kernel's whole-batch loop, RowTuning::ce_fwd_whole.)
  // (" 3 ctas": RowTuning::ce_fwd_bulk_ctas.)
  const std::string bulk_whole = std::string((tune.ce_fwd_whole & 1) ? " whole" : "") +
                                 (ops::ce_bulk_ctas(tune.ce_fwd_bulk_ctas) == 3 ? " 3 ctas" : "");
  const std::string stream_whole = (tune.ce_fwd_whole & 2) ? " whole" : "";
  if (shifted) {
    if (shifted_fwd_bulk(rows, cols, es, wide, tune)) return "fwd-bulk shifted" + bulk_whole;
    if (shifted_fwd_stream(cols, es, wide, tune)) return "fwd-stream";  // (no whole loop: kShift)
    return describe(shifted_plan(rows, cols, es, lim, wide, grad));
  }
  const Plan fused = grad ? plan_rows(rows, cols, es, lim, false, true) : Plan{};
  const bool staged = fused.reg && fused.cfg.staged;
  if (grad && !general && !staged && cols >= tune.ce_grad_split_min_cols)
    return "2-pass: " + cross_entropy_plan_description(rows, cols, dtype, lim, true);
  if (ce_fwd_bulk(rows, cols, es, wide, tune)) return "fwd-bulk" + bulk_whole;
  if (wide && cols * es >= tune.ce_fwd_stream_min_bytes) return "fwd-stream" + stream_whole;
  return describe(grad ? fused : plan_rows(rows, cols, es, lim, wide));
}

// Vocabulary sharding and the two shard modes (statistics, gradient from lse).
static Status check_sharding(const CrossEntropyArgs& a) {
  if (a.num_classes < 0) return invalid("num_classes: must be >= 0 (0: cols), got " + std::to_string(a.num_classes));
  if (a.num_classes == 0 && a.class_offset != 0)
    return invalid("class_offset: must be 0 when num_classes is 0 (the logits hold every class), got " +
                   std::to_string(a.class_offset));
  if (a.num_classes > 0 && (a.class_offset < 0 || a.class_offset > a.num_classes - a.cols))
    return invalid("class_offset: the shard [" + std::to_string(a.class_offset) + ", " +
                   std::to_string(a.class_offset) + " + " + std::to_string(a.cols) + ") is not inside [0, num_classes = " +
                   std::to_string(a.num_classes) + ")");
  const bool stats = a.shard_stats != nullptr, from_lse = a.lse_in != nullptr, combine = a.combine_stats != nullptr;
  if (stats && from_lse) return invalid("shard_stats: given with lse_in (one mode a call)");
  if (combine) {
    if (a.combine_shards < 1)
      return invalid("combine_shards: must be >= 1 with combine_stats, got " + std::to_string(a.combine_shards));
    if (uintptr_t(a.combine_stats) % 16 != 0)
      return invalid("combine_stats: pointer is not 16-byte aligned (float4 rows)");
    if (stats) return invalid("shard_stats: given with combine_stats (one mode a call)");
    if (from_lse) return invalid("lse_in: given with combine_stats (one mode a call)");
    if (a.dlogits.ptr != nullptr) return invalid("dlogits: not written with combine_stats (use lse_in on each shard)");
    if (a.num_classes != 0 && a.num_classes != a.cols)
      return invalid("num_classes: combine_stats makes cols the whole vocabulary (" + std::to_string(a.cols) +
                     "); num_classes must be 0 or equal, got " + std::to_string(a.num_classes));
    if (a.class_offset != 0) return invalid("class_offset: must be 0 with combine_stats, got " +
                                            std::to_string(a.class_offset));
    if (a.rows > 0 && a.combine_shards > (INT64_MAX / 16) / a.rows)
      return invalid("combine_shards: " + std::to_string(a.combine_shards) + " shards of " + std::to_string(a.rows) +
                     " rows overflow the byte count");
    return Status::success();
  }
  if (ce_classes(a) != a.cols && !stats && !from_lse)
    return invalid("num_classes: the logits hold a shard (" + std::to_string(a.cols) + " of " +
                   std::to_string(a.num_classes) + " classes): write shard_stats, or dlogits from lse_in");
  if (stats) {
    if (uintptr_t(a.shard_stats) % 16 != 0) return invalid("shard_stats: pointer is not 16-byte aligned (float4 rows)");
    if (a.loss != nullptr) return invalid("loss: not written with shard_stats (combine the shards' statistics)");
    if (a.lse != nullptr) return invalid("lse: not written with shard_stats (combine the shards' statistics)");
    if (a.dlogits.ptr != nullptr) return invalid("dlogits: not written with shard_stats (use lse_in)");
  }
  if (from_lse) {
    if (uintptr_t(a.lse_in) % 4 != 0) return invalid("lse_in: pointer is not aligned to 4 bytes (fp32)");
    if (a.rows > 0 && a.dlogits.ptr == nullptr) return invalid("dlogits: null pointer (lse_in writes the gradient)");
    if (a.loss != nullptr) return invalid("loss: not written with lse_in (the gradient mode)");
    if (a.lse != nullptr) return invalid("lse: given with lse_in (the gradient mode reads lse_in)");
  }
  return Status::success();
}

Status can_implement(const CrossEntropyArgs& a) {
  Status st;
  if (!(st = detail::check_shape(a.rows, a.cols, "the class dimension")).ok()) return st;
  if (a.combine_shards != 0 && a.combine_stats == nullptr)
    return invalid("combine_shards: given without combine_stats (" + std::to_string(a.combine_shards) + ")");
  if (a.combine_stats != nullptr) {
    if (a.logits.ptr != nullptr) return invalid("logits: not read with combine_stats (pass null)");
  } else if (!(st = detail::check_matrix("logits", a.logits.ptr, a.logits.dtype, a.logits.row_stride, a.rows, a.cols,
                                         true))
                  .ok()) {
    return st;
  }
  if (a.target_dtype != IndexDType::kInt32 && a.target_dtype != IndexDType::kInt64)
    return invalid("target_dtype: unsupported index dtype code " + std::to_string(int(a.target_dtype)) +
                   " (expected int32 or int64)");
  const int tsize = a.target_dtype == IndexDType::kInt64 ? 8 : 4;
  if (a.rows > 0 && a.target == nullptr) return invalid("target: null pointer");
  if (uintptr_t(a.target) % tsize != 0)
    return invalid("target: pointer is not aligned to its element size (" + std::to_string(tsize) + " bytes)");
  if (a.target_stride < 0) return invalid("target_stride: must be >= 0, got " + std::to_string(a.target_stride));
  if (uintptr_t(a.weight) % 4 != 0) return invalid("weight: pointer is not aligned to 4 bytes (fp32)");
  if (a.reduction != Reduction::kNone && a.reduction != Reduction::kMean && a.reduction != Reduction::kSum)
    return invalid("reduction: unsupported code " + std::to_string(int(a.reduction)) + " (expected none, mean or sum)");
  if (!(a.label_smoothing >= 0.0f && a.label_smoothing <= 1.0f))
    return invalid("label_smoothing: must be in [0, 1], got " + std::to_string(a.label_smoothing));
  if (!(st = detail::check_finite("z_loss", a.z_loss, true)).ok()) return st;
  if (!(st = detail::check_finite("softcap", a.softcap, true)).ok()) return st;
  // 2 log2(e) / softcap must stay finite: no subnormal caps.
  if (a.softcap != 0.0f && a.softcap < FLT_MIN)
    return invalid("softcap: must be 0 (off) or >= 1.18e-38 (a normal float), got " + std::to_string(a.softcap));
  if (uintptr_t(a.loss) % 4 != 0) return invalid("loss: pointer is not aligned to 4 bytes (fp32)");
  if (uintptr_t(a.lse) % 4 != 0) return invalid("lse: pointer is not aligned to 4 bytes (fp32)");
  if (a.dlogits.ptr != nullptr) {
    if (!(st = detail::check_matrix("dlogits", a.dlogits.ptr, a.dlogits.dtype, a.dlogits.row_stride, a.rows, a.cols,
                                    false))
             .ok())
      return st;
    if (a.dlogits.dtype != a.logits.dtype)
      return invalid(std::string("dlogits: dtype ") + dtype_name(a.dlogits.dtype) + " differs from logits' " +
                     dtype_name(a.logits.dtype) + " (they must match)");
  }
  if (uintptr_t(a.dloss) % 4 != 0) return invalid("dloss: pointer is not aligned to 4 bytes (fp32)");
  if (a.dloss != nullptr && a.dlogits.ptr == nullptr)
    return invalid("dloss: given without dlogits (the upstream gradient only scales dlogits)");
  if (!(st = check_sharding(a)).ok()) return st;
  const CEWorkspace ws = ce_workspace(a);
  if (ws.bytes > 0 && a.rows > 0) {
    if (a.workspace == nullptr) return invalid("workspace: null pointer (cross_entropy_workspace_bytes says " +
                                               std::to_string(ws.bytes) + " bytes)");
    if (uintptr_t(a.workspace) % 16 != 0) return invalid("workspace: pointer is not 16-byte aligned");
    if (a.workspace_bytes < ws.bytes)
      return invalid("workspace_bytes: " + std::to_string(a.workspace_bytes) + " is less than the " +
                     std::to_string(ws.bytes) + " bytes needed");
  }
  // The outputs against the inputs and one another (detail::check_disjoint:
  // in place is dlogits over the logits, inplace_backward).
  if (a.rows == 0) return Status::success();
  using detail::vector_span;
  const DType f32 = DType::kFloat32;
  const int64_t per_call = a.reduction == Reduction::kNone ? a.rows : 1;  // loss, dloss
  return detail::check_disjoint(
      {detail::matrix_span("dlogits", a.dlogits.ptr, a.dlogits.dtype, a.dlogits.row_stride, a.rows, a.cols),
       vector_span("loss", a.loss, f32, per_call), vector_span("lse", a.lse, f32, a.rows),
       vector_span("shard_stats", a.shard_stats, f32, detail::sat_mul(4, a.rows)),
       detail::bytes_span("workspace", ws.bytes > 0 ? a.workspace : nullptr, ws.bytes)},
      {detail::matrix_span("logits", a.logits.ptr, a.logits.dtype, a.logits.row_stride, a.rows, a.cols),
       detail::bytes_span("target", a.target, size_t(detail::extent_bytes(a.rows, a.target_stride, 1, tsize))),
       vector_span("weight", a.weight, f32, ce_classes(a)), vector_span("dloss", a.dloss, f32, per_call),
       vector_span("lse_in", a.lse_in, f32, a.rows),
       vector_span("combine_stats", a.combine_stats, f32, detail::sat_mul(detail::sat_mul(4, a.rows), a.combine_shards))});
}

Status cross_entropy_workspace_bytes(const CrossEntropyArgs& a, size_t* bytes) {
  if (bytes == nullptr) return invalid("bytes: null pointer");
  Status st = detail::check_shape(a.rows, a.cols, "the class dimension");
  if (!st.ok()) return st;
  *bytes = ce_workspace(a).bytes;
  return Status::success();
}

Status cross_entropy(const CrossEntropyArgs& a, cudaStream_t stream) {
  Status st = can_implement(a);
  if (!st.ok()) return st;
  if (a.rows == 0 && (a.loss == nullptr || a.reduction == Reduction::kNone)) return Status::success();
  int device = -1;
  DeviceLimits lim;
  if (!(st = core::launch_device(&lim, &device)).ok()) return st;

  const CEWorkspace ws = ce_workspace(a);
  char* const base = a.rows > 0 ? static_cast<char*>(a.workspace) : nullptr;
  float* totals = ws.totals ? reinterpret_cast<float*>(base) : nullptr;
  float* shares = ws.shares && base != nullptr ? reinterpret_cast<float*>(base + ws.shares_offset) : nullptr;
  float* zshares = shares != nullptr && a.reduction == Reduction::kMean ? reinterpret_cast<float*>(base + ws.z_offset)
                                                                         : nullptr;
  const int parts = ws.split.parts;
  const int scalar_threads = ops::ce_scalar_threads(ws.split, a.weight != nullptr);

  ops::CEScalarParams sp{};
  sp.rows = a.rows;
  sp.cols = ce_classes(a);  // targets' range and the class weights' sum: the whole vocabulary
  sp.target = a.target;
  sp.target_stride = a.target_stride;
  sp.target64 = a.target_dtype == IndexDType::kInt64;
  sp.cw = a.weight;
  sp.ignore_index = a.ignore_index;
  sp.totals = totals;
  sp.row_loss = shares;
  sp.row_z = zshares;
  sp.loss = a.loss;
  sp.reduction = int(a.reduction);
  sp.parts = parts > 1 && base != nullptr ? reinterpret_cast<float4*>(base + ws.parts_offset) : nullptr;
  sp.row_share = ws.split.row_share;
  sp.col_share = ws.split.col_share;
  if (a.rows == 0) {
    // Nothing to read; the reduced loss is still written by the finish
    // kernel: NaN for a mean of nothing, 0 for a sum (as torch).
    ops::ce_finish_kernel<<<1, scalar_threads, 0, stream>>>(sp);
    return cuda_check("cross_entropy finish kernel launch");
  }
  if (totals != nullptr) {
    ops::ce_prepare_kernel<<<parts, scalar_threads, 0, stream>>>(sp);
    if (parts > 1) ops::ce_combine_kernel<<<1, ops::kCEScalarThreads, 0, stream>>>(sp, parts, false);
    if (!(st = cuda_check("cross_entropy prepare kernel launch")).ok()) return st;
  }

  ops::CEParams p{};
  p.rows = a.rows;
  p.cols = a.cols;
  p.num_classes = ce_classes(a);
  p.class_offset = a.class_offset;
  p.cwc = a.weight != nullptr ? a.weight + a.class_offset : nullptr;
  p.stats = reinterpret_cast<float4*>(a.shard_stats);
  p.x = a.logits.ptr;
  p.x_stride = a.logits.row_stride;
  p.target = a.target;
  p.target_stride = a.target_stride;
  p.target64 = sp.target64;
  p.cw = a.weight;
  p.ignore_index = a.ignore_index;
  p.smoothing = a.label_smoothing;
  p.z_loss = a.z_loss;
  p.softcap = a.softcap;
  p.reduction = int(a.reduction);
  p.wsmooth = a.weight != nullptr && a.label_smoothing != 0.0f;
  p.totals = totals;
  p.row_loss = a.reduction == Reduction::kNone ? a.loss : shares;
  p.row_z = zshares;
  // One row's reduced loss from the row's own kernel (ce_write_row): no
  // shares (so no workspace for a plain call) and no finish kernel.
  p.loss_out = ws.one_row ? a.loss : nullptr;
  p.lse = a.lse;
  p.dx = a.dlogits.ptr;
  p.dx_stride = a.dlogits.row_stride;
  p.dloss = a.dloss;
  p.dloss_per_row = a.reduction == Reduction::kNone;
  const bool grad = a.dlogits.ptr != nullptr;
  const RowTuning tune = current_row_tuning();
  p.fwd_whole = tune.ce_fwd_whole;
  // The reduced loss: the sums of the rows' terms in a fixed order (by the
  // rows' own cluster where p.rows_cluster, ce_cluster_finish).
  auto finish = [&]() -> Status {
    if (shares == nullptr || p.rows_cluster > 1) return Status::success();
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t lc = core::pdl_config(parts, scalar_threads, stream, tune.ce_finish_pdl != 0, &attr);
    if (!(st = core::cuda_status(cudaLaunchKernelEx(&lc, ops::ce_finish_kernel, sp), "cross_entropy finish kernel launch")).ok())
      return st;
    if (parts > 1) ops::ce_combine_kernel<<<1, ops::kCEScalarThreads, 0, stream>>>(sp, parts, true);
    return cuda_check("cross_entropy finish kernel launch");
  };
  if (a.combine_stats != nullptr) {
    const int64_t blocks = std::min<int64_t>((a.rows + ops::kCECombineThreads - 1) / ops::kCECombineThreads,
                                             int64_t(lim.num_sms) * 8);
    ops::ce_combine_shards_kernel<<<int(blocks), ops::kCECombineThreads, 0, stream>>>(
        p, reinterpret_cast<const float4*>(a.combine_stats), a.combine_shards);
    if (!(st = cuda_check("cross_entropy combine kernel launch")).ok()) return st;
    return finish();
  }

  const int es = dtype_size(a.logits.dtype);
  const int vec = 16 / es;
  const bool vec_io = detail::vec_ok(a.logits.ptr, a.logits.dtype, a.logits.row_stride, vec) &&
                      detail::vec_ok(a.dlogits.ptr, a.dlogits.dtype, a.dlogits.row_stride, vec);
  // Persistent streaming kernels: four CTAs an SM (their launch bounds), at
  // most one per row.
  const int64_t stream_grid = std::min<int64_t>(a.rows, int64_t(lim.num_sms) * 4);
  // Streaming rows: one CTA per row, about 4 vectors a thread per pass,
  // 32..1024 threads; up to 32 CTAs per SM (the kernel strides over the rest).
  const int row_threads = detail::stream_row_threads(a.cols, es);
  const int64_t row_grid = std::min<int64_t>(a.rows, int64_t(lim.num_sms) * 32);
  if (a.lse_in != nullptr) {
    // The gradient from the caller's lse alone: the two-pass gradient kernel
    // for plain aligned rows, else one CTA a row.
    p.lse_src = a.lse_in;
    return detail::by_dtype(a.logits.dtype, "logits", [&](auto dt) {
      if (vec_io && ce_plain(a))
        return ops::launch_ce_fwd_stream<decltype(dt)::value>(p, stream_grid, true, device, stream);
      p.team = row_threads;
      p.cluster = 1;
      p.row_blocks = a.rows;
      return ops::launch_ce_stream<decltype(dt)::value>(p, row_threads, row_grid, vec_io, true, true, device, stream);
    });
  }
  // A gradient of aligned rows that a cluster stages: one fused pass
  // (ce_staged_kernel). Else, two-pass gradient: the forward alone
  // (its plain, wide kernels) writes lse, then ce_grad_stream_kernel the
  // gradient. (The workspace keeps room for the two-pass lse either way.)
  const Plan staged_plan = grad && vec_io ? plan_rows(a.rows, a.cols, es, lim, false, true) : Plan{};
  const bool staged = staged_plan.reg && staged_plan.cfg.staged;
  const bool two_pass = vec_io && !staged && ce_two_pass(a, tune);
  const bool row_grad = grad && !two_pass;  // the row kernels write dx
  const bool wide = !row_grad && ce_plain(a);
  if (two_pass) {
    p.dx = nullptr;
    if (p.lse == nullptr) p.lse = reinterpret_cast<float*>(base + ws.lse_offset);
    p.lse_src = p.lse;
  }
  // Rows at one offset in a vector, not all 0 (logits and dlogits alike):
  // shifted register rows where the tuning allows.
  const bool shifted = !vec_io && detail::same_vector_offsets(a.logits.ptr, a.logits.row_stride, a.dlogits.ptr,
                                                              a.dlogits.row_stride, es);
  const Plan plan = shifted          ? shifted_plan(a.rows, a.cols, es, lim, wide, row_grad)
                    : row_grad && vec_io ? staged_plan
                    : vec_io         ? plan_rows(a.rows, a.cols, es, lim, wide)
                                     : Plan{};
  auto launch_rows = [&]() -> Status {
    const bool bulk_shifted = shifted && shifted_fwd_bulk(a.rows, a.cols, es, wide, tune);
    if (ce_fwd_bulk(a.rows, a.cols, es, wide && vec_io, tune) || bulk_shifted) {
      const int ctas = ops::ce_bulk_ctas(tune.ce_fwd_bulk_ctas);
      const int64_t grid =
          std::min<int64_t>((a.rows + ops::kCEBulkWarps - 1) / ops::kCEBulkWarps, int64_t(lim.num_sms) * ctas);
      return detail::by_dtype(a.logits.dtype, "logits", [&](auto dt) {
        return ops::launch_ce_fwd_bulk<decltype(dt)::value>(p, grid, bulk_shifted, ctas, device, stream);
      });
    }
    if (wide && vec_io && a.cols * es >= tune.ce_fwd_stream_min_bytes) {
      return detail::by_dtype(a.logits.dtype, "logits", [&](auto dt) {
        return ops::launch_ce_fwd_stream<decltype(dt)::value>(p, stream_grid, false, device, stream);
      });
    }
    if (shifted && shifted_fwd_stream(a.cols, es, wide, tune)) {
      return detail::by_dtype(a.logits.dtype, "logits", [&](auto dt) {
        return ops::launch_ce_fwd_stream_shifted<decltype(dt)::value>(p, stream_grid, device, stream);
      });
    }
    if (plan.reg) {
      p.team = plan.cfg.team;
      p.cluster = plan.cfg.cluster;
      p.row_blocks = plan.cfg.row_blocks;
      if (ce_cluster_rows(a.rows, plan.cfg, grad, shares != nullptr && a.combine_stats == nullptr, lim, tune)) {
        p.rows_cluster = int(a.rows);
        p.rows_oneway = tune.ce_cluster_oneway != 0;
        p.loss_out = a.loss;
        p.row_loss = p.row_z = nullptr;
      }
      return detail::by_dtype(a.logits.dtype, "logits", [&](auto dt) {
        return ops::launch_ce_reg<decltype(dt)::value>(p, plan.cfg, row_grad, shifted, device, stream);
      });
    }
    p.team = row_threads;
    p.cluster = 1;
    p.row_blocks = a.rows;
    return detail::by_dtype(a.logits.dtype, "logits", [&](auto dt) {
      return ops::launch_ce_stream<decltype(dt)::value>(p, row_threads, row_grid, vec_io, row_grad, false, device,
                                                        stream);
    });
  };
  if (Status ls = launch_rows(); !ls.ok()) return ls;
  if (two_pass) {
    p.dx = a.dlogits.ptr;
    const Status gs = detail::by_dtype(a.logits.dtype, "logits", [&](auto dt) {
      return ops::launch_ce_fwd_stream<decltype(dt)::value>(p, stream_grid, true, device, stream);
    });
    if (!gs.ok()) return gs;
  }

  return finish();
}

Status can_implement(const CrossEntropyGradScaleArgs& a) {
  Status st;
  if (!(st = detail::check_shape(a.rows, a.cols, "the class dimension")).ok()) return st;
  if (!(st = detail::check_matrix("dlogits", a.dlogits.ptr, a.dlogits.dtype, a.dlogits.row_stride, a.rows, a.cols,
                                  true))
           .ok())
    return st;
  if (a.rows > 0 && a.dloss == nullptr) return invalid("dloss: null pointer");
  if (uintptr_t(a.dloss) % 4 != 0) return invalid("dloss: pointer is not aligned to 4 bytes (fp32)");
  // dlogits apart from the factors every row reads (detail::check_disjoint).
  if (a.rows == 0) return Status::success();
  return detail::check_disjoint(
      {detail::matrix_span("dlogits", a.dlogits.ptr, a.dlogits.dtype, a.dlogits.row_stride, a.rows, a.cols)},
      {detail::vector_span("dloss", a.dloss, DType::kFloat32, a.per_row ? a.rows : 1)});
}

Status cross_entropy_scale_grad(const CrossEntropyGradScaleArgs& a, cudaStream_t stream) {
  Status st = can_implement(a);
  if (!st.ok() || a.rows == 0) return st;
  int device = -1;
  DeviceLimits lim;
  if (!(st = core::launch_device(&lim, &device)).ok()) return st;
  const bool vec_io = detail::vec_ok(a.dlogits.ptr, a.dlogits.dtype, a.dlogits.row_stride, 16 / dtype_size(a.dlogits.dtype));
  // Rows that are not whole vectors: in shifted vectors where the tuning
  // allows (RowTuning::shifted_rows bit 1), else element by element.
  const bool shift = !vec_io && (current_row_tuning().shifted_rows & 2) != 0;
  const int64_t grid = std::min<int64_t>(a.rows, int64_t(lim.num_sms) * 8);
  return detail::by_dtype(a.dlogits.dtype, "dlogits", [&](auto dt) {
    return ops::launch_ce_scale<decltype(dt)::value>(a.rows, a.cols, a.dlogits.ptr, a.dlogits.row_stride, a.dloss,
                                                     a.per_row, vec_io, shift, grid, device, stream);
  });
}

}  // namespace quack
