// The row-kernel configuration heuristic. Every constant below is a tuning
// threshold; each cites the measurement that set it (bench/results/).
#include "quack/core/config.hpp"

#include <algorithm>
#include <atomic>

namespace quack {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Threads per SM below which a launch leaves the GPU idle: 512 = two of the
// kernels' 256-thread CTAs (the register budget's occupancy). Spreading such
// launches over more threads per row took M = 1, N = 4096 bf16 from 5.56 to
// 3.38 us per call (CUDA graph replay; bench/results/2026-11-30-rmsnorm-fwd.md).
// Measured on the staged kernel; the register kernels reuse it unmeasured
// (their M = 1, N = 4096 call: 1.9-2.0 us, Liger's 1.6 us).
constexpr int64_t kFillThreadsPerSm = 512;

int64_t pow2_ceil(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// A CTA size the register kernels take: a power of two in [32, 1024].
bool is_pow2_team(int64_t t) { return t >= 32 && t <= kRegRowMaxThreads && (t & (t - 1)) == 0; }

// The fewest whole warps that hold `nvec` vectors at `per_thread` a thread
// (a cluster's CTAs: the cluster times the tile): a CTA fitted to its row
// (RowTuning::reg_fit_team, reg_staged_balance).
int64_t fitted_team(int64_t nvec, int64_t per_thread) { return ceil_div(ceil_div(nvec, per_thread), 32) * 32; }

// An unclustered row's CTA, one team above a warp, fitted to its row of
// `nvec` vectors at its tile (RowTuning::reg_fit_team, norm_fit_team,
// bwd_pipe_fit_team): the checkers' exception to power-of-two teams.
bool is_fitted_row_cta(const RegRowConfig& c, int64_t nvec) {
  return c.cluster == 1 && c.team > 32 && c.vpt >= 1 && c.team == fitted_team(nvec, c.vpt);
}

}  // namespace

// Measurements: bench/results/2026-11-30-rmsnorm-fwd-tuning.md (H200, M*N = 2^28,
// bf16 and fp32, rmsnorm_sweep with QUACK_TUNE variants).
RowTuning default_row_tuning() {
  RowTuning t;
  // Staged bytes per CTA above which a row is split over a cluster. 32 KB
  // (two 256-thread CTAs per SM, each double-buffered) beat 16 KB and 64 KB:
  // fp32 N = 8K went 85.5% (32 KB, one CTA per row) vs 69% (16 KB, cluster 2);
  // 64 KB with vpt 16 lost 10-15 points everywhere (one CTA per SM).
  t.cta_target_bytes = 32 * 1024;
  // Staged bytes per CTA beyond which a row is chunked (two passes over HBM).
  // Not a measured optimum: the largest share that leaves the opt-in 227 KB
  // room for the reducer scratch and the 1 KB the hardware reserves; the
  // 16-CTA clusters it implies were checked to schedule (cluster occupancy
  // query in launch.cuh) on the H200. The nearest benchmarked shape, N = 1M
  // bf16 (128 KB per CTA, too large to double-buffer), runs at 31% of copy.
  t.cta_max_bytes = 200 * 1024;
  // Vectors (16 B of x) per thread per row: 8 beat 4 (fp32 N = 1K: 88% vs
  // 80%; bf16 N = 1K: 70% vs 59%) and 16 (76% / 50%).
  t.vpt_target = 8;
  // 256 threads per team and per CTA: the kernels' launch bound. max_team = 128
  // lost at N >= 16K (bf16 16K: 54.6% vs 66.7%); 128-thread CTAs for sub-warp
  // teams changed nothing measurable (bf16 N = 1K: 59.5% vs 59.2%).
  t.max_team = 256;
  t.small_team_threads = 256;
  // Rows a sub-warp team stages at once so a thread has ~vpt_target vectors
  // in flight when rows are only a few vectors long (N < 128 bf16). Not yet
  // measured: no benchmark shape has N < 256.
  t.max_rows_per_team = 4;
  // The kernels are built with __launch_bounds__(256, 2): at most 128 registers.
  t.regs_per_thread = 128;
  // Register-resident kernels; bench/results/2026-11-30-rmsnorm-fwd-reg.md
  // (H200, M*N = 2^28, rmsnorm_sweep, commit 49ddfb4). 4 vectors per thread
  // up to 256 threads per row: bf16 95-99% for N = 256..8K, fp32 95-99% for
  // N = 256..4K; 2 vectors lost 5-13 points, 8 lost 1-5 points at N <= 1K.
  // Past 256 threads, 8 vectors per thread before more threads: bf16 N = 16K
  // 95.4% (256 x 8) vs 88.6% (512 x 4); fp32 N = 8K 95.7% vs 95.0%; 1024-thread
  // teams lost (bf16 32K: 79% vs 94.5% for 512 x 8). 128-thread CTAs for
  // sub-warp teams lost 0-2 points against 256.
  // Longer rows: 1024-thread CTAs, one per SM, clustered past 1024 x 8
  // vectors (commit 0dd422d, persistent clusters): bf16 N = 128K / 256K
  // 86.8% / 81.6% (512-thread CTAs: 76.8% / 73.2%), fp32 N = 64K / 128K
  // 91.9% / 89.4% (80.0% / 76.5%); bf16 N = 64K in one 1024-thread CTA 88.4%
  // against 88.6% for two clustered 512-thread CTAs.
  // Re-checked for LayerNorm bf16 with an fp32 weight and bias (run 16 of
  // that log, twentieth session): at 0f69c68 2 / 1 vectors a thread lost
  // 11-17 / 29-32 points at N = 256-4K; at 1d91542 (straight-line passes)
  // teams of 512 / 1024 at 4 vectors lost at 16K / 24K-32K (310.1 against
  // 283.7 us; 489.8 / 400.8 against 340.3 / 333.8).
  t.reg_enable = 1;
  t.reg_vpt_target = 4;
  t.reg_max_team = 256;
  // Off until measured (forty-fourth session, no device): RMSNorm bf16 at
  // 4K runs 94.9% of copy (1d91542, README; Liger 97.9) where the softmax
  // forward of the same rows, 8 vectors a thread (softmax_fwd_vpt16), runs
  // 96-98%. At 4 vectors the 4K row takes a 128-thread CTA of 48
  // registers a thread: ten an SM, 80 KB of x in flight; at 8, 64-thread
  // CTAs of 64 registers: sixteen, 128 KB (cuobjdump --dump-resource-usage,
  // CUDA 13.0). It moves 16-bit rows of 2K-8K only (from 16K the rule
  // above already takes 8 -- bf16 16K's 94.0% at 8, 128 KB in flight, is
  // the case against). The 4-vector rule predates the straight-line
  // passes (49ddfb4; 8 lost 1-5 points at N <= 1K there, 2K-8K
  // unreported).
  t.norm_fwd_vpt16_min_cols = 0;
  // Shifted 16-bit rows from 3000 elements take 8 vectors a thread
  // (rmsnorm_sweep at a016783, NVIDIA H100, M*N = 2^28, % of copy, defaults
  // -> norm_fwd_vpt16_min_cols=2048, every other plan unchanged; logs/
  // 2026-12-05-shifted-vpt16-stages-sweep-a016783-h100-tables.md): RMSNorm
  // bf16 4100 / 4101 64.5 / 58.1 -> 79.8 / 79.0 (160 threads at 4 vectors
  // -> 96 at 8), LayerNorm bf16 with fp32 weight and bias 56.3 / 47.2 ->
  // 64.9 / 56.3 (the small CTA); 24580 .. 50257 the same plans (+-0.7%).
  // Then (45219de, NVIDIA H200, this knob 2048 against 0; logs/
  // 2026-12-05-norm-shifted-vpt16-45219de-h200-tables.md): RMSNorm bf16
  // 3001 / 4100 / 4101 48.4 / 47.7 / 42.1 -> 65.0 / 61.1 / 60.2, LayerNorm
  // 35.0 / 40.5 / 33.8 -> 41.7 / 46.7 / 40.2, but 2050 lost (RMSNorm 67.7
  // -> 49.1, LayerNorm 42.3 -> 36.1: 2 warps of 64 threads for 33 at 8
  // vectors against 3 at 4), so from 3000, the smallest width measured to
  // win; 2051 .. 2999 unmeasured.
  // The aligned rows' knob stays off: it lost 0.4-1.1% at 2048-32768
  // (013ec5b, logs/2026-12-05-norm-vpt16-sweep-013ec5b-h100-tables.md).
  t.norm_fwd_shift_vpt16_min_cols = 3000;
  t.reg_wide_team = 1024;
  // The staged kernels' kFillThreadsPerSm (above), which the register
  // kernels reused unmeasured.
  t.reg_fill_threads_per_sm = int(kFillThreadsPerSm);
  // Spread decode rows over teams of at most 512 threads. decode_sweep
  // (bench/cpp/decode_sweep.cu: CUDA-graph replay, 20 calls a graph, us a
  // call), H100, bf16, wip-dd5bc91-decode2, the spread floored at 2 vectors
  // a thread against the defaults (bench/results/logs/
  // 2026-12-06-decode-sweep-h100.log): N = 8192, M = 1 / 4 / 16 / 64, 1024
  // threads at 1 vector -> 512 at 2: RMSNorm 2.52 / 2.54 / 2.62 / 2.83 ->
  // 2.35 / 2.38 / 2.44 / 2.64, LayerNorm 3.43 / 3.45 / 3.55 / 3.81 -> 3.15 /
  // 3.15 / 3.23 / 3.49, softmax 2.94 / 2.94 / 3.06 / 3.19 -> 2.74 / 2.75 /
  // 2.83 / 2.99, cross-entropy 7.40 / 7.90 / 8.25 / 8.44 -> 6.86 / 7.36 /
  // 7.64 / 7.80 (ncu at M = 1: ours 7,500 / 9,300 / 8,600 cycles with 1024
  // threads, Liger's 512-thread kernels 6,900 / 7,600 / 7,400;
  // logs/2026-12-06-decode-ncu-h100.txt). At 4096 (512 threads at 1 vector,
  // which the cap keeps) the 2-vector floor gained -0.04 .. -0.15 us for
  // the norms and cross-entropy and lost 0.06 for softmax; at 2048 (256 at
  // 1) it lost 0.03-0.14 us; flooring at 4 vectors lost everywhere (up to
  // +0.8 us). 16-bit rows past 8192 and fp32 rows from 4096 at decode sizes
  // take the cap unmeasured. Re-measured with lean rows (610ede8, H200,
  // decode_sweep bf16, 1024 in one binary; bench/results/logs/
  // 2026-12-07-decode-fill-max-team-1024-610ede8-h200.log): 1024 x 1 lost
  // to 512 x 2 in every 8192 cell at M <= 64, RMSNorm +0.17-0.22 us,
  // LayerNorm +0.34-0.43, softmax +0.08-0.13, cross-entropy +0.42-0.57.
  t.reg_fill_max_team = 512;
  // Lean norm rows (kLean: the row is blockIdx.x, its bounds and the
  // reductions' team tests compiled away, the CTA's warp partials combined
  // over 3 butterfly levels at 8 warps, not 5). decode_sweep bf16, CUDA-graph
  // replay, us a call, H100, two rounds each against 69aadb4 in the same call
  // (bench/results/logs/2026-12-06-decode-lean-h100.log): RMSNorm 2048 M = 1
  // / 256 / 1024 1.76 / 2.34 / 3.63 -> 1.55 / 2.06 / 2.93, 8192 M = 1 / 256
  // 2.35 / 3.86 -> 2.09 / 3.23; LayerNorm (fp32 weight and bias) 2048 M =
  // 1 / 256 / 1024 2.32 / 3.00 / 4.65 -> 2.05 / 2.52 / 3.95, 8192 M = 1 /
  // 256 3.12 / 5.02 -> 2.67 / 4.31; every lean cell faster, the others (4
  // vectors a thread at M = 1024 past 2048) even. ncu at M = 1, N = 2048:
  // LayerNorm 298 -> 235 warp instructions a warp, RMSNorm 206 -> 162
  // (Liger's 189 / 169). Bit 1, softmax's (and log-softmax's) lean rows:
  // decode_sweep bf16 at 2b4e64d, the defaults against reg_lean=1 (the
  // norms' bit alone) in one binary, two rounds, H100
  // (bench/results/logs/2026-12-06-decode-softmax-lean-2b4e64d-h100.log):
  // 2048 M = 1 / 256 / 1024 1.93 / 2.45 / 3.70 -> 1.85 / 2.36 / 3.28, 4096
  // M = 1 / 256 2.16 / 3.12 -> 2.06 / 2.97, 8192 M = 1 / 256 2.76 / 4.09 ->
  // 2.60 / 3.70 us; the 4- and 8-vector cells (M = 1024 from 4096) even.
  // Bit 2, cross-entropy's plain forward (ce_reg_kernel's kLean, with its
  // max-first reductions): decode_sweep at 7b0e129, the defaults against
  // reg_lean=3 in one binary, H100 (bench/results/logs/2026-12-06-ce-lean-
  // maxfirst-7b0e129-{bf16,f32}-h100.log): bf16 2048 M = 1 / 1024 2.32 /
  // 5.78 -> 2.06 / 5.43 us, 4096 M = 4 / 256 4.15 / 5.28 -> 3.83 / 4.94,
  // 8192 M = 1 / 256 2.80 / 5.99 -> 2.50 / 5.52; fp32 0.22-0.37 less; every
  // lean cell faster (predicted 0.08-0.1 at M = 1: softmax's gain).
  t.reg_lean = 7;
  t.reg_small_threads = 256;
  // Fitted CTAs at model widths (bf16 5120 / 2560 / 6144 leave 3/8 / 3/8 /
  // 1/4 of the power-of-two tile idle). rmsnorm_sweep / softmax_sweep bf16,
  // M*N = 2^28, % of same-run copy, H100 SXM, 563c15e (gpu_session part
  // `widths`; bench/results/logs/2026-12-05-model-widths-sweep-563c15e-h100*):
  // LayerNorm forward 2560 / 3072 / 5120 / 6144 / 12288 ran 91.7 / 98.1 /
  // 85.4 / 93.0 / 95.5 at powers of two and 99.8 / 99.6 / 99.6 / 99.4 /
  // 98.7 fitted; RMSNorm 5120 98.2 -> 100.4, the rest within 1 point; the
  // powers of two themselves unchanged (their plans are the same). Softmax
  // gained nothing there (100-101% either way, forward and backward, fitted
  // 0.2-0.9% slower at 5120-7168, within a run's noise). Again at 7123574
  // (widths): LayerNorm bf16 without the fit 9.2 / 1.6 / 17.2 / 7.5 / 3.9%
  // slower at 2560 / 3072 / 5120 / 6144 / 12288, fp32 and RMSNorm within
  // 1.4% (bench/results/logs/2026-12-05-model-widths-sweep-7123574-h100*).
  //
  // Softmax and cross-entropy (reg_fit_team) gain where a row runs just past
  // a power of two of the tile, so the power-of-two CTA leaves about half
  // its threads idle: softmax_sweep / cross_entropy_sweep bf16, M*N = 2^28,
  // % of same-run copy, H100 SXM, 7123574 (bench/results/logs/
  // 2026-12-05-short-odd-rows-fit-sweep-7123574-h100*), power of two ->
  // fitted: softmax forward 4100 / 4111 / 8200 / 12301 77.7 / 76.0 / 87.4 /
  // 89.6 -> 91.9 / 90.3 / 98.3 / 90.3, backward 85.7 / 83.6 / 103.0 / 93.1
  // -> 101.5 / 100.3 / 101.7 / 94.4; cross-entropy loss 4100 / 4111 / 12301
  // 37.9 / 37.8 / 56.1 -> 48.1 / 47.7 / 60.7 (8200 84.1 -> 83.1), fused
  // loss and gradient 38.4 / 38.1 / 39.9 / 49.2 -> 49.3 / 47.6 / 64.0 /
  // 53.5 at 4100 / 4111 / 8200 / 12301; 4096, 32000, 32001 the same plans.
  // With the model widths above (no gap, within noise) it is the default
  // for both; the power-of-two CTAs keep tuned GPU suites
  // (SoftmaxGpuPow2Teams, CrossEntropyGpuPow2Teams).
  t.reg_fit_team = 1;
  t.norm_fit_team = 1;
  // Clustered 16-bit rows without a residual stream stage x in shared
  // memory, 64 elements a thread, in CTAs of 256 threads only (commit
  // 1426b3e): bf16 N = 256K 87.8% of copy (register-held 1024-thread CTAs:
  // 81.9%; staged 512-thread CTAs 85.8%), 128K 88.7% (88.8%); staged
  // 1024-thread CTAs lost at 1M (56.8% against 68.5%), so no CTA other than
  // reg_staged_team is tried.
  // fp32 rows staged too, loading the weight while x is in flight
  // (rmsnorm_sweep at 8881e2b, H200, M*N = 2^28, % of copy; fifteenth
  // session, bench/results/2026-11-30-rmsnorm-fwd-reg.md): N = 24576 /
  // 32768 / 40000 / 64K / 96K / 128K 97.1 / 97.0 / 90.6 / 95.8 / 92.2 / 92.3
  // against register-held 1024-thread CTAs 92.1 / 90.2 / 79.1 / 91.2 / 89.1
  // / 88.6, and against staged with the weight loaded after the reduction
  // 93.1 / 85.0 / 84.5 / 82.5 / 81.1 / 77.4. (The 61-65% of 1426b3e was
  // fp32 at 16 vectors a thread, the weight late: 60.8-73.3% again at
  // 8881e2b, and bf16 at 16 vectors 59.7-68.8%: kRMSNormStagedVpt.)
  // 16-bit rows keep the late weight: early, bf16 N = 40000 / 64K /
  // 96K / 128K / 256K ran 82.3 / 91.7 / 90.9 / 88.9 / 83.5 against 89.3 /
  // 90.8 / 90.4 / 89.9 / 87.7 (68 registers: three CTAs an SM, not six).
  t.reg_staged = 3;
  t.reg_staged_early_w = 2;
  // The small-CTA instance (kSmallCta) for 8-vector tiles of 16-bit x with
  // an fp32 weight. Predicted: LayerNorm bf16 N = 16K with an fp32 weight
  // and bias from 86.6% of copy (1d91542's checked 64-register loops) to
  // >= 93%. Measured (rmsnorm_sweep, QUACK_SWEEP_LAYERNORM=1, 96d9efe, H200;
  // logs/2026-12-01-layernorm-fwd-small-cta-96d9efe.log): bf16 87.1% ->
  // 94.3%, f16 90.6% -> 95.3% with it. Every other N takes the same kernel
  // either way and read 0.3-1.6 points lower in the default run, which ran
  // first (run-to-run drift); RMSNorm (x-dtype weight, never this instance)
  // within 0.7.
  t.reg_small_cta = 1;
  // LayerNorm (fp32 weight and bias, rmsnorm_sweep with
  // QUACK_SWEEP_LAYERNORM=1 at 47e8481, H200; run 11 of
  // 2026-11-30-rmsnorm-fwd-reg.md): fp32 rows staged (weight early, bias
  // late) lost to register-held ones at N = 16K / 32K / 64K / 96K / 128K
  // (83.6 / 76.6 / 71.5 / 63.9 / 61.3% against 91.7 / 78.9 / 79.0 / 73.2 /
  // 70.4%) and won only at 24576 / 40000 (77.7 / 69.7 against 75.9 /
  // 58.3): fp32 LayerNorm rows stay in registers.
  t.ln_staged = 1;
  t.reg_staged_team = 256;
  // Staged clusters from rows that need a 1024-thread register team
  // (softmax_sweep / rmsnorm_sweep, commit 1e6f05c, H200, M*N = 2^28, bf16,
  // % of copy in one run each; bench/results/2026-11-30-rmsnorm-fwd-reg.md,
  // twelfth session): N = 64K 88.1% (296.4 us) in one 1024-thread CTA
  // against 90.8% / 91.3% (284.8 / 285.0 us) staged in 4 x 256 threads; N =
  // 32K stays in registers (512 x 8: 94.9% against 90.4% staged in 2 x 256).
  t.reg_staged_above_team = 512;
  // RMSNorm / LayerNorm fp32 rows (the weight loaded early) from rows that
  // need a 512-thread team: N = 16K 96.7% staged in 2 x 256 threads against
  // 95.1% in one 512-thread register CTA (rmsnorm_sweep at 3af80af, H200;
  // run 10 of bench/results/2026-11-30-rmsnorm-fwd-reg.md). bf16 lost there
  // (N = 24576 / 32768: 87.1 / 90.3% against 93.4 / 93.7%).
  t.reg_staged_above_team_f32 = 256;
  // Staged rows whose weight comes after the reduction issue it a batch of
  // vectors at a time (rmsnorm_sweep bf16 at 7e82df0, H200, M*N = 2^28, us,
  // A B A B in one call; run 14 of bench/results/2026-11-30-rmsnorm-fwd-reg.md):
  // N = 40000 / 64K / 96K / 128K / 256K 278.0 / 276.3 / 275.1 / 275.5 / 283.3
  // against one load before each vector's use 293.7 / 291.1 / 290.6 / 291.4
  // / 299.1 (and 294.1 / 289.2 / 290.5 / 290.8 / 301.6); LayerNorm bf16
  // (fp32 weight and bias) 371.3 / 343.9 / 352.3 / 358.6 / 408.4 against
  // 395.2 / 348.8 / 354.3 / 363.3 / 405.0. Without any weight the same rows
  // take 270-272 us: the batched weight costs 1.5-5%, the serial one 7-11%.
  // 2: the next batch issued before the current batch's writes, in the
  // instances with the registers for it (ops::staged_w_ahead: pairs, or
  // tiles past 8 vectors; 1 elsewhere). rmsnorm_sweep, H100, 6fa1d7b, M*N =
  // 2^28, against 1 in the same call (bench/results/logs/
  // 2026-12-08-norm-fwd-w-ahead-6fa1d7b-h100-tables.md): LayerNorm bf16
  // 131072 / 196608 / 262144 413.2 / 445.0 / 474.2 us -> 396.8 / 410.7 /
  // 414.0 (87.7 / 81.5 / 76.4 -> 91.1 / 87.7 / 87.3% of copy; a second
  // run 405.7 -> 396.0 at 131072), f16 the same (77.0 -> 88.3% at 262144);
  // every other cell (RMSNorm, fp32, N <= 98304) takes the same plan and
  // is within noise. Predicted 447 -> ~380 us at 262144 (ncu, logs/
  // 2026-12-08-ncu-ln-fwd-256k-w-ahead-6fa1d7b-h100.txt: 447.4 -> 418.9 us,
  // DRAM 71.7 -> 75.7%, long-scoreboard stalls 8.2 -> 5.9 cycles an
  // instruction; the SMs are busy 83% of the elapsed cycles, 87% before).
  t.reg_w_batch = 2;
  // Two staged rows a cluster (the kernel's kRows = 2). Why: LayerNorm
  // bf16 rows (rmsnorm_sweep, QUACK_SWEEP_LAYERNORM=1, 6ae04cb, H200, % of
  // copy at N = 32K / 64K / 128K / 256K; logs/2026-12-03-norm-fwd-params.log)
  // ran 78.4 / 80.4 / 76.8 / 69.8 with fp32 weight and bias, 95.8 / 89.2 /
  // 88.1 / 84.5 with bf16 ones and 95.6 / 94.6 / 95.3 / 95.7 without: the
  // parameters, not the centring, cost them. Measured (the same sweep with
  // pairs, A B A B against reg_staged_pair=0 in one call;
  // logs/2026-12-03-norm-fwd-pairs.log), N = 40000 / 64K / 96K / 128K /
  // 256K, clusters of 3 / 4 / 6 / 8 / 16:
  //   LayerNorm bf16, fp32 weight and bias: 74.2 / 81.0 / 80.1 / 79.1 /
  //     74.3 and 73.4 / 80.1 / 79.1 / 78.2 / 72.8 against 76.8 / 81.0 /
  //     79.3 / 77.2 / 70.2 and 76.4 / 80.7 / 79.1 / 77.0 / 69.9; fp16
  //     74.6 / 80.3 / 79.4 / 78.4 / 74.4 against 76.4 / 80.3 / 78.6 / 77.0
  //     / 69.7;
  //   LayerNorm bf16, bf16 weight and bias: 74.7 / 83.0 / 83.1 / 82.1 / 78.0
  //     against 83.1 / 89.0 / 88.4 / 88.0 / 84.1 (both runs alike);
  //   RMSNorm bf16 weight: 92.3 / 93.2 / 92.6 / 92.0 / 88.2 against 94.5 /
  //     94.5 / 94.5 / 94.5 / 92.6; fp32 weight 89.9 / 91.8 / 90.9 / 89.6 /
  //     84.9 against 93.6 / 94.2 / 93.8 / 93.3 / 91.7.
  // (Predicted >= 85-90 for the fp32 parameters: missed. Halving their
  // reads gains 2-4 points at clusters of 8-16, and the pair's own cost --
  // three CTAs an SM instead of six, the same batches of one weight and
  // one bias vector a round trip -- is 2-6 points wherever the parameters
  // are light.) So only LayerNorm's fp32 parameters pair, from clusters of
  // 8 (128K columns of 16-bit x). Few rows (256 / 128 / 64 rows of 64K /
  // 128K / 256K) measured even either way (65.0 / 62.3 / 61.7 against 64.2
  // / 63.9 / 62.4); the full-wave guard is kept for rows fewer than that.
  t.reg_staged_pair = 8;
  t.reg_staged_pair_full_wave = 1;
  t.reg_staged_pair_min_cluster = 8;
  // Clustered rows keep the end-of-kernel cluster barrier: without it the
  // same call measured within noise (bf16 staged 40000 / 64K / 256K 282.7 /
  // 275.9 / 280.8 us against 278.0 / 276.3 / 283.3; LayerNorm bf16 1-2%
  // faster; fp32 N = 40000 535.6 against 562.2 us in run 14's first call,
  // 512K 731.9 against 713.4): not taken on that evidence.
  t.cluster_end_sync = 1;
  // Staged rows past a 16-CTA cluster at 8 vectors a thread (rmsnorm_sweep at
  // c4bee5f, H200, M*N = 2^28, us; run 15 of
  // bench/results/2026-11-30-rmsnorm-fwd-reg.md): at 16 vectors (64 KB a CTA,
  // three an SM) bf16 N = 512K 307.7 / 309.4 against 342.1 in register-held
  // 1024-thread clusters of 8, LayerNorm bf16 586.7 / 586.4 against 634.9,
  // RMSNorm fp32 256K 590.8 / 585.6 against 585.1 (even). At 32 (128 KB, one
  // an SM) bf16 1M lost to the register clusters (481.6 against 377.8) but
  // beat the general kernel where no register tile holds the row (LayerNorm
  // bf16 1M with fp32 weights: 1083.5 against 1485.8).
  t.reg_staged_vpt_max = 16;
  t.reg_staged_vpt_max_beyond = 32;
  // The case for it (docs/KERNELS.md, "Balanced staged CTAs"): a staged
  // row of N = 70000 bf16 (8750 vectors) takes 3 CTAs of 256 x 16 vectors,
  // 12288 slots for 8750 (71%), three 64 KB CTAs an SM; balanced, 3 CTAs of
  // 192 threads (95%), 48 KB, four an SM. Measured (sweeps at 7d42552,
  // H200, M*N = 2^28, % of copy, off -> on;
  // bench/results/logs/2026-12-05-staged-balance-sweep-7d42552.log):
  // softmax bf16 forward 40000 70.5 -> 85.5, 49152 76.6 -> 97.2, 65544
  // 78.2 -> 88.0, 70000 82.6 -> 89.9, the rest even (+-1); the
  // cross-entropy fused gradient bf16 50304 79.1 -> 82.4, 70000 76.0 ->
  // 87.3, fp32 50304 90.0 -> 91.9; its forward even (bf16 50304 82.0 ->
  // 81.1, the one loss, a 1% cell). The norms lost in bf16 (RMSNorm 70000 /
  // 100000 93.5 / 93.3 -> 85.9 / 86.1, LayerNorm 73.6 / 72.2 -> 67.6 / 67.0,
  // RMSNorm 40000 94.8 -> 92.5) and won in fp32 (RMSNorm 24580 88.4 -> 91.3,
  // its one trimmed cell; LayerNorm fp32 keeps its plans): the norms'
  // knob, norm_staged_balance, is on for fp32 x only.
  t.reg_staged_balance = 1;
  t.norm_staged_balance = 2;
  // Rows whose first element sits inside a 16-byte vector (odd N) take the
  // register and staged kernels from that vector, both ops (softmax_sweep /
  // cross_entropy_sweep at 013ec5b, NVIDIA H100, M*N = 2^28, % of copy,
  // defaults -> shifted_rows=3, one call;
  // bench/results/logs/2026-12-05-shifted-rows-sweep-013ec5b-h100-tables.md):
  //   softmax bf16 fwd 32001 / 50257 / 128257 61.5 / 64.7 / 59.9 -> 97.8 /
  //   83.3 / 89.3, bwd 79.7 / 82.3 / 61.3 -> 98.9 / 96.3 / 97.4; fp32 fwd
  //   73.5 / 70.1 / 58.2 -> 94.9 / 95.6 / 95.0;
  //   cross-entropy bf16 fused gradient 23.4 / 24.6 / 25.7 -> 90.0 / 88.9 /
  //   88.6, forward 32.5 / 35.0 / 44.6 -> 88.4 / 87.8 / 89.9; fp32 fused
  //   50.0 / 52.3 / 44.6 -> 91.6 / 90.9 / 91.5;
  //   bf16 4100 (4107 columns planned, a tile of twice the row): softmax
  //   64.4 -> 78.3, CE fused 27.9 -> 38.7 -- better, far from 4096's.
  // Aligned N within 1.5% either way (noise). Their GPU cases (221, the
  // shifted, staged, register and balanced suites) passed, memcheck and
  // initcheck clean (73 cases): ...-shifted-cases-sanitizers-013ec5b-h100.txt.
  // Bits 2 and 3 (built in the forty-seventh session without a device) are
  // on since the forty-eighth: their GPU cases passed (53, memcheck and
  // initcheck clean over 49; logs/2026-12-05-norm-shifted-cases-sanitizers-
  // 08b29c5-h100.txt) and the sweep (rmsnorm_sweep, cross_entropy_sweep at
  // 08b29c5, NVIDIA H100, M*N = 2^28, % of copy, defaults -> shifted_rows=15;
  // logs/2026-12-05-norm-shifted-rows-sweep-08b29c5-h100-tables.md) lost
  // nothing beyond noise (aligned N, the same plans: -1.1..+2.0%):
  //   bit 2, the norm forward, element by element -> shifted register rows:
  //   RMSNorm bf16 4100 / 4101 / 5123 / 32001 32.4 / 32.3 / 32.7 / 26.7 ->
  //   64.8 / 58.3 / 57.2 / 64.3, fp32 4101 / 5123 46.4 / 48.1 -> 98.3 /
  //   98.9; LayerNorm bf16 (fp32 weight) 4100 / 4101 / 5123 24.7 / 24.6 /
  //   23.9 -> 56.0 / 47.0 / 46.3, fp32 4101 / 5123 / 32001 39.2 / 40.7 /
  //   35.2 -> 97.3 / 98.1 / 88.1. The prediction (within ~5 points of the
  //   aligned 97-100%) held for fp32 and missed for 16-bit x, whose rows
  //   run 47-65% (docs/KERNELS.md, shifted norm rows: an open question).
  //   Rows the sweep left element by element (fp32 RMSNorm 32001, whose
  //   aligned plan is staged; LayerNorm bf16 32001 with an fp32 weight at
  //   8 vectors in 512 threads, not built shifted) take unstaged tiles since
  //   (src/rmsnorm.cu, plan_norm_fwd): 45.6 -> 97.1% and 24.1 -> 45.1%
  //   (a016783, logs/2026-12-05-shifted-vpt16-stages-sweep-a016783-h100*,
  //   whose norm_fwd_vpt16_min_cols=2048 column lifts shifted bf16 4100 /
  //   4101 further, RMSNorm 64.5 / 58.1 -> 79.8 / 79.0: the next rule).
  //   bit 3, cross-entropy's plain forward of short odd rows, fitted register
  //   tiles -> the shifted bulk copy: bf16 4100 / 12301 48.0 / 60.5 -> 81.2
  //   / 83.3 (the prediction, within ~3 points of aligned 4096's 88.8,
  //   missed by 4-7 points), fp32 12301 (the stream) 88.5 -> 90.3.
  // Bit 4 (the norm backward's shifted rows, fiftieth session) is on since
  // the fifty-first, when the full tests ran with it on. Measured first
  // (rmsnorm_bwd_sweep at 79bacc8, NVIDIA H100, M*N = 2^28, % of copy,
  // defaults -> shifted_rows=31;
  // logs/2026-12-05-norm-bwd-shifted-sweep-79bacc8-h100-tables.md): odd N
  // 2-6x faster wherever the plan changed (RMSNorm bf16 dx 1025 / 4101 /
  // 5123 27.0 / 32.6 / 32.9 -> 56.9 / 69.6 / 82.7, fp32 +dw,db 4101 23.5
  // -> 73.5), aligned N within 1.3% (the same plans); docs/KERNELS.md,
  // "The norm backward's shifted rows". The walk at the aligned walk's
  // cost since e42f07b (no division, no class row counts in the loop);
  // measured on (rmsnorm_bwd_sweep at b78e22c, NVIDIA H100, M*N = 2^28, %
  // of copy, defaults -> shifted_rows=15;
  // logs/2026-12-06-norm-bwd-shifted-sweep-b78e22c-h100-tables.md), dx:
  //   RMSNorm bf16 1025 / 2049 / 4101 / 5123 27.0 / 30.8 / 32.5 / 32.8 <-
  //   64.0 / 67.9 / 77.1 / 90.6 (79bacc8's walk: 56.9 / 60.0 / 69.6 /
  //   82.7); LayerNorm bf16 24.8-31.3 <- 72.3 / 82.2 / 80.2 / 92.9;
  //   RMSNorm fp32 47.2-61.2 <- 84.3-94.5; LayerNorm fp32 47.0-59.9 <-
  //   65.5-85.6; with dweight (and dbias) 14.0-50.8 <- 54.6-93.9;
  // aligned N within -1.4..+1.3% (the same plans), 8191 unchanged (its
  // tile needs a cluster: element by element either way). Its full tests
  // passed at b78e22c (ctest 339/339, pytest 2216;
  // logs/2026-12-06-tests-b78e22c-h100.txt), memcheck and initcheck clean
  // over its 12 "_shift" cases.
  // Bit 5, the shifted rows past one CTA in clusters (the fifty-second
  // session, 15433cc): its six GPU cases passed, memcheck clean, and
  // rmsnorm_bwd_sweep (NVIDIA H100, M*N = 2^28, % of copy, defaults ->
  // shifted_rows=63; logs/2026-12-06-norm-bwd-cshift-sweep-15433cc-h100-tables.md)
  // ran every changed cell 2-6x faster -- RMSNorm bf16 +dw,db 8191 /
  // 12287 / 16383 13 -> 63 / 68 / 65, LayerNorm bf16 dx 8191 28 -> 51,
  // fp32 23-46 -> 74-85 -- and the aligned neighbours within 1.5%. On
  // since the fifty-third session, when the full tests ran with it on
  // (logs/2026-12-06-tests-shifted63-967078e-h100.txt).
  t.shifted_rows = 63;
  // Chunked softmax rows (softmax_sweep, commit b0db224, H200, % of copy;
  // bench/results/2026-11-30-softmax-sweep.md): 128 KB of the row per CTA,
  // 96 KB of it staged, two 512-thread CTAs an SM, beat one 1024-thread CTA
  // staging 200 KB (bf16 N = 1M forward 70.7% vs 60.7%, fp32 73.2% vs 63.6%)
  // and 256-thread CTAs with 64 KB chunks (69.9%, 64.0%). Forward rows of
  // 256 KB and more are chunked although the clustered register kernel fits
  // (bf16 N = 128K / 256K: 79.8% / 75.1% against 56.1% / 55.8%; fp32 N = 64K
  // .. 256K: 89.3 / 86.9 / 84.0% against 63.0 / 61.8 / 52.3%); at 128 KB the
  // register kernel wins for fp32 N = 32K (97.1% vs 94.2%) and loses for
  // bf16 N = 64K (85.2% vs 88.8%). Backward (y and dy) the register kernels
  // win up to 1 MB (bf16 N = 256K: 97.0% vs 86.8%, fp32 N = 128K: 96.3% vs
  // 91.2%) and lose at 2 MB (fp32 N = 256K: 71.1% vs 87.9%).
  t.chunk_min_bytes = 256 << 10;
  t.chunk_min_bytes_bwd = 2 << 20;
  // Forward rows by element count and cluster (softmax_sweep, commit
  // f71d42f, H200; softmax-sweep.md run 6): bf16 N = 64K (128 KB, one
  // 1024-thread register CTA) chunked 88.5% against 84.6% at 4096 rows,
  // 80.9 / 77.6% against 76.0 / 70.6% at 1093 / 320 rows; N = 70000 (140 KB,
  // register CTAs clustered by 3) chunked 71.3% against 44.9% at 300 rows,
  // 65.8% against 38.8% at 1024. No clustered register forward has won a
  // cell (runs 3 and 5: bf16 128K-256K 55-58% against 75-80% chunked; fp32
  // 64K-256K 52-63% against 84-89%). fp32 N = 32K (128 KB, one CTA) stays
  // in registers: 97.1% against 94.2% chunked (run 3).
  t.chunk_min_cols = 64 << 10;
  t.chunk_clustered_fwd = 1;
  // Softmax forward rows staged in clusters of 256-thread CTAs (the RMSNorm
  // rule above: from rows needing a register team past reg_staged_above_team
  // / _f32, up to 16 CTAs), ahead of chunking, 16 vectors (256 bytes) a
  // thread; fp32 first
  // (softmax_sweep, H200, M*N = 2^28 unless said; softmax-sweep.md runs 8
  // and 9, commits 7da9258 / b034322, % of copy):
  //   fp32 staged at 16 vectors against chunked: N = 64K 95.9 vs 88.6,
  //   128K 95.2 vs 87.5, 256K 90.2 vs 85.1, 40000 86.4 vs 79.9, 49152 96.1
  //   vs 89.2, 70000 x 300 rows 77.2 vs 71.7; against one register CTA
  //   (16K < N <= 32K) even: 20000 74.1 vs 73.6, 24576 83.6 vs 83.9, 32768
  //   95.4 vs 95.8 (and 93.3 vs 87.3 at 640 rows). At 8 vectors fp32 lost
  //   5-11 points from 32K to 128K (90.9 / 90.2 / 84.4%).
  //   16-bit rows too since the pair went to log2 units, max first
  //   (5454870; bench/results/logs/2026-12-03-softmax-log2-ab-5454870.log,
  //   the defaults then against softmax_staged_fwd=3 in one call, bf16,
  //   M*N = 2^28): 64K 88.0-88.7 -> 95.3, 128K 81.4-82.0 -> 94.6, 256K
  //   77.7-78.2 -> 93.2, 512K 76.7-77.1 -> 87.6-88.6 (staged against
  //   chunked); at 8 vectors 94.2 / 93.6 / 87.8. Where it loses: N = 70000
  //   at 300 / 1120 rows 70.2-73.2 / 71.1 against 73.5-74.3 / 73.5-73.6
  //   chunked, 49152 68.5 against 69.5-69.7 in one register CTA (rows
  //   whose last CTA is mostly empty), 128K at 64 rows 57.6-62.7 against
  //   62.6-70.1 (noisy); 40000 ties (61%). Before, 16-bit staged lost or
  //   tied (bf16 64K 87.4 vs 89.1 chunked, 6417b13).
  t.softmax_staged_fwd = 3;
  t.softmax_staged_vpt = 16;
  // 16-bit softmax forward rows of 512 elements or more aim for 8 vectors a
  // thread (softmax_sweep, commit b0db224, H200: bf16 N = 512..8K
  // 95.6-98.6% of copy against 79.8-95.3% at the default 4; N = 256 93.5%
  // against 95.3%; fp32 lost 1-3 points at N <= 4K). A knob since the
  // thirty-seventh session, for the geometry QuACK's forward uses at bf16
  // N <= 3K (4 vectors a thread, a warp a row, 128-thread CTAs:
  // softmax_fwd_vpt16=4,reg_small_threads=128), not measured against ours
  // since b0db224.
  t.softmax_fwd_vpt16 = 8;
  // Softmax backward rows past one register CTA (1024 threads at 4 vectors
  // of y and dy): staged in clusters of 256-thread CTAs, 8 vectors of each
  // a thread (64 KB a CTA, three an SM), up to 16 CTAs; past that the
  // register cluster or the chunked kernel as before.
  // softmax_sweep at 5d0508e, H200, M*N = 2^28, us, defaults then
  // softmax_staged_bwd=0 then softmax_staged_bwd_vpt=16 in one call
  // (bench/results/logs/2026-12-04-softmax-staged-bwd-sweep-5d0508e.log):
  //   bf16 64K / 128K / 256K 381.7 / 379.8 / 381.5 staged against 396.9 /
  //   397.0 / 404.4 in register clusters of 1024-thread CTAs (short rows
  //   take 375-380); fp32 32K / 64K / 128K 743.9 / 742.6 / 741.7 against
  //   782.0 / 780.9 / 798.8.
  //   At 16 vectors: bf16 64K 378.7 (2 CTAs), 128K / 256K 397.2 / 411.6;
  //   fp32 32K / 64K 737.8 / 738.7 (0.6-0.8% ahead), 128K 752.2; fp32
  //   256K (16 CTAs of 128 KB, one an SM) 878.2 / 872.4 against 861.9
  //   chunked, so rows past 16 CTAs at 8 vectors stay chunked.
  t.softmax_staged_bwd = 3;
  t.softmax_staged_bwd_vpt = 8;
  // Rows past 16 of those CTAs (backward: fp32 N > 128K, 16-bit N > 256K;
  // forward: fp32 N > 256K, 16-bit N > 512K) up to 16 CTAs of 512 threads
  // (backward fp32 256K, 16-bit 512K; forward fp32 512K, 16-bit 1M), part
  // of a thread's vectors staged and part in registers, two CTAs an SM;
  // beyond, CTAs of 1024 threads, one an SM. Built without a GPU in the
  // thirty-eighth session; predicted backward fp32 256K 862 us chunked ->
  // ~760, forward bf16 1M 71.6% chunked -> ~88%. Measured (softmax_sweep,
  // H200, M*N = 2^28, one call each variant, forty-first session;
  // bench/results/logs/2026-12-05-softmax-wide-grid-sweep-b6104ad.log),
  // defaults (chunked) / wide 512 / wide 1024, % of copy:
  //   backward fp32 256K 89.4 / 100.4 / 97.7 (857.4 / 760.5 / 781.5 us),
  //   fp32 512K 76.9 / 89.1 / 88.6, bf16 512K 86.3 / 100.1 / 95.7, bf16
  //   1M 75.8 / 88.4 / 87.8; forward bf16 1M 71.9 / 86.7 / 84.6, fp32
  //   512K 80.0 / 90.6 / 86.9, fp32 1M 72.3 / 82.4 / 82.6 (the grid
  //   forward takes fp32 from 512K: below). The CTA of 512 threads wins
  //   every cell; wide-first is not taken (unmeasured).
  t.softmax_staged_fwd_wide = 512;
  t.softmax_staged_bwd_wide = 512;
  t.softmax_staged_wide_first = 0;
  // The grid forward (softmax_fwd_grid_kernel) for rows past 16 staged
  // CTAs, built without a GPU in the thirty-ninth session; predicted bf16 /
  // fp32 1M 69.9 / 72.0% (chunked) -> ~85-90%. Measured (the wide
  // geometry's sweep above, same log), % of copy: fp32 at two rows a step
  // 256K / 512K / 1M 91.2 / 90.8 / 88.8 (one row a step 80.8 / 79.9 /
  // 78.2) against staged 94.6 at 256K and the wide geometry's 90.6 / 82.4
  // at 512K / 1M; bf16 (two rows) 55.6 / 53.0 at 512K / 1M against the
  // wide 91.7 / 86.7 -- its step is the exponentials and the phases'
  // chain (docs/KERNELS.md). So fp32 rows past 512K (where the wide
  // geometry needs 1024-thread CTAs, one an SM) take the grid, two rows a
  // step; 512K itself measured even and keeps the wide CTAs, which need
  // no workspace; 16-bit rows never.
  t.softmax_fwd_grid = 2;
  t.softmax_fwd_grid_min_cols16 = int64_t(512) << 10;
  t.softmax_fwd_grid_min_cols32 = (int64_t(512) << 10) + 1;
  t.softmax_fwd_grid_rows32 = 2;
  // The grid backward (softmax_bwd_grid_kernel), built without a GPU in the
  // seventy-first session for the one backward cell below issue 6's target:
  // fp32 1M at 67.6% of copy (bench_all at 52f77fe, H100), the chunked
  // kernel re-reading ~1.6 of its 2 input tensors. Predicted ~88-92% (the
  // norm grid backward's fp32 RMSNorm 1M runs 93.0% on the same layout).
  // Measured (softmax_sweep, H100, fb2b81c, M*N = 2^28, against
  // softmax_bwd_grid=0; bench/results/logs/2026-12-07-softmax-bwd-grid-
  // fb2b81c-h100.log): fp32 1M 1220.6 us (87.8% of copy) against the
  // chunked kernel's 1582.5 (67.4%), scrubbed 88.8 against 67.1%;
  // 524292 86.9 against 78.0%; log-softmax 1M 87.7 against 84.6% (its
  // dy-alone chunked pass). Hit, at the prediction's low edge. So on for
  // the rows the chunked kernel takes, fp32 past 512K (the staged wide
  // geometry keeps 512K and below: 101.9% at 256K), where the call passes
  // a workspace. 16-bit rows keep their staged CTAs: bf16 1M 96.5% against
  // the grid's 97.3 at two rows a step, one round, within noise.
  t.softmax_bwd_grid = 2;
  t.softmax_bwd_grid_min_cols16 = (int64_t(512) << 10) + 1;
  t.softmax_bwd_grid_min_cols32 = (int64_t(512) << 10) + 1;
  t.chunk_cta_bytes = 128 << 10;
  t.chunk_stage_bytes = 96 << 10;
  t.chunk_threads = 512;
  // On: predicted from bench_all at a92fde5 (H100,
  // bench/results/2026-12-06-log-softmax-a92fde5-h100.md): log-softmax fp32
  // 1M backward 67.6% of copy (torch.compile 77.2%), chunked in clusters of
  // 16 with 3072 of each CTA's 16384 vectors staged a tensor: ~4.6 tensors
  // moved against 3 -> ~3.6 with it, ~80-85%. Measured at dd5bc91 (H100,
  // softmax_sweep f32 log, M*N = 2^28, two rounds,
  // bench/results/logs/2026-12-06-softmax-log-dy-dd5bc91-h100.log): 1M
  // backward 1607.6 -> 1270.0 us (66.7% -> 84.4%); 128K-512K and every
  // bf16 size take other kernels (unchanged, within 0.2%).
  t.softmax_chunk_log_dy = 1;
  // Cross-entropy (cross_entropy_sweep, commit 49608cb, H200, % of copy,
  // bench/results/2026-11-30-cross-entropy-49608cb.md). Forward, streaming
  // against the register kernels: bf16 V = 16384 (32 KB rows) 63.4 vs 68.3,
  // V = 32000 (64 KB) 73.1 vs 59.7; fp32 V = 4096 (16 KB) 43.8 vs 59.5,
  // V = 16384 (64 KB) 93.5 vs 80.6 -- the streaming kernel from 48 KB rows.
  // Gradient, two passes against fused: bf16 V = 16384 53.3 vs 59.7, V =
  // 32000 56.3 vs 52.0; fp32 V = 16384 60.0 vs 63.3, V = 32000 60.6 vs 54.4;
  // at V >= 50304 two passes ran at 55.8-57.7% bf16 and 60.0-60.9% fp32
  // against 38.9-49.7% and 29.2-50.7% fused -- two passes from 32000 classes.
  t.ce_fwd_stream_min_bytes = 48 << 10;
  t.ce_grad_split_min_cols = 32000;
  // One row's reduced loss without the finish kernel or a workspace: a launch
  // less at M = 1. decode_sweep cross_entropy, CUDA-graph replay, H100,
  // 63af781, bf16 / fp32 M = 1 at 2048 / 4096 / 8192: 2.96 / 3.24 / 3.42 and
  // 3.12 / 3.28 / 3.57 us against 4.91 / 5.15 / 5.36 and 5.05 / 5.20 / 5.42
  // with ce_one_row_loss=0 (predicted ~1.5 us less; measured 1.85-1.95).
  // bench_latency, same call: 2.90 / 3.34 / 3.56 us against torch eager's
  // 6.61 / 4.56 / 5.59, and eager host time 20.68 us a call against torch's
  // 20.97 (bench/results/2026-12-06-ce-decode-63af781-h100.md).
  t.ce_one_row_loss = 1;
  // The finish kernel after the rows' kernel by programmatic dependent
  // launch: M > 1's second launch (4096 bf16, M = 4: 6.17 us against M = 1's
  // one launch, 3.36, bench_latency, H100, a25d4e5). decode_sweep
  // cross_entropy, H100, 63af781, the defaults against ce_finish_pdl=0, two
  // rounds each: 0.18-0.78 us less from M = 4 (bf16 4096 x 16: 5.70
  // against 6.40; fp32 8192 x 16: 5.98 against 6.76) except at 2048 x 256
  // (bf16 6.40 against 6.38, fp32 6.98 against 7.08). Predicted 1-1.5 us:
  // the finish kernel's own loads still followed its wait. With a mean's
  // rows counted before the wait (9d7cc41), the rest came: against main's
  // 63af781 kernels in one call, bf16, 0.56-1.05 us less from M = 4 (4096 x
  // 64: 5.98 -> 5.32 us; 8192 x 1024: 11.79 -> 10.77; M >= 64 takes no
  // rows cluster, so this is the count's alone; H100, two rounds,
  // bench/results/2026-12-06-ce-decode-2c93803-h100.md).
  t.ce_finish_pdl = 1;
  // Decode-sized batches in one launch: the rows' CTAs as one cluster that
  // finishes the loss itself. Predicted ~1.5-2 us less at 2 .. 16 rows (the
  // PDL finish cost 2.2-2.5 us over M = 1 at 63af781); measured far less,
  // decode_sweep cross_entropy against ce_cluster_rows=0, H100, b2f9841's
  // kernels, two calls of two rounds: M = 4 0.13-0.28 us less in both
  // (bf16 2048 / 4096 / 8192: 4.77 / 4.98 / 5.35 -> 4.50 / 4.82 / 5.12;
  // fp32 -0.14 .. -0.26), M = 16 -0.18 .. +0.08 (8192 bf16 5.24 -> 5.32 in
  // one call, 5.50 -> 5.43 in the other): with the rows counted before the
  // PDL wait the finish kernel costs about what a cluster launch and its
  // two barriers cost. On, as it is never worse by more than 0.08 us; its
  // code in the register kernel costs M = 1 ~0.07 us (3.06 against 2.99,
  // across two calls; bench/results/2026-12-06-ce-decode-2c93803-h100.md).
  t.ce_cluster_rows = 16;
  // The rows cluster's finish one way (ce_cluster_finish_oneway), against
  // its two cluster barriers (whose first arrival's release is MEMBAR.ALL.GPU,
  // then rank 0 reads each peer's shared memory and the second barrier holds
  // every CTA for those reads). Predicted 0.3-0.5 us less at 2 .. 16 rows;
  // measured 0.86-1.22 us less (decode_sweep, the defaults against
  // ce_cluster_oneway=1 in one binary, H100, 79f7445: bf16 2048 / 4096 /
  // 8192 x 4 3.81 / 4.08 / 4.04 -> 2.91 / 2.97 / 3.15, x 16 4.07 / 4.36 /
  // 4.44 -> 3.03 / 3.14 / 3.39; fp32 x 4 4.19 / 3.89 / 4.46 -> 3.07 / 2.98
  // / 3.60; M = 1 and M >= 64, where no rows cluster runs, within 0.04).
  t.ce_cluster_oneway = 1;
  // Staged fused gradients (ce_staged_kernel) ahead of both (cross_entropy_sweep,
  // M*V = 2^28, H200, e299386, % of the two-sweep ideal, staged against
  // staging off in one call; bench/results/2026-12-03-cross-entropy-staged.md):
  // bf16 32000 / 50304 / 65536 / 128256 / 151936 / 262144 66.0 / 66.4 /
  // 78.1 / 72.1 / 69.0 / 72.0 against two passes' 58.1 / 56.3 / 56.3 / 58.4 /
  // 58.1 / 57.5; fp32 16384 74.2 against the register CTA's 61.8, 32000 ..
  // 262144 87.2 / 74.3 / 83.3 / 80.9 / 73.9 / 76.3 against 60.7 / 60.4 /
  // 60.2 / 60.9 / 60.0 / 59.6. 16 vectors a thread against 8 (5e84b6d, one
  // call): bf16 65536 75.1 / 62.6, 128256 70.1 / 62.5, 262144 69.9 / 60.4;
  // fp32 32000 83.8 / 69.4, 128256 79.2 / 65.0 -- 8 only where one CTA of 16
  // would hold the row (src/cross_entropy.cu). bf16 16384 is not staged (a
  // 512-thread register CTA, 58.8%; rows that one CTA of 16 holds are not
  // staged at all, unmeasured).
  t.ce_staged_grad = 3;
  t.ce_staged_vpt = 16;
  t.ce_staged_min_cols = 16384;
  // Persistent clusters walking rows, each slot refilled with the next row
  // as its gradient is written, against one cluster a row (-1), in one
  // call (cross_entropy_sweep, M*V = 2^28, H200, 942e0d4, % of the
  // two-sweep ideal; bench/results/2026-12-03-cross-entropy-persistent.md):
  // bf16 32000 / 50304 / 65536 / 128256 / 151936 / 262144 70.3 / 69.2 /
  // 78.7 / 75.7 / 72.1 / 75.4 against 68.4 / 68.0 / 79.6 / 75.0 / 71.4 /
  // 74.9; fp32 16384 .. 262144 80.9 / 84.1 / 80.2 / 83.3 / 84.1 / 75.8 /
  // 81.4 against 72.6 / 90.7 / 77.8 / 86.8 / 84.7 / 75.0 / 80.2 -- even or
  // ahead but at fp32 32000 and 65536 (clusters of 2 and 4), where one
  // cluster a row led by 3-7 points. After the reductions went max first
  // one cluster a row led everywhere (same sweep, 8be4e96): bf16 84.1 /
  // 80.0 / 87.5 / 87.5 / 81.9 / 84.5 against persistent 81.2 / 78.7 / 81.5
  // / 80.1 / 78.9 / 80.5; fp32 90.2 / 90.7 / 89.8 / 90.2 / 91.1 / 86.8 /
  // 89.2 against 86.3 / 86.4 / 82.0 / 84.6 / 85.4 / 81.1 / 83.0 -- so one
  // cluster a row (-1); the persistent walk stays built and tested.
  t.ce_staged_clusters = -1;
  // The bulk-copy forward against the register and streaming kernels
  // (cross_entropy_sweep, M*V = 2^28, H200, cea56ca; % of copy, bulk vs
  // not): bf16 wins from 4096 to 128256 classes (73.5 vs 58.9 at 4096, 88.3
  // vs 66.2 at 16384, 87.9 vs 73.5 at 32000, 82.6 vs 79.0 at 65536) and
  // loses below (1024: 42.3 vs 70.0, 2048: 61.8 vs 69.5: ~1.5 us a row of
  // fixed cost); fp32 wins from 1024 (77.1 vs 48.6; 2048-16384 ~95 vs 53-91)
  // to 32000 (96.5 vs 95.5) and loses at 50304 and 65536 (91.3 vs 96.3,
  // 92.1 vs 96.0). Rows of 8 KB (16-bit) / 4 KB (fp32) to 128 KB, then:
  // beyond, bf16 128256 (87.5 vs 83.8) and fp32 262144 (98.0 vs 96.2) are
  // the cells given up. From 1024 rows (a warp a row: fewer rows than the
  // grid's 2112 warps leave SMs idle): with the kernel forced from 1 row
  // (e4eb7b2, M*V = 2^24 and 2^21), 524 rows of bf16 32000 streamed at 33.3%
  // against its 27.5%, 256 rows of 65536 31.9 vs 19.1, 128 rows of fp32
  // 16384 24.4 vs 16.7; 512 rows of fp32 4096 even (24.6 vs 25.5). 524-1023
  // rows unmeasured.
  t.ce_fwd_bulk_min_rows = 1024;
  t.ce_fwd_bulk_min_bytes2 = 8 << 10;
  t.ce_fwd_bulk_min_bytes4 = 4 << 10;
  t.ce_fwd_bulk_max_bytes = 128 << 10;
  // The whole-batch loops, both kernels (bit 0 bulk, bit 1 stream). The
  // checked loops spend ~60 of a batch's ~192 instructions on 32 bf16
  // logits on the tests, the padding and a branch a vector (SASS of
  // ce_fwd_bulk_kernel, sm_90a, CUDA 13.0). cross_entropy_sweep, H100,
  // 4ad49f3, M*V = 2^28, against ce_fwd_whole=0 in the same call (bench/
  // results/logs/2026-12-07-ce-fwd-whole-4ad49f3-h100-tables.md), forward
  // % of copy: bf16 4096 / 32000 / 50304 91.6 / 90.9 / 88.7 -> 92.6 / 93.4
  // / 91.1, 128256-262144 (stream) 95.5-96.9 -> 96.3-97.7, the rest within
  // +-0.3%; fp32 0.1-0.7% faster at every V; the fused forward+backward,
  // which runs neither loop, within 0.3%. Predicted 91-96 (bulk) and 96-98
  // (stream): the bulk kernel's low end, so its instructions were part of
  // the bound, not all of it. Bit-identical results either way.
  t.ce_fwd_whole = 3;
  // Two bulk CTAs an SM, not three (unmeasured; the variant is built). ncu
  // of bf16 V = 32000 (H100, 6fa1d7b; bench/results/logs/
  // 2026-12-08-ncu-ce-fwd-bulk-32000-6fa1d7b-h100.txt): alone, the kernel
  // reads at 2.94 TB/s, the copy's rate, but with 3.9 warps a scheduler
  // (0.57 eligible) it issues 0.41 instructions a cycle a scheduler where
  // the logits need ~0.4: no headroom when the sustained clock drops,
  // which is where the timed sweeps lose 7-9 points (91-93% of copy).
  // Three CTAs (8 KB rings: the same 192 KB an SM in flight; 80 registers,
  // no spill) give 6 warps a scheduler. Predicted: bf16 32000 / 50304
  // 93.4 / 91.1 -> 95-97%, fp32 unchanged (within 0.5). The risk: whole
  // rows a warp. At M*V = 2^28, 50304 has 5336 rows: 2.53 a warp over 2112
  // warps (47% of the warps idle for the last round, which may be part of
  // why it trails 32000, at 3.97 a warp), 1.68 over 3168.
  t.ce_fwd_bulk_ctas = 2;
  // Pipelined norm backward against the register kernel (rmsnorm_bwd_sweep,
  // H200, M*N = 2^28, weight in x's dtype, % of copy with dweight, A then B
  // in one call at 29c1365; bench/results/2026-11-30-rmsnorm-bwd-sweep.md
  // run 6): RMSNorm bf16 N = 256 / 1K / 4K / 16K 85.5 / 80.9 / 86.8 / 84.7
  // against 79.7 / 71.6 / 72.0 / 65.8; fp32 256 / 1K / 4K 91.6 / 92.2 / 92.2
  // against 92.6 / 87.2 / 90.2; LayerNorm fp32 (with dbias) 92.0 / 88.9 /
  // 84.1 against 90.8 / 85.3 / 82.4. Both dtypes; LayerNorm's 16-bit rows
  // too since 9a1e907 (their tile had spilled until run 9's cuts): bf16
  // with dweight 88.3 / 76.3 / 77.6 / 73.4 / 61.1% at 256 / 1K / 4K / 16K /
  // 64K against the register kernel's 64.0 / 58.5 / 59.2 / 56.3 / 47.6 (run
  // 10). 2 vectors a thread: 1 ran 16-bit rows at 55-58% and fp32 at 63-73% (run
  // 4, at ce37acc). Two stages: three measured even or worse (bf16 with
  // dbias 74-75% against 82% at 1K-4K; fp32 +-1.5 points; run 6), four worse
  // (run 4: fewer CTAs an SM for no gain). Teams of up to a warp in
  // 256-thread CTAs (bf16 N = 256 79.4% against 75.5% in 64-thread ones,
  // run 5), larger teams owning their CTA (fp32 1K-4K 91-93% against 83-90%
  // sharing 256-thread CTAs, whose every row then waits at one barrier of 8
  // warps; run 5).
  t.bwd_pipe = 3;
  // 16-bit rows: the 4-vector tile (32 elements a thread in small CTAs,
  // kNormBwdPipeWideVpt) from 16K columns (RMSNorm) and 1K (LayerNorm),
  // the 2-vector tile below (rmsnorm_bwd_sweep bf16, M*N = 2^28, H200,
  // b2bc621, % of copy with dweight and dbias, 4 vectors against 2;
  // bench/results/logs/2026-12-01-norm-4vec-one-pass-b2bc621.log):
  // RMSNorm 256 / 1K / 4K 84.9 / 87.4 / 87.7 against 87.8 / 88.5 / 90.7,
  // 16K / 32K / 64K / 128K 90.5 / 89.8 / 88.5 / 82.6 against 80.4 / 78.1 /
  // 72.1 / 58.0 (with dweight alone 16K 91.0 against 91.5, even);
  // LayerNorm 256 84.2 against 90.5, 1K / 4K / 16K / 32K / 64K / 128K 87.6
  // / 88.7 / 86.6 / 79.8 / 77.4 / 71.5 against 80.5 / 77.7 / 64.7 / 62.7 /
  // 58.2 / 47.2; and (15fa5dd, logs/2026-12-01-norm-bwd-threshold-15fa5dd.log)
  // LayerNorm 512 / 2K / 8K 87.7 / 90.5 / 91.8 against 90.3 / 80.8 / 65.1.
  // RMSNorm 8K unmeasured. (Since one CTA an SM, LayerNorm's aligned rows
  // of 1K-8K take 2 vectors again where their teams share CTAs:
  // choose_norm_bwd_pipe_config.)
  t.bwd_pipe_vpt16 = 4;
  // Off until measured (the forty-sixth session's hypothesis, after the
  // forward's norm_fit_team won 1-14 points at model widths): the
  // power-of-two CTA leaves 3/8 of bf16 5120's (512 threads at 2 vectors
  // for 320 x 2) and 1/4 of 6144's idle, and its stages are sized for every
  // thread: 107 KB a CTA, two an SM; fitted, 320 threads hold 67 KB, three
  // an SM (the rows in flight an SM 2 -> 3; likewise bf16 2560 / 3072, fp32
  // 2560 and LayerNorm bf16 2560-5120; where threads bound the SM -- 6144,
  // 7168, 12288, fp32 from 3072 -- the grid stays: docs/KERNELS.md, model
  // widths). Prediction: the rows whose grid grows rise toward their
  // power-of-two neighbours' % of copy, the rest within noise; the powers of
  // two unchanged (same plans). Measured (rmsnorm_bwd_sweep, M*N = 2^28, %
  // of same-run copy, H100 SXM, 7123574; bench/results/logs/
  // 2026-12-05-model-widths-sweep-7123574-h100*): missed -- the fitted
  // plans run 87-95% nearly everywhere, the power-of-two plans swing 73-98%
  // from width to width, so the fit wins where they dip (RMSNorm bf16
  // 5120 +dw,db 73.0 -> 89.5, LayerNorm fp32 2560 / 5120 dx 82.5 / 78.7 ->
  // 91.1 / 93.0, at 5120 with the grid unchanged) and loses where they
  // peak (LayerNorm bf16 6144 dx 96.4 -> 88.7, RMSNorm bf16 12288 dx 98.1
  // -> 88.7, fp32 5120 98.5 -> 94.4). It stays off until the swings are
  // understood (docs/KERNELS.md, model widths).
  t.bwd_pipe_fit_team = 0;
  t.bwd_pipe_wide_min_cols = 16384;
  t.bwd_pipe_wide_min_cols_ln = 1024;
  // Below that, with dbias, where the 2-vector tile is one 512-thread
  // 64-register CTA (the db sums in shared memory) with more than a
  // quarter of its threads idle, the 4-vector small CTA (RMSNorm bf16
  // 4097-6128; rmsnorm_bwd_sweep bf16 at dde89b5, NVIDIA H100, M*N =
  // 2^28, +dw,db, us, defaults -> bwd_pipe_wide_min_cols=0, scrubbed
  // (QUACK_SWEEP_SCRUB_MB=256) / after its own call; bench/results/logs/
  // 2026-12-06-norm-bwd-wide-widths-dde89b5-h100-tables.md):
  //   5120 (320 of 512 threads busy) 668.7 -> 559.5 (78.9 -> 94.3% of
  //   copy) / 675.8 -> 601.3; 6144 (384 of 512: a quarter idle, left at 2
  //   vectors) 596.2 -> 561.0 / 603.8 -> 616.9; 7168 (448) 554.4 -> 560.6
  //   / 562.2 -> 607.5; 8192 (all busy) 544.1 -> 563.1 / 553.9 -> 605.2.
  // Without dbias the same 5120 tile is even (+dw 566.4 -> 558.5 / 591.1
  // -> 601.4): the loss is the shared-memory db sums' with idle threads.
  // Checked with the rule in (279b26e, H100, +dw,db, defaults against
  // bwd_pipe_wide_idle_db=0, scrubbed / after its own call; logs/
  // 2026-12-06-norm-bwd-wide-idle-db-279b26e-h100-tables.md): 4104 576.9
  // / 595.6 against 839.8 / 859.3 us (91.5 against 62.8% of copy), 4608
  // 554.5 / 578.2 against 722.5 / 734.9, 5120 559.6 / 594.9 against 668.0
  // / 676.6, 5632 557.5 / 596.7 against 631.7 / 633.6, 6128 583.1 / 623.1
  // against 606.4 / 621.5; 6144 the same plan; dx and +dw the same plans,
  // within 0.7%. Its full tests passed (logs/2026-12-06-tests-279b26e-h100.txt).
  t.bwd_pipe_wide_idle_db = 1;
  // Without dbias, where at least 15/32 of that CTA's threads are idle
  // (bf16 4097-4352): rmsnorm_bwd_sweep bf16, NVIDIA H100, M*N = 2^28, dx /
  // +dw us. At 7f8ecfa, after its own call, defaults -> the 4-vector tile
  // (bwd_pipe_wide_min_cols=0; bench/results/logs/
  // 2026-12-06-norm-bwd-wide-idle-7f8ecfa-h100.log): 4104 (257 of 512
  // threads busy) 623.2 -> 576.8 / 634.5 -> 604.5; 4200 (263) 608.3 ->
  // 575.3 / 622.7 -> 591.7; 4608 (288) 553.8 -> 573.2 / 569.7 -> 584.4;
  // 5120 (320) +dw even scrubbed, 591.1 -> 601.4 after its own call (the
  // dde89b5 log above). At a92fde5 (the rule at "more than 7/16"),
  // bwd_pipe_wide_idle16=16 (off) -> 7, scrubbed / after its own call (logs/
  // 2026-12-06-norm-bwd-wide-idle-a92fde5-h100-tables.md): 4097 (shifted)
  // dx 689.3 -> 612.7 / 693.6 -> 618.6; 4104 dx 607.3 -> 564.7 / 612.5 ->
  // 570.6; 4352 (272 busy: 15/32 idle) +dw 574.2 -> 552.7 / 578.8 ->
  // 574.4; 4592 (287 busy) +dw 567.9 -> 563.6 but 572.7 -> 590.0 after
  // its own call, dx likewise (+3.1%): left at 2 vectors. Its full tests
  // passed (logs/2026-12-06-tests-baaf0ac-h100.txt).
  t.bwd_pipe_wide_idle32 = 15;
  // One CTA an SM, teams of more than a warp sharing 512-thread CTAs
  // (bwd_pipe_ctas_per_sm=1, bwd_pipe_min_threads=512): rmsnorm_bwd_sweep,
  // H100, 2026-12-07 (bench/results/logs/2026-12-07-norm-bwd-one-cta-h100-
  // tables.md). After its own call, bf16 RMSNorm dx / +dw / +dw,db 2048-8192
  // 89.5-91.4 / 86.9-89.3 / 87.1-97.5% of copy -> 98.6-99.1 / 96.2-97.9 /
  // 99.0-99.8, LayerNorm dx / +dw 90.1-90.6 / 86.4-88.1 -> 99.4-99.7 /
  // 97.3-97.9, bf16 1024 and 16384 (the cap alone: clusters of two small
  // CTAs) alike, fp32 1024-4096 +1-3 points; scrubbed, RMSNorm bf16
  // 92.5-97.8 -> 96.9-99.1 and LayerNorm bf16 4096 dx / +dw 96.8 / 92.4 ->
  // 98.0 / 96.6. The knobs leave LayerNorm with dbias alone (it lost:
  // choose_norm_bwd_pipe_at). 1024-thread shared CTAs lost everywhere
  // (2048-8192 dx 88.7-88.9%). Which CTAs the cap acts on, measured at
  // every width 256-256K: capped_ctas.
  t.bwd_pipe_ctas_per_sm = 1;
  t.bwd_pipe_min_threads = 512;
  // LayerNorm with dbias too: off (it lost scrubbed, above); on, an
  // experiment's switch (why its shared CTA runs 8 points below RMSNorm's
  // with dbias in the same plan after its own call, 90.7 against 98.4% at
  // bf16 4096: bench/results/logs/2026-12-07-ln-db-shared-d988a08-h100.md).
  t.bwd_pipe_share_db = 0;
  // The big-CTA kernel for LayerNorm with dbias (rmsnorm_bwd_sweep, H100,
  // 2026-12-07, M*N = 2^28, % of copy after its own call / scrubbed; bench/
  // results/logs/2026-12-07-norm-bwd-big-cta-h100-tables.md): bf16
  // 2048-8192 86.6-87.8 -> 96.8-97.5 / 90.1-92.6 -> 97.3-97.9 (its CTAs
  // now shared, 2 vectors, one an SM, where the 4-vector small CTAs ran),
  // fp32 512-4096 90.5-93.0 -> 96.2-96.8 / 94.9-96.1 -> 97.3-98.2. Not
  // every row (2): RMSNorm bf16 +dw / +dw,db 1024-8192 lost 1.5-3 points
  // after its own call (96.7-99.2 -> 94.6-96.3; scrubbed even), LayerNorm
  // bf16 dx / +dw 1-2.4 (scrubbed +0.5-1.1), fp32 within a point either
  // way. Its stages: 2; 3 and 4 lost 5-12% everywhere (both timings).
  t.bwd_pipe_big_cta = 1;
  t.bwd_pipe_big_stages = 2;
  t.bwd_pipe_lead_threads = 1024;  // (mark_lead_stats says why)
  t.bwd_pipe_vpt32 = 2;
  t.bwd_pipe_stages = 2;
  // CTAs of up to 256 threads take the small-CTA kernel (80 registers, 768
  // threads an SM, the dbias sums in registers; rmsnorm_bwd_sweep, H200,
  // bench/results/2026-11-30-rmsnorm-bwd-sweep.md runs 11-12): with dbias,
  // LayerNorm bf16 1K / 4K / 16K 82.3 / 79.4 / 66.1% of copy against 72.7 /
  // 71.1 / 61.3 with the sums in shared memory (3f8433b); without, RMSNorm
  // bf16 with dweight 1K / 4K 89.2 / 91.1% against 84.7 / 88.9 at 64
  // registers (f449819).
  t.bwd_pipe_db_regs = 1;
  t.bwd_pipe_small_cta = 1;
  t.bwd_pipe_threads = 256;
  // Rows past one CTA: clusters up to 16 (with dweight, against the
  // register kernel: bf16 32K / 64K / 128K / 256K 77.5 / 70.5 / 69.8 / 64.3%
  // of copy against 61.3 / 56.0 / 54.8 / 48.5%, fp32 16K-128K 93.6 / 92.0 /
  // 90.6 / 83.7% against 73.8 / 71.2 / 66.6 / 65.3%; rmsnorm_bwd_sweep at
  // ba2a34f, bench/results/2026-11-30-rmsnorm-bwd-sweep.md run 7).
  t.bwd_pipe_cluster = 16;
  t.bwd_pipe_cluster_threads = 1024;
  // The grid kernel: rows past 128K columns (fp32 since 0c39bc9, 16-bit since
  // 8a13d2b), but for 16-bit rows a full 16-CTA register cluster holds
  // without dbias. rmsnorm_bwd_sweep, H200, % of copy bandwidth, dx / +dw /
  // +dw,db, the plan before in brackets:
  //   0c39bc9 (bench/results/logs/2026-12-01-rmsnorm-bwd-grid-0c39bc9.log,
  //   against QUACK_TUNE=bwd_grid=0): fp32 RMSNorm 160K 76.7/75.2/75.8
  //     (register kernel 51.1/49.8/49.6), 256K 79.7/78.6/78.5 (62.3/59.6/59.5),
  //     1M 77.4/75.1/75.1 (split 34.7/34.3/34.3); LayerNorm 160K 68.2/67.0/67.2
  //     (44.3/42.4/42.3), 1M 67.3/65.6/65.7 (33.1/32.7/32.8).
  //   8a13d2b, two 16-bit rows a step (bench/results/logs/
  //   2026-12-02-norm-bwd-grid-2rows.log; the register kernel from the same
  //   session's run of 24d0feb, whose register kernels are the same):
  //     bf16 RMSNorm 160K 61.6/59.7/59.6 (reg 45.7/44.7/33.3), 192K
  //     61.5/59.2/59.5 (55.8/53.8/39.3), 256K 64.1/61.6/61.8 (72.8/68.7/48.3),
  //     512K 62.9/60.4/60.4, 1M 62.4/58.3/58.4 (split 9.2); LayerNorm 160K
  //     52.0/50.7/50.8 (37.1/36.3/28.1), 192K 52.0/50.9/51.0 (44.6/43.4/33.2),
  //     256K 55.5/53.8/54.0 (59.1/56.3/41.7), 1M 53.0/50.4/50.0;
  //     fp32 RMSNorm 256K 87.0/85.1/84.9, 1M 75.5/73.1/73.1; LayerNorm 256K
  //     80.7/79.7/79.4, 1M 73.5/71.1/71.0.
  // So 256K (the register kernel's 16-CTA cluster) kept the register
  // kernel for dx and +dw, and gave +dw,db to the grid kernel
  // (bwd_grid_keep_cluster16 = 16). Since the grid's instruction diet
  // (6ae04cb, logs/2026-12-03-norm-fwd-params.log, bf16 262144, dx / +dw,
  // the 16-CTA cluster kept against bwd_grid_keep_cluster16=0 in one call):
  // RMSNorm 73.7/69.4 against the grid's 76.4/72.8, LayerNorm 59.3/56.6
  // against 72.2/68.8; 245760 (a grid row either way) 73.4 / 72.4. So no
  // 16-bit row keeps its cluster now (0). Stages: 6 of 32 KB for 16-bit rows
  // (7 do not fit the 3456-byte header), 3 of 64 KB for fp32 rows; a lag of
  // 1 to 4 rows measured the same at a row a step (bf16 256K and 1M within
  // 0.3 points, 0c39bc9), 2 kept: with two rows a step, 6 stages leave a
  // lag of 1 step.
  t.bwd_grid = 3;
  t.bwd_grid_min_cols16 = (int64_t(128) << 10) + 1;
  t.bwd_grid_min_cols32 = (int64_t(128) << 10) + 1;
  t.bwd_grid_stages16 = 6;
  t.bwd_grid_stages32 = 3;
  t.bwd_grid_lag = 2;
  // Two 16-bit rows a step (one block reduction, one exchange and one
  // collect for both): bf16 RMSNorm 1M 62.4/58.3/58.4 against a row a
  // step's 51.1/49.2/49.0, LayerNorm 53.0/50.4/50.0 against 45.7/44.2/44.1
  // (8a13d2b, the same run). Predicted >= 72 / 60: missed; the step still
  // costs ~4.9 us for fp32's bytes, where fp32 takes ~4.0 (docs/KERNELS.md).
  t.bwd_grid_rows16 = 2;
  t.bwd_grid_keep_cluster16 = 0;
  // The grid forward (rmsnorm_fwd_grid_kernel). rmsnorm_sweep, H200, % of
  // copy, the grid (min_cols 64K, keep_reg 0) against the plan without it
  // (bench/results/2026-12-02-norm-fwd-grid.md; f0e0632 and bd4430b, whose
  // kernels time the same):
  //   fp32 RMSNorm 512K 66.3 (register clusters 71.7), 1M 65.6 (the
  //     chunked general kernel 45.5); LayerNorm 512K 58.4 (58.7), 1M 53.4
  //     (23.7);
  //   bf16 RMSNorm (bf16 weight) 256K 64.7 (staged 93.3), 512K 64.2 (85.5),
  //     1M 61.6 (register clusters 70.6): kept on its clusters
  //     (fwd_grid_keep_reg bit 0);
  //   bf16 LayerNorm (fp32 weight and bias) 256K 53.8 (staged 69.6), 384K
  //     ~39 (47.3: 48 ranks fill 96 SMs), 512K 51.7 (45.7), 1M 43.2 (25.8).
  // So fp32 rows past 512K (where no register tile holds them) and 16-bit
  // rows with fp32 weights from 512K; 16-bit rows with 16-bit weights keep
  // the register kernels. (16-bit RMSNorm with fp32 weights takes
  // LayerNorm's staged tiles and follows LayerNorm's measurement,
  // unmeasured itself.) Stages: the most that fit, up to 8 (fp32: 6 of 32
  // KB; 16-bit: 8 of 16 KB); two 16-bit rows a step (bf16 RMSNorm 1M 61.6
  // against a row a step's 47.4, LayerNorm 43.2 against 32.8).
  // Then (3d4b5c6, the grid's instruction diet; rmsnorm_sweep, H200, the
  // grid for every row from 128K against these defaults' plan, the same
  // run; bench/results/2026-12-02-grid-exchange-log.md): fp32 RMSNorm 256K
  // 89.9 (staged 86.4), 512K 89.6 (register 70.1); fp32 LayerNorm 256K
  // 79.1 (64.8), 512K 77.2 (57.7); bf16 RMSNorm (bf16 weight) 512K 86.7
  // (staged 84.2), 1M 84.9 (clusters 69.8), but 256K 86.8 (staged 91.5);
  // bf16 LayerNorm 256K 58.9 (staged 70.4). So fp32 rows from 256K and
  // every 16-bit row from 512K, the 16-bit-weight ones included.
  t.fwd_grid = 3;
  t.fwd_grid_min_cols16 = int64_t(512) << 10;
  t.fwd_grid_min_cols32 = int64_t(256) << 10;
  t.fwd_grid_keep_reg = 0;
  t.fwd_grid_stages16 = 8;
  t.fwd_grid_stages32 = 8;
  t.fwd_grid_lag = 2;
  // Two 16-bit rows a step, one fp32 row. The fortieth session's four
  // 16-bit rows and two fp32 rows (predicted +3-15 points) measured worse
  // (rmsnorm_sweep at 1c3e9a0, H200, M*N = 2^28, % of copy, defaults / two
  // fp32 rows / four 16-bit rows at 13 stages;
  // bench/results/logs/2026-12-05-norm-grid-rows-sweep-1c3e9a0.log):
  // bf16 RMSNorm 512K / 1M 87.6 / 87.3 against 73.1 / 71.8 at four rows;
  // bf16 LayerNorm 64.3 / 62.6 against 61.0 / 56.3; fp32 RMSNorm 90.8 /
  // 91.7 against 88.4 / 85.0 at two rows; fp32 LayerNorm 80.6 / 79.0
  // against 82.3 / 77.2. A step's fixed part grows with its rows.
  t.fwd_grid_rows16 = 2;
  t.fwd_grid_prefetch = 1;
  t.fwd_grid_rows32 = 1;
  return t;
}

namespace {
std::atomic<const RowTuning*> g_tuning{nullptr};
RowTuning g_tuning_storage;
}  // namespace

RowTuning current_row_tuning() {
  const RowTuning* t = g_tuning.load(std::memory_order_acquire);
  return t ? *t : default_row_tuning();
}

void set_row_tuning(const RowTuning* tune) {
  if (tune == nullptr) {
    g_tuning.store(nullptr, std::memory_order_release);
    return;
  }
  g_tuning_storage = *tune;
  g_tuning.store(&g_tuning_storage, std::memory_order_release);
}

RowConfig choose_row_config(const RowProblem& prob, const DeviceLimits& lim) {
  return choose_row_config(prob, lim, current_row_tuning());
}

RowConfig choose_row_config(const RowProblem& prob, const DeviceLimits& lim, const RowTuning& tune) {
  RowConfig c;
  const int64_t cols = std::max<int64_t>(prob.cols, 1);
  c.vec = 16 / prob.x_elem_bytes;
  const int64_t nvec = ceil_div(cols, c.vec);
  const int64_t vec_bytes = int64_t(c.vec) * prob.staged_elem_bytes;

  // 1. Cluster: split the row while a CTA's share is above the target.
  int cluster = 1;
  while (cluster < lim.max_cluster && ceil_div(nvec, cluster) * vec_bytes > tune.cta_target_bytes)
    cluster *= 2;
  cluster = std::min(cluster, std::max(lim.max_cluster, 1));
  c.cluster = cluster;
  c.seg_vecs = ceil_div(nvec, cluster);

  // 2. Chunks: a share above the on-chip cap is staged in several passes
  //    (single-buffered: the whole cap serves one chunk).
  const int64_t smem_cap = int64_t(lim.max_smem_per_block) - int64_t(prob.scratch_bytes);
  const int64_t cap = std::min<int64_t>(tune.cta_max_bytes, smem_cap);
  c.chunks = int(ceil_div(c.seg_vecs * vec_bytes, cap));
  const int64_t chunk_need = ceil_div(c.seg_vecs, c.chunks);

  // 3. Team size and vectors per thread: grow the team up to max_team, then
  //    the vectors per thread. With too few rows to fill the GPU at the
  //    target (decode-sized batches), spread each row over more threads: a
  //    thread's vectors are worked through in sequence, so fewer per thread
  //    is a shorter latency chain when there is no other work to overlap.
  int64_t vpt_target = tune.vpt_target;
  const int64_t fill_threads = int64_t(lim.num_sms) * kFillThreadsPerSm;
  while (vpt_target > 1 && prob.rows * ceil_div(chunk_need * c.chunks * cluster, vpt_target) < fill_threads)
    vpt_target /= 2;
  int64_t team = pow2_ceil(ceil_div(chunk_need, vpt_target));
  team = std::min<int64_t>(team, std::min(std::max(tune.max_team, 32), kRowKernelMaxThreads));
  if (cluster > 1 || c.chunks > 1) team = std::max<int64_t>(team, 32);
  c.team = int(team);
  c.vpt = int(ceil_div(chunk_need, team));

  // 4. CTA shape: teams of up to one warp share a CTA; larger teams own it.
  if (c.team <= 32 && cluster == 1 && c.chunks == 1) {
    c.threads = std::min(std::max(tune.small_team_threads, 32), kRowKernelMaxThreads);
    c.rows_per_team = int(std::min<int64_t>(tune.max_rows_per_team, ceil_div(vpt_target, c.vpt)));
  } else {
    c.threads = c.team;
    c.rows_per_team = 1;
  }
  c.stage_bytes = size_t(c.threads) * c.rows_per_team * c.vpt * vec_bytes;
  c.buffers = (c.chunks == 1 && 2 * c.stage_bytes <= size_t(smem_cap)) ? 2 : 1;
  c.smem_bytes = c.buffers * c.stage_bytes + prob.scratch_bytes;

  // 5. Persistent grid: as many clusters as can be resident at once (each
  //    then walks row blocks), never more than there are row blocks.
  c.row_blocks = ceil_div(prob.rows, c.rows_per_cta());
  const int64_t by_threads = 2048 / c.threads;
  const int64_t by_regs = 65536 / (int64_t(c.threads) * tune.regs_per_thread);
  const int64_t by_smem = int64_t(lim.smem_per_sm) / int64_t(c.smem_bytes + 1024);  // 1 KB reserved per CTA
  const int64_t per_sm = std::max<int64_t>(1, std::min({by_threads, by_regs, by_smem, int64_t(32)}));
  const int64_t resident_clusters = std::max<int64_t>(1, per_sm * lim.num_sms / cluster);
  c.grid = std::min(c.row_blocks, resident_clusters) * cluster;
  return c;
}

namespace {
// Shared memory of a staged CTA: the scratch (one row, or a pair's) and
// `rows` rows of t threads at smem_vpt 16-byte vectors a thread.
size_t staged_smem_bytes(const RegRowProblem& prob, int64_t t, int smem_vpt, int rows) {
  return (rows == 2 ? prob.staged_pair_scratch_bytes : prob.scratch_bytes) + size_t(rows) * size_t(t) * smem_vpt * 16;
}
}  // namespace

bool choose_reg_row_config(const RegRowProblem& prob, const DeviceLimits& lim, RegRowConfig* out) {
  return choose_reg_row_config(prob, lim, current_row_tuning(), out);
}

bool choose_reg_row_config(const RegRowProblem& prob, const DeviceLimits& lim, const RowTuning& tune,
                           RegRowConfig* out) {
  if (!tune.reg_enable || prob.x_elem_bytes <= 0 || 16 % prob.x_elem_bytes) return false;
  RegRowConfig c;
  c.vec = 16 / prob.x_elem_bytes;
  const int64_t nvec = ceil_div(std::max<int64_t>(prob.cols, 1), c.vec);
  int max_vpt = 0;
  for (int b : kRegRowVptBuckets)
    if (b <= prob.max_vpt) max_vpt = b;
  if (max_vpt == 0) return false;
  const int cl_vpt = std::min(prob.tile_for_clusters(), max_vpt);
  const int max_cluster = std::max(1, std::min(lim.max_cluster, 16));

  // Clustered rows without a residual stream, staged in shared memory: CTAs
  // of reg_staged_team threads, if a cluster of <= max_cluster of them covers
  // the row at staged_vpt vectors a thread (else at 2x, 4x .. up to
  // staged_vpt_max; else, where the problem has one, its wide geometry)
  // within the shared memory limit. Returns false when not.
  auto try_staged = [&](int vpt_max) {
    if (prob.staged_vpt <= 0 || !tune.reg_staged) return false;
    const int64_t staged_team = std::min<int64_t>(pow2_ceil(std::max(tune.reg_staged_team, 32)), kRegRowMaxThreads);
    const int tensors = std::max(prob.staged_tensors, 1);
    int64_t t = staged_team;
    int vpt = prob.staged_vpt;
    vpt_max = std::min(vpt_max, prob.staged_vpt_max);
    while (ceil_div(nvec, t * vpt) > max_cluster && 2 * vpt <= vpt_max) vpt *= 2;
    int smem_vpt = tensors * vpt;
    const bool has_wide = is_pow2_team(prob.staged_wide_team) && prob.staged_wide_team > t && prob.staged_wide_vpt > 0 &&
                          prob.staged_wide_smem_vpt > 0;
    // The wide geometry where the staged tile needs more than max_cluster
    // CTAs, or (staged_wide_first) wherever it makes a cluster of two or more.
    if (has_wide && (ceil_div(nvec, t * vpt) > max_cluster ||
                     (prob.staged_wide_first && ceil_div(nvec, int64_t(prob.staged_wide_team) * prob.staged_wide_vpt) >= 2))) {
      // The wide CTA, doubled (up to 1024 threads) while max_cluster of
      // them do not cover the row.
      t = prob.staged_wide_team;
      vpt = prob.staged_wide_vpt;
      smem_vpt = prob.staged_wide_smem_vpt;
      while (ceil_div(nvec, t * vpt) > max_cluster && 2 * t <= kRegRowMaxThreads) t *= 2;
    }
    const int64_t cl = ceil_div(nvec, t * vpt);
    size_t smem = staged_smem_bytes(prob, t, smem_vpt, 1);
    if (cl < 2 || cl > max_cluster || smem > lim.max_smem_per_block) return false;
    if (prob.rows > int64_t(0x7fffffff) / cl) return false;
    // reg_staged_balance: the same cluster and tile in the fewest whole
    // warps that cover the row (more than half of t, since cl >= 2 CTAs of
    // t were needed; check_reg_row_config recovers t as the power of two
    // above).
    const int balance = prob.staged_balance >= 0 ? prob.staged_balance : tune.reg_staged_balance;
    const int64_t t_fit = balance ? fitted_team(nvec, cl * vpt) : t;
    // Two rows a cluster at the staged tile, where the problem allows and
    // both rows' staging fits; with pair_full_wave only where the pairs'
    // CTAs still fill every SM's slots once (fewer clusters than that would
    // leave SMs idle that one row a cluster keeps busy).
    int rows_per = 1;
    if (prob.staged_rows == 2 && vpt == prob.staged_vpt && t == staged_team && prob.rows > 1 &&
        cl >= prob.pair_min_cluster) {
      const size_t smem2 = staged_smem_bytes(prob, t_fit, smem_vpt, 2);
      const int64_t per_sm = int64_t(lim.smem_per_sm) / int64_t(smem2 + 1024);  // 1 KB reserved per CTA
      const bool fills = ceil_div(prob.rows, 2) * cl >= per_sm * lim.num_sms;
      if (smem2 <= lim.max_smem_per_block && per_sm >= 1 && (fills || !prob.pair_full_wave)) {
        rows_per = 2;
        smem = smem2;
      }
    }
    if (rows_per == 1) smem = staged_smem_bytes(prob, t_fit, smem_vpt, 1);
    c.team = c.threads = int(t_fit);
    c.cluster = int(cl);
    c.vpt = vpt;
    c.staged = true;
    c.staged_smem_vpt = smem_vpt;
    c.rows_per_cluster = rows_per;
    c.smem_bytes = smem;
    c.row_blocks = ceil_div(prob.rows, rows_per);
    c.grid = c.row_blocks * c.cluster;
    *out = c;
    return true;
  };
  if (nvec > std::max(int64_t(kRegRowMaxThreads) * max_vpt, int64_t(kRegRowMaxThreads) * cl_vpt * max_cluster))
    return try_staged(tune.reg_staged_vpt_max_beyond);  // beyond the register tiles: staged, or not at all
  const int64_t max_team = std::min<int64_t>(pow2_ceil(std::max(tune.reg_max_team, 1)), kRegRowMaxThreads);
  const int64_t wide_team = std::min<int64_t>(pow2_ceil(std::max<int64_t>(tune.reg_wide_team, max_team)), kRegRowMaxThreads);

  // Vectors per thread aimed for; fewer for decode-sized batches, whose rows
  // cannot fill the GPU: a shorter chain per thread, more threads per row.
  const int asked_vpt = prob.vpt_target > 0 ? prob.vpt_target : tune.reg_vpt_target;
  int vpt_target = 1;
  for (int b : kRegRowVptBuckets)
    if (b <= std::min(asked_vpt, max_vpt)) vpt_target = b;
  const int64_t fill_threads = int64_t(lim.num_sms) * std::max(tune.reg_fill_threads_per_sm, 0);
  const int64_t fill_max_team = std::max(tune.reg_fill_max_team, 32);
  // Decode-sized: the rows at `vpt` vectors a thread fill fewer threads.
  auto decode_at = [&](int vpt) { return prob.rows * ceil_div(nvec, vpt) < fill_threads; };
  while (vpt_target > 1 && decode_at(vpt_target) && pow2_ceil(ceil_div(nvec, vpt_target / 2)) <= fill_max_team)
    vpt_target /= 2;

  // 1. A team of up to max_team threads at the target (up to wide_team for
  //    decode-sized batches, whose target was lowered to spread the row;
  //    up to reg_fill_max_team for decode-sized batches whose target stayed
  //    because its next lower tile would need a larger team: fp32 8192 at
  //    M = 1 took 256 x 8 with the online reduction, 3.66 us, against 2.32
  //    at 4096, H100, bench/results/2026-12-06-ce-decode-lean-maxfirst-h100.md).
  //    Predicted fp32 8192 CE at 512 x 4 ~2.7 us; measured 2.96 (decode_sweep
  //    against d4e7e9a in one call, H100, 79f7445, two rounds), and every
  //    changed cell of the four ops faster: fp32 8192 at M = 1 .. 64 CE
  //    3.68 / 5.13 / 5.38 / 5.61 -> 2.96 / 4.46 / 4.84 / 4.96, RMSNorm
  //    0.55-0.67 us less, LayerNorm 0.58-0.60, softmax 0.12-0.37. (16-bit
  //    norms of 8193 .. 16384, which a plan trace said this changed up to
  //    ~150 rows, measured at 610ede8 against d4e7e9a, H200, 12288 / 16384
  //    at M = 1 .. 150: not one plan changed, nor any time by more than
  //    0.01 us; bench/results/2026-12-07-ce-writer-launch-ws-latency-h200.md.)
  const int64_t fill_cap = std::min<int64_t>(pow2_ceil(fill_max_team), wide_team);
  const int64_t stage1_cap = vpt_target < std::min(asked_vpt, max_vpt) ? wide_team
                             : decode_at(vpt_target)                    ? std::max(max_team, fill_cap)
                                                                        : max_team;
  int64_t team = pow2_ceil(ceil_div(nvec, vpt_target));
  int64_t cluster = 1;
  if (team > stage1_cap) {
    // 2. The largest tile per thread, a team of up to wide_team; 3. beyond
    //    that a cluster of wide_team CTAs, or of 1024-thread CTAs when 16
    //    of those do not cover the row.
    team = pow2_ceil(ceil_div(nvec, max_vpt));
    const int above = prob.staged_above_team > 0 ? prob.staged_above_team : tune.reg_staged_above_team;
    if (team > std::min<int64_t>(wide_team, above) && try_staged(tune.reg_staged_vpt_max)) return true;
    if (team > wide_team) {
      const int64_t cl_wide = ceil_div(nvec, wide_team * cl_vpt);      // >= 2 here
      const int64_t cl_full = ceil_div(nvec, int64_t(kRegRowMaxThreads) * cl_vpt);
      if (cl_wide <= max_cluster) {
        team = wide_team;
        cluster = cl_wide;
      } else if (cl_full <= max_cluster && cl_full > 1) {
        team = kRegRowMaxThreads;
        cluster = cl_full;
      } else {  // one 1024-thread CTA (the capacity check above: it fits at max_vpt)
        team = kRegRowMaxThreads;
      }
    }
  }
  c.team = int(team);
  c.cluster = int(cluster);
  c.smem_bytes = prob.scratch_bytes;
  const int64_t need = ceil_div(nvec, team * cluster);
  c.vpt = cluster > 1 ? cl_vpt : max_vpt;
  if (cluster == 1)
    for (int b : kRegRowVptBuckets)
      if (b >= need && b < c.vpt) c.vpt = b;
  // reg_fit_team: a team that owns its CTA, unclustered, in the fewest
  // whole warps that cover the row at that tile.
  const int fit = prob.fit_team >= 0 ? prob.fit_team : tune.reg_fit_team;
  if (fit && cluster == 1 && c.team > 32) c.team = int(fitted_team(nvec, c.vpt));
  c.threads = c.team <= 32 ? int(std::min<int64_t>(pow2_ceil(std::max(tune.reg_small_threads, 32)), kRegRowMaxThreads))
                           : c.team;
  c.threads = std::max(c.threads, c.team);
  c.row_blocks = ceil_div(prob.rows, c.teams_per_cta());
  // One CTA (cluster) per row block; more than gridDim.x can hold (rows >
  // 2^31 / cluster * teams) take the staged kernels, whose grid is persistent.
  if (c.row_blocks > int64_t(0x7fffffff) / c.cluster) return false;
  c.grid = c.row_blocks * c.cluster;
  *out = c;
  return true;
}

bool lean_row(const RegRowConfig& c, int64_t cols) {
  return !c.staged && c.cluster == 1 && c.vpt <= 2 && c.team == c.threads && c.team % 32 == 0 &&
         cols == int64_t(c.vpt) * c.team * c.vec;
}

const char* check_reg_row_config(const RegRowConfig& c, const RegRowProblem& prob, const DeviceLimits& lim) {
  const int64_t nvec = ceil_div(std::max<int64_t>(prob.cols, 1), c.vec);
  if (c.vec * prob.x_elem_bytes != 16) return "vector is not 16 bytes of x";
  if (c.team < 1 || c.team > kRegRowMaxThreads) return "team outside [1, 1024]";
  // A staged row's CTA may be balanced (RowTuning::reg_staged_balance): the
  // fewest whole warps that cover the row at its cluster and tile. `base`,
  // the power of two above (more than half of it, since cluster >= 2 CTAs
  // of base were needed), is the CTA the rules chose; the rules are checked
  // on it.
  const int64_t base = pow2_ceil(c.team);
  // (or, reg_fit_team / norm_fit_team, an unclustered team above a warp
  // fitted so to its row at its tile)
  if (c.team != base &&
      !(c.staged && c.cluster >= 1 && c.vpt >= 1 && c.team % 32 == 0 &&
        fitted_team(nvec, int64_t(c.cluster) * c.vpt) == c.team) &&
      !(!c.staged && is_fitted_row_cta(c, nvec)))
    return "team is not a power of two in [1, 1024], nor a row's fitted CTA";
  if (c.threads < c.team || c.threads > kRegRowMaxThreads || c.threads % c.team)
    return "threads is not a multiple of team in [team, 1024]";
  if (c.threads % 32) return "threads is not a whole number of warps";
  if (c.threads != c.team && c.team > 32) return "a team larger than a warp must own its CTA";
  if (c.cluster < 1 || c.cluster > lim.max_cluster || c.cluster > 16) return "cluster outside [1, max_cluster]";
  if (c.cluster > 1 && c.threads != c.team) return "a clustered row must own whole CTAs";
  if (c.staged) {
    if (c.cluster < 2) return "a staged row is not clustered";
    // The wide geometry (staged_wide_team) at its own tile and shared
    // memory, one row a cluster; otherwise a staged tile, every tensor's
    // vectors in shared memory.
    const bool wide = prob.staged_wide_team > 0 && base >= prob.staged_wide_team && base % prob.staged_wide_team == 0 &&
                      c.vpt == prob.staged_wide_vpt && c.staged_smem_vpt == prob.staged_wide_smem_vpt;
    if (wide) {
      if (c.rows_per_cluster != 1) return "a wide staged row takes one row a cluster";
      // A CTA above the wide one only where max_cluster of half its size do not cover the row.
      if (base > prob.staged_wide_team &&
          ceil_div(nvec, int64_t(base / 2) * c.vpt) <= std::min(lim.max_cluster, 16))
        return "a wide staged row takes a bigger CTA than it needs";
    } else {
      bool tile = false;
      for (int v = prob.staged_vpt; v > 0 && v <= std::max(prob.staged_vpt, prob.staged_vpt_max); v *= 2)
        tile |= c.vpt == v;
      if (!tile) return "a staged row does not use a staged tile";
      // A wider tile only where the narrower one needs more than max_cluster CTAs.
      if (c.vpt > prob.staged_vpt && ceil_div(nvec, base * (c.vpt / 2)) <= std::min(lim.max_cluster, 16))
        return "a staged row takes a wider tile than it needs";
      if (c.staged_smem_vpt != std::max(prob.staged_tensors, 1) * c.vpt)
        return "a staged row does not hold every tensor's tile in shared memory";
    }
    if (c.rows_per_cluster != 1 && c.rows_per_cluster != 2) return "a staged cluster takes one or two rows";
    if (c.rows_per_cluster == 2 && (prob.staged_rows != 2 || c.vpt != prob.staged_vpt))
      return "two staged rows a cluster where the problem does not allow them";
    if (c.smem_bytes != staged_smem_bytes(prob, c.team, c.staged_smem_vpt, c.rows_per_cluster) ||
        c.smem_bytes > lim.max_smem_per_block)
      return "staging does not fit the shared memory";
  } else {
    if (c.rows_per_cluster != 1) return "only staged rows go several a cluster";
    bool bucket = false;
    for (int b : kRegRowVptBuckets) bucket |= (b == c.vpt);
    if (!bucket || c.vpt > prob.max_vpt) return "vpt is not a bucket the kernel family is built with";
    if (c.cluster > 1 && c.vpt != prob.tile_for_clusters()) return "a clustered row does not use the clustered tile";
    if (c.smem_bytes != prob.scratch_bytes) return "shared memory is not the scratch alone";
  }
  if (int64_t(c.cluster) * c.team * c.vpt < nvec) return "the tiles do not cover the row";
  if (c.row_blocks * c.teams_per_cta() * c.rows_per_cluster < prob.rows) return "row blocks do not cover the rows";
  if (c.grid < 0 || c.grid > int64_t(0x7fffffff)) return "grid exceeds gridDim.x";
  if (c.grid % c.cluster) return "grid is not a whole number of clusters";
  if (c.grid != c.row_blocks * c.cluster) return "grid is not one cluster per row block";
  return nullptr;
}

bool choose_norm_bwd_config(const RegRowProblem& prob, const DeviceLimits& lim, RegRowConfig* out) {
  if (prob.x_elem_bytes <= 0 || 16 % prob.x_elem_bytes) return false;
  RegRowConfig c;
  c.vec = 16 / prob.x_elem_bytes;
  const int64_t nvec = ceil_div(std::max<int64_t>(prob.cols, 1), c.vec);
  for (int b : kRegRowVptBuckets)
    if (b <= prob.max_vpt) c.vpt = b;
  const int max_cluster = std::max(1, std::min(lim.max_cluster, 16));
  // The family's own smaller tile, where a cluster of such tiles covers the row.
  if (prob.vpt_target > 0 && prob.vpt_target < c.vpt && nvec <= int64_t(kRegRowMaxThreads) * prob.vpt_target * max_cluster)
    c.vpt = prob.vpt_target;
  if (nvec > int64_t(kRegRowMaxThreads) * c.vpt * max_cluster) return false;
  // The largest tile, then as many threads as the row needs; past one
  // 1024-thread CTA, a cluster of them.
  int64_t team = pow2_ceil(ceil_div(nvec, c.vpt));
  if (team > kRegRowMaxThreads) {
    c.cluster = int(ceil_div(nvec, int64_t(kRegRowMaxThreads) * c.vpt));
    team = kRegRowMaxThreads;
  }
  c.team = int(team);
  // Teams of up to a warp share 256-thread CTAs; larger teams own theirs.
  c.threads = c.team <= 32 ? 256 : c.team;
  c.smem_bytes = prob.scratch_bytes + size_t(c.threads) * c.vpt * c.vec * 8;
  if (c.smem_bytes > lim.max_smem_per_block) return false;
  c.row_blocks = c.cluster > 1 ? prob.rows : ceil_div(prob.rows, c.teams_per_cta());
  // Persistent: as many CTAs as fit at once (64 registers a thread: 1024
  // threads an SM; the accumulators' shared memory).
  const int64_t by_threads = kRegRowMaxThreads / c.threads;
  const int64_t by_smem = int64_t(lim.smem_per_sm) / int64_t(c.smem_bytes + 1024);
  const int64_t per_sm = std::max<int64_t>(1, std::min({by_threads, by_smem, int64_t(32)}));
  const int64_t resident = std::max<int64_t>(1, per_sm * lim.num_sms / c.cluster);
  c.grid = std::min(c.row_blocks, resident) * c.cluster;
  *out = c;
  return true;
}

const char* check_norm_bwd_config(const RegRowConfig& c, const RegRowProblem& prob, const DeviceLimits& lim) {
  const int64_t nvec = ceil_div(std::max<int64_t>(prob.cols, 1), c.vec);
  if (c.vec * prob.x_elem_bytes != 16) return "vector is not 16 bytes of x";
  if (c.team < 1 || c.team > kRegRowMaxThreads || (c.team & (c.team - 1))) return "team is not a power of two in [1, 1024]";
  if (c.threads < c.team || c.threads > kRegRowMaxThreads || c.threads % c.team || c.threads % 32)
    return "threads is not a whole number of warps and teams in [team, 1024]";
  if (c.threads != c.team && c.team > 32) return "a team larger than a warp must own its CTA";
  if (c.cluster < 1 || c.cluster > std::min(lim.max_cluster, 16)) return "cluster outside [1, max_cluster]";
  if (c.cluster > 1 && c.threads != c.team) return "a clustered row must own whole CTAs";
  bool bucket = false;
  for (int b : kRegRowVptBuckets) bucket |= (b == c.vpt);
  if (!bucket || c.vpt > prob.max_vpt) return "vpt is not a bucket the kernel family is built with";
  if (int64_t(c.cluster) * c.team * c.vpt < nvec) return "the tiles do not cover the row";
  if (c.smem_bytes != prob.scratch_bytes + size_t(c.threads) * c.vpt * c.vec * 8 || c.smem_bytes > lim.max_smem_per_block)
    return "shared memory is not scratch + the accumulators within the per-CTA limit";
  if (c.row_blocks * (c.cluster > 1 ? 1 : c.teams_per_cta()) < prob.rows) return "row blocks do not cover the rows";
  if (c.grid % c.cluster) return "grid is not a whole number of clusters";
  if (c.grid / c.cluster > c.row_blocks) return "more clusters than row blocks";
  if (prob.rows > 0 && c.grid == 0) return "empty grid for a non-empty problem";
  if (c.grid > int64_t(lim.num_sms) * 32) return "grid beyond the resident CTAs";
  return nullptr;
}

namespace {
// Pipelined norm backward CTAs resident on an SM: 1024 threads at the
// kernel's 64 registers, and the shared memory (1 KB of it reserved a CTA).
// small_cta: the small-CTA kernel, built for at most
// kNormBwdPipeSmallCtaThreadsPerSm threads an SM (its 4-vector tile for
// kNormBwdPipeWideThreadsPerSm); big_cta: the big-CTA kernel, one CTA an SM.
int64_t pipe_ctas_per_sm(const RegRowConfig& c, size_t smem, const DeviceLimits& lim) {
  const int per_sm_threads = c.big_cta                     ? kNormBwdPipeBigCtaThreads
                             : !c.small_cta                ? kRegRowMaxThreads
                             : c.vpt == kNormBwdPipeWideVpt ? kNormBwdPipeWideThreadsPerSm
                                                            : kNormBwdPipeSmallCtaThreadsPerSm;
  return std::min<int64_t>(per_sm_threads / c.threads, int64_t(lim.smem_per_sm) / int64_t(smem + 1024));
}
}  // namespace

size_t norm_bwd_pipe_smem_bytes(const NormBwdPipeProblem& prob, int vpt, int threads, int stages, bool small_cta,
                                bool big_cta) {
  const int vec = 16 / std::max(prob.x_elem_bytes, 1);
  const size_t stage = size_t(prob.tensors * vpt * 16 + 8) * size_t(threads);
  const size_t weight = prob.weight && !big_cta ? size_t(vpt) * size_t(threads) * size_t(vec * 4) : 0;  // fp32
  const size_t db_sums = prob.db && !small_cta && !big_cta ? size_t(vpt) * size_t(threads) * size_t(vec * 4) : 0;
  return prob.scratch_bytes + size_t(stages) * stage + weight + db_sums;
}

namespace {
bool choose_norm_bwd_pipe_at(const NormBwdPipeProblem& prob, const DeviceLimits& lim, const RowTuning& tune,
                             RegRowConfig* out);
// The one-CTA knobs (bwd_pipe_ctas_per_sm, bwd_pipe_min_threads) act on
// every row but LayerNorm's with dbias (choose_norm_bwd_pipe_at says why),
// unless tune.bwd_pipe_share_db.
bool one_cta_knobs_act(const NormBwdPipeProblem& prob, const RowTuning& tune) {
  return !(prob.centre && prob.db) || tune.bwd_pipe_share_db;
}
// The big-CTA kernel takes the problem's 2-vector CTAs of
// kNormBwdPipeBigCtaThreads: tune.bwd_pipe_big_cta 1 for LayerNorm rows with
// dbias, 2 for every row (aligned rows only: it has no kShift form).
bool big_ctas(const NormBwdPipeProblem& prob, const RowTuning& tune) {
  return !prob.shifted && (tune.bwd_pipe_big_cta >= 2 || (tune.bwd_pipe_big_cta == 1 && prob.centre && prob.db));
}
// Teams of more than a warp share CTAs of tune.bwd_pipe_min_threads -- with
// the big-CTA kernel, LayerNorm's with dbias too (its db sums in registers),
// where those are its CTAs.
bool shares_ctas(const NormBwdPipeProblem& prob, const RowTuning& tune) {
  return tune.bwd_pipe_min_threads > 0 &&
         (one_cta_knobs_act(prob, tune) ||
          (big_ctas(prob, tune) && pow2_ceil(tune.bwd_pipe_min_threads) == kNormBwdPipeBigCtaThreads));
}
// The CTAs tune.bwd_pipe_ctas_per_sm caps: rmsnorm_bwd_sweep, H100,
// 2026-12-07, M*N = 2^28, the cap at 1 against none, after its own call /
// scrubbed (a 256 MB read first), % of copy (bench/results/logs/
// 2026-12-07-norm-bwd-cap-h100-tables.md):
// - the 2-vector tile's CTAs of 512 threads or more (teams sharing them
//   included): bf16 1024-8192 RMSNorm dx 98.2-98.5 against 91.3-92.2 /
//   98.8-98.9 against 96.5-97.7, +dw 96.0-96.8 against 88.1-90.5 /
//   96.7-97.8 against 91.7-94.4; LayerNorm bf16 2048-8192 dx 100.2-100.3
//   against 89.4-89.8 / 98.2-98.5 against 95.7-97.4; fp32 512-4096
//   +1 to +7%, scrubbed +0.3 to +3.7 points;
// - the 4-vector tile's clusters of two (bf16 16384): RMSNorm dx / +dw
//   98.9 / 96.4 against 91.9 / 89.5 after its own call, 97.4 / 95.2
//   against 97.1 / 92.4 scrubbed; LayerNorm 92.4 / 90.1 against 88.1 /
//   86.2, but scrubbed 90.6 / 88.4 against 95.2 / 90.6 (the one loss kept:
//   the benchmark times after its own call).
// Not capped, each a loss at one an SM: the 4-vector tile's clusters of
// four or more (bf16 32K-128K: 58-73% of copy against 90-99), its single
// CTAs with idle threads (bf16 4104 / 5120, bwd_pipe_wide_idle_db /
// idle32's rows: 61-89% against 87-96), and 256-thread CTAs of teams of up
// to a warp (bf16 256 / 512: +1 to +3% after its own call but scrubbed
// RMSNorm 93.2 against 97.0, LayerNorm 91.5 against 96.5).
bool capped_ctas(const RegRowConfig& c) {
  return c.vpt == kNormBwdPipeWideVpt ? c.cluster == 2 : c.threads >= 512;
}
// One thread a warp copies a row's statistics in CTAs of at least
// tune.bwd_pipe_lead_threads (RegRowConfig::lead_stats). rmsnorm_bwd_sweep
// A/B, H100, 2026-12-07, M*N = 2^28, after its own call (bench/results/
// logs/2026-12-07-norm-bwd-stat-leaders-ab-h100-tables.md): fp32 8192's
// 1024-thread CTAs +2.7 to +6.3% (LayerNorm dx 90.5 -> 95.9% of copy); every
// 512-thread CTA -0.3 to -2.2% (the big-CTA kernel's included). So 1024,
// the default since 3ec81ee, whose A/B of this plan bit against 0 (H100,
// one round, bench/results/logs/2026-12-07-norm-bwd-lead-default-ab-
// 3ec81ee-h100-tables.md) had fp32 5120-131072 +1.8% on average, 24 of 30
// cells faster (-2.3 to +7.8%; LayerNorm 8192 dx 90.0 -> 94.7% of copy),
// the 4096 control (the same plan both ways) within 1.4%.
void mark_lead_stats(RegRowConfig* c, const RowTuning& tune) {
  c->lead_stats = tune.bwd_pipe_lead_threads > 0 && c->threads >= tune.bwd_pipe_lead_threads;
}
// The tile (16-byte vectors a thread) the tuning asks for x's dtype.
int asked_pipe_vpt(const NormBwdPipeProblem& prob, const RowTuning& tune) {
  return prob.x_elem_bytes == 4 ? tune.bwd_pipe_vpt32 : tune.bwd_pipe_vpt16;
}
}  // namespace

// The 4-vector tile where it is asked, the row is long enough
// (tune.bwd_pipe_wide_min_cols, _ln for LayerNorm) and it serves the row;
// else (a shorter row, a row past 16 of its CTAs, or no stage fitting) the
// 2-vector one -- but for the rows tune.bwd_pipe_wide_idle_db and
// tune.bwd_pipe_wide_idle32 name.
bool choose_norm_bwd_pipe_config(const NormBwdPipeProblem& prob, const DeviceLimits& lim, const RowTuning& tune,
                                 RegRowConfig* out) {
  const int asked = asked_pipe_vpt(prob, tune);
  const int64_t wide_min = prob.centre ? tune.bwd_pipe_wide_min_cols_ln : tune.bwd_pipe_wide_min_cols;
  // Where teams share CTAs, a row whose 4-vector tile is one CTA of a team
  // above a warp (LayerNorm bf16 2048-8192) takes the 2-vector tile, its
  // teams sharing 512-thread CTAs one an SM: dx / +dw 90.1-90.6 / 86.4-88.1%
  // of copy -> 99.4-99.7 / 97.3-97.9 after its own call (rmsnorm_bwd_sweep,
  // H100, 2026-12-07; bench/results/logs/2026-12-07-norm-bwd-one-cta-h100-
  // tables.md). So does an aligned row's team of one warp (LayerNorm bf16
  // 1024): teams of 64 in the shared CTA, with dbias the big CTA's, as at
  // 2048. Predicted >= 97 / 95 / 95% dx / +dw / +dw,db; measured against
  // the 4-vector small CTAs two an SM (rmsnorm_bwd_sweep bf16, M*N = 2^28,
  // H100, e8aeef0, against bwd_pipe_min_threads=0 in two rounds; bench/
  // results/logs/2026-12-07-ln-1k-team64-e8aeef0-h100-tables.md): after its
  // own call 97.9 / 96.1 / 96.9 against 90.5-91.1 / 88.5-88.7 / 87.5-88.3,
  // scrubbed 97.7 / 96.4 / 98.0 against 97.6-97.8 / 94.4-94.9 / 94.4-94.7;
  // the bench's backward 86.4 -> 96.6%. Not shifted rows: LayerNorm bf16
  // 1017 (its plan 1024 columns) in the shared CTA lost dx / +dw 88.4-88.7
  // / 86.3-86.5 -> 77.7 / 75.9% (the same sweep).
  if ((asked < kNormBwdPipeWideVpt || prob.cols >= wide_min) && choose_norm_bwd_pipe_at(prob, lim, tune, out) &&
      !(shares_ctas(prob, tune) && out->vpt == kNormBwdPipeWideVpt && out->cluster == 1 &&
        out->team > (prob.shifted ? 32 : 16)))
    return true;
  if (asked < kNormBwdPipeWideVpt) return false;
  RowTuning narrow = tune;
  narrow.bwd_pipe_vpt16 = narrow.bwd_pipe_vpt32 = 2;
  if (!choose_norm_bwd_pipe_at(prob, lim, narrow, out)) return false;
  // Rows whose 2-vector tile is one 64-register CTA with idle threads --
  // with dbias more than a quarter (tune.bwd_pipe_wide_idle_db), without at
  // least tune.bwd_pipe_wide_idle32 thirty-seconds: the 4-vector tile where
  // one small CTA holds the row.
  if (!out->small_cta && out->cluster == 1 && out->team == out->threads) {
    const int64_t busy = ceil_div(ceil_div(std::max<int64_t>(prob.cols, 1), int64_t(out->vec)), int64_t(out->vpt));
    const int64_t idle = out->threads - busy;
    const bool idle_enough = prob.db ? tune.bwd_pipe_wide_idle_db && 4 * idle > out->threads
                                     : 32 * idle >= int64_t(tune.bwd_pipe_wide_idle32) * out->threads;
    RegRowConfig wide;
    if (idle_enough && choose_norm_bwd_pipe_at(prob, lim, tune, &wide) && wide.cluster == 1 &&
        wide.vpt == kNormBwdPipeWideVpt)
      *out = wide;
  }
  return true;
}

namespace {
bool choose_norm_bwd_pipe_at(const NormBwdPipeProblem& prob, const DeviceLimits& lim, const RowTuning& tune,
                             RegRowConfig* out) {
  if (prob.x_elem_bytes <= 0 || 16 % prob.x_elem_bytes || prob.tensors < 2 || prob.tensors > 3) return false;
  const int bit = prob.x_elem_bytes == 4 ? 2 : 1;
  if (!(tune.bwd_pipe & bit)) return false;
  RegRowConfig c;
  c.vec = 16 / prob.x_elem_bytes;
  const int64_t nvec = ceil_div(std::max<int64_t>(prob.cols, 1), c.vec);
  // The tuned tile, where the kernel has it (the other kernels serve the
  // row otherwise): 1 vector a thread ran 16-bit rows at 55-58% of copy
  // against 62-72% at 2 (rmsnorm_bwd_sweep at ce37acc, H200; bench/results/
  // 2026-11-30-rmsnorm-bwd-sweep.md run 4).
  // 4 vectors (asked by the tuning) only in small CTAs, which hold their
  // sums in registers; where those are not built or not wanted, 2.
  const bool small_ok = prob.small_cta_ok && (prob.db ? tune.bwd_pipe_db_regs : tune.bwd_pipe_small_cta);
  const int max_vpt = prob.max_vpt >= kNormBwdPipeWideVpt && small_ok ? kNormBwdPipeWideVpt
                      : prob.max_vpt >= 2                              ? 2
                                                                       : 1;
  const int asked = asked_pipe_vpt(prob, tune);
  int vpt = asked >= kNormBwdPipeWideVpt ? std::min(max_vpt, kNormBwdPipeWideVpt) : asked >= 2 ? 2 : 1;
  if (vpt > max_vpt) return false;
  // (A 4-vector row stays at 4: past one small CTA it takes a cluster.)
  while (pow2_ceil(ceil_div(nvec, vpt)) > kRegRowMaxThreads && vpt < std::min(max_vpt, 2)) vpt *= 2;
  const int64_t team_cap = vpt == kNormBwdPipeWideVpt ? kNormBwdPipeSmallCtaThreads : kRegRowMaxThreads;
  // The stage count with the most bytes in flight an SM ((stages - 1) stages
  // of each resident CTA; 1024 threads an SM at the kernel's 64 registers);
  // ties to fewer stages. Returns the CTAs an SM (0: no stage count fits).
  const int max_stages = std::max(2, std::min(tune.bwd_pipe_stages, 4));
  // tune.bwd_pipe_ctas_per_sm / bwd_pipe_min_threads (one_cta_knobs_act):
  // not for LayerNorm with dbias, whose shared 512-thread CTA (the db sums in
  // shared memory, 2 vectors) lost to its 4-vector small CTAs (db sums in
  // registers) in a scrubbed run: bf16 4096 +dw,db 573.2 -> 592.5 us (H100,
  // 2026-12-07; bench/results/logs/2026-12-07-norm-bwd-one-cta-h100.log) --
  // but its teams share the big-CTA kernel's (shares_ctas, big_ctas).
  // The cap acts on the 2-vector tile's CTAs of 512 threads or more and
  // the 4-vector tile's clusters of two (capped_ctas).
  const int cta_cap = one_cta_knobs_act(prob, tune) ? tune.bwd_pipe_ctas_per_sm : 0;
  auto pick_stages = [&]() -> int64_t {
    int64_t best = 0, best_per_sm = 0;
    c.small_cta = small_ok && c.threads <= kNormBwdPipeSmallCtaThreads;
    c.big_cta = big_ctas(prob, tune) && c.vpt == 2 && c.cluster == 1 && c.threads == kNormBwdPipeBigCtaThreads;
    if (c.vpt == kNormBwdPipeWideVpt && !c.small_cta) return 0;
    const int stages_max = c.big_cta ? std::max(2, std::min(tune.bwd_pipe_big_stages, 4)) : max_stages;
    for (int s = 2; s <= stages_max; ++s) {
      const size_t smem = norm_bwd_pipe_smem_bytes(prob, c.vpt, c.threads, s, c.small_cta, c.big_cta);
      if (smem > lim.max_smem_per_block) break;
      int64_t per_sm = pipe_ctas_per_sm(c, smem, lim);
      if (cta_cap > 0 && capped_ctas(c)) per_sm = std::min<int64_t>(per_sm, cta_cap);
      if (per_sm < 1) break;
      if ((s - 1) * per_sm > best) {
        best = (s - 1) * per_sm;
        best_per_sm = per_sm;
        c.stages = s;
        c.smem_bytes = smem;
      }
    }
    return best_per_sm;
  };
  const int64_t team = pow2_ceil(ceil_div(nvec, vpt));
  if (team <= team_cap) {
    // The smallest bucket that still covers the row with the same team (short rows).
    c.vpt = vpt;
    while (c.vpt > 1 && int64_t(c.vpt / 2) * team >= nvec) c.vpt /= 2;
    c.team = int(team > 32 && tune.bwd_pipe_fit_team ? fitted_team(nvec, c.vpt) : team);
    c.threads = team <= 32 ? int(std::min<int64_t>(pow2_ceil(std::max(tune.bwd_pipe_threads, 32)), kRegRowMaxThreads))
                           : c.team;
    // (The 2-vector tile's 64-register kernel alone: the 4-vector tile's
    // small CTAs stop at 256 threads. And only where the shared CTAs still
    // fill every SM: a few hundred rows keep a CTA a team, spread over as
    // many SMs as there are rows.)
    // Shifted rows share only RMSNorm's tiles at least 7/8 full
    // (rmsnorm_bwd_sweep bf16, H100, 4ad49f3, M*N = 2^28, against
    // bwd_pipe_min_threads=0 in the same call; bench/results/logs/
    // 2026-12-07-norm-bwd-shifted-share-4ad49f3-h100-tables.md), dx / +dw /
    // +dw,db % of copy, shared against a CTA a team: RMSNorm 1017 (its tile
    // full) 91.4 / 90.0 / 85.5 against 82.3 / 78.6 / 78.6, 2001 (98%) 91.8 /
    // 90.3 / 86.3 against 85.9 / 83.2 / 83.6, but 1500 and 3001 (73%) 69.6-
    // 80.5 against 81.6-89.5; LayerNorm dx / +dw 1017 even (88.6 / 86.5),
    // 2001 80.5 / 79.5 against 85.4 / 81.4, 1500 and 3001 64.4-68.9 against
    // 78.6-86.1.
    const bool shift_shares = !prob.shifted || (!prob.centre && 8 * nvec >= 7 * team * c.vpt);
    if (shares_ctas(prob, tune) && vpt < kNormBwdPipeWideVpt && team > 32 && c.team == team &&
        tune.bwd_pipe_min_threads > c.threads && shift_shares) {
      const int shared = int(std::min<int64_t>(pow2_ceil(tune.bwd_pipe_min_threads), kRegRowMaxThreads));
      if (ceil_div(prob.rows, int64_t(shared / c.team)) >= lim.num_sms) c.threads = shared;
    }
    c.cluster = 1;
    const int64_t per_sm = pick_stages();
    if (per_sm > 0) {
      c.row_blocks = ceil_div(prob.rows, c.teams_per_cta());
      c.grid = std::min(c.row_blocks, per_sm * lim.num_sms);
      mark_lead_stats(&c, tune);
      *out = c;
      return true;
    }
  }
  // Past one CTA (or where the one CTA's stages do not fit its shared
  // memory): a cluster of CTAs that own their slices of the row, at 2
  // vectors a thread, as few as cover the row. The CTA (below the one that
  // did not fit) with the most threads resident an SM, ties to the larger:
  // bf16 with dbias, where 1024 threads do not fit, 256-thread CTAs (3 an
  // SM) ran N = 16K / 32K / 64K at 69.5 / 67.6 / 62.9% of copy against
  // 65.1 / 58.1 / 58.0% in 512-thread ones (1 an SM); without dbias 1024
  // threads (1 an SM) and 256 (4) ran 85.5 / 78.0 / 70.9% and 84.4 / 74.5 /
  // 69.8%, fp32 94.1 / 91.5 / 90.3% and 93.2 / 90.9% / - (rmsnorm_bwd_sweep,
  // H200, e38f7fb; bench/results/2026-11-30-rmsnorm-bwd-sweep.md run 8).
  const int max_cluster = std::max(1, std::min({lim.max_cluster, 16, tune.bwd_pipe_cluster}));
  if (vpt < 2 || max_cluster < 2 || (prob.shifted && !small_ok)) return false;
  int max_threads = 256;  // the largest power of two within the knob
  while (max_threads < kRegRowMaxThreads && max_threads * 2 <= tune.bwd_pipe_cluster_threads) max_threads *= 2;
  if (vpt == kNormBwdPipeWideVpt || prob.shifted) max_threads = kNormBwdPipeSmallCtaThreads;
  RegRowConfig best;
  int64_t best_threads_per_sm = 0;
  c.vpt = vpt;
  for (int threads = int(std::min<int64_t>(team / 2, max_threads)); threads >= 256; threads /= 2) {
    c.team = c.threads = threads;
    const int64_t cluster = ceil_div(nvec, int64_t(threads) * c.vpt);
    if (cluster > max_cluster) break;  // (smaller CTAs need larger clusters)
    c.cluster = int(cluster);
    const int64_t per_sm = pick_stages();
    if (per_sm == 0 || per_sm * threads <= best_threads_per_sm) continue;
    best_threads_per_sm = per_sm * threads;
    c.row_blocks = prob.rows;
    c.grid = std::min(c.row_blocks, std::max<int64_t>(1, per_sm * lim.num_sms / c.cluster)) * c.cluster;
    best = c;
  }
  if (best_threads_per_sm == 0) return false;
  mark_lead_stats(&best, tune);
  *out = best;
  return true;
}
}  // namespace

const char* check_norm_bwd_pipe_config(const RegRowConfig& c, const NormBwdPipeProblem& prob,
                                       const DeviceLimits& lim) {
  const int64_t nvec = ceil_div(std::max<int64_t>(prob.cols, 1), c.vec);
  if (c.vec * prob.x_elem_bytes != 16) return "vector is not 16 bytes of x";
  // (or, RowTuning::bwd_pipe_fit_team, a row of one CTA fitted to it)
  if (c.team < 1 || c.team > kRegRowMaxThreads || ((c.team & (c.team - 1)) && !is_fitted_row_cta(c, nvec)))
    return "team is not a power of two in [1, 1024], nor a row's fitted CTA";
  if (c.threads < c.team || c.threads > kRegRowMaxThreads || c.threads % c.team || c.threads % 32)
    return "threads is not a whole number of warps and teams in [team, 1024]";
  if (c.cluster < 1 || c.cluster > std::min(lim.max_cluster, 16)) return "cluster outside [1, max_cluster]";
  if (c.cluster > 1 && (c.threads != c.team || c.vpt < 2))
    return "a clustered row must own whole CTAs at 2 or 4 vectors a thread";
  const bool wide = c.vpt == kNormBwdPipeWideVpt && prob.max_vpt >= kNormBwdPipeWideVpt && c.small_cta;
  if (c.vpt != 1 && !(c.vpt == 2 && prob.max_vpt >= 2) && !wide) return "vpt is not a tile the kernel is built with";
  if (int64_t(c.cluster) * c.team * c.vpt < nvec) return "the tiles do not cover the row";
  if (c.stages < 2 || c.stages > 4) return "stages outside [2, 4]";
  if (c.small_cta && (!prob.small_cta_ok || c.threads > kNormBwdPipeSmallCtaThreads))
    return "the small-CTA kernel is not built for this dtype or past its CTA size";
  if (c.big_cta && (c.small_cta || c.vpt != 2 || c.cluster != 1 || prob.shifted || c.threads > kNormBwdPipeBigCtaThreads))
    return "the big-CTA kernel takes aligned rows of one CTA of at most 512 threads at 2 vectors";
  if (c.lead_stats && (c.team < 32 ? 32 % c.team : c.team % 32))
    return "a row's statistics copied by one thread a warp need teams of whole warps or within one";
  if (c.smem_bytes != norm_bwd_pipe_smem_bytes(prob, c.vpt, c.threads, c.stages, c.small_cta, c.big_cta) ||
      c.smem_bytes > lim.max_smem_per_block)
    return "shared memory is not scratch + stages + weight within the per-CTA limit";
  // The end-of-kernel combine of the teams' sums reuses the stages:
  // vpt * vec (dw, db) pairs a thread.
  if (size_t(c.stages) * size_t(prob.tensors * c.vpt * 16 + 8) < size_t(c.vpt) * c.vec * 8)
    return "the stages cannot hold the teams' weight-gradient sums";
  if (c.row_blocks * c.teams_per_cta() < prob.rows) return "row blocks do not cover the rows";
  if (c.grid % c.cluster) return "grid is not a whole number of clusters";
  if (c.grid / c.cluster > c.row_blocks) return "more clusters than row blocks";
  if (prob.rows > 0 && c.grid == 0) return "empty grid for a non-empty problem";
  if (c.grid > std::max<int64_t>(c.cluster, pipe_ctas_per_sm(c, c.smem_bytes, lim) *
                                                  lim.num_sms))
    return "grid beyond the resident CTAs";
  return nullptr;
}

ChunkRowConfig choose_chunk_row_config(const ChunkRowProblem& prob, const DeviceLimits& lim) {
  return choose_chunk_row_config(prob, lim, current_row_tuning());
}

ChunkRowConfig choose_chunk_row_config(const ChunkRowProblem& prob, const DeviceLimits& lim,
                                       const RowTuning& tune) {
  ChunkRowConfig c;
  c.vec = 16 / prob.elem_bytes;
  const int64_t nvec = ceil_div(std::max<int64_t>(prob.cols, 1), c.vec);
  const int64_t row_bytes = nvec * 16 * prob.tensors;
  const int max_cluster = std::min(16, std::max(lim.max_cluster, 1));
  const int64_t cta_bytes = std::max<int64_t>(tune.chunk_cta_bytes, 16);
  while (c.cluster < max_cluster && row_bytes > int64_t(c.cluster) * cta_bytes) c.cluster *= 2;
  c.chunk_vecs = ceil_div(nvec, c.cluster);
  // Threads: the CTA size asked for, fewer when the chunk gives each thread
  // less than one unrolled step (4 vectors); at least 128 (the kernel orders
  // its staging stores by the CTA reduction's barrier).
  const int64_t want = std::min<int64_t>(pow2_ceil(std::max(tune.chunk_threads, 128)), kRegRowMaxThreads);
  c.threads = int(std::clamp<int64_t>(pow2_ceil(ceil_div(c.chunk_vecs, 4)), 128, want));
  const int64_t room = int64_t(lim.max_smem_per_block) - int64_t(prob.scratch_bytes);
  const int64_t stage_bytes = std::max<int64_t>(std::min<int64_t>(tune.chunk_stage_bytes, room), 0);
  c.stage_vecs = int(std::min<int64_t>(c.chunk_vecs, stage_bytes / (16 * prob.tensors)));
  c.smem_bytes = prob.scratch_bytes + size_t(c.stage_vecs) * 16 * prob.tensors;
  // Persistent: at most 32 clusters' worth per SM are ever resident.
  c.grid = std::min<int64_t>(prob.rows, int64_t(lim.num_sms) * 32) * c.cluster;
  return c;
}

const char* check_chunk_row_config(const ChunkRowConfig& c, const ChunkRowProblem& prob, const DeviceLimits& lim) {
  const int64_t nvec = ceil_div(std::max<int64_t>(prob.cols, 1), c.vec);
  if (c.vec * prob.elem_bytes != 16) return "vector is not 16 bytes";
  if (c.threads < 128 || c.threads > kRegRowMaxThreads || (c.threads & (c.threads - 1)))
    return "threads is not a power of two in [128, 1024]";
  if (c.cluster < 1 || c.cluster > 16 || c.cluster > lim.max_cluster || (c.cluster & (c.cluster - 1)))
    return "cluster is not a power of two in [1, max_cluster]";
  if (c.chunk_vecs * c.cluster < nvec) return "chunks do not cover the row";
  if (c.chunk_vecs > int64_t(0x7fffffff) / 2) return "chunk too long for int indexing";
  if (c.stage_vecs < 0 || c.stage_vecs > c.chunk_vecs) return "staging outside [0, chunk]";
  if (c.smem_bytes != prob.scratch_bytes + size_t(c.stage_vecs) * 16 * prob.tensors ||
      c.smem_bytes > lim.max_smem_per_block)
    return "shared memory is not scratch + staging within the per-CTA limit";
  if (c.grid % c.cluster) return "grid is not a whole number of clusters";
  if (prob.rows > 0 && c.grid == 0) return "empty grid for a non-empty problem";
  if (c.grid / c.cluster > prob.rows) return "more clusters than rows";
  if (c.grid > int64_t(0x7fffffff)) return "grid exceeds gridDim.x";
  return nullptr;
}

const char* check_row_config(const RowConfig& c, const RowProblem& prob,
                             const DeviceLimits& lim) {
  const int64_t nvec = ceil_div(std::max<int64_t>(prob.cols, 1), c.vec);
  if (c.vec * prob.x_elem_bytes != 16) return "vector is not 16 bytes of x";
  if (c.team < 1 || c.team > 1024 || (c.team & (c.team - 1))) return "team is not a power of two in [1, 1024]";
  if (c.threads < c.team || c.threads > kRowKernelMaxThreads || c.threads % c.team)
    return "threads is not a multiple of team in [team, kRowKernelMaxThreads]";
  if (c.threads % 32) return "threads is not a whole number of warps";
  if (c.cluster < 1 || c.cluster > lim.max_cluster) return "cluster outside [1, max_cluster]";
  if (c.cluster > 1 && c.threads != c.team) return "a clustered row must own whole CTAs";
  if (c.chunks > 1 && c.threads != c.team) return "a chunked row must own whole CTAs";
  if (c.threads != c.team && c.team > 32) return "a team larger than a warp must own its CTA";
  if (c.rows_per_team < 1 || (c.rows_per_team > 1 && c.team > 32)) return "rows_per_team > 1 needs a team of at most a warp";
  if (c.vpt < 1) return "vpt < 1";
  if (c.seg_vecs * c.cluster < nvec) return "cluster segments do not cover the row";
  if (c.chunk_vecs() * c.chunks < c.seg_vecs) return "chunks do not cover the segment";
  if (c.smem_bytes > lim.max_smem_per_block) return "shared memory exceeds the per-CTA limit";
  if (c.buffers < 1 || c.buffers > 2 || (c.buffers == 2 && c.chunks > 1)) return "buffers must be 1 or 2 (1 when chunked)";
  if (c.smem_bytes < c.buffers * c.stage_bytes) return "shared memory smaller than the staging buffers";
  if (c.row_blocks * c.rows_per_cta() < prob.rows) return "row blocks do not cover the rows";
  if (c.grid < 0 || c.grid > int64_t(0x7fffffff)) return "grid exceeds gridDim.x";
  if (c.grid % c.cluster) return "grid is not a whole number of clusters";
  if (c.grid / c.cluster > c.row_blocks) return "more clusters than row blocks";
  if (prob.rows > 0 && c.grid == 0) return "empty grid for a non-empty problem";
  return nullptr;
}

namespace {

// The grid kernels' layout for `tiles` tiles of the row a stage (backward: h
// and dy; forward: x), the tuning's knobs for the direction passed in.
struct GridKnobs {
  int bits;
  int64_t min_cols16, min_cols32;
  int stages16, stages32, lag, rows16, rows32;
  int max_rows16, max_rows32;  // the kernels built: rows a step at most
  int64_t max_step_words = 0;  // the words a step's exchange may hold (0: no bound)
};
bool choose_norm_grid_config(int64_t rows, int64_t cols, int x_elem_bytes, bool centre, int tiles,
                             const DeviceLimits& lim, const GridKnobs& k, NormGridConfig* out) {
  if (x_elem_bytes != 2 && x_elem_bytes != 4) return false;
  const int64_t min_cols = x_elem_bytes == 4 ? k.min_cols32 : k.min_cols16;
  if (!(k.bits & (x_elem_bytes == 4 ? 2 : 1)) || cols < std::max<int64_t>(min_cols, 1))
    return false;
  if (rows < 1 || rows >= (int64_t(1) << 31)) return false;  // the exchange's 32-bit row tags
  NormGridConfig c;
  const int vec = 16 / x_elem_bytes;
  const int64_t nvec = ceil_div(cols, vec);
  const int64_t tile_max = int64_t(kNormGridCtaThreads) * (kNormGridCtaElems / vec);
  const int64_t ranks = ceil_div(nvec, tile_max);
  if (ranks > lim.num_sms) return false;  // one CTA an SM, all resident
  if (ranks > kNormGridMaxRanks) return false;  // the header's collected words
  c.ranks = int(ranks);
  c.tile_vecs = ceil_div(nvec, ranks);
  c.groups = int(std::max<int64_t>(1, std::min<int64_t>(rows, lim.num_sms / ranks)));
  const size_t stage = size_t(c.tile_vecs) * 16 * size_t(tiles);
  const int asked = x_elem_bytes == 4 ? k.stages32 : k.stages16;
  // The stages that fit beside a header of `words` collected words a rank
  // a step (the backward's: 4).
  auto stages_beside = [&](int words) {
    const size_t header = tiles == 1 ? norm_fwd_grid_header(words) : kNormGridHeader;
    const int64_t fit = (int64_t(lim.max_smem_per_block) - int64_t(header)) / int64_t(stage);
    return int(std::min<int64_t>({fit, int64_t(asked), int64_t(kNormGridStagesMax)}));
  };
  const int per_row = centre ? 2 : 1;
  c.stages = stages_beside(4);
  // Rows a step (1, 2 or 4; the knob rounded down to one of them, at most
  // the kernels'): halved until two steps of them and a row in flight fit.
  const int want = x_elem_bytes == 2 ? std::min(k.rows16, k.max_rows16) : std::min(k.rows32, k.max_rows32);
  c.rows = want >= 4 ? 4 : want >= 2 ? 2 : 1;
  while (c.rows > 1 && c.stages < 2 * c.rows + 1) c.rows /= 2;
  if (c.rows * per_row > 4) {
    // The forward's larger header (LayerNorm's four rows): its stages, or
    // two rows beside the smaller one.
    const int s8 = stages_beside(c.rows * per_row);
    if (s8 >= 2 * c.rows + 1) c.stages = s8;
    else c.rows /= 2;
  }
  if (k.max_step_words > 0 && norm_grid_step_words(c.ranks, c.rows, centre) > k.max_step_words) c.rows = 1;
  // At least one row in flight past the lag where the stages allow it: the
  // lag's steps and the step being reduced hold (lag + 1) * rows stages.
  c.lag = std::min({std::max(k.lag, 1), kNormGridMaxLag, std::max((c.stages - 1) / c.rows - 1, 1)});
  if (c.stages < 2) return false;
  c.smem_bytes = (tiles == 1 ? norm_fwd_grid_header(c.rows * per_row) : kNormGridHeader) + size_t(c.stages) * stage;
  c.grid = int64_t(c.ranks) * c.groups;
  c.steps = ceil_div(ceil_div(rows, int64_t(c.groups)), int64_t(c.rows));
  // A group's exchange log is indexed in 32 bits (core/grid_exchange.cuh).
  if (c.steps * norm_grid_step_words(c.ranks, c.rows, centre) >= (int64_t(1) << 31)) return false;
  const size_t words = size_t(c.groups) * size_t(c.steps) * size_t(c.ranks) * size_t(c.rows) * (centre ? 2 : 1);
  c.exchange_bytes = (words * 8 + 15) / 16 * 16;
  *out = c;
  return true;
}

// centre: two words a row in the exchange (LayerNorm's sums or dots,
// softmax's pair; the forward's header follows the words).
const char* check_norm_grid_config(const NormGridConfig& c, int64_t rows, int64_t cols, int x_elem_bytes, int tiles,
                                   bool centre, int max_rows16, int max_rows32, const DeviceLimits& lim) {
  const int vec = 16 / x_elem_bytes;
  const int64_t nvec = ceil_div(cols, vec);
  if (c.ranks < 1 || c.groups < 1 || c.grid != int64_t(c.ranks) * c.groups) return "grid != ranks * groups";
  if (c.grid > lim.num_sms) return "more CTAs than SMs (one CTA an SM, all resident)";
  if (c.ranks > kNormGridMaxRanks) return "more ranks than the header's collected words hold";
  if (c.groups > std::max<int64_t>(rows, 1)) return "more row groups than rows";
  if (c.tile_vecs > int64_t(kNormGridCtaThreads) * (kNormGridCtaElems / vec))
    return "tile beyond kNormGridCtaElems elements a thread";
  if (int64_t(c.ranks) * c.tile_vecs < nvec) return "tiles do not cover the row";
  if (int64_t(c.ranks - 1) * c.tile_vecs >= nvec) return "the last rank owns no column";
  if (c.stages < 2 || c.stages > kNormGridStagesMax) return "stages outside [2, kNormGridStagesMax]";
  if ((c.rows != 1 && c.rows != 2 && c.rows != 4) || c.rows > (x_elem_bytes == 2 ? max_rows16 : max_rows32))
    return "rows a step not 1, 2 or 4, or more than the dtype's kernels take";
  if (c.lag < 1 || (c.lag + 1) * c.rows > c.stages || c.lag > kNormGridMaxLag)
    return "lag outside [1, 7] or (lag + 1) * rows beyond the stages";
  const size_t header = tiles == 1 ? norm_fwd_grid_header(c.rows * (centre ? 2 : 1)) : kNormGridHeader;
  if (c.smem_bytes != header + size_t(c.stages) * size_t(c.tile_vecs) * 16 * size_t(tiles))
    return "smem != header + stages";
  if (c.smem_bytes > lim.max_smem_per_block) return "shared memory beyond a CTA's limit";
  if (c.steps * c.rows * c.groups < rows) return "the exchange log's steps do not cover the group's rows";
  const int64_t step_words = norm_grid_step_words(c.ranks, c.rows, centre);
  if (c.steps * step_words >= (int64_t(1) << 31)) return "a group's exchange log past 2^31 words";
  if (c.exchange_bytes < size_t(c.groups) * size_t(c.steps) * size_t(step_words) * 8)
    return "exchange_bytes below the words (a rank's a row) of every step";
  return nullptr;
}

}  // namespace

bool choose_norm_bwd_grid_config(int64_t rows, int64_t cols, int x_elem_bytes, bool centre, const DeviceLimits& lim,
                                 const RowTuning& tune, NormGridConfig* out) {
  const GridKnobs k{tune.bwd_grid,          tune.bwd_grid_min_cols16, tune.bwd_grid_min_cols32,
                    tune.bwd_grid_stages16,  tune.bwd_grid_stages32,   tune.bwd_grid_lag,
                    tune.bwd_grid_rows16,    1,                        kNormGridMaxRowsPerStep,
                    1,                       kNormBwdGridMaxStepWords};
  return choose_norm_grid_config(rows, cols, x_elem_bytes, centre, 2, lim, k, out);
}

const char* check_norm_bwd_grid_config(const NormGridConfig& c, int64_t rows, int64_t cols, int x_elem_bytes,
                                       const DeviceLimits& lim, bool centre) {
  return check_norm_grid_config(c, rows, cols, x_elem_bytes, 2, centre, kNormGridMaxRowsPerStep, 1, lim);
}

bool choose_norm_fwd_grid_config(int64_t rows, int64_t cols, int x_elem_bytes, bool centre, const DeviceLimits& lim,
                                 const RowTuning& tune, NormGridConfig* out) {
  if (cols < kNormFwdWorkspaceMinCols) return false;
  // 16-bit rows up to four a step, fp32 rows two.
  const GridKnobs k{tune.fwd_grid,         tune.fwd_grid_min_cols16, tune.fwd_grid_min_cols32,
                    tune.fwd_grid_stages16, tune.fwd_grid_stages32,   tune.fwd_grid_lag,
                    tune.fwd_grid_rows16,   tune.fwd_grid_rows32,     kNormFwdGridMaxRowsPerStep,
                    2};
  return choose_norm_grid_config(rows, cols, x_elem_bytes, centre, 1, lim, k, out);
}

const char* check_norm_fwd_grid_config(const NormGridConfig& c, int64_t rows, int64_t cols, int x_elem_bytes,
                                       const DeviceLimits& lim, bool centre) {
  if (cols < kNormFwdWorkspaceMinCols) return "a row shorter than kNormFwdWorkspaceMinCols";
  return check_norm_grid_config(c, rows, cols, x_elem_bytes, 1, centre, kNormFwdGridMaxRowsPerStep, 2, lim);
}

// Softmax's: two words a row in the exchange (the pair), as LayerNorm's
// (centre: the layout's two-word rows).
bool choose_softmax_fwd_grid_config(int64_t rows, int64_t cols, int x_elem_bytes, const DeviceLimits& lim,
                                    const RowTuning& tune, NormGridConfig* out) {
  if (cols < kSoftmaxFwdWorkspaceMinCols) return false;
  // Two words a row (the pair): two rows a step at most, in either dtype.
  const GridKnobs k{tune.softmax_fwd_grid,  tune.softmax_fwd_grid_min_cols16, tune.softmax_fwd_grid_min_cols32,
                    tune.fwd_grid_stages16, tune.fwd_grid_stages32,           tune.fwd_grid_lag,
                    tune.fwd_grid_rows16,   tune.softmax_fwd_grid_rows32,     kNormGridMaxRowsPerStep,
                    2};
  return choose_norm_grid_config(rows, cols, x_elem_bytes, true, 1, lim, k, out);
}

const char* check_softmax_fwd_grid_config(const NormGridConfig& c, int64_t rows, int64_t cols, int x_elem_bytes,
                                          const DeviceLimits& lim) {
  if (cols < kSoftmaxFwdWorkspaceMinCols) return "a row shorter than kSoftmaxFwdWorkspaceMinCols";
  return check_norm_grid_config(c, rows, cols, x_elem_bytes, 1, true, kNormGridMaxRowsPerStep, 2, lim);
}

// The backward's: y's and dy's tiles a stage (the norm grid backward's
// layout and knobs), a word a row (the dot); 16-bit rows up to two a step,
// fp32 rows one.
bool choose_softmax_bwd_grid_config(int64_t rows, int64_t cols, int x_elem_bytes, const DeviceLimits& lim,
                                    const RowTuning& tune, NormGridConfig* out) {
  if (cols < kSoftmaxBwdWorkspaceMinCols) return false;
  const GridKnobs k{tune.softmax_bwd_grid,  tune.softmax_bwd_grid_min_cols16, tune.softmax_bwd_grid_min_cols32,
                    tune.bwd_grid_stages16, tune.bwd_grid_stages32,           tune.bwd_grid_lag,
                    tune.bwd_grid_rows16,   1,                                kNormGridMaxRowsPerStep,
                    1};
  return choose_norm_grid_config(rows, cols, x_elem_bytes, false, 2, lim, k, out);
}

const char* check_softmax_bwd_grid_config(const NormGridConfig& c, int64_t rows, int64_t cols, int x_elem_bytes,
                                          const DeviceLimits& lim) {
  if (cols < kSoftmaxBwdWorkspaceMinCols) return "a row shorter than kSoftmaxBwdWorkspaceMinCols";
  return check_norm_grid_config(c, rows, cols, x_elem_bytes, 2, false, kNormGridMaxRowsPerStep, 1, lim);
}

}  // namespace quack
