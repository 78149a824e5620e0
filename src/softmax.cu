// Softmax host entry points: validation, configuration, and the one
// run-time -> template dispatch for the op (ops/softmax.cuh).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "quack/core/config.hpp"
#include "quack/ops/softmax.cuh"
#include "quack/ops/softmax_grid.cuh"
#include "quack/quack.hpp"
#include "validate.hpp"

namespace quack {

using detail::invalid;

namespace {

Status check_shape(int64_t rows, int64_t cols) { return detail::check_shape(rows, cols, "the softmax dimension"); }

Status check_same_dtype(const char* name, DType got, const char* ref_name, DType ref) {
  if (got != ref)
    return invalid(std::string(name) + ": dtype " + dtype_name(got) + " differs from " + ref_name + "'s " +
                   dtype_name(ref) + " (they must match)");
  return Status::success();
}

// Which kernel serves an aligned row problem, and its configuration:
// the register-resident kernels where the row fits their tiles -- staged in
// shared memory for long rows where softmax_staged_fwd / _bwd allow --
// unless the tuning chunks rows this long (forward rows of chunk_min_cols
// elements or more, or whose register tile needs a cluster, are chunked
// unless staged), otherwise the chunked two-pass kernel. Ahead of them,
// rows the grid kernels serve (softmax_fwd_grid, softmax_bwd_grid) where
// the call has a workspace: grid, the configuration exists (it sizes the
// workspace); the plan above stays the fallback for a grid that cannot be
// resident.
struct Plan {
  bool reg = false;
  RegRowConfig reg_cfg;
  ChunkRowConfig chunk_cfg;
  bool grid = false;
  NormGridConfig gcfg;
  bool grid_prefetch = false;  // RowTuning::fwd_grid_prefetch (both directions' collect)
  // Backward: a log-softmax row the chunked kernel takes reads dy alone in
  // pass 1 (RowTuning::softmax_chunk_log_dy; the launch checks p.log).
  bool chunk_log_dy = false;
};

// The grid kernel's configuration for the direction, where it serves the
// row (whole-vector rows only).
bool grid_path(int64_t rows, int64_t cols, int es, bool backward, const DeviceLimits& lim, const RowTuning& tune,
               NormGridConfig* g) {
  if (backward)
    return choose_softmax_bwd_grid_config(rows, cols, es, lim, tune, g) &&
           check_softmax_bwd_grid_config(*g, rows, cols, es, lim) == nullptr;
  return choose_softmax_fwd_grid_config(rows, cols, es, lim, tune, g) &&
         check_softmax_fwd_grid_config(*g, rows, cols, es, lim) == nullptr;
}

// shifted: rows that start anywhere inside a 16-byte vector (every
// operand at the same offset: the register kernels' kShift), planned for
// the N + VEC - 1 columns from the vector that holds the first element;
// they take the register and staged kernels alone (no grid, no chunking:
// else the streaming kernel), where RowTuning::shifted_rows allows.
Plan plan_rows(int64_t rows, int64_t cols, int es, bool backward, bool shifted, const DeviceLimits& lim) {
  const RowTuning tune = current_row_tuning();
  const int dtype_bit = es == 4 ? 2 : 1;  // the staging knobs' bit for this dtype
  Plan plan;
  if (shifted && !(tune.shifted_rows & 1)) return plan;
  if (shifted) cols += 16 / es - 1;
  if (!shifted) plan.grid = grid_path(rows, cols, es, backward, lim, tune, &plan.gcfg);
  plan.grid_prefetch = tune.fwd_grid_prefetch != 0;
  plan.chunk_log_dy = backward && tune.softmax_chunk_log_dy != 0;
  RegRowProblem prob;
  prob.rows = rows;
  prob.cols = cols;
  prob.x_elem_bytes = es;
  prob.max_vpt = backward ? ops::softmax_bwd_max_vpt() : ops::softmax_fwd_max_vpt();
  prob.cluster_vpt = backward ? ops::softmax_bwd_max_vpt() : ops::softmax_fwd_cluster_vpt();
  prob.scratch_bytes = ops::kSoftmaxScratchBytes;
  // 16-bit forward rows from 512 elements: softmax_fwd_vpt16 vectors a
  // thread (config.cpp).
  if (!backward && es == 2 && cols >= 512) prob.vpt_target = tune.softmax_fwd_vpt16;
  if (!backward && (tune.softmax_staged_fwd & dtype_bit) && ops::softmax_fwd_staged_tile(tune.softmax_staged_vpt)) {
    prob.staged_vpt = tune.softmax_staged_vpt;
    // Rows past 16 of those CTAs: x's first 12 vectors a thread staged, the
    // other 4 in registers, CTAs of softmax_staged_fwd_wide threads or more
    // (the kernel's one split instantiation: 16 vectors).
    if (prob.staged_vpt == ops::kSoftmaxFwdSplitVpt) {
      prob.staged_wide_team = tune.softmax_staged_fwd_wide;
      prob.staged_wide_vpt = ops::kSoftmaxFwdSplitVpt;
      prob.staged_wide_smem_vpt = ops::kSoftmaxFwdSplitVpt - ops::kSoftmaxFwdSplitRegs;
      prob.staged_wide_first = (tune.softmax_staged_wide_first & dtype_bit) != 0;
    }
  }
  // Backward rows that need more than one register CTA (1024 threads at 4
  // vectors of y and dy each) stage both in shared memory where
  // softmax_staged_bwd allows, at the tuning's tile; rows past 16 CTAs at
  // it take the register cluster or the chunked kernel as before (the
  // doubled tile lost there: config.cpp).
  if (backward && (tune.softmax_staged_bwd & dtype_bit) &&
      ops::softmax_bwd_staged_tile(tune.softmax_staged_bwd_vpt)) {
    prob.staged_vpt = tune.softmax_staged_bwd_vpt;
    prob.staged_tensors = 2;
    prob.staged_above_team = kRegRowMaxThreads;
    // Rows past 16 of those CTAs: y staged, dy in registers, CTAs of
    // softmax_staged_bwd_wide threads at the 8-vector tile (the kernel's
    // one wide instantiation).
    if (prob.staged_vpt == ops::kSoftmaxBwdWideVpt) {
      prob.staged_wide_team = tune.softmax_staged_bwd_wide;
      prob.staged_wide_vpt = ops::kSoftmaxBwdWideVpt;
      prob.staged_wide_smem_vpt = ops::kSoftmaxBwdWideVpt;  // y's tile; dy's in registers
      prob.staged_wide_first = (tune.softmax_staged_wide_first & dtype_bit) != 0;
    }
  }
  const int tensors = backward ? 2 : 1;
  const int64_t row_bytes = (cols + 16 / es - 1) / (16 / es) * 16 * tensors;
  const int64_t chunk_min = backward ? tune.chunk_min_bytes_bwd : tune.chunk_min_bytes;
  const bool fits = choose_reg_row_config(prob, lim, tune, &plan.reg_cfg) &&
                    check_reg_row_config(plan.reg_cfg, prob, lim) == nullptr;
  plan.reg = fits && (plan.reg_cfg.staged ||
                      (row_bytes < chunk_min && (backward || cols < tune.chunk_min_cols) &&
                       (backward || !tune.chunk_clustered_fwd || plan.reg_cfg.cluster == 1)));
  // Lean forward rows (kLean, RowTuning::reg_lean bit 1): one team owning
  // its CTA, 1 or 2 vectors a thread, the row exactly the tile.
  plan.reg_cfg.lean = plan.reg && !backward && !shifted && (tune.reg_lean & 2) != 0 &&
                      lean_row(plan.reg_cfg, cols);
  if (!plan.reg && !shifted) {
    ChunkRowProblem cp;
    cp.rows = rows;
    cp.cols = cols;
    cp.elem_bytes = es;
    cp.tensors = tensors;
    cp.scratch_bytes = ops::kSoftmaxScratchBytes;
    plan.chunk_cfg = choose_chunk_row_config(cp, lim, tune);
  }
  return plan;
}

// Every operand of the problem (p.b: dy, backward) allows 16-byte vectors.
bool whole_vectors(const ops::SoftmaxParams& p, DType dtype, bool backward) {
  const int vec = 16 / dtype_size(dtype);
  return detail::vec_ok(p.a, dtype, p.a_stride, vec) && detail::vec_ok(p.out, dtype, p.out_stride, vec) &&
         (!backward || detail::vec_ok(p.b, dtype, p.b_stride, vec));
}

// The forward's problem.
ops::SoftmaxParams fwd_params(const SoftmaxFwdArgs& a) {
  ops::SoftmaxParams p{};
  p.rows = a.rows;
  p.cols = a.cols;
  p.a = a.x.ptr;
  p.a_stride = a.x.row_stride;
  p.out = a.out.ptr;
  p.out_stride = a.out.row_stride;
  p.log = a.log;
  return p;
}

// The backward's problem.
ops::SoftmaxParams bwd_params(const SoftmaxBwdArgs& a) {
  ops::SoftmaxParams p{};
  p.rows = a.rows;
  p.cols = a.cols;
  p.a = a.y.ptr;
  p.a_stride = a.y.row_stride;
  p.b = a.dy.ptr;
  p.b_stride = a.dy.row_stride;
  p.out = a.dx.ptr;
  p.out_stride = a.dx.row_stride;
  p.log = a.log;
  return p;
}

// The launch, shared by both directions (p.b: dy, backward): rows of whole
// 16-byte vectors by plan_rows; rows whose operands all start at the same
// offset inside a vector (detail::same_vector_offsets: an odd pitch, a
// misaligned base) by plan_rows too, shifted, where its register or staged
// kernels hold them, else by the streaming kernel in shifted vectors;
// other rows element by element. workspace (nullptr: none): the grid
// kernel's, workspace_bytes of it.
Status launch(const ops::SoftmaxParams& base, DType dtype, bool backward, cudaStream_t stream,
              void* workspace = nullptr, size_t workspace_bytes = 0) {
  if (base.rows == 0) return Status::success();
  int device = -1;
  DeviceLimits lim;
  Status st = core::launch_device(&lim, &device);
  if (!st.ok()) return st;
  ops::SoftmaxParams p = base;
  const int es = dtype_size(dtype);
  const bool vec_io = whole_vectors(p, dtype, backward);
  const bool shift_io = detail::same_vector_offsets(p.a, p.a_stride, p.out, p.out_stride, es) &&
                        (!backward || detail::same_vector_offsets(p.a, p.a_stride, p.b, p.b_stride, es));

  if (vec_io || shift_io) {
    const bool shifted = !vec_io;
    const Plan plan = plan_rows(p.rows, p.cols, es, backward, shifted, lim);
    if (plan.grid && workspace != nullptr) {
      const NormGridConfig& g = plan.gcfg;
      if (workspace_bytes < g.exchange_bytes)
        return invalid("workspace_bytes: " + std::to_string(workspace_bytes) + " bytes given, the call needs " +
                       std::to_string(g.exchange_bytes) +
                       (backward ? " (softmax_bwd_workspace_bytes)" : " (softmax_fwd_workspace_bytes)"));
      ops::SoftmaxGridParams gp{};
      gp.op = p;
      core::set_grid_params(gp, g, workspace, plan.grid_prefetch);
      bool not_resident = false;
      Status gst = detail::by_dtype(dtype, backward ? "y" : "x", [&](auto dt) {
        return ops::launch_softmax_grid<decltype(dt)::value>(gp, g, backward, device, stream, &not_resident);
      });
      if (!not_resident) return gst;  // else the plan without the grid kernel
    }
    if (plan.reg) {
      const RegRowConfig& cfg = plan.reg_cfg;
      p.team = cfg.team;
      p.cluster = cfg.cluster;
      p.row_blocks = cfg.row_blocks;
      return detail::by_dtype(dtype, backward ? "y" : "x", [&](auto dt) {
        return ops::launch_softmax_reg<decltype(dt)::value>(p, cfg, backward, shifted, device, stream);
      });
    }
    if (!shifted) {
      const ChunkRowConfig& cfg = plan.chunk_cfg;
      p.team = cfg.threads;
      p.cluster = cfg.cluster;
      p.row_blocks = p.rows;
      p.chunk_vecs = cfg.chunk_vecs;
      p.stage_vecs = cfg.stage_vecs;
      const bool log_dy = p.log && plan.chunk_log_dy;
      return detail::by_dtype(dtype, backward ? "y" : "x", [&](auto dt) {
        return ops::launch_softmax_chunk<decltype(dt)::value>(p, cfg, backward, log_dy, device, stream);
      });
    }
  }

  // Streaming: one CTA per row, about 4 vectors a thread in flight per pass,
  // 32..1024 threads; as many CTAs as rows, up to 32 per SM (the kernel
  // strides over the rest).
  const int threads = detail::stream_row_threads(p.cols, es);
  p.team = threads;
  p.cluster = 1;
  p.row_blocks = p.rows;
  const int64_t grid = std::min<int64_t>(p.rows, int64_t(lim.num_sms) * 32);
  return detail::by_dtype(dtype, backward ? "y" : "x", [&](auto dt) {
    return ops::launch_softmax_stream<decltype(dt)::value>(p, threads, grid, shift_io, backward, device, stream);
  });
}

}  // namespace

std::string softmax_plan_description(int64_t rows, int64_t cols, DType dtype, bool backward,
                                     const DeviceLimits& lim, bool workspace, bool shifted) {
  const Plan plan = plan_rows(rows, cols, dtype_size(dtype), backward, shifted, lim);
  char buf[128];
  if (shifted && !plan.reg) {
    std::snprintf(buf, sizeof buf, "stream, shifted vectors");
  } else if (plan.grid && workspace) {
    const NormGridConfig& g = plan.gcfg;
    std::snprintf(buf, sizeof buf, "grid  ranks %3d groups %2d rows %d stages %d lag %d tile %lld smem %6zu grid %lld",
                  g.ranks, g.groups, g.rows, g.stages, g.lag, (long long)g.tile_vecs, g.smem_bytes, (long long)g.grid);
  } else if (plan.reg) {
    const RegRowConfig& c = plan.reg_cfg;
    // Staged rows with vectors in registers too (the wide geometry): how many a thread.
    const int regs = c.staged ? (backward ? 2 : 1) * c.vpt - c.staged_smem_vpt : 0;
    std::snprintf(buf, sizeof buf, "%s team %4d thr %4d cl %2d vpt %d", c.staged ? "stage" : "reg  ", c.team,
                  c.threads, c.cluster, c.vpt);
    if (regs > 0) std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf), " regs %d", regs);
    if (c.lean) std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf), " lean");
  } else {
    const ChunkRowConfig& c = plan.chunk_cfg;
    std::snprintf(buf, sizeof buf, "chunk thr %4d cl %2d vecs %lld staged %d", c.threads, c.cluster,
                  (long long)c.chunk_vecs, c.stage_vecs);
  }
  return buf;
}

