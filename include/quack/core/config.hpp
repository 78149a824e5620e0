// Row-kernel launch configuration: how one (M, N) problem is cut into teams,
// CTAs and clusters, and how much of a row is staged on chip.
//
// Host-only and pure (no CUDA calls): unit-tested for every N on a CPU.
//
// Vocabulary (one row of N elements, in "vectors" of `vec` elements = 16 B of x):
//   team      threads of one CTA that cooperate on one row (power of two,
//             1..1024); a CTA holds `threads / team` teams.
//   cluster   CTAs that split one row between them (1..16), reduced through
//             distributed shared memory.
//   vpt       vectors staged per thread per row (per chunk).
//   rows_per_team  rows a team stages at once (more bytes in flight for small N).
//   chunks    1 when the CTA's share of the row fits its shared memory (the row
//             is read from HBM once); > 1 otherwise (two passes over the row).
//   buffers   2: the CTA is persistent and stages its next rows while it
//             reduces and writes the current ones (double buffering); 1 for
//             chunked rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "quack/quack.hpp"

namespace quack {

// Largest CTA a row kernel is built for (__launch_bounds__).
constexpr int kRowKernelMaxThreads = 256;
// Longest row the kernels serve. Their column arithmetic is 32-bit and a
// thread's column index runs up to one chunk (< 2^17 columns) past the row's
// end while it zero-fills padding slots, so 2^30 keeps far from 2^31.
constexpr int64_t kRowMaxCols = int64_t(1) << 30;

struct DeviceLimits {
  int num_sms = 132;                    // H100 SXM / H200
  size_t max_smem_per_block = 232448;   // opt-in dynamic smem per CTA (227 KB)
  size_t smem_per_sm = 233472;          // 228 KB
  int max_cluster = 16;                 // 16 needs the non-portable attribute
  int compute_capability = 90;          // major * 10 + minor
};

struct RowConfig {
  int vec = 1;            // elements per vector
  int team = 1;           // threads per row inside one CTA
  int threads = 1;        // threads per CTA (multiple of team)
  int cluster = 1;        // CTAs per row
  int vpt = 1;            // vectors per thread per row per chunk
  int rows_per_team = 1;  // rows staged at once by one team
  int chunks = 1;         // passes of the CTA's segment through shared memory
  int buffers = 2;        // staging buffers (2: next rows load during this row's work)
  int64_t seg_vecs = 0;   // vectors of a row owned by one CTA of the cluster
  size_t stage_bytes = 0; // one staging buffer
  size_t smem_bytes = 0;  // dynamic shared memory per CTA (scratch + buffers)
  int64_t row_blocks = 0; // groups of rows_per_cta rows (a cluster works on one at a time)
  int64_t grid = 0;       // CTAs in the launch: cluster * min(row_blocks, resident clusters)

