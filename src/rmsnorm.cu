// RMSNorm and LayerNorm forward host entry points: validation,
// configuration, and the one run-time -> template dispatch (x's dtype,
// vector I/O) for both ops; LayerNorm is the kernels' centred mode.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "quack/core/config.hpp"
#include "quack/ops/norm_fwd_grid.cuh"
#include "quack/ops/rmsnorm.cuh"
#include "quack/quack.hpp"
#include "validate.hpp"

namespace quack {

using detail::invalid;

namespace {

// The outputs (LayerNorm's mean and the workspace among them) against the
// inputs and one another (detail::check_disjoint: in place is out or
// residual_out on x's or the residual's very matrix).
Status norm_fwd_disjoint(const RMSNormFwdArgs& a, const float* mean) {
  if (a.rows == 0) return Status::success();
  using detail::matrix_span;
  using detail::vector_span;
  const DType f32 = DType::kFloat32;
  return detail::check_disjoint(
      {matrix_span("out", a.out.ptr, a.out.dtype, a.out.row_stride, a.rows, a.cols),
       matrix_span("residual_out", a.residual_out.ptr, a.residual_out.dtype, a.residual_out.row_stride, a.rows,
                   a.cols),
       vector_span("rstd", a.rstd, f32, a.rows), vector_span("mean", mean, f32, a.rows),
       detail::bytes_span("workspace", a.workspace, a.workspace_bytes)},
      {matrix_span("x", a.x.ptr, a.x.dtype, a.x.row_stride, a.rows, a.cols),
       matrix_span("residual", a.residual.ptr, a.residual.dtype, a.residual.row_stride, a.rows, a.cols),
       vector_span("weight", a.weight.ptr, a.weight.dtype, a.cols),
       vector_span("bias", a.bias.ptr, a.bias.dtype, a.cols)});
}

// The checks both ops share, without the outputs' overlaps.
Status check_fwd_operands(const RMSNormFwdArgs& a) {
  Status st = detail::check_shape(a.rows, a.cols, "the normalised dimension");
  if (!st.ok()) return st;
  if (!(st = detail::check_matrix("x", a.x.ptr, a.x.dtype, a.x.row_stride, a.rows, a.cols, true)).ok()) return st;
  if (!(st = detail::check_matrix("residual", a.residual.ptr, a.residual.dtype, a.residual.row_stride, a.rows, a.cols, false)).ok()) return st;
  if (!(st = detail::check_vector("weight", a.weight.ptr, a.weight.dtype)).ok()) return st;
  if (!(st = detail::check_vector("bias", a.bias.ptr, a.bias.dtype)).ok()) return st;
  if (!(st = detail::check_matrix("out", a.out.ptr, a.out.dtype, a.out.row_stride, a.rows, a.cols, true)).ok()) return st;
  if (!(st = detail::check_matrix("residual_out", a.residual_out.ptr, a.residual_out.dtype, a.residual_out.row_stride, a.rows, a.cols, false)).ok()) return st;
  if (a.rstd != nullptr && uintptr_t(a.rstd) % 4 != 0) return invalid("rstd: pointer is not 4-byte aligned");
  if (!(st = detail::check_finite("eps", a.eps, true)).ok()) return st;
  if (!(st = detail::check_finite("weight_offset", a.weight_offset, false)).ok()) return st;
  if (a.workspace != nullptr && uintptr_t(a.workspace) % 16 != 0)
    return invalid("workspace: pointer is not 16-byte aligned");
  return Status::success();
}

}  // namespace

Status can_implement(const RMSNormFwdArgs& a) {
  Status st = check_fwd_operands(a);
  return st.ok() ? norm_fwd_disjoint(a, nullptr) : st;
}

Status can_implement(const LayerNormFwdArgs& a) {
  Status st = check_fwd_operands(a);
  if (!st.ok()) return st;
  if (a.mean != nullptr && uintptr_t(a.mean) % 4 != 0) return invalid("mean: pointer is not 4-byte aligned");
  return norm_fwd_disjoint(a, a.mean);
}

namespace {

// The tuning's per-dtype bits: bit 0 16-bit x, bit 1 fp32 x.
int dtype_bit(DType x) { return x == DType::kFloat32 ? 2 : 1; }

// Staged 8-vector rows of x load the weight while x is in flight
// (kStagedEarlyW) where the tuning's bit for x's dtype says so and the
// weight is in x's dtype (fp32 weights of 16-bit x would take twice the
// registers).
bool wants_early_w(DType x, bool w_f32, const RowTuning& tune) {
  return !(w_f32 && x != DType::kFloat32) && (tune.reg_staged_early_w & dtype_bit(x));
}

RowProblem rmsnorm_fwd_problem(const RMSNormFwdArgs& a) {
  RowProblem prob;
  prob.rows = a.rows;
  prob.cols = a.cols;
  prob.x_elem_bytes = dtype_size(a.x.dtype);
  prob.staged_elem_bytes = dtype_size(a.x.dtype) + (a.residual.ptr ? dtype_size(a.residual.dtype) : 0);
  prob.scratch_bytes = ops::rmsnorm_fwd_scratch_bytes();
  return prob;
}

// The register-resident kernel's layouts (ops/rmsnorm.cuh): out in x's
// dtype, weight and bias in one dtype (x's or fp32), residual and
// residual_out in one dtype (x's or fp32), and a row that fits the tiles.
// The caller has checked 16-byte vector alignment.
// shifted: the row's vectors of shifted rows (a.cols is then N + VEC - 1;
// kShift's tiles, ops::rmsnorm_reg_shift_max_vpt). max_vpt: a lower cap on
// the tile (vectors a thread).
bool reg_path(const RMSNormFwdArgs& a, bool centre, const DeviceLimits& lim, const RowTuning& tune, RegRowConfig* cfg,
              ops::RegRes* res, bool* w_f32, bool shifted = false, int max_vpt = 8) {
  const DType x = a.x.dtype;
  if (a.out.dtype != x) return false;
  DType w = x;
  if (a.weight.ptr != nullptr) w = a.weight.dtype;
  if (a.bias.ptr != nullptr) {
    if (a.weight.ptr != nullptr && a.bias.dtype != w) return false;
    w = a.bias.dtype;
  }
  if (w != x && w != DType::kFloat32) return false;
  *w_f32 = w == DType::kFloat32;
  int res_bytes = 0;
  *res = ops::RegRes::kNone;
  if (a.residual.ptr != nullptr || a.residual_out.ptr != nullptr) {
    const DType r = a.residual.ptr != nullptr ? a.residual.dtype : a.residual_out.dtype;
    if (a.residual.ptr != nullptr && a.residual_out.ptr != nullptr && a.residual_out.dtype != r) return false;
    if (r == x) *res = ops::RegRes::kSameAsX;
    else if (r == DType::kFloat32) *res = ops::RegRes::kFloat32;
    else return false;
    res_bytes = dtype_size(r);
  }
  RegRowProblem prob;
  prob.rows = a.rows;
  prob.cols = a.cols;
  prob.x_elem_bytes = dtype_size(x);
  prob.max_vpt = std::min(max_vpt, shifted ? ops::rmsnorm_reg_shift_max_vpt(dtype_size(x), res_bytes, dtype_size(w))
                                            : ops::rmsnorm_reg_max_vpt(dtype_size(x), res_bytes, dtype_size(w)));
  // 16-bit rows from norm_fwd_vpt16_min_cols: 8 vectors a thread (max_vpt
  // caps it).
  if (tune.norm_fwd_vpt16_min_cols > 0 && dtype_size(x) == 2 && a.cols >= tune.norm_fwd_vpt16_min_cols)
    prob.vpt_target = 8;
  prob.cluster_vpt = ops::rmsnorm_reg_cluster_vpt(dtype_size(x), res_bytes, dtype_size(w));
  // Staged clustered rows: no residual stream, x's dtype allowed by the
  // tuning's bit mask (config.cpp cites the measurements).
  const int staged_bits = centre ? tune.reg_staged & tune.ln_staged : tune.reg_staged;
  // The staged kernels are built for CTAs of at most ops::kStagedThreads.
  if (res_bytes == 0 && (staged_bits & dtype_bit(x)) && tune.reg_staged_team <= ops::kStagedThreads) {
    prob.staged_vpt = ops::kRMSNormStagedVpt;
    prob.staged_vpt_max = ops::kRMSNormStagedVptMax;
  }
  if (x == DType::kFloat32) prob.staged_above_team = tune.reg_staged_above_team_f32;
  prob.staged_balance = (tune.norm_staged_balance & dtype_bit(x)) ? 1 : 0;
  prob.fit_team = tune.norm_fit_team ? 1 : 0;
  prob.scratch_bytes = ops::reg_scratch_bytes(centre);
  // Two staged rows a cluster share their weight and bias reads (16-bit x,
  // a weight or bias to share, the tuning's bit for the op and the
  // parameters' dtype; the early-weight instance keeps one row).
  const bool has_params = a.weight.ptr != nullptr || a.bias.ptr != nullptr;
  const int pair_bit = (centre ? 4 : 1) << (*w_f32 ? 1 : 0);
  if (prob.staged_vpt > 0 && dtype_size(x) == 2 && has_params && (tune.reg_staged_pair & pair_bit) &&
      !wants_early_w(x, *w_f32, tune)) {
    prob.staged_rows = 2;
    prob.staged_pair_scratch_bytes = ops::reg_scratch_bytes(centre, 2);
    prob.pair_full_wave = tune.reg_staged_pair_full_wave != 0;
    prob.pair_min_cluster = tune.reg_staged_pair_min_cluster;
  }
  if (!choose_reg_row_config(prob, lim, tune, cfg)) return false;
  return check_reg_row_config(*cfg, prob, lim) == nullptr;
}

// Which kernel a call takes, and its layout.
struct NormFwdPlan {
  bool vec_io = false;  // every operand allows 16-byte vectors of x
  bool shifted = false;  // the register kernel takes shifted rows (kShift, fwd_shift_io)
  // 1. The register-resident kernel, when the layout and the row allow.
  bool reg = false;
  RegRowConfig reg_cfg;
  ops::RegRes res = ops::RegRes::kNone;
  bool w_f32 = false;
  bool staged_early_w = false;  // staged, the weight loaded early (kStagedEarlyW)
  bool small_cta = false;       // the 8-vector fp32-weight tile in a small CTA (kSmallCta)
  int w_batch = 0, end_sync = 1;  // RowTuning::reg_w_batch, cluster_end_sync
  // 2. Otherwise the general staged kernel: any layout, any N.
  RowConfig cfg;
  const char* why = nullptr;  // cfg is not valid (never expected)
  bool uniform = false;       // every present tensor in x's dtype
  // 0. Ahead of both, the grid kernel (ops/norm_fwd_grid.cuh) where the
  // call has a workspace: grid, the configuration exists (it sizes the
  // workspace, which does not depend on args.workspace); grid_runs: it is
  // launched. The plan above stays the fallback for a grid that cannot be
  // resident at launch.
  bool grid = false, grid_runs = false;
  NormGridConfig gcfg;
  bool grid_w_f32 = false;
  bool grid_prefetch = false;  // RowTuning::fwd_grid_prefetch
};

// The grid kernel's layouts: x and out in one dtype, no residual stream,
// the weight and bias in one dtype (x's or fp32), 16-byte vectors
// (vec_io), a row the grid serves.
bool grid_path(const RMSNormFwdArgs& a, bool centre, bool vec_io, const DeviceLimits& lim, const RowTuning& tune,
               NormGridConfig* cfg, bool* w_f32) {
  const DType x = a.x.dtype;
  if (!vec_io || a.out.dtype != x || a.residual.ptr != nullptr || a.residual_out.ptr != nullptr) return false;
  if (a.weight.ptr != nullptr && a.bias.ptr != nullptr && a.weight.dtype != a.bias.dtype) return false;
  const DType w = a.weight.ptr != nullptr ? a.weight.dtype : a.bias.ptr != nullptr ? a.bias.dtype : x;
  if (w != x && w != DType::kFloat32) return false;
  *w_f32 = w == DType::kFloat32 && x != DType::kFloat32;
  return choose_norm_fwd_grid_config(a.rows, a.cols, dtype_size(x), centre, lim, tune, cfg) &&
         check_norm_fwd_grid_config(*cfg, a.rows, a.cols, dtype_size(x), lim, centre) == nullptr;
}

// fwd_grid_keep_reg's bit for this layout (config.hpp).
int keep_reg_bit(DType x, bool w_f32) { return x == DType::kFloat32 ? 4 : w_f32 ? 2 : 1; }

// Every operand allows 16-byte vectors of x.
bool fwd_vec_io(const RMSNormFwdArgs& a) {
  const int vec = 16 / dtype_size(a.x.dtype);
  return detail::vec_ok(a.x.ptr, a.x.dtype, a.x.row_stride, vec) &&
         detail::vec_ok(a.residual.ptr, a.residual.dtype, a.residual.row_stride, vec) &&
         detail::vec_ok(a.weight.ptr, a.weight.dtype, 0, vec) && detail::vec_ok(a.bias.ptr, a.bias.dtype, 0, vec) &&
         detail::vec_ok(a.out.ptr, a.out.dtype, a.out.row_stride, vec) &&
         detail::vec_ok(a.residual_out.ptr, a.residual_out.dtype, a.residual_out.row_stride, vec);
}

// Shifted rows (rmsnorm_fwd_reg_kernel's kShift): every row of every
// operand starts at x's row's offset inside a 16-byte vector of x, in
// elements, so that each operand's row pointer moved back by that many
// elements is 16-byte aligned (an operand of another dtype -- an fp32
// residual of bf16 x -- included); weight and bias aligned as for vectors.
// The offsets repeat every 16 rows (a pitch's bytes mod 16), so the first
// 16 rows decide.
bool fwd_shift_io(const RMSNormFwdArgs& a) {
  const int xe = dtype_size(a.x.dtype), vec = 16 / xe;
  if (!detail::vec_ok(a.weight.ptr, a.weight.dtype, 0, vec) || !detail::vec_ok(a.bias.ptr, a.bias.dtype, 0, vec))
    return false;
  const int64_t n = std::min<int64_t>(a.rows, 16);
  for (int64_t r = 0; r < n; ++r) {
    const uintptr_t xb = uintptr_t(a.x.ptr) + uintptr_t(r * a.x.row_stride * xe);
    if (xb % uintptr_t(xe)) return false;
    const int64_t sh = int64_t(xb & 15u) / xe;
    auto at = [&](const void* ptr, DType t, int64_t stride) {
      if (ptr == nullptr) return true;
      const int e = dtype_size(t);
      return (uintptr_t(ptr) + uintptr_t((r * stride - sh) * e)) % 16 == 0;
    };
    if (!at(a.residual.ptr, a.residual.dtype, a.residual.row_stride) || !at(a.out.ptr, a.out.dtype, a.out.row_stride) ||
        !at(a.residual_out.ptr, a.residual_out.dtype, a.residual_out.row_stride))
      return false;
  }
  return true;
}

// The register plan's 8-vector tile of 16-bit x with an fp32 weight in a
// CTA of at most kRegSmallCtaThreads threads (kSmallCta: 80 registers).
bool small_cta_tile(const RegRowConfig& c, DType x, bool w_f32, const RowTuning& tune) {
  return tune.reg_small_cta != 0 && !c.staged && c.cluster == 1 && c.vpt == 8 && w_f32 && dtype_size(x) == 2 &&
         c.threads <= ops::kRegSmallCtaThreads;
}

// The lean kernel's rows (kLean, RowTuning::reg_lean): an unclustered,
// unshifted 1- or 2-vector tile whose row is one team owning its CTA and
// exactly the tile, so that every thread's vectors lie inside the row.
bool lean_tile(const RegRowConfig& c, int64_t cols, bool shifted, const RowTuning& tune) {
  return (tune.reg_lean & 1) != 0 && !shifted && lean_row(c, cols);
}

NormFwdPlan plan_norm_fwd(const RMSNormFwdArgs& a, bool centre, const DeviceLimits& lim) {
  NormFwdPlan plan;
  const RowTuning tune = current_row_tuning();  // one copy a call, for every rule below
  plan.vec_io = fwd_vec_io(a);
  plan.reg = plan.vec_io && reg_path(a, centre, lim, tune, &plan.reg_cfg, &plan.res, &plan.w_f32);
  // Shifted rows (RowTuning::shifted_rows bit 2): the register plan of N +
  // VEC - 1 columns, where it is a tile of one unclustered CTA. Never
  // staged: rows whose aligned plan stages x in a cluster (fp32 RMSNorm
  // from 16K, tune.reg_staged) take the widest register CTA instead, up to
  // 1024 threads at 8 vectors -- fp32 N = 32001 was element by element at
  // 45% of copy, where LayerNorm's 1024-thread shifted tile of the same row
  // ran 88% (08b29c5, H100, logs/2026-12-05-norm-shifted-rows-sweep-*);
  // so planned it ran 97.1% (a016783, H100,
  // logs/2026-12-05-shifted-vpt16-stages-sweep-a016783-h100*).
  // 16-bit x with an fp32 weight takes 8 vectors only in the small CTA
  // (the 1024-thread instance spilled 24 bytes with the shifted weight's
  // loads, ptxas -v, CUDA 13.0: not built); larger rows take 4 vectors in
  // up to 1024 threads (LayerNorm bf16 N = 32001 with fp32 weight and bias:
  // element by element 24.1%, so 45.1%, the same sweeps).
  if (!plan.vec_io && (tune.shifted_rows & 4) && fwd_shift_io(a)) {
    RMSNormFwdArgs sa = a;
    sa.cols += 16 / dtype_size(a.x.dtype) - 1;
    RowTuning st = tune;
    st.reg_staged = 0;
    // 16-bit rows from norm_fwd_shift_vpt16_min_cols aim for 8 vectors a
    // thread (config.cpp cites the sweep).
    const int v16 = tune.norm_fwd_shift_vpt16_min_cols;
    if (v16 > 0 && (st.norm_fwd_vpt16_min_cols <= 0 || v16 < st.norm_fwd_vpt16_min_cols))
      st.norm_fwd_vpt16_min_cols = v16;
    auto shifted_tile = [&](int max_vpt) {
      return reg_path(sa, centre, lim, st, &plan.reg_cfg, &plan.res, &plan.w_f32, true, max_vpt) &&
             !plan.reg_cfg.staged && plan.reg_cfg.cluster == 1 && plan.reg_cfg.rows_per_cluster == 1;
    };
    plan.shifted = shifted_tile(8);
    if (plan.shifted && plan.reg_cfg.vpt == 8 && plan.w_f32 && dtype_size(a.x.dtype) == 2 &&
        !small_cta_tile(plan.reg_cfg, a.x.dtype, plan.w_f32, tune))
      plan.shifted = shifted_tile(4);
    plan.reg = plan.shifted;
  }
  plan.grid = grid_path(a, centre, plan.vec_io, lim, tune, &plan.gcfg, &plan.grid_w_f32);
  plan.grid_prefetch = tune.fwd_grid_prefetch != 0;
  plan.grid_runs = plan.grid && a.workspace != nullptr &&
                   !(plan.reg && (tune.fwd_grid_keep_reg & keep_reg_bit(a.x.dtype, plan.grid_w_f32)));
  if (plan.reg) {
    plan.staged_early_w = plan.reg_cfg.staged && plan.reg_cfg.vpt == ops::kRMSNormStagedVpt &&
                          plan.reg_cfg.rows_per_cluster == 1 && wants_early_w(a.x.dtype, plan.w_f32, tune);
    plan.small_cta = small_cta_tile(plan.reg_cfg, a.x.dtype, plan.w_f32, tune);
    plan.reg_cfg.lean = lean_tile(plan.reg_cfg, a.cols, plan.shifted, tune);
    plan.w_batch = tune.reg_w_batch;
    plan.end_sync = tune.cluster_end_sync;
    return plan;
  }
  const RowProblem prob = rmsnorm_fwd_problem(a);
  plan.cfg = choose_row_config(prob, lim, tune);
  plan.why = check_row_config(plan.cfg, prob, lim);
  auto same = [&](const void* ptr, DType t) { return ptr == nullptr || t == a.x.dtype; };
  plan.uniform = same(a.residual.ptr, a.residual.dtype) && same(a.weight.ptr, a.weight.dtype) &&
                 same(a.bias.ptr, a.bias.dtype) && same(a.out.ptr, a.out.dtype) &&
                 same(a.residual_out.ptr, a.residual_out.dtype);
  return plan;
}

// Both ops: mean is LayerNorm's (kCentre) output, nullptr for RMSNorm.
template <bool kCentre>
Status norm_fwd(const RMSNormFwdArgs& a, float* mean, cudaStream_t stream) {
  if (a.rows == 0) return Status::success();
  Status st;

  int device = -1;
  DeviceLimits lim;
  if (!(st = core::launch_device(&lim, &device)).ok()) return st;

  ops::RMSNormFwdParams p{};  // fields a kernel does not read stay zero
  p.rows = a.rows;
  p.cols = a.cols;
  p.x = a.x.ptr;
  p.x_stride = a.x.row_stride;
  p.res = a.residual.ptr;
  p.res_stride = a.residual.row_stride;
  p.res_dtype = a.residual.dtype;
  p.w = a.weight.ptr;
  p.w_dtype = a.weight.dtype;
  p.b = a.bias.ptr;
  p.b_dtype = a.bias.dtype;
  p.out = a.out.ptr;
  p.out_stride = a.out.row_stride;
  p.out_dtype = a.out.dtype;
  p.res_out = a.residual_out.ptr;
  p.res_out_stride = a.residual_out.row_stride;
  p.res_out_dtype = a.residual_out.dtype;
  p.rstd = a.rstd;
  p.mean = mean;
  p.eps = a.eps;
  p.weight_offset = a.weight_offset;
  p.inv_cols = 1.0f / float(a.cols);

  const NormFwdPlan plan = plan_norm_fwd(a, kCentre, lim);
  if (plan.grid && a.workspace != nullptr && a.workspace_bytes < plan.gcfg.exchange_bytes)
    return invalid("workspace_bytes: " + std::to_string(a.workspace_bytes) + " bytes given, the call needs " +
                   std::to_string(plan.gcfg.exchange_bytes) + " (rmsnorm_fwd_workspace_bytes)");
  if (plan.grid_runs) {
    const NormGridConfig& g = plan.gcfg;
    ops::RMSNormFwdParams gp = p;
    core::set_grid_params(gp, g, a.workspace, plan.grid_prefetch);
    bool not_resident = false;
    Status gst = detail::by_dtype(a.x.dtype, "x", [&](auto dt) {
      return ops::launch_rmsnorm_fwd_grid<decltype(dt)::value, kCentre>(gp, g, plan.grid_w_f32, device, stream,
                                                                        &not_resident);
    });
    if (!not_resident) return gst;  // else the plan without the grid kernel
  }
  if (plan.reg) {
    const RegRowConfig& rcfg = plan.reg_cfg;
    p.team = rcfg.team;  // (and team_shift: the register kernel reads no other layout field)
    p.cluster = rcfg.cluster;
    // (the power of two at or above the team: a team fitted to its row,
    // norm_fit_team, owns its CTA; reg_path's check_reg_row_config refuses
    // any other)
    while ((1 << p.team_shift) < rcfg.team) ++p.team_shift;
    p.row_blocks = rcfg.row_blocks;
    p.staged_early_w = plan.staged_early_w;
    p.small_cta = plan.small_cta;
    p.w_batch = plan.w_batch;
    p.end_sync = plan.end_sync;
    return detail::by_dtype(a.x.dtype, "x", [&](auto dt) {
      return ops::launch_rmsnorm_fwd_reg<decltype(dt)::value, kCentre>(p, rcfg, plan.w_f32, plan.res, plan.shifted,
                                                                       device, stream);
    });
  }

  const RowConfig& cfg = plan.cfg;
  if (plan.why != nullptr)
    return {Code::kUnsupported, std::string("no launch configuration for rows = ") + std::to_string(a.rows) +
                                    ", N = " + std::to_string(a.cols) + ": " + plan.why};
  p.team = cfg.team;
  p.cluster = cfg.cluster;
  p.vpt = cfg.vpt;
  p.rows_per_team = cfg.rows_per_team;
  p.chunks = cfg.chunks;
  p.buffers = cfg.buffers;
  p.seg_vecs = cfg.seg_vecs;
  p.row_blocks = cfg.row_blocks;
  p.stage_bytes = uint32_t(cfg.stage_bytes);
  return detail::by_dtype(a.x.dtype, "x", [&](auto dt) {
    return ops::launch_rmsnorm_fwd<decltype(dt)::value, kCentre>(p, cfg, plan.vec_io, plan.uniform, device, stream);
  });
}

}  // namespace

Status rmsnorm_fwd(const RMSNormFwdArgs& a, cudaStream_t stream) {
  Status st = can_implement(a);
  return st.ok() ? norm_fwd<false>(a, nullptr, stream) : st;
}

Status layernorm_fwd(const LayerNormFwdArgs& a, cudaStream_t stream) {
  Status st = can_implement(a);
  return st.ok() ? norm_fwd<true>(a, a.mean, stream) : st;
}

// The grid's configuration alone (not the whole plan: the Python front asks
// for this before every launch of a long row).
size_t norm_fwd_workspace_bytes(const RMSNormFwdArgs& a, bool layernorm, const DeviceLimits& lim) {
  if (a.rows == 0 || a.cols < kNormFwdWorkspaceMinCols) return 0;
  NormGridConfig g;
  bool w_f32 = false;
  return grid_path(a, layernorm, fwd_vec_io(a), lim, current_row_tuning(), &g, &w_f32) ? g.exchange_bytes : 0;
}

namespace {

template <class Args>
Status fwd_workspace_bytes(const Args& a, bool layernorm, size_t* bytes) {
  if (bytes == nullptr) return invalid("bytes: null pointer");
  *bytes = 0;
  Status st = can_implement(a);
  if (!st.ok() || a.rows == 0 || a.cols < kNormFwdWorkspaceMinCols) return st;
  int device = -1;
  DeviceLimits lim;
  if (!(st = core::launch_device(&lim, &device)).ok()) return st;
  *bytes = norm_fwd_workspace_bytes(a, layernorm, lim);
  return Status::success();
}

}  // namespace

Status rmsnorm_fwd_workspace_bytes(const RMSNormFwdArgs& a, size_t* bytes) { return fwd_workspace_bytes(a, false, bytes); }

Status layernorm_fwd_workspace_bytes(const LayerNormFwdArgs& a, size_t* bytes) {
  return fwd_workspace_bytes(a, true, bytes);
}

std::string norm_fwd_plan_description(const RMSNormFwdArgs& a, bool layernorm, const DeviceLimits& lim) {
  const NormFwdPlan plan = plan_norm_fwd(a, layernorm, lim);
  char buf[160];
  if (plan.grid_runs) {
    const NormGridConfig& g = plan.gcfg;
    std::snprintf(buf, sizeof buf, "grid    ranks %3d groups %2d rows %d stages %d lag %d tile %lld smem %6zu grid %lld",
                  g.ranks, g.groups, g.rows, g.stages, g.lag, (long long)g.tile_vecs, g.smem_bytes, (long long)g.grid);
  } else if (plan.reg) {
    const RegRowConfig& c = plan.reg_cfg;
    std::snprintf(buf, sizeof buf, "%s team %4d thr %4d cl %2d vpt %2d smem %6zu grid %lld",
                  c.staged ? "stage  " : "reg    ", c.team, c.threads, c.cluster, c.vpt, c.smem_bytes,
                  (long long)c.grid);
    if (c.rows_per_cluster > 1)
      std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf), " %d rows", c.rows_per_cluster);
    if (plan.staged_early_w) std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf), " early w");
    else if (c.staged && plan.w_batch)
      std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf), "%s",
                    plan.w_batch == 2 && ops::staged_w_ahead(c.vpt, c.rows_per_cluster) ? " w batch ahead" : " w batch");
    if (plan.small_cta) std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf), " small cta");
    if (c.cluster > 1 && !plan.end_sync)
      std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf), " no end sync");
    if (plan.shifted) std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf), " shifted");
    if (c.lean) std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf), " lean");
  } else {
    const RowConfig& c = plan.cfg;
    std::snprintf(buf, sizeof buf, "general team %4d thr %4d cl %2d vpt %2d R %d chunks %d buf %d smem %6zu grid %lld%s",
                  c.team, c.threads, c.cluster, c.vpt, c.rows_per_team, c.chunks, c.buffers, c.smem_bytes,
                  (long long)c.grid, plan.vec_io ? "" : " (element-wise)");
  }
  return buf;
}

}  // namespace quack