Status can_implement(const SoftmaxFwdArgs& a) {
  Status st;
  if (!(st = check_shape(a.rows, a.cols)).ok()) return st;
  if (!(st = detail::check_matrix("x", a.x.ptr, a.x.dtype, a.x.row_stride, a.rows, a.cols, true)).ok()) return st;
  if (!(st = detail::check_matrix("out", a.out.ptr, a.out.dtype, a.out.row_stride, a.rows, a.cols, true)).ok())
    return st;
  if (a.rows > 0 && !(st = check_same_dtype("out", a.out.dtype, "x", a.x.dtype)).ok()) return st;
  if (a.workspace != nullptr && uintptr_t(a.workspace) % 16 != 0)
    return invalid("workspace: pointer is not 16-byte aligned");
  // out in place of x, or apart from it (detail::check_disjoint).
  if (a.rows == 0) return Status::success();
  return detail::check_disjoint(
      {detail::matrix_span("out", a.out.ptr, a.out.dtype, a.out.row_stride, a.rows, a.cols),
       detail::bytes_span("workspace", a.workspace, a.workspace_bytes)},
      {detail::matrix_span("x", a.x.ptr, a.x.dtype, a.x.row_stride, a.rows, a.cols)});
}

Status can_implement(const SoftmaxBwdArgs& a) {
  Status st;
  if (!(st = check_shape(a.rows, a.cols)).ok()) return st;
  if (!(st = detail::check_matrix("y", a.y.ptr, a.y.dtype, a.y.row_stride, a.rows, a.cols, true)).ok()) return st;
  if (!(st = detail::check_matrix("dy", a.dy.ptr, a.dy.dtype, a.dy.row_stride, a.rows, a.cols, true)).ok())
    return st;
  if (!(st = detail::check_matrix("dx", a.dx.ptr, a.dx.dtype, a.dx.row_stride, a.rows, a.cols, true)).ok())
    return st;
  if (a.rows > 0) {
    if (!(st = check_same_dtype("dy", a.dy.dtype, "y", a.y.dtype)).ok()) return st;
    if (!(st = check_same_dtype("dx", a.dx.dtype, "y", a.y.dtype)).ok()) return st;
  }
  if (a.workspace != nullptr && uintptr_t(a.workspace) % 16 != 0)
    return invalid("workspace: pointer is not 16-byte aligned");
  // dx in place of y or dy, or apart from both; the workspace apart from
  // every tensor (detail::check_disjoint).
  if (a.rows == 0) return Status::success();
  return detail::check_disjoint({detail::matrix_span("dx", a.dx.ptr, a.dx.dtype, a.dx.row_stride, a.rows, a.cols),
                                 detail::bytes_span("workspace", a.workspace, a.workspace_bytes)},
                                {detail::matrix_span("y", a.y.ptr, a.y.dtype, a.y.row_stride, a.rows, a.cols),
                                 detail::matrix_span("dy", a.dy.ptr, a.dy.dtype, a.dy.row_stride, a.rows, a.cols)});
}