  int teams_per_cta() const { return threads / team; }
  int64_t rows_per_cta() const { return int64_t(teams_per_cta()) * rows_per_team; }
  // Vectors one CTA stages per chunk of one row.
  int64_t chunk_vecs() const { return int64_t(team) * vpt; }
};

// Describes what a row kernel stages per element (bytes of every tensor held
// in shared memory for one element of the row: x, plus residual, plus dy...).
struct RowProblem {
  int64_t rows = 0;
  int64_t cols = 0;
  int x_elem_bytes = 2;        // decides the vector width: 16 B of x
  int staged_elem_bytes = 2;   // sum over staged tensors of their element bytes
  // Extra per-CTA shared memory the kernel needs besides the staged rows
  // (reduction scratch), in bytes.
  size_t scratch_bytes = 0;
};

// The heuristic's tuning constants. The defaults are the measured choices
// (each cites its measurement in config.cpp); tools may pass others to
// explore.
struct RowTuning {
  int64_t cta_target_bytes;  // staged bytes per CTA above which a row is clustered
  int64_t cta_max_bytes;     // staged bytes per CTA above which a row is chunked
  int vpt_target;            // vectors per thread per row aimed for
  int max_team;              // largest team (threads per row in one CTA)
  int small_team_threads;    // CTA size when teams of <= 32 threads share a CTA
  int max_rows_per_team;     // rows a small team stages at once
  int regs_per_thread;       // register budget the kernels are built for (occupancy)
  // Register-resident kernels (RegRowConfig below).
  int reg_enable;            // 0: always use the staged kernels (tests, A/B runs)
  int reg_vpt_target;        // vectors per thread aimed for
  int reg_max_team;          // largest team at reg_vpt_target (then the largest tile per thread)
  // RMSNorm / LayerNorm forward rows of 16-bit x and at least this many
  // elements aim for 8 vectors a thread in the register tiles (in place of
  // reg_vpt_target; with a residual stream the tile is at most 4, or 2
  // with fp32 weights, as ever); 0: off.
  int norm_fwd_vpt16_min_cols;
  // The same for shifted rows (RowTuning::shifted_rows bit 2), counted in
  // the shifted tile's columns, N + VEC - 1; 0: as norm_fwd_vpt16_min_cols.
  // Where both are set the smaller applies.
  int norm_fwd_shift_vpt16_min_cols;
  int reg_wide_team;         // largest team at the largest tile, and the CTA of clustered rows
  // Register rows spread over more threads (fewer vectors each, down to 1)
  // while rows * threads a row stays below num_sms * this: decode-sized
  // batches; 0: never (the tile stays at reg_vpt_target). Not past a team
  // of reg_fill_max_team threads.
  int reg_fill_threads_per_sm;
  int reg_fill_max_team;
  // Unclustered 1- and 2-vector forward tiles whose row is one team owning
  // its CTA and exactly the tile (N = vpt * team * vec) take the lean
  // kernels (kLean): bit 0 the norms (ops/rmsnorm.cuh), bit 1 softmax and
  // log-softmax (ops/softmax.cuh), bit 2 cross-entropy's plain forward
  // (ops/cross_entropy.cuh); 0: never.
  int reg_lean;
  int reg_small_threads;     // CTA size when teams of <= 32 threads share a CTA
  // Unclustered register rows of one team a CTA (more than a warp) in the
  // fewest whole warps that cover the row at the tile chosen, not the power
  // of two above (bf16 N = 5120, 640 vectors at 4 a thread: 160 threads,
  // not 256 with 3/8 of the tile idle); 0: powers of two. Softmax and
  // cross-entropy; norm_fit_team: the same for the RMSNorm / LayerNorm
  // forward (RegRowProblem::fit_team).
  int reg_fit_team;
  int norm_fit_team;
  // Clustered rows stage x in shared memory where allowed. RMSNorm and
  // LayerNorm forward (rows without a residual stream): bit 0 for 16-bit x,
  // bit 1 for fp32 x; reg_staged_early_w, the same bits, for rows that load
  // the weight (in x's dtype) while x is in flight rather than after the
  // reduction; LayerNorm only where ln_staged's bits allow too. Softmax
  // stages where reg_staged is non-zero and softmax_staged_fwd (below)
  // allows.
  int reg_staged;
  int reg_staged_early_w;
  int reg_small_cta;  // 1: 8-vector fp32-weight tiles of 16-bit x in CTAs of <= 256 threads get an 80-register budget
  int ln_staged;             // LayerNorm's own dtype bits (staged where reg_staged allows too)
  int reg_staged_team;       // the CTA size of staged clustered rows
  int reg_staged_above_team; // rows whose register tile needs a wider team are staged where allowed
  int reg_staged_above_team_f32;  // the same for RMSNorm / LayerNorm forward rows of fp32 x
  // RMSNorm / LayerNorm forward, staged rows whose weight is loaded after the
  // reduction: 1 issues a thread's weight (and bias) vectors together, 0 one
  // before each use; 2 as 1, with the next batch issued before the current
  // batch's outputs are written, in the instances with the registers for it
  // (ops::staged_w_ahead: two rows a cluster, tiles past 8 vectors).
  int reg_w_batch;
  // Staged 16-bit rows at the family's staged tile whose weight comes after
  // the reduction: a cluster takes two rows at once and reads each weight
  // and bias vector once for both (the kernel's kRows). Bits: 1 RMSNorm with
  // a weight in x's dtype, 2 RMSNorm with an fp32 weight, 4 LayerNorm with
  // weight / bias in x's dtype, 8 LayerNorm with fp32 ones (none: one row).
  // reg_staged_pair_full_wave = 1: only where the pairs' CTAs still fill
  // every SM's slots once (fewer rows keep one row a cluster);
  // reg_staged_pair_min_cluster: only rows whose cluster has at least this
  // many CTAs.
  int reg_staged_pair;
  int reg_staged_pair_full_wave;
  int reg_staged_pair_min_cluster;
  // Staged rows too long for a 16-CTA cluster at the family's staged tile
  // take 2x, 4x .. that tile up to RegRowProblem::staged_vpt_max and up to
  // reg_staged_vpt_max where a register tile holds the row too (else the
  // register kernels), reg_staged_vpt_max_beyond where none does.
  int reg_staged_vpt_max;
  int reg_staged_vpt_max_beyond;
  // Staged rows of softmax (forward and backward) and the cross-entropy
  // gradient: 1 sizes the CTA to the row -- the fewest whole warps a
  // thread that still cover the row with the same cluster and tile (the
  // CTA the rules above chose, or fewer threads), so that the last CTA is
  // not mostly empty and an SM's shared memory holds more CTAs. 0: the
  // chosen power-of-two CTA. norm_staged_balance: the same for the RMSNorm
  // / LayerNorm forward's staged rows, bit 0 for 16-bit x, bit 1 for fp32
  // x (RegRowProblem::staged_balance carries a family's own choice).
  int reg_staged_balance;
  int norm_staged_balance;
  // Shifted rows -- each row's first element inside a 16-byte vector, every
  // operand at the same offset (contiguous rows whose pitch is not whole
  // vectors: bf16 N = 50257, fp32 N = 1001; a misaligned base) -- read by
  // the register and staged kernels from the vector that holds that
  // element (planned for N + VEC - 1 columns), instead of the streaming
  // kernel in shifted vectors. Bit 0: softmax (forward and backward); bit
  // 1: cross-entropy (its register kernels, any options, forward or fused
  // gradient, its staged fused gradient, its plain streaming forward and
  // cross_entropy_scale_grad; else the element-wise kernels). Bit 2: the
  // RMSNorm / LayerNorm forward, where the row's register plan is one
  // unclustered, unstaged CTA (every operand's row at x's offset, an fp32
  // residual of 16-bit x too; the weight and bias read s elements early,
  // RawVec::load_shifted), else the element-wise staged kernel. Bit 3:
  // cross-entropy's plain forward of shifted rows in the bulk-copy kernel
  // (ce_fwd_bulk_kernel's kShift) where the aligned rows' rules take it,
  // rather than the register tiles. Bit 4: the RMSNorm / LayerNorm
  // backward, in the pipelined kernel where one CTA holds the row (h, dy,
  // dx and the residual gradients at one offset; each CTA walks one class
  // of rows, every P-th, that share it: ops/rmsnorm_bwd.cuh, kShift), else
  // the element-wise kernels. Bit 5 (with bit 4): the backward's shifted
  // rows past one CTA, in clusters of small CTAs (each cluster one class).
  // Bits 0-4 on by default (config.cpp cites the sweeps: bits 0-1 since
  // f606aaa, 2-3 since the forty-eighth session, 4 since the fifty-first).
  int shifted_rows;
  // Clustered register rows: 1 ends with a cluster barrier, 0 only where a
  // CTA took part in no exchange (a CTA's last exchange already waited for
  // every peer's write into its shared memory).
  int cluster_end_sync;
  // Chunked two-pass rows (ChunkRowConfig below).
  int64_t chunk_min_bytes;   // forward rows of at least this many bytes are chunked even
                             // where the register-resident kernels fit
  int64_t chunk_min_bytes_bwd;  // the same for backward rows (bytes of y and dy)
  int64_t chunk_min_cols;    // forward rows of at least this many elements are chunked
  int chunk_clustered_fwd;   // 1: forward rows whose register tile needs a cluster are chunked
  // Softmax forward rows that stage x in shared memory in clusters of
  // reg_staged_team-thread CTAs where the register rules allow (reg_staged,
  // reg_staged_above_team), ahead of the chunking rules above: bit 0 for
  // 16-bit x, bit 1 for fp32 x; softmax_staged_vpt 16-byte vectors of x a
  // thread (8 or 16: the tiles the kernel is built with).
  int softmax_staged_fwd;
  int softmax_staged_vpt;
  // Softmax forward rows of 16-bit x and at least 512 elements: the vectors
  // a thread aimed for in the register tiles (in place of reg_vpt_target).
  int softmax_fwd_vpt16;
  // Softmax backward rows that stage y and dy in shared memory the same way
  // (bits as softmax_staged_fwd), from rows that need a cluster of register
  // CTAs up to 16 CTAs; softmax_staged_bwd_vpt 16-byte vectors of each a
  // thread (8 or 16: the tiles the kernel is built with).
  int softmax_staged_bwd;
  int softmax_staged_bwd_vpt;
  // Rows past 16 such CTAs, in CTAs of this many threads, doubled up to
  // 1024 while 16 do not hold the row (0: off, those rows take the
  // register cluster or the chunked kernel): the forward's 16 vectors of x
  // a thread, 12 staged and 4 in registers (softmax_staged_fwd_wide, where
  // softmax_staged_vpt is 16); the backward's 8 of y staged and 8 of dy in
  // registers (softmax_staged_bwd_wide, where softmax_staged_bwd_vpt is 8).
  int softmax_staged_fwd_wide;
  int softmax_staged_bwd_wide;
  // Bits as softmax_staged_fwd: the wide geometry (where its knob is on)
  // for every staged row it makes a cluster of two or more for, not only
  // past 16 staged CTAs -- fewer, larger CTAs a row (0: off; unmeasured).
  int softmax_staged_wide_first;
  // Softmax forward rows of at least softmax_fwd_grid_min_cols16 (16-bit x)
  // / 32 (fp32 x) columns (never below kSoftmaxFwdWorkspaceMinCols) take
  // the grid kernel (softmax_fwd_grid_kernel, NormGridConfig) where the
  // call passes a workspace, its rows are 16-byte aligned and
  // softmax_fwd_grid has the dtype's bit (bit 0 16-bit x, bit 1 fp32 x;
  // 0: off). Its stages, lag, 16-bit rows a step and prefetch are the norm
  // grid forward's (fwd_grid_stages16 / 32, fwd_grid_lag, fwd_grid_rows16,
  // fwd_grid_prefetch); its fp32 rows a step, softmax_fwd_grid_rows32 (1 or
  // 2; the norms' is fwd_grid_rows32).
  int softmax_fwd_grid;
  int64_t softmax_fwd_grid_min_cols16;
  int64_t softmax_fwd_grid_min_cols32;
  int softmax_fwd_grid_rows32;
  // Softmax backward rows likewise (softmax_bwd_grid_kernel: y's and dy's
  // tiles a stage, a word a row in the exchange) from
  // softmax_bwd_grid_min_cols16 / 32 columns (never below
  // kSoftmaxBwdWorkspaceMinCols), where the call passes a workspace and
  // softmax_bwd_grid has the dtype's bit. Its stages, lag and 16-bit rows a
  // step are the norm grid backward's (bwd_grid_stages16 / 32, bwd_grid_lag,
  // bwd_grid_rows16; fp32 rows one a step), its collect early where
  // fwd_grid_prefetch says.
  int softmax_bwd_grid;
  int64_t softmax_bwd_grid_min_cols16;
  int64_t softmax_bwd_grid_min_cols32;
  int64_t chunk_cta_bytes;   // bytes of the row (all tensors) per CTA aimed for: sets the cluster
  int64_t chunk_stage_bytes; // shared memory per CTA keeping the chunk between the passes
  int chunk_threads;         // CTA size
  // softmax_chunk_log_dy: log-softmax's chunked backward reads dy alone in
  // its first pass and stages twice the dy (softmax_chunk_kernel's kLogDy;
  // 0: y and dy as softmax's). On by default (config.cpp cites the sweep).
  int softmax_chunk_log_dy;
  // Cross-entropy's plain rows (no softcap or class-weighted smoothing),
  // aligned: the forward streams rows of at least ce_fwd_stream_min_bytes
  // (ce_fwd_stream_kernel) instead of holding them in registers; the
  // gradient of rows of at least ce_grad_split_min_cols classes takes two
  // passes (the forward, then ce_grad_stream_kernel from lse) instead of one
  // fused, unless staged (ce_staged_grad below).
  int64_t ce_fwd_stream_min_bytes;
  int64_t ce_grad_split_min_cols;
  // A reduced loss ('mean' or 'sum') of one row is written by the row's
  // kernel itself (CEParams::loss_out), the same bits as the finish
  // kernel's, which is then not launched; 0: the finish kernel as for any M.
  int ce_one_row_loss;
  // The finish kernel of a reduced loss launched programmatically dependent
  // on the rows' kernel (PDL: core::pdl_config), which lets it start as soon
  // as every CTA of the rows' kernel has started; 0: an ordinary launch.
  int ce_finish_pdl;
  // A reduced loss of 2 .. ce_cluster_rows rows (at most the device's
  // cluster size) without a gradient, where each row is an unclustered
  // register CTA of its own: those CTAs launched as one cluster, rank 0
  // combining the rows' terms from their shared memory into the loss, the
  // finish kernel's bits, with no finish kernel (ops::ce_cluster_finish);
  // 0: off.
  int ce_cluster_rows;
  // The rows cluster's finish one way (ops::ce_cluster_finish_oneway): each
  // CTA sends its row's terms into rank 0's shared memory with st.async and
  // leaves, rank 0 waits on an mbarrier for them; 0: two cluster barriers,
  // rank 0 reading its peers' shared memory (ops::ce_cluster_finish).
  int ce_cluster_oneway;
  // Cross-entropy gradients of aligned rows that a cluster of
  // reg_staged_team-thread CTAs holds in shared memory at ce_staged_vpt
  // 16-byte vectors a thread (8 or 16, the tiles built; 2x that for rows
  // past 16 CTAs at 8) are staged and fused -- the logits read once, dx
  // written once -- ahead of the two-pass gradient and of the register
  // clusters: bit 0 for 16-bit logits, bit 1 for fp32 (0: never), from
  // ce_staged_min_cols classes.
  int ce_staged_grad;
  int ce_staged_vpt;
  int64_t ce_staged_min_cols;
  // The staged gradient's grid: -1, one cluster a row (the default: it
  // measured faster); 0, as many clusters as are resident, each walking
  // rows (persistent, the next row staged under this one's gradient pass);
  // n > 0, at most n clusters (the tests: many rows a cluster).
  int ce_staged_clusters;
  // The plain forward of aligned rows takes the bulk-copy kernel
  // (ce_fwd_bulk_kernel, a warp a row) when there are at least
  // ce_fwd_bulk_min_rows rows (0: never) of at least ce_fwd_bulk_min_bytes2
  // (16-bit logits) or ce_fwd_bulk_min_bytes4 (fp32) and at most
  // ce_fwd_bulk_max_bytes bytes (never below 1 KB: the kernel's floor).
  int64_t ce_fwd_bulk_min_rows;
  int64_t ce_fwd_bulk_min_bytes2;
  int64_t ce_fwd_bulk_min_bytes4;
  int64_t ce_fwd_bulk_max_bytes;
  // The plain forward kernels' whole-batch loops: bit 0 ce_fwd_bulk_kernel,
  // bit 1 ce_fwd_stream_kernel (aligned rows: not its kShift). Where set, a thread's batches whose vectors
  // all lie in the chunk (the row) run first with no test, padding or
  // branch a vector; the rest in the checked loop. The same fold in the same
  // order: the same bits either way.
  int ce_fwd_whole;
  // ce_fwd_bulk_kernel's CTAs an SM: 2 (a warp's ring 12 KB, 92 registers)
  // or 3 (8 KB rings, 80 registers: half again the warps to issue from);
  // any other value is read as 2.
  int ce_fwd_bulk_ctas;
  // RMSNorm / LayerNorm backward rows that one CTA holds take the pipelined
  // kernel (rmsnorm_bwd_pipe_kernel: weight gradients in registers, the next
  // rows' h and dy copied into shared memory while this row is reduced):
  // bit 0 for 16-bit rows, bit 1 for fp32 rows (0: the register kernel with
  // shared-memory accumulators). bwd_pipe_vpt16 / bwd_pipe_vpt32: 16-byte
  // vectors a thread (1 or 2; 2 where a 1024-thread team needs it and the
  // kernel has that tile; 4: kNormBwdPipeWideVpt in small CTAs where built,
  // 16-bit rows, else 2);
  // bwd_pipe_stages: the most shared-memory stages (2..4); bwd_pipe_threads:
  // the CTA that teams of up to a warp share (larger teams own theirs);
  // bwd_pipe_cluster: the largest cluster a longer row is spread over (1:
  // rows past one CTA keep the register kernel); bwd_pipe_cluster_threads:
  // the largest CTA of such a cluster (256..1024); bwd_pipe_db_regs: with
  // dbias, CTAs of up to 256 threads take the small-CTA kernel (80
  // registers, the db sums in registers; 0: the db sums in shared memory);
  // bwd_pipe_small_cta: without dbias too (0: the 64-register kernel);
  // bwd_pipe_wide_min_cols / bwd_pipe_wide_min_cols_ln: with
  // bwd_pipe_vpt16 = 4, RMSNorm / LayerNorm rows shorter than this take the
  // 2-vector tile (0: the 4-vector tile at every length it serves).
  // bwd_pipe_wide_idle_db: rows shorter than that with dbias whose 2-vector
  // tile is one 64-register CTA (the db sums in shared memory) with more
  // than a quarter of its threads idle take the 4-vector tile where it
  // serves them in one small CTA (RMSNorm bf16 4097-6128; 0: never).
  // bwd_pipe_wide_idle32: likewise without dbias, where at least this many
  // thirty-seconds of the CTA's threads are idle (15: bf16 4097-4352; 32: never).
  // bwd_pipe_fit_team: a row of one CTA (more than a warp, unclustered) in
  // the fewest whole warps that cover it at its tile, not the power of two
  // above -- bf16 5120 at 2 vectors in 320 threads, not 512 -- and the
  // stages (sized a thread) shrink with it (0: powers of two).
  // bwd_pipe_ctas_per_sm: at most this many CTAs an SM (0: as many as fit;
  // the stage count is then picked for the most stages in flight an SM),
  // for the 2-vector tile's CTAs of 512 threads or more and the 4-vector
  // tile's clusters of two (config.cpp, capped_ctas; 1 by default);
  // bwd_pipe_min_threads: a power-of-two team of more than a warp at 2
  // vectors shares a CTA of at least this many threads with other teams
  // where the rows fill every SM (0: a CTA a team; 512 by default).
  // Neither acts on LayerNorm rows with dbias (config.cpp says why) unless
  // bwd_pipe_share_db is 1 (0 by default: an experiment's switch) or
  // bwd_pipe_big_cta is.
  // bwd_pipe_big_cta: aligned rows whose 2-vector CTA is
  // kNormBwdPipeBigCtaThreads threads (teams sharing one, or a team of that
  // size) take the big-CTA kernel (RegRowConfig::big_cta), one an SM: 1
  // (the default) LayerNorm rows with dbias, whose teams then share its CTAs
  // as the others' do; 2 every row; 0 none.
  // bwd_pipe_lead_threads: in CTAs of at least this many threads a row's
  // (rstd, mean) is copied and read by one thread a warp (a team's first,
  // teams below a warp each their own) and shuffled to the others
  // (RegRowConfig::lead_stats; 1024, the default: fp32's 1024-thread
  // CTAs, the measured threshold, config.cpp says why; 0: never).
  int bwd_pipe;
  int bwd_pipe_fit_team;
  int bwd_pipe_vpt16;
  int bwd_pipe_vpt32;
  int bwd_pipe_stages;
  int bwd_pipe_threads;
  int bwd_pipe_cluster;
  int bwd_pipe_cluster_threads;
  int bwd_pipe_db_regs;
  int bwd_pipe_small_cta;
  int64_t bwd_pipe_wide_min_cols;
  int64_t bwd_pipe_wide_min_cols_ln;
  int bwd_pipe_wide_idle_db;
  int bwd_pipe_wide_idle32;
  int bwd_pipe_ctas_per_sm;
  int bwd_pipe_min_threads;
  int bwd_pipe_share_db;
  int bwd_pipe_big_cta;
  int bwd_pipe_big_stages;  // the big-CTA kernel's most stages (2..4)
  int bwd_pipe_lead_threads;
  // Rows of at least bwd_grid_min_cols16 (16-bit rows) / bwd_grid_min_cols32
  // (fp32 rows) columns take the grid kernel (rmsnorm_bwd_grid_kernel,
  // NormGridConfig below) where it serves them and bwd_grid has the
  // dtype's bit: bit 0 for 16-bit rows, bit 1 for fp32 rows. bwd_grid_stages16 /
  // bwd_grid_stages32: its shared-memory stages (the most that fit, at most
  // this many); bwd_grid_lag: the rows a CTA collects a row's sums after
  // publishing its own (1..7, below the stages); bwd_grid_rows16: rows
  // of a 16-bit tensor a CTA reduces and exchanges together, a step (1 or
  // 2; fp32 rows take 1: their 64 KB stages fit 3), the lag then counted in
  // steps. bwd_grid_keep_cluster16: 16-bit rows the register / pipelined
  // kernel serves in a cluster of at least this many CTAs stay on it when
  // no dbias is asked for (0: never).
  int bwd_grid;
  int64_t bwd_grid_min_cols16;
  int64_t bwd_grid_min_cols32;
  int bwd_grid_stages16;
  int bwd_grid_stages32;
  int bwd_grid_lag;
  int bwd_grid_rows16;
  int bwd_grid_keep_cluster16;
  // Forward rows of at least fwd_grid_min_cols16 (16-bit x) / 32 (fp32 x)
  // columns (never below kNormFwdWorkspaceMinCols) take the grid forward
  // (rmsnorm_fwd_grid_kernel) where the call passes a workspace, the layout
  // allows (x and out in one dtype, no residual, 16-byte aligned) and
  // fwd_grid has the dtype's bit (bit 0 16-bit x, bit 1 fp32 x) -- unless
  // the register kernels serve the row and fwd_grid_keep_reg has the
  // layout's bit: bit 0 16-bit x with its weight and bias in x's dtype (or
  // none), bit 1 16-bit x with fp32 ones, bit 2 fp32 x. fwd_grid_stages16 /
  // 32, fwd_grid_lag, fwd_grid_rows16: as the backward's. fwd_grid_prefetch:
  // 1 issues a step's collect loads at the top of the step, under phase A;
  // 0 after it.
  int fwd_grid;
  int64_t fwd_grid_min_cols16;
  int64_t fwd_grid_min_cols32;
  int fwd_grid_keep_reg;
  int fwd_grid_stages16;
  int fwd_grid_stages32;
  int fwd_grid_lag;
  int fwd_grid_rows16;
  int fwd_grid_prefetch;
  // fp32 rows a step of the grid forwards (norms and softmax; 1 or 2; the
  // 16-bit rows' is fwd_grid_rows16: 1, 2, or 4 for the norms). Two rows pay
  // a step's barriers and exchange once for both (as 16-bit rows have since
  // the grid's first version); rows halve where the stages cannot hold
  // 2 * rows + 1 of them.
  int fwd_grid_rows32;
};
RowTuning default_row_tuning();
// The tuning the ops use: the defaults, unless a tuning tool installed others
// with set_row_tuning (nullptr restores the defaults). Not for concurrent use
// with running ops: it exists for benchmarks that sweep the constants.
RowTuning current_row_tuning();
void set_row_tuning(const RowTuning* tune);

// Chooses the configuration. Never fails for cols >= 1 and rows >= 0; a row
// too long for the on-chip capacity of a 16-CTA cluster gets chunks > 1.
RowConfig choose_row_config(const RowProblem& prob, const DeviceLimits& lim);
RowConfig choose_row_config(const RowProblem& prob, const DeviceLimits& lim, const RowTuning& tune);

// Checks the invariants every kernel relies on; returns nullptr when the
// config is valid for the problem, otherwise a static description of the
// first broken invariant. Used by the tests and as a debug assertion.
const char* check_row_config(const RowConfig& cfg, const RowProblem& prob,
                             const DeviceLimits& lim);

// ---------------------------------------------------------------------------
// Register-resident row kernels: a thread holds its whole share of a row in
// registers (loaded straight from global memory, every load issued before the
// first use), so there is no staging buffer and the CTA is small enough for
// many of them to share an SM. A row is served this way when
//   cols <= cluster * team * vpt * vec with team <= 1024, cluster <= 16 and
//   vpt <= max_vpt (the kernel's register tile: vpt 16-byte vectors of x, or
//   the fp32 values they widen to when the kernel keeps fp32 per element);
//   clustered rows use the family's cluster_vpt tile.
// The vector count per thread is a compile-time bucket: 1, 2, 4 or 8.
constexpr int kRegRowMaxThreads = 1024;
constexpr int kRegRowVptBuckets[] = {1, 2, 4, 8};

struct RegRowProblem {
  int64_t rows = 0;
  int64_t cols = 0;
  int x_elem_bytes = 2;  // decides the vector width: 16 B of x
  int max_vpt = 8;       // largest bucket the kernel family is built with
  int cluster_vpt = 0;   // the bucket of its clustered kernels (0: max_vpt)
  int staged_vpt = 0;    // > 0: clustered rows may stage x in shared memory at this tile
  int staged_tensors = 1;  // tensors staged a row (a tile of staged_vpt vectors each)
  int staged_vpt_max = 0;  // > staged_vpt: the kernels also take 2x, 4x .. this tile
  // > 0: rows that max_cluster staged CTAs do not cover (at staged_vpt and
  // its doublings) take CTAs of staged_wide_team threads at staged_wide_vpt
  // vectors of each tensor a thread, staged_wide_smem_vpt of the thread's
  // vectors (all tensors) in shared memory and the rest in registers. 0: no
  // such geometry.
  int staged_wide_team = 0;
  int staged_wide_vpt = 0;
  int staged_wide_smem_vpt = 0;
  // The wide geometry also for rows the staged tile covers, wherever it
  // makes a cluster of two or more (an experiment's switch).
  bool staged_wide_first = false;
  int vpt_target = 0;    // > 0: the family's own vectors-per-thread target (else the tuning's)
  int staged_above_team = 0;  // > 0: the family's own reg_staged_above_team
  int staged_balance = -1;    // >= 0: the family's own reg_staged_balance (-1: the tuning's)
  int fit_team = -1;          // >= 0: the family's own reg_fit_team (-1: the tuning's)
  size_t scratch_bytes = 0;  // shared memory the kernels use besides staging
  // Staged rows at staged_vpt may go two a cluster (2; 1: never), then with
  // staged_pair_scratch_bytes of scratch, in clusters of at least
  // pair_min_cluster CTAs; pair_full_wave: only where ceil(rows / 2)
  // clusters fill every SM once.
  int staged_rows = 1;
  size_t staged_pair_scratch_bytes = 0;
  int pair_min_cluster = 2;
  bool pair_full_wave = true;
  int tile_for_clusters() const { return cluster_vpt > 0 && cluster_vpt < max_vpt ? cluster_vpt : max_vpt; }
};

struct RegRowConfig {
  int vec = 1;             // elements per vector
  int team = 1;            // threads per row in one CTA (power of two; staged rows and
                           // RowTuning::*fit_team's: whole warps)
  int threads = 1;         // threads per CTA (multiple of team)
  int cluster = 1;         // CTAs per row
  int vpt = 1;             // vectors per thread (a bucket)
  int64_t row_blocks = 0;  // groups of threads/team rows (clustered: one row, or rows_per_cluster staged ones)
  int64_t grid = 0;        // CTAs in the launch: cluster * row_blocks
  bool staged = false;     // x staged in shared memory (clustered rows only)
  int staged_smem_vpt = 0;  // staged rows: vectors a thread in shared memory, all tensors (the rest in registers)
  int rows_per_cluster = 1;  // staged rows: rows a cluster takes at once (1 or 2)
  int stages = 0;          // norm backward, pipelined: shared-memory stages (0: not pipelined)
  bool small_cta = false;  // norm backward, pipelined: the small-CTA kernel (kNormBwdPipeSmallCtaThreads)
  bool big_cta = false;    // norm backward, pipelined: the big-CTA kernel (kNormBwdPipeBigCtaThreads)
  bool lead_stats = false;  // norm backward, pipelined: a row's statistics copied by one thread a warp
  bool lean = false;       // forward: one team a CTA and N exactly the tile (kLean; set by the op's plan)
  size_t smem_bytes = 0;   // dynamic shared memory per CTA (scratch + staging)

