// RMSNorm and LayerNorm backward host entry points: validation, the plan
// (pipelined, register-resident or general kernel, and the partial rows of
// the weight gradients), and the launches (ops/rmsnorm_bwd.cuh; LayerNorm is the
// kernels' centred mode).
#include <algorithm>
#include <string>

#include "quack/core/config.hpp"
#include "quack/ops/rmsnorm_bwd.cuh"
#include "quack/quack.hpp"
#include "validate.hpp"

namespace quack {

using detail::invalid;

namespace {

bool wants_grads(const RMSNormBwdArgs& a) { return a.dweight.ptr != nullptr || a.dbias.ptr != nullptr; }

// Everything but the workspace when `workspace` is false (the size query
// comes before the workspace exists). centre: LayerNorm, whose mean is
// required.
Status validate(const RMSNormBwdArgs& a, bool workspace, bool centre, const float* mean) {
  Status st = detail::check_shape(a.rows, a.cols, "the normalised dimension");
  if (!st.ok()) return st;
  if (!(st = detail::check_matrix("h", a.h.ptr, a.h.dtype, a.h.row_stride, a.rows, a.cols, true)).ok()) return st;
  if (!(st = detail::check_matrix("dy", a.dy.ptr, a.dy.dtype, a.dy.row_stride, a.rows, a.cols, true)).ok()) return st;
  if (!(st = detail::check_matrix("dresidual_out", a.dresidual_out.ptr, a.dresidual_out.dtype,
                                  a.dresidual_out.row_stride, a.rows, a.cols, false)).ok())
    return st;
  if (!(st = detail::check_vector("weight", a.weight.ptr, a.weight.dtype)).ok()) return st;
  if (a.rows > 0 && a.rstd == nullptr) return invalid("rstd: null pointer (the forward's rstd is required)");
  if (a.rstd != nullptr && uintptr_t(a.rstd) % 4 != 0) return invalid("rstd: pointer is not 4-byte aligned");
  if (centre) {
    if (a.rows > 0 && mean == nullptr) return invalid("mean: null pointer (the forward's mean is required)");
    if (mean != nullptr && uintptr_t(mean) % 4 != 0) return invalid("mean: pointer is not 4-byte aligned");
  }
  if (!(st = detail::check_matrix("dx", a.dx.ptr, a.dx.dtype, a.dx.row_stride, a.rows, a.cols, true)).ok()) return st;
  if (!(st = detail::check_matrix("dresidual", a.dresidual.ptr, a.dresidual.dtype, a.dresidual.row_stride, a.rows,
                                  a.cols, false)).ok())
    return st;
  if (!(st = detail::check_vector("dweight", a.dweight.ptr, a.dweight.dtype)).ok()) return st;
  if (!(st = detail::check_vector("dbias", a.dbias.ptr, a.dbias.dtype)).ok()) return st;
  if (a.dweight.ptr != nullptr && a.weight.ptr == nullptr)
    return invalid("dweight: asked for without a weight (the forward had none)");
  if (!(st = detail::check_finite("weight_offset", a.weight_offset, false)).ok()) return st;
  if (workspace && wants_grads(a) && a.rows > 0) {
    if (a.workspace == nullptr)
      return invalid("workspace: null pointer (dweight / dbias need rmsnorm_bwd_workspace_bytes of it)");
    if (uintptr_t(a.workspace) % 16 != 0) return invalid("workspace: pointer is not 16-byte aligned");
  }
  // The outputs against the inputs and one another (detail::check_disjoint:
  // dx or dresidual may be h's, dy's or dresidual_out's very matrix, as
  // before; a partial overlap, and any of the weight gradients or a given
  // workspace's, is refused; the size query has no workspace yet).
  if (a.rows == 0) return Status::success();
  using detail::matrix_span;
  using detail::vector_span;
  const DType f32 = DType::kFloat32;
  const bool ws = workspace && a.workspace != nullptr;
  return detail::check_disjoint(
      {matrix_span("dx", a.dx.ptr, a.dx.dtype, a.dx.row_stride, a.rows, a.cols),
       matrix_span("dresidual", a.dresidual.ptr, a.dresidual.dtype, a.dresidual.row_stride, a.rows, a.cols),
       vector_span("dweight", a.dweight.ptr, a.dweight.dtype, a.cols),
       vector_span("dbias", a.dbias.ptr, a.dbias.dtype, a.cols),
       detail::bytes_span("workspace", ws ? a.workspace : nullptr, a.workspace_bytes)},
      {matrix_span("h", a.h.ptr, a.h.dtype, a.h.row_stride, a.rows, a.cols),
       matrix_span("dy", a.dy.ptr, a.dy.dtype, a.dy.row_stride, a.rows, a.cols),
       matrix_span("dresidual_out", a.dresidual_out.ptr, a.dresidual_out.dtype, a.dresidual_out.row_stride, a.rows,
                   a.cols),
       vector_span("weight", a.weight.ptr, a.weight.dtype, a.cols), vector_span("rstd", a.rstd, f32, a.rows),
       vector_span("mean", mean, f32, a.rows)});
}

// The general kernel's CTAs: at most 8 an SM, and no more partial rows than
// 256 MB of workspace hold (N = 1M: 32 CTAs).
constexpr int64_t kGeneralMaxWorkspace = int64_t(256) << 20;

struct Plan {
  bool pipe = false;  // the pipelined kernel (cfg.stages > 0)
  // ... of shifted rows (kShift), every P = 1 << shift_log2 rows a class
  // of its own CTAs (shift_rows_log2)
  bool shifted = false;
  int shift_log2 = 0;
  bool reg = false;   // the register kernel with shared-memory accumulators
  bool w_f32 = false;
  RegRowConfig cfg;
  int64_t general_grid = 0;
  int64_t parts = 0;  // partial rows of the weight gradients
  // Long general rows (ops/rmsnorm_bwd.cuh, 2'): the per-row dots at the
  // workspace's start, then the partial rows (one per group of rows).
  bool split = false;
  int64_t splits = 0, rows_per_group = 0, groups = 0;
  size_t dot_bytes = 0;
  // The grid kernel (ops/rmsnorm_bwd.cuh, 2''), ahead of the plan above,
  // which stays the fallback for a grid that cannot be resident at launch:
  // its exchange logs at the workspace's start, then gcfg.groups partial
  // rows.
  // grid: the configuration exists (it sizes the workspace, which depends
  // on no option); grid_runs: it is launched -- not for 16-bit rows that a
  // full register cluster holds without dbias (make_plan).
  bool grid = false, grid_runs = false;
  NormGridConfig gcfg;
};

// Shifted rows (the pipelined kernel's kShift): h, dy, dx, dresidual_out
// and dresidual (one dtype) start every row at one offset inside a 16-byte
// vector, row for row (detail::same_vector_offsets: contiguous rows whose
// pitch is not whole vectors, bf16 N = 4101; a misaligned base). A row's
// offset repeats every P = 16 / gcd(16, pitch in bytes) rows: returns
// log2 P (0: every row at the base's offset), or -1 where the operands'
// offsets differ.
int shift_rows_log2(const RMSNormBwdArgs& a) {
  const int es = dtype_size(a.h.dtype);
  using detail::same_vector_offsets;
  const void* h = a.h.ptr;
  const int64_t hs = a.h.row_stride;
  if (!same_vector_offsets(h, hs, a.dy.ptr, a.dy.row_stride, es) ||
      !same_vector_offsets(h, hs, a.dx.ptr, a.dx.row_stride, es) ||
      !same_vector_offsets(h, hs, a.dresidual_out.ptr, a.dresidual_out.row_stride, es) ||
      !same_vector_offsets(h, hs, a.dresidual.ptr, a.dresidual.row_stride, es))
    return -1;
  const int lg = RowClasses::period_log2(hs * es);
  return lg <= RowClasses::kMaxLog2 ? lg : -1;  // (es >= 2: always)
}

// The register-resident kernel serves h, dy, dx (and dresidual_out,
// dresidual) in one dtype, the weight in it or fp32, every operand 16-byte
// aligned, rows within its tiles; the pipelined kernel those and, where
// RowTuning::shifted_rows bit 4 allows, shifted rows (in one CTA; bit 5:
// or a cluster).
// Everything else takes the general kernel.
Plan make_plan(const RMSNormBwdArgs& a, bool centre, const DeviceLimits& lim) {
  Plan plan;
  const RowTuning tune = current_row_tuning();  // one copy a call, for every rule below
  const DType t = a.h.dtype;
  const int vec = 16 / dtype_size(t);
  bool uniform = a.dy.dtype == t && a.dx.dtype == t && (a.dresidual_out.ptr == nullptr || a.dresidual_out.dtype == t) &&
                 (a.dresidual.ptr == nullptr || a.dresidual.dtype == t) &&
                 (a.weight.ptr == nullptr || a.weight.dtype == t || a.weight.dtype == DType::kFloat32);
  bool aligned = detail::vec_ok(a.h.ptr, t, a.h.row_stride, vec) && detail::vec_ok(a.dy.ptr, t, a.dy.row_stride, vec) &&
                 detail::vec_ok(a.dx.ptr, t, a.dx.row_stride, vec) &&
                 detail::vec_ok(a.dresidual_out.ptr, t, a.dresidual_out.row_stride, vec) &&
                 detail::vec_ok(a.dresidual.ptr, t, a.dresidual.row_stride, vec) &&
                 (a.weight.ptr == nullptr || uintptr_t(a.weight.ptr) % 16 == 0);
  // Shifted rows (bit 4): the pipelined plan of N + VEC - 1 columns (the
  // row from the 16-byte vector that holds its first element), in one CTA
  // or (bit 5) a cluster.
  const int shift_log2 = uniform && !aligned && (tune.shifted_rows & 16) ? shift_rows_log2(a) : -1;
  if (uniform && (aligned || shift_log2 >= 0)) {
    plan.w_f32 = a.weight.ptr != nullptr && a.weight.dtype == DType::kFloat32;
    NormBwdPipeProblem pp;
    pp.rows = a.rows;
    pp.cols = a.cols + (aligned ? 0 : vec - 1);
    pp.x_elem_bytes = dtype_size(t);
    pp.weight = a.weight.ptr != nullptr;
    pp.tensors = a.dresidual_out.ptr != nullptr ? 3 : 2;
    pp.max_vpt = ops::rmsnorm_bwd_pipe_max_vpt(t, centre);
    pp.db = a.dbias.ptr != nullptr;
    pp.small_cta_ok = ops::rmsnorm_bwd_pipe_small_cta(t, centre);
    pp.centre = centre;
    pp.shifted = !aligned;
    pp.scratch_bytes = ops::kRMSNormBwdScratchBytes;
    plan.pipe = choose_norm_bwd_pipe_config(pp, lim, tune, &plan.cfg) &&
                check_norm_bwd_pipe_config(plan.cfg, pp, lim) == nullptr;
    if (!aligned) {
      plan.pipe = plan.pipe && (plan.cfg.cluster == 1 || (tune.shifted_rows & 32));
      plan.shifted = plan.pipe;
      plan.shift_log2 = shift_log2;
    }
    if (plan.shifted) {
      // P classes of rows, each its own CTAs -- or clusters -- (ops/
      // rmsnorm_bwd.cuh, kShift): the resident ones shared out evenly, or
      // one a row block where the rows are fewer.
      const int64_t classes = int64_t(1) << shift_log2;
      const int64_t units = plan.cfg.grid / plan.cfg.cluster;  // CTAs or clusters
      const int64_t class_blocks = RowClasses::blocks(a.rows, 0, shift_log2, plan.cfg.teams_per_cta());
      const int64_t per_class = units >= plan.cfg.row_blocks ? class_blocks : std::max<int64_t>(1, units / classes);
      plan.cfg.grid = per_class * classes * plan.cfg.cluster;
      plan.cfg.row_blocks = class_blocks;  // the walk's bound in every class
    }
  }
  if (uniform && aligned && !plan.pipe) {
    RegRowProblem prob;
    prob.rows = a.rows;
    prob.cols = a.cols;
    prob.x_elem_bytes = dtype_size(t);
    prob.max_vpt = ops::rmsnorm_bwd_max_vpt(dtype_size(t));
    prob.scratch_bytes = ops::kRMSNormBwdScratchBytes;
    // LayerNorm in fp32: 8 elements a thread wherever the row fits a cluster
    // of such tiles, 16 beyond (H200, fp32 weight and bias, 8 vs 16: N = 256
    // 93.6% vs 89.1% of copy, 1K 89.1 vs 84.7, 16K 74.0 vs 66.8, 64K 64.0 vs
    // 58.6; bench/results/2026-11-30-layernorm.md).
    if (centre && t == DType::kFloat32) prob.vpt_target = 2;
    plan.reg = choose_norm_bwd_config(prob, lim, &plan.cfg) && check_norm_bwd_config(plan.cfg, prob, lim) == nullptr;
  }
  if (plan.pipe || plan.reg) {
    plan.parts = plan.cfg.grid / plan.cfg.cluster;
  } else if (a.cols > ops::kRMSNormBwdSplitMinCols) {
    // Enough (split, group) CTAs to fill the GPU once (4 of 256 threads an
    // SM: 54 registers, ptxas -v); each group one partial row.
    plan.split = true;
    plan.splits = (a.cols + ops::kRMSNormBwdSplitCols - 1) / ops::kRMSNormBwdSplitCols;
    const int64_t want = std::max<int64_t>(1, (int64_t(lim.num_sms) * 4 + plan.splits - 1) / plan.splits);
    plan.rows_per_group = std::max<int64_t>(1, (a.rows + want - 1) / std::max<int64_t>(1, want));
    plan.groups = (a.rows + plan.rows_per_group - 1) / plan.rows_per_group;
    plan.parts = plan.groups;
    plan.dot_bytes = (size_t(a.rows) * (centre ? 8 : 4) + 15) / 16 * 16;  // a float (float2) a row
  } else {
    int64_t g = std::min<int64_t>(a.rows, int64_t(lim.num_sms) * 8);
    if (wants_grads(a)) g = std::min<int64_t>(g, std::max<int64_t>(1, kGeneralMaxWorkspace / (a.cols * 8)));
    plan.general_grid = g;
    plan.parts = g;
  }
  if (!wants_grads(a)) plan.parts = 0;
  plan.grid = uniform && aligned &&
              choose_norm_bwd_grid_config(a.rows, a.cols, dtype_size(t), centre, lim, tune, &plan.gcfg) &&
              check_norm_bwd_grid_config(plan.gcfg, a.rows, a.cols, dtype_size(t), lim, centre) == nullptr;
  // 16-bit rows in a full register cluster stay there without dbias
  // (src/config.cpp: bwd_grid_keep_cluster16's measurement).
  const int keep = tune.bwd_grid_keep_cluster16;
  plan.grid_runs = plan.grid && !(dtype_size(t) == 2 && (plan.pipe || plan.reg) && keep > 0 &&
                                  plan.cfg.cluster >= keep && a.dbias.ptr == nullptr);
  return plan;
}

size_t grid_parts(const Plan& plan, bool grads) { return grads ? size_t(plan.gcfg.groups) : 0; }

// The larger of the grid kernel's and its fallback's needs.
size_t workspace_for(const Plan& plan, int64_t cols, bool grads) {
  const size_t fallback = plan.dot_bytes + size_t(plan.parts) * size_t(cols) * 8;
  if (!plan.grid) return fallback;
  return std::max(fallback, plan.gcfg.exchange_bytes + grid_parts(plan, grads) * size_t(cols) * 8);
}

size_t workspace_bytes(const RMSNormBwdArgs& a, bool centre, const DeviceLimits& lim) {
  return a.rows > 0 ? workspace_for(make_plan(a, centre, lim), a.cols, wants_grads(a)) : 0;
}

Status workspace_bytes(const RMSNormBwdArgs& a, bool centre, const float* mean, size_t* bytes) {
  if (bytes == nullptr) return invalid("bytes: null pointer");
  *bytes = 0;
  Status st = validate(a, false, centre, mean);
  if (!st.ok()) return st;
  int device = -1;
  DeviceLimits lim;
  if (!(st = core::device_limits(&lim, &device)).ok()) return st;
  *bytes = workspace_bytes(a, centre, lim);
  return Status::success();
}

// Both ops, validated: mean is LayerNorm's (kCentre), nullptr for RMSNorm.
template <bool kCentre>
Status norm_bwd(const RMSNormBwdArgs& a, const float* mean, cudaStream_t stream) {
  int device = -1;
  DeviceLimits lim;
  Status st;
  if (!(st = core::launch_device(&lim, &device)).ok()) return st;
  const Plan plan = make_plan(a, kCentre, lim);
  const bool grads = wants_grads(a);
  const size_t need = a.rows > 0 ? workspace_for(plan, a.cols, grads) : 0;
  if (need > 0) {
    if (a.workspace == nullptr || uintptr_t(a.workspace) % 16 != 0)
      return invalid("workspace: null or not 16-byte aligned (the call needs rmsnorm_bwd_workspace_bytes of it)");
    if (a.workspace_bytes < need)
      return invalid("workspace_bytes: " + std::to_string(a.workspace_bytes) + " given, " + std::to_string(need) +
                     " needed (rmsnorm_bwd_workspace_bytes)");
  }

  ops::RMSNormBwdParams p{};
  p.rows = a.rows;
  p.cols = a.cols;
  p.h = a.h.ptr;
  p.h_stride = a.h.row_stride;
  p.dy = a.dy.ptr;
  p.dy_stride = a.dy.row_stride;
  p.dres_out = a.dresidual_out.ptr;
  p.dres_out_stride = a.dresidual_out.row_stride;
  p.w = a.weight.ptr;
  p.rstd = a.rstd;
  p.mean = mean;
  p.dx = a.dx.ptr;
  p.dx_stride = a.dx.row_stride;
  p.dres = a.dresidual.ptr;
  p.dres_stride = a.dresidual.row_stride;
  p.weight_offset = a.weight_offset;
  p.inv_cols = 1.0f / float(a.cols);
  p.partial = grads ? reinterpret_cast<float2*>(static_cast<char*>(a.workspace) + plan.dot_bytes) : nullptr;
  p.h_dtype = a.h.dtype;
  p.dy_dtype = a.dy.dtype;
  p.dres_out_dtype = a.dresidual_out.dtype;
  p.w_dtype = a.weight.dtype;
  p.dx_dtype = a.dx.dtype;
  p.dres_dtype = a.dresidual.dtype;

  // The CTAs the row kernel launches: one partial row each (a cluster's
  // CTAs write one between them).
  int64_t launched = 0;
  bool grid_ran = false;
  auto run_rows = [&]() -> Status {
    if (a.rows == 0) return Status::success();
    if (plan.grid_runs) {
      const NormGridConfig& g = plan.gcfg;
      p.exchange = static_cast<uint64_t*>(a.workspace);
      float2* const fallback_partial = p.partial;
      if (grads) p.partial = reinterpret_cast<float2*>(static_cast<char*>(a.workspace) + g.exchange_bytes);
      p.grid_ranks = g.ranks;
      p.grid_groups = g.groups;
      p.grid_lag = g.lag;
      p.grid_tile_vecs = g.tile_vecs;
      p.grid_steps = g.steps;
      p.stages = g.stages;
      bool not_resident = false;
      Status st = detail::by_dtype(a.h.dtype, "h", [&](auto dt) {
        return ops::launch_rmsnorm_bwd_grid<decltype(dt)::value, kCentre>(p, g, plan.w_f32, device, stream,
                                                                          &not_resident);
      });
      if (!not_resident) {
        grid_ran = true;
        return st;
      }
      p.partial = fallback_partial;  // the plan without the grid kernel
    }
    if (plan.pipe) {
      p.team = plan.cfg.team;
      p.cluster = plan.cfg.cluster;
      p.row_blocks = plan.cfg.row_blocks;
      p.stages = plan.cfg.stages;
      p.team_log2 = 0;
      while ((1 << p.team_log2) < plan.cfg.team) ++p.team_log2;
      p.teams = plan.cfg.teams_per_cta();
      if (plan.shifted) {  // p.row_blocks: class 0's, the bound of every class's walk (make_plan)
        p.shift_log2 = plan.shift_log2;
        p.class_shifts = RowClasses::shifts(uint64_t(uintptr_t(a.h.ptr)), a.h.row_stride * dtype_size(a.h.dtype),
                                            dtype_size(a.h.dtype), plan.shift_log2);
      }
      p.db_sums = a.dbias.ptr != nullptr;
      p.lead_stats = plan.cfg.lead_stats;
      return detail::by_dtype(a.h.dtype, "h", [&](auto dt) {
        return ops::launch_rmsnorm_bwd_pipe<decltype(dt)::value, kCentre>(p, plan.cfg, plan.w_f32, plan.shifted,
                                                                          device, stream, &launched);
      });
    }
    if (plan.reg) {
      p.team = plan.cfg.team;
      p.cluster = plan.cfg.cluster;
      p.row_blocks = plan.cfg.row_blocks;
      return detail::by_dtype(a.h.dtype, "h", [&](auto dt) {
        return ops::launch_rmsnorm_bwd_reg<decltype(dt)::value, kCentre>(p, plan.cfg, plan.w_f32, device, stream,
                                                                         &launched);
      });
    }
    p.team = 256;
    p.cluster = 1;
    p.row_blocks = a.rows;
    if (plan.split) {
      float* dot = static_cast<float*>(a.workspace);
      const int64_t dot_grid = std::min<int64_t>(a.rows, int64_t(lim.num_sms) * 4);
      ops::rmsnorm_bwd_dot_kernel<kCentre><<<unsigned(dot_grid), 512, ops::kRMSNormBwdScratchBytes, stream>>>(p, dot);
      Status st = core::cuda_status(cudaGetLastError(), "rmsnorm backward row-dot launch");
      if (!st.ok()) return st;
      launched = plan.groups;
      ops::rmsnorm_bwd_split_kernel<kCentre><<<unsigned(plan.splits * plan.groups), ops::kRMSNormBwdSplitThreads, 0,
                                        stream>>>(p, dot, plan.splits, plan.rows_per_group);
      return core::cuda_status(cudaGetLastError(), "rmsnorm backward split-row launch");
    }
    const core::LaunchShape shape{plan.general_grid, 256, ops::kRMSNormBwdScratchBytes, 1, false, &launched};
    return core::launch_cached<ops::rmsnorm_bwd_general_kernel<kCentre>>(device, shape, stream, p);
  };
  Status rows_st = run_rows();
  if (!rows_st.ok() || !grads) return rows_st;
  const int64_t parts =
      grid_ran ? int64_t(grid_parts(plan, true)) : launched / (plan.reg || plan.pipe ? plan.cfg.cluster : 1);
  // The weight gradients: a fixed-order sum of the partial rows.
  const int64_t blocks = (a.cols + 31) / 32;
  ops::rmsnorm_bwd_reduce_kernel<><<<unsigned(blocks), 32 * ops::kRMSNormBwdReduceSlices, 0, stream>>>(
      p.partial, parts, a.cols, a.dweight.ptr, a.dweight.dtype, a.dbias.ptr,
      a.dbias.dtype);
  return core::cuda_status(cudaGetLastError(), "rmsnorm backward weight-gradient reduction launch");
}

}  // namespace

Status can_implement(const RMSNormBwdArgs& a) { return validate(a, true, false, nullptr); }
Status can_implement(const LayerNormBwdArgs& a) { return validate(a, true, true, a.mean); }

std::string norm_bwd_plan_description(const RMSNormBwdArgs& a, bool layernorm, const DeviceLimits& lim) {
  const Plan plan = make_plan(a, layernorm, lim);
  const RegRowConfig& c = plan.cfg;
  auto num = [](int64_t v) { return std::to_string(v); };
  if (plan.grid_runs) {
    const NormGridConfig& g = plan.gcfg;
    return "grid ranks=" + num(g.ranks) + " groups=" + num(g.groups) + " tile_vecs=" + num(g.tile_vecs) + " stages=" +
           num(g.stages) + " lag=" + num(g.lag) + " rows=" + num(g.rows) + " smem=" + num(int64_t(g.smem_bytes));
  }
  if (plan.pipe)
    return "pipe team=" + num(c.team) + " threads=" + num(c.threads) + " cluster=" + num(c.cluster) + " vpt=" + num(c.vpt) + " stages=" +
           num(c.stages) + " grid=" + num(c.grid) + " smem=" + num(int64_t(c.smem_bytes)) + (c.small_cta ? " small_cta" : "") + (c.big_cta ? " big_cta" : "") + (c.lead_stats ? " lead_stats" : "") +
           (plan.shifted ? " shifted classes=" + num(int64_t(1) << plan.shift_log2) : "");
  if (plan.reg)
    return "reg team=" + num(c.team) + " threads=" + num(c.threads) + " cluster=" + num(c.cluster) + " vpt=" +
           num(c.vpt) + " grid=" + num(c.grid);
  if (plan.split) return "split splits=" + num(plan.splits) + " groups=" + num(plan.groups);
  return "general grid=" + num(plan.general_grid);
}

size_t rmsnorm_bwd_workspace_bytes(const RMSNormBwdArgs& a, const DeviceLimits& lim) {
  return workspace_bytes(a, false, lim);
}
size_t layernorm_bwd_workspace_bytes(const LayerNormBwdArgs& a, const DeviceLimits& lim) {
  return workspace_bytes(a, true, lim);
}

Status rmsnorm_bwd_workspace_bytes(const RMSNormBwdArgs& a, size_t* bytes) {
  return workspace_bytes(a, false, nullptr, bytes);
}
Status layernorm_bwd_workspace_bytes(const LayerNormBwdArgs& a, size_t* bytes) {
  return workspace_bytes(a, true, a.mean, bytes);
}

Status rmsnorm_bwd(const RMSNormBwdArgs& a, cudaStream_t stream) {
  Status st = can_implement(a);
  return st.ok() ? norm_bwd<false>(a, nullptr, stream) : st;
}
Status layernorm_bwd(const LayerNormBwdArgs& a, cudaStream_t stream) {
  Status st = can_implement(a);
  return st.ok() ? norm_bwd<true>(a, a.mean, stream) : st;
}

}  // namespace quack