// The workspace a call may use (either direction): the grid kernel's
// exchange logs where it serves the rows, else 0. st: the arguments'
// validation, returned as is where it failed.
Status workspace_bytes(Status st, const ops::SoftmaxParams& p, DType dtype, bool backward, int64_t min_cols,
                       size_t* bytes) {
  if (!st.ok() || p.rows == 0 || p.cols < min_cols || !whole_vectors(p, dtype, backward)) return st;
  int device = -1;
  DeviceLimits lim;
  if (!(st = core::launch_device(&lim, &device)).ok()) return st;
  NormGridConfig g;
  if (grid_path(p.rows, p.cols, dtype_size(dtype), backward, lim, current_row_tuning(), &g))
    *bytes = g.exchange_bytes;
  return Status::success();
}

Status softmax_fwd_workspace_bytes(const SoftmaxFwdArgs& a, size_t* bytes) {
  if (bytes == nullptr) return invalid("bytes: null pointer");
  *bytes = 0;
  return workspace_bytes(can_implement(a), fwd_params(a), a.x.dtype, false, kSoftmaxFwdWorkspaceMinCols, bytes);
}

Status softmax_bwd_workspace_bytes(const SoftmaxBwdArgs& a, size_t* bytes) {
  if (bytes == nullptr) return invalid("bytes: null pointer");
  *bytes = 0;
  return workspace_bytes(can_implement(a), bwd_params(a), a.y.dtype, true, kSoftmaxBwdWorkspaceMinCols, bytes);
}

Status softmax_fwd(const SoftmaxFwdArgs& a, cudaStream_t stream) {
  Status st = can_implement(a);
  if (!st.ok() || a.rows == 0) return st;
  return launch(fwd_params(a), a.x.dtype, false, stream, a.workspace, a.workspace_bytes);
}

Status softmax_bwd(const SoftmaxBwdArgs& a, cudaStream_t stream) {
  Status st = can_implement(a);
  if (!st.ok() || a.rows == 0) return st;
  return launch(bwd_params(a), a.y.dtype, true, stream, a.workspace, a.workspace_bytes);
}

}  // namespace quack