  int teams_per_cta() const { return threads / team; }
};

// Chooses a register-resident configuration; returns false (and leaves *out
// unspecified) when the row does not fit the register tile of a 16-CTA
// cluster of 1024-thread CTAs, when the row blocks outnumber gridDim.x, or
// when the tuning disables the path.
bool choose_reg_row_config(const RegRowProblem& prob, const DeviceLimits& lim, RegRowConfig* out);
bool choose_reg_row_config(const RegRowProblem& prob, const DeviceLimits& lim, const RowTuning& tune,
                           RegRowConfig* out);
const char* check_reg_row_config(const RegRowConfig& cfg, const RegRowProblem& prob, const DeviceLimits& lim);
// A lean row's layout (the forwards' kLean kernels, RowTuning::reg_lean):
// an unclustered, unstaged 1- or 2-vector tile whose row is one team of
// whole warps owning its CTA and exactly the tile, N = vpt * team * vec.
bool lean_row(const RegRowConfig& cfg, int64_t cols);

// ---------------------------------------------------------------------------
// Register-resident norm backward (ops/rmsnorm_bwd.cuh): the RegRowConfig
// layout, persistent -- grid / cluster CTAs (clusters) walk the row blocks and
// each leaves one partial row of weight gradients -- with shared memory of
// scratch + threads * vpt * vec * 8 bytes (a thread's fp32 accumulator
// pairs). prob.max_vpt: the kernel family's largest tile; prob.vpt_target (a
// bucket, 0: none): a smaller tile taken wherever a cluster of them covers
// the row. Returns false when the row exceeds a cluster of max_cluster
// 1024-thread CTAs at the largest tile.
bool choose_norm_bwd_config(const RegRowProblem& prob, const DeviceLimits& lim, RegRowConfig* out);
const char* check_norm_bwd_config(const RegRowConfig& cfg, const RegRowProblem& prob, const DeviceLimits& lim);

// Pipelined norm backward (rmsnorm_bwd_pipe_kernel): rows that one CTA of up
// to 1024 threads holds at `vpt` vectors a thread, and longer ones at 2
// vectors a thread over a cluster of up to tune.bwd_pipe_cluster CTAs (the
// CTA of 256..1024 threads with the most threads resident an SM; one row a
// cluster, one partial row a cluster). Teams of up
// to a warp share a CTA of tune.bwd_pipe_threads; a thread keeps
// its columns' weight-gradient sums in registers over all the rows its CTA
// walks (persistent grid: as many CTAs as are resident, one partial row
// each). Shared memory: scratch, then `stages` stages of
//   [tensors][vpt][threads] 16-byte vectors + [threads] (rstd, mean) pairs,
// then, with a weight, the weight as fp32: vpt * vec floats a thread, then,
// with db, the db sums: vpt * vec floats a thread.
// Stages are chosen for the most bytes in flight an SM: (stages - 1) stages
// of every resident CTA.
// CTAs of at most kNormBwdPipeSmallCtaThreads threads take the small-CTA
// kernel (RegRowConfig::small_cta; tune.bwd_pipe_db_regs with dbias,
// tune.bwd_pipe_small_cta without): at most kNormBwdPipeSmallCtaThreadsPerSm
// threads an SM, 80 registers each, the db sums in registers (no shared
// memory for them).
constexpr int kNormBwdPipeSmallCtaThreads = 256;
constexpr int kNormBwdPipeSmallCtaThreadsPerSm = 768;
// The small-CTA kernel's 4-vector tile (16-bit x; tune.bwd_pipe_vpt16 = 4):
// 32 elements a thread, their dw and db sums in 64 registers, so at most
// kNormBwdPipeWideThreadsPerSm threads an SM, 128 registers each (the
// layout QuACK's backward takes: twice the elements a thread past each row
// reduction).
constexpr int kNormBwdPipeWideVpt = 4;
constexpr int kNormBwdPipeWideThreadsPerSm = 512;
// The big-CTA kernel (RegRowConfig::big_cta, tune.bwd_pipe_big_cta): the
// 2-vector tile of aligned rows in CTAs of up to this many threads, one an
// SM, 128 registers each: the weight, the dw and db sums and the row's h and
// dy in registers; shared memory only for the stages.
constexpr int kNormBwdPipeBigCtaThreads = 512;
// Shifted rows in classes (the pipelined norm backward's kShift): rows
// whose pitch is p bytes start at one offset inside a 16-byte vector every
// P = 16 / gcd(16, p) rows, 1 << period_log2(p) (at most kMaxLog2: rows of
// 2-byte elements or wider). Class c holds rows c, c + P, c + 2P, ...; in a
// grid of whole classes (a multiple of P CTAs: the host plan's), CTA b
// walks class of(b) as that class's (b >> lg)-th of step() CTAs, row blocks
// (of `teams` rows) up to class 0's blocks(), skipping its rows past the
// last. Every row is walked once (NormBwdPlan.RowClassesWalkEveryRowOnce).
// The rows' offsets (in elements) ride in one word, 4 bits a class
// (shifts(), shift_of()). Constexpr: the kernel calls the same functions.
// The clusters a persistent clustered grid launches: the `want` it asks
// for, or where fewer are resident at once (the GPCs bound them), the
// `resident` ones rounded down to whole multiples of `multiple` -- at least
// one multiple, the clusters past the resident ones then running after
// them (core::launch_row_kernel; LaunchShape::cluster_multiple, the shifted
// norm backward's whole classes).
constexpr int64_t launched_clusters(int64_t want, int64_t resident, int64_t multiple) {
  const int64_t m = multiple > 1 ? multiple : 1;
  const int64_t whole = resident / m * m;
  return want <= resident ? want : whole > m ? whole : m;
}
// The offset, in elements of es bytes, of address addr inside its 16-byte
// vector: where a row starting there begins in the vector that holds its
// first element (core::row_shift on the device; RowClasses::shifts here).
constexpr int vector_offset(uint64_t addr, int es) { return int((addr & 15u) / unsigned(es)); }
struct RowClasses {
  static constexpr int kMaxLog2 = 3;
  static constexpr int period_log2(int64_t pitch_bytes) {
    const unsigned p = unsigned(pitch_bytes & 15);
    int zeros = 0;  // gcd(16, p) = 1 << zeros
    while (p != 0 && !((p >> zeros) & 1u)) ++zeros;
    return p == 0 ? 0 : 4 - zeros;
  }
  static constexpr int of(unsigned cta, int lg) { return int(cta & ((1u << lg) - 1u)); }
  static constexpr int64_t rows(int64_t rows, int c, int lg) { return rows > c ? ((rows - c - 1) >> lg) + 1 : 0; }
  static constexpr int64_t row(int c, int64_t m, int lg) { return int64_t(c) + (m << lg); }
  // Blocks of `teams` rows (a CTA's teams take one block a step) of class
  // c; class 0 has the most (the walk's bound for every class).
  static constexpr int64_t blocks(int64_t rows, int c, int lg, int64_t teams) {
    return (RowClasses::rows(rows, c, lg) + teams - 1) / teams;
  }
  // A class's CTAs in a grid of whole classes.
  static constexpr unsigned step(unsigned grid, int lg) { return grid >> lg; }
  // Class c's offset in elements of es bytes: rows of pitch_bytes from a
  // base at address `base` (c < P <= 1 << kMaxLog2; es >= 2).
  static constexpr uint32_t shifts(uint64_t base, int64_t pitch_bytes, int es, int lg) {
    uint32_t packed = 0;
    for (int c = 0; c < (1 << lg); ++c)
      packed |= uint32_t(vector_offset(base + uint64_t(c) * uint64_t(pitch_bytes), es)) << (4 * c);
    return packed;
  }
  static constexpr int shift_of(uint32_t packed, int c) { return int((packed >> (4 * c)) & 15u); }
};
struct NormBwdPipeProblem {
  int64_t rows = 0;
  int64_t cols = 0;
  int x_elem_bytes = 2;      // h, dy, dx (and dresidual_out, dresidual)
  bool weight = false;       // a weight (held as fp32 whatever its dtype)
  int tensors = 2;           // staged per row: h, dy (3: and dresidual_out)
  int max_vpt = 2;           // the largest tile the kernel is built with (1, 2; 4 in small CTAs)
  bool db = true;            // dbias asked for (its sums take shared memory but in the small-CTA kernel)
  bool small_cta_ok = true;  // the small-CTA kernel is built for x's dtype
  bool centre = false;       // LayerNorm (tune.bwd_pipe_wide_min_cols_ln)
  // Shifted rows (the kernel's kShift): past one CTA, clusters of small
  // CTAs only (in the 64-register kernel the shifted clustered LayerNorm
  // bf16 tile spilled 24 bytes, ptxas -v, CUDA 13.0).
  bool shifted = false;
  size_t scratch_bytes = 0;
};
// small_cta: the small-CTA kernel (the db sums in registers, not here);
// big_cta: the big-CTA kernel (the weight and the db sums in registers).
size_t norm_bwd_pipe_smem_bytes(const NormBwdPipeProblem& prob, int vpt, int threads, int stages,
                                bool small_cta = false, bool big_cta = false);
bool choose_norm_bwd_pipe_config(const NormBwdPipeProblem& prob, const DeviceLimits& lim, const RowTuning& tune,
                                 RegRowConfig* out);
const char* check_norm_bwd_pipe_config(const RegRowConfig& cfg, const NormBwdPipeProblem& prob,
                                       const DeviceLimits& lim);
// The grid norm kernels (rmsnorm_bwd_grid_kernel, rmsnorm_fwd_grid_kernel):
// rows too long for a cluster at the other kernels' tiles, read once. A
// cooperative grid of `groups` groups of `ranks` CTAs of kNormGridCtaThreads
// threads, one CTA an SM; rank r of each group owns tile_vecs 16-byte vectors
// of the row (at most kNormGridCtaElems elements a thread), group g takes
// rows g, g + groups, ... in steps of `rows` of its rows; the ranks exchange
// each step's sums through global memory (core/grid_exchange.cuh). Shared
// memory: kNormGridHeader bytes (the reduction scratch, the mbarriers, the
// collected words of up to kNormGridMaxRanks ranks), then `stages` stages of
// a row's tiles each: h and dy (backward) or x (forward). Workspace: the
// groups' exchange logs (exchange_bytes: a slot a step, zeroed before each
// launch); the backward's `groups` partial rows follow them.
constexpr int kNormGridCtaThreads = 512;
constexpr int kNormGridCtaElems = 16;
constexpr int kNormGridMaxRanks = 144;    // the collected words' room: 4 a rank (8 in norm_fwd_grid_header's larger)
constexpr int kNormGridMaxRowsPerStep = 2;  // the backward's and softmax's; 16-bit rows (fp32: 1 backward, 2 softmax)
// The norm forward's rows a step at most: 4 for 16-bit rows (RMSNorm's four
// words a step, LayerNorm's eight: norm_fwd_grid_header), 2 for fp32 rows
// (RowTuning::fwd_grid_rows16 / 32).
constexpr int kNormFwdGridMaxRowsPerStep = 4;
// The backward's words a step (ranks * rows, twice that for LayerNorm) at
// most: one a thread, all loaded at the top of the step (two a thread held
// over the step's first phase spilled in LayerNorm's 2-row instances;
// ptxas -v, sm_90a). Wider steps take a row a step.
constexpr int kNormBwdGridMaxStepWords = kNormGridCtaThreads;
// A grid step's exchange words: a word a rank a reduced value a row.
constexpr int64_t norm_grid_step_words(int ranks, int rows, bool centre) {
  return int64_t(ranks) * rows * (centre ? 2 : 1);
}
constexpr uint32_t kNormGridScratchBytes = 1024;                      // block reductions' partials
constexpr uint32_t kNormGridBarOffset = kNormGridScratchBytes;        // the stages' mbarriers, 8 B each
constexpr uint32_t kNormGridValsOffset = kNormGridBarOffset + 128;    // the collected words, a float each
constexpr size_t kNormGridHeader = kNormGridValsOffset + kNormGridMaxRanks * 4 * 4;
// The forward's header for `words` collected words a rank a step: the
// backward's (4 a rank) up to 4, room for 8 above (LayerNorm's 16-bit rows
// four a step: 2.3 KB more, which can cost an fp32 stage, so only there).
constexpr size_t norm_fwd_grid_header(int words) {
  return kNormGridValsOffset + size_t(kNormGridMaxRanks) * (words > 4 ? 8 : 4) * 4;
}
constexpr int kNormGridMaxLag = 7;
// (14: 16-bit rows four a step need 2 * 4 + 1 stages and more; 13 16 KB
// stages and the header fit a CTA's 227 KB, 14 only tiles of at most
// 16356 bytes -- the chooser's fit decides; 14 mbarriers fit their 128
// bytes.)
constexpr int kNormGridStagesMax = 14;
// The forward's grid has the backward's CTA: one of kNormGridCtaThreads an
// SM. (Two 256-thread CTAs an SM -- two independent chains of steps, twice
// the ranks -- measured worse, the more so the more ranks: fp32 RMSNorm 1M
// 63.0% of copy against one CTA's 65.6, LayerNorm bf16 with fp32 weights
// 33.6 against 43.2, fp32 LayerNorm 43.3 against 53.4; H200, 8a9ed8b /
// f0e0632, bench/results/2026-12-02-norm-fwd-grid.md.)
// The forward's grid serves no row shorter than kNormFwdWorkspaceMinCols
// (quack.hpp), whatever the tuning: a caller that passes no workspace below
// it loses nothing (the Python front asks for one from there on).
struct NormGridConfig {
  int ranks = 0;           // CTAs a row
  int groups = 0;          // rows in flight at once
  int stages = 0;          // shared-memory stages a CTA
  int lag = 0;             // steps between a CTA's publish and its collect
  int rows = 1;            // rows a step: one exchange for all of them (1, 2 or 4)
  int64_t tile_vecs = 0;   // vectors of the row a CTA owns (the last rank may own fewer)
  size_t smem_bytes = 0;   // a CTA's
  int64_t grid = 0;        // ranks * groups
  int64_t steps = 0;       // a group's steps: the slots of its exchange log
  size_t exchange_bytes = 0;  // the logs, 16-byte padded
};
// False where the tuning does not ask for it (tune.bwd_grid's dtype bit,
// tune.bwd_grid_min_cols16 / 32) or the row needs more CTAs than there are SMs.
// centre: LayerNorm (two sums a row in the exchange).
bool choose_norm_bwd_grid_config(int64_t rows, int64_t cols, int x_elem_bytes, bool centre, const DeviceLimits& lim,
                                 const RowTuning& tune, NormGridConfig* out);
// centre: as the chooser's (LayerNorm's exchange words, checked against
// exchange_bytes; no default, so that a caller cannot check half of them).
const char* check_norm_bwd_grid_config(const NormGridConfig& cfg, int64_t rows, int64_t cols, int x_elem_bytes,
                                       const DeviceLimits& lim, bool centre);
// The forward's (x's tile alone a stage; tune.fwd_grid*), as the backward's.
bool choose_norm_fwd_grid_config(int64_t rows, int64_t cols, int x_elem_bytes, bool centre, const DeviceLimits& lim,
                                 const RowTuning& tune, NormGridConfig* out);
// centre: LayerNorm's (two words a row in the exchange and the header; no
// default, as the backward's).
const char* check_norm_fwd_grid_config(const NormGridConfig& cfg, int64_t rows, int64_t cols, int x_elem_bytes,
                                       const DeviceLimits& lim, bool centre);
// Softmax's grid forward (x's tile alone a stage, a (max, sum) pair a row in
// the exchange; tune.softmax_fwd_grid*, the stages, lag and rows a step of
// tune.fwd_grid*).
bool choose_softmax_fwd_grid_config(int64_t rows, int64_t cols, int x_elem_bytes, const DeviceLimits& lim,
                                    const RowTuning& tune, NormGridConfig* out);
const char* check_softmax_fwd_grid_config(const NormGridConfig& cfg, int64_t rows, int64_t cols, int x_elem_bytes,
                                          const DeviceLimits& lim);
// Softmax's grid backward (y's and dy's tiles a stage, as the norm grid
// backward's; a word a row, the dot, in the exchange; tune.softmax_bwd_grid*,
// the stages, lag and 16-bit rows a step of tune.bwd_grid*).
bool choose_softmax_bwd_grid_config(int64_t rows, int64_t cols, int x_elem_bytes, const DeviceLimits& lim,
                                    const RowTuning& tune, NormGridConfig* out);
const char* check_softmax_bwd_grid_config(const NormGridConfig& cfg, int64_t rows, int64_t cols, int x_elem_bytes,
                                          const DeviceLimits& lim);
// The kernel and configuration rmsnorm_bwd (layernorm: layernorm_bwd) takes
// for these arguments, in words: "pipe", "reg", "grid", "general" or "split", then
// the layout (src/rmsnorm_bwd.cu). Reads no tensor.
std::string norm_bwd_plan_description(const RMSNormBwdArgs& args, bool layernorm, const DeviceLimits& lim);
// rmsnorm_bwd_workspace_bytes for given device limits (src/rmsnorm_bwd.cu).
size_t rmsnorm_bwd_workspace_bytes(const RMSNormBwdArgs& args, const DeviceLimits& lim);
size_t layernorm_bwd_workspace_bytes(const LayerNormBwdArgs& args, const DeviceLimits& lim);

// ---------------------------------------------------------------------------
// Chunked two-pass rows (softmax's long rows): a row split over a cluster of
// up to 16 CTAs, each reading its chunk twice -- from HBM, then from shared
// memory (the first stage_vecs vectors) and L2 (the rest). Any row length;
// 16-byte-aligned rows. Persistent grid (clamped at launch to the resident
// clusters).
struct ChunkRowProblem {
  int64_t rows = 0;
  int64_t cols = 0;
  int elem_bytes = 2;        // every tensor's; the vector is 16 bytes
  int tensors = 1;           // tensors read per element (staged alike)
  size_t scratch_bytes = 0;  // shared memory before the staging area
};

struct ChunkRowConfig {
  int vec = 1;             // elements per vector
  int threads = 128;       // per CTA, a power of two in [128, 1024]
  int cluster = 1;         // CTAs per row (power of two <= 16)
  int64_t chunk_vecs = 0;  // vectors of the row per CTA (the last CTAs may have fewer or none)
  int stage_vecs = 0;      // vectors per tensor a CTA keeps in shared memory
  size_t smem_bytes = 0;   // scratch + staging
  int64_t grid = 0;        // rows * cluster (the launch clamps it)
};

ChunkRowConfig choose_chunk_row_config(const ChunkRowProblem& prob, const DeviceLimits& lim);
ChunkRowConfig choose_chunk_row_config(const ChunkRowProblem& prob, const DeviceLimits& lim, const RowTuning& tune);
const char* check_chunk_row_config(const ChunkRowConfig& cfg, const ChunkRowProblem& prob, const DeviceLimits& lim);

// The kernel and configuration softmax_fwd (backward: softmax_bwd) takes for
// 16-byte-aligned (rows, cols) operands of `dtype`, in words: for benchmarks
// and their records (src/softmax.cu). workspace: the call has the
// workspace softmax_fwd_workspace_bytes (backward: softmax_bwd_workspace_
// bytes) asks for (as the Python front passes), so "grid" where a grid
// kernel serves the row. shifted:
// operands whose rows start inside a 16-byte vector, all at the same
// offset (contiguous rows whose pitch is not whole vectors: bf16 N =
// 50257), which take the register and staged kernels from the vector
// holding each row's first element, else "stream, shifted vectors".
std::string softmax_plan_description(int64_t rows, int64_t cols, DType dtype, bool backward, const DeviceLimits& lim,
                                     bool workspace = true, bool shifted = false);
// The kernel and configuration rmsnorm_fwd (layernorm: layernorm_fwd) takes
// for these arguments on a device with these limits, in words: "stage",
// "reg" (register-resident) or "general" (the general staged kernel),
// then the layout (src/rmsnorm.cu). Reads no tensor: the pointers only
// decide alignment.
// "grid" (rmsnorm_fwd_grid_kernel) where args.workspace is set and the
// grid serves the row.
std::string norm_fwd_plan_description(const RMSNormFwdArgs& args, bool layernorm, const DeviceLimits& lim);
// The forward's workspace for given device limits: the grid kernel's
// exchange logs where it serves the row (whether or not args.workspace is
// set), else 0 (src/rmsnorm.cu).
size_t norm_fwd_workspace_bytes(const RMSNormFwdArgs& args, bool layernorm, const DeviceLimits& lim);
// Cross-entropy's kernel for aligned logits (src/cross_entropy.cu).
// forward: the loss alone (no gradient): plain options take the bulk, the
// streaming or the 8-vector register kernels, general ones the register
// tiles; else the gradient, fused (staged where a cluster holds the row)
// or, plain options from ce_grad_split_min_cols classes, "2-pass: <the
// forward's kernel>". general: a softcap or class-weighted smoothing.
// shifted: logits (and dlogits) whose rows start inside a 16-byte vector,
// all at the same offset (odd V): the register kernels from the vector
// holding each row's first logit ("reg ...", "stage ...", the plain
// forward's "fwd-stream", or under bit 3 "fwd-bulk shifted") where
// RowTuning::shifted_rows allows, else "stream".
std::string cross_entropy_plan_description(int64_t rows, int64_t cols, DType dtype, const DeviceLimits& lim,
                                          bool forward = false, bool general = false, bool shifted = false);

}  // namespace quack
