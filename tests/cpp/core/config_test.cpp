// Host tests of the row-kernel configuration heuristic (quack/core/config.hpp).
//
// The sweep asks for a configuration at every N in [1, 2^21], for x of 4 and
// 2 bytes, staging x alone or x plus a residual of 2 or 4 bytes, at several
// row counts, and checks each one twice: through check_row_config, and
// through the invariants restated here independently (so a bug shared by the
// heuristic and its checker still shows). 2^21 reaches past the on-chip
// capacity of a 16-CTA cluster for every staging (the largest, 16-bit x
// alone, holds 1,638,400 elements), so the sweep crosses from one pass over
// HBM to chunked rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "quack/core/config.hpp"

namespace quack {
namespace {

constexpr int64_t kSweepMaxN = int64_t(1) << 21;
constexpr int64_t kRowCounts[] = {0, 1, 7, 8192};
// What RMSNorm reserves for its reducer; any op's scratch is of this order.
constexpr size_t kScratch = 512;
// A CTA's staged share of a row is at most 200 KiB (config.cpp), so one row
// is read from HBM once up to 16 x 200 KiB staged.
constexpr int64_t kCtaCapBytes = 200 * 1024;
constexpr int kMaxCluster = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

RowProblem problem(int64_t rows, int64_t cols, int x_bytes, int res_bytes) {
  RowProblem p;
  p.rows = rows;
  p.cols = cols;
  p.x_elem_bytes = x_bytes;
  p.staged_elem_bytes = x_bytes + res_bytes;
  p.scratch_bytes = kScratch;
  return p;
}

std::string describe(const RowConfig& c, const RowProblem& p) {
  std::ostringstream s;
  s << "rows=" << p.rows << " N=" << p.cols << " x_bytes=" << p.x_elem_bytes
    << " staged_bytes=" << p.staged_elem_bytes << " -> vec=" << c.vec << " team=" << c.team
    << " threads=" << c.threads << " cluster=" << c.cluster << " vpt=" << c.vpt
    << " rows_per_team=" << c.rows_per_team << " chunks=" << c.chunks << " seg_vecs=" << c.seg_vecs
    << " buffers=" << c.buffers << " stage_bytes=" << c.stage_bytes << " smem=" << c.smem_bytes
    << " row_blocks=" << c.row_blocks << " grid=" << c.grid;
  return s.str();
}

// The invariants every row kernel relies on, restated without reference to
// config.cpp. Returns nullptr or the first broken one.
const char* broken_invariant(const RowConfig& c, const RowProblem& p, const DeviceLimits& lim) {
  const int64_t nvec = ceil_div(p.cols, 16 / p.x_elem_bytes);
  const int64_t vec_bytes = int64_t(c.vec) * p.staged_elem_bytes;
  if (c.vec * p.x_elem_bytes != 16) return "a vector is not 16 bytes of x";
  if (!is_pow2(c.team) || c.team > 1024) return "team is not a power of two <= 1024";
  if (c.threads < 32 || c.threads > 1024 || c.threads % 32 != 0) return "threads not whole warps in [32, 1024]";
  if (c.threads % c.team != 0) return "threads not a multiple of team";
  if (c.team > 32 && c.threads != c.team) return "a team wider than a warp does not own its CTA";
  if (c.cluster < 1 || c.cluster > kMaxCluster || c.cluster > lim.max_cluster) return "cluster outside [1, 16]";
  if (c.cluster > 1 && c.threads != c.team) return "a clustered row does not own whole CTAs";
  if (c.chunks < 1) return "chunks < 1";
  if (c.chunks > 1 && c.threads != c.team) return "a chunked row does not own whole CTAs";
  if (c.vpt < 1 || c.rows_per_team < 1) return "vpt or rows_per_team < 1";
  if (c.rows_per_team > 1 && c.team > 32) return "several rows per team with a team wider than a warp";
  // Segments: the cluster's CTAs cover the row, and none is empty.
  if (c.seg_vecs * c.cluster < nvec) return "cluster segments do not cover N";
  if (c.seg_vecs * (c.cluster - 1) >= nvec) return "a CTA of the cluster owns no part of the row";
  // Chunks: they cover a CTA's segment.
  if (c.chunk_vecs() * c.chunks < c.seg_vecs) return "chunks do not cover the segment";
  // Shared memory: one staging buffer holds every staged slot; one buffer
  // when chunked, at most two (double buffering) otherwise; plus scratch.
  const size_t slots = size_t(c.threads) * c.rows_per_team * c.vpt * vec_bytes;
  if (c.stage_bytes < slots) return "staging buffer smaller than the staged slots";
  if (c.buffers < 1 || c.buffers > 2 || (c.chunks > 1 && c.buffers != 1)) return "buffers not 1 or 2 (1 when chunked)";
  if (c.smem_bytes < c.buffers * c.stage_bytes + p.scratch_bytes) return "shared memory smaller than buffers + scratch";
  if (c.smem_bytes > lim.max_smem_per_block) return "shared memory above the per-CTA limit";
  if (c.smem_bytes > lim.smem_per_sm) return "shared memory above one SM";
  // Rows: blocks of rows_per_cta rows cover every row, none is empty; the
  // (persistent) grid is whole clusters, at most one per row block.
  if (c.row_blocks * c.rows_per_cta() < p.rows) return "row blocks do not cover the rows";
  if (p.rows > 0 && (c.row_blocks - 1) * c.rows_per_cta() >= p.rows) return "a row block with no row";
  if (p.rows == 0 && (c.row_blocks != 0 || c.grid != 0)) return "rows = 0 with a non-empty grid";
  if (p.rows > 0 && c.grid == 0) return "empty grid for rows > 0";
  if (c.grid % c.cluster != 0) return "grid not a whole number of clusters";
  if (c.grid / c.cluster > c.row_blocks) return "more clusters than row blocks";
  if (c.grid > int64_t(0x7fffffff)) return "grid above gridDim.x";
  return nullptr;
}

// ---------------------------------------------------------------------------
// The sweep: every N in [1, 2^21].

struct Staging {
  int x_bytes;
  int res_bytes;  // 0: x alone
};

std::string staging_label(const Staging& s) {
  return "x" + std::to_string(s.x_bytes * 8) + (s.res_bytes ? "_res" + std::to_string(s.res_bytes * 8) : "_only");
}
std::string staging_name(const testing::TestParamInfo<Staging>& info) { return staging_label(info.param); }
void PrintTo(const Staging& s, std::ostream* os) { *os << staging_label(s); }

// Calls check(rows, n) for every N in [1, max_n] (with the given step) and
// every row count; check returns an empty string or what is broken. The first
// few failures are reported.
template <class Check>
void for_each_shape(int64_t max_n, int64_t step, Check&& check) {
  int failures = 0;
  for (int64_t n = 1; n <= max_n; n += step) {
    for (const int64_t rows : kRowCounts) {
      const std::string why = check(rows, n);
      if (!why.empty()) {
        ADD_FAILURE() << why;
        if (++failures >= 10) return;
      }
    }
  }
}

// Sweeps N in [1, max_n] with the given N step.
void sweep(const Staging& s, const DeviceLimits& lim, int64_t max_n, int64_t step) {
  RowConfig prev;  // N-monotonicity at a fixed row count
  for_each_shape(max_n, step, [&](int64_t rows, int64_t n) -> std::string {
    const RowProblem p = problem(rows, n, s.x_bytes, s.res_bytes);
    const RowConfig c = choose_row_config(p, lim);
    const char* why = check_row_config(c, p, lim);
    if (why == nullptr) why = broken_invariant(c, p, lim);
    // The on-chip guarantee: a single pass exactly when the row's staged
    // bytes fit a cluster of max_cluster CTAs holding 200 KiB each.
    const int64_t vec_bytes = int64_t(c.vec) * p.staged_elem_bytes;
    const bool fits = ceil_div(ceil_div(n, c.vec), lim.max_cluster) * vec_bytes <= kCtaCapBytes;
    if (why == nullptr && fits != (c.chunks == 1)) why = "chunks > 1 although the row fits on chip, or the reverse";
    if (why == nullptr && c.chunks > 1 && c.cluster != lim.max_cluster) why = "chunked before the cluster is full";
    if (why == nullptr && rows == 1 && n > 1 &&
        (c.cluster < prev.cluster || c.chunks < prev.chunks))
      why = "cluster or chunks decreased as N grew";
    if (rows == 1) prev = c;
    return why == nullptr ? std::string() : why + (": " + describe(c, p));
  });
}

class ConfigSweep : public testing::TestWithParam<Staging> {};

TEST_P(ConfigSweep, EveryNUpTo2Pow21IsValidOnH200) { sweep(GetParam(), DeviceLimits{}, kSweepMaxN, 1); }

// Devices that allow less: a portable cluster (8) and no cluster at all. Every
// 7th N, so that the three sweeps together stay a few seconds.
TEST_P(ConfigSweep, ValidWithPortableClusterOf8) {
  DeviceLimits lim;
  lim.max_cluster = 8;
  sweep(GetParam(), lim, kSweepMaxN, 7);
}
TEST_P(ConfigSweep, ValidWithoutClusters) {
  DeviceLimits lim;
  lim.max_cluster = 1;
  sweep(GetParam(), lim, kSweepMaxN, 7);
}

INSTANTIATE_TEST_SUITE_P(Staging, ConfigSweep,
                         testing::Values(Staging{4, 0}, Staging{4, 2}, Staging{4, 4}, Staging{2, 0},
                                         Staging{2, 2}, Staging{2, 4}),
                         staging_name);

// ---------------------------------------------------------------------------
// Specific shapes: which regime a given N lands in.

RowConfig config_for(int64_t rows, int64_t n, int x_bytes, int res_bytes = 0) {
  const RowProblem p = problem(rows, n, x_bytes, res_bytes);
  const RowConfig c = choose_row_config(p, DeviceLimits{});
  EXPECT_EQ(check_row_config(c, p, DeviceLimits{}), nullptr) << describe(c, p);
  EXPECT_EQ(broken_invariant(c, p, DeviceLimits{}), nullptr) << describe(c, p);
  return c;
}

TEST(ConfigShapes, SmallRowsUseSubWarpTeamsSeveralPerCta) {
  for (const int64_t n : {1, 2, 7, 8, 64, 100, 128}) {
    const RowConfig c = config_for(8192, n, 2);
    EXPECT_LT(c.team, 32) << "N=" << n;
    EXPECT_GT(c.teams_per_cta(), 1) << "N=" << n;
    EXPECT_EQ(c.cluster, 1) << "N=" << n;
    EXPECT_EQ(c.chunks, 1) << "N=" << n;
  }
  // One vector per row: a team of one thread.
  EXPECT_EQ(config_for(8192, 8, 2).team, 1);
  EXPECT_EQ(config_for(8192, 1, 4).team, 1);
}

TEST(ConfigShapes, MidRowsUseWholeCtaTeams) {
  for (const int64_t n : {4096, 8192, 16384}) {
    const RowConfig c = config_for(8192, n, 2);
    EXPECT_GT(c.team, 32) << "N=" << n;
    EXPECT_EQ(c.threads, c.team) << "N=" << n;
    EXPECT_EQ(c.cluster, 1) << "N=" << n;
    EXPECT_EQ(c.chunks, 1) << "N=" << n;
  }
}

TEST(ConfigShapes, LargeRowsUseClusters) {
  const RowConfig c64k = config_for(8192, 65536, 2);
  const RowConfig c256k = config_for(8192, 262144, 2);
  EXPECT_GT(c64k.cluster, 1);
  EXPECT_GT(c256k.cluster, c64k.cluster);
  EXPECT_EQ(c256k.chunks, 1);
  // fp32 x of 262144 elements is 1 MiB: needs the whole 16-CTA cluster.
  EXPECT_EQ(config_for(8192, 262144, 4).cluster, 16);
  // Staging a residual too doubles the bytes: at least as wide a cluster.
  EXPECT_GE(config_for(8192, 65536, 2, 2).cluster, c64k.cluster);
}

TEST(ConfigShapes, ChunksBeyondTheCapacityOfA16CtaCluster) {
  // 16-bit x alone: 16 CTAs x 200 KiB = 204800 vectors of 8 elements.
  const int64_t cap_bf16 = 16 * kCtaCapBytes / 16 * 8;  // 1,638,400
  EXPECT_EQ(config_for(2, cap_bf16, 2).chunks, 1);
  EXPECT_EQ(config_for(2, cap_bf16, 2).cluster, 16);
  EXPECT_EQ(config_for(2, cap_bf16 + 1, 2).chunks, 2);
  // fp32 x alone: 819,200 elements.
  EXPECT_EQ(config_for(2, 819200, 4).chunks, 1);
  EXPECT_GT(config_for(2, 819201, 4).chunks, 1);
  // With a 16-bit residual staged too, the capacity halves for 16-bit x.
  EXPECT_EQ(config_for(2, cap_bf16 / 2, 2, 2).chunks, 1);
  EXPECT_GT(config_for(2, cap_bf16 / 2 + 1, 2, 2).chunks, 1);
  // The benchmark's largest rows.
  const RowConfig big = config_for(4, 4194304, 4);
  EXPECT_EQ(big.cluster, 16);
  EXPECT_GT(big.chunks, 1);
  const RowConfig huge = config_for(1, int64_t(1) << 30, 2, 4);  // 6 GiB of row
  EXPECT_EQ(huge.cluster, 16);
  EXPECT_GT(huge.chunks, 1000);
}

TEST(ConfigShapes, NoRowsMeansAnEmptyGrid) {
  for (const int64_t n : {1, 4096, 262144, 4194304}) {
    EXPECT_EQ(config_for(0, n, 2).grid, 0) << "N=" << n;
    EXPECT_EQ(config_for(0, n, 2).row_blocks, 0) << "N=" << n;
  }
}

TEST(ConfigShapes, RowBlocksCoverRowsAtEveryRegime) {
  for (const int64_t n : {3, 100, 4096, 262144, 4194304}) {
    for (const int64_t rows : {1, 7, 8192, 100003}) {
      const RowConfig c = config_for(rows, n, 2);
      EXPECT_GE(c.row_blocks * c.rows_per_cta(), rows) << "N=" << n << " rows=" << rows;
      EXPECT_GT(c.grid, 0) << "N=" << n << " rows=" << rows;
    }
  }
}

// ---------------------------------------------------------------------------
// Register-resident configurations (choose_reg_row_config).

struct RegTile {
  int x_bytes;
  int max_vpt;
  int cluster_vpt;
  int staged_vpt;
  int staged_vpt_max = 0;  // the kernels' widest staged tile (0: staged_vpt only)
  int staged_tensors = 1;  // tensors a staged row holds in shared memory
  int wide_team = 0;       // the wide staged geometry's CTA (0: none), ...
  int wide_vpt = 0;        // ... its tile (vectors of each tensor a thread) ...
  int wide_smem_vpt = 0;   // ... and the vectors a thread of them in shared memory
  bool wide_first = false; // the wide geometry wherever it makes a cluster
};
std::string reg_tile_name(const testing::TestParamInfo<RegTile>& i) {
  return "x" + std::to_string(i.param.x_bytes) + "B_maxvpt" + std::to_string(i.param.max_vpt) + "_clustervpt" +
         std::to_string(i.param.cluster_vpt) + "_stagedvpt" + std::to_string(i.param.staged_vpt) +
         (i.param.staged_vpt_max > 0 ? "_to" + std::to_string(i.param.staged_vpt_max) : "") +
         (i.param.staged_tensors > 1 ? "_x" + std::to_string(i.param.staged_tensors) : "") +
         (i.param.wide_team > 0 ? "_wide" + std::to_string(i.param.wide_team) + "_vpt" + std::to_string(i.param.wide_vpt) +
                                      "_smem" + std::to_string(i.param.wide_smem_vpt) +
                                      (i.param.wide_first ? "_first" : "")
                                : "");
}

std::string describe(const RegRowConfig& c, const RegRowProblem& p) {
  std::ostringstream s;
  s << "rows=" << p.rows << " N=" << p.cols << " x_bytes=" << p.x_elem_bytes << " max_vpt=" << p.max_vpt
    << " cluster_vpt=" << p.cluster_vpt
    << " -> vec=" << c.vec << " team=" << c.team << " threads=" << c.threads << " cluster=" << c.cluster
    << " vpt=" << c.vpt << " row_blocks=" << c.row_blocks << " grid=" << c.grid;
  return s.str();
}

// The register kernels' invariants, restated independently of config.cpp.
// balance: the tuning's reg_staged_balance (a staged row's CTA is then the
// fewest whole warps covering the row at its cluster and tile); fit: its
// reg_fit_team (so is an unclustered register row's team above a warp).
const char* broken_reg_invariant(const RegRowConfig& c, const RegRowProblem& p, const DeviceLimits& lim,
                                 bool balance = false, bool fit = false) {
  const int vec = 16 / p.x_elem_bytes;
  if (c.vec != vec) return "vector is not 16 bytes of x";
  if (c.team < 1 || c.team > 1024) return "team";
  // The power-of-two CTA the rules chose; a staged row's may be trimmed to
  // whole warps (balance), more than half of it.
  int team = 1;
  while (team < c.team) team *= 2;
  const int64_t warp_cols = int64_t(32) * c.cluster * c.vpt * vec;  // the columns a warp a CTA covers
  if (c.staged && balance) {
    if (c.team % 32) return "a balanced staged CTA is not whole warps";
    if (int64_t(c.team) * c.cluster * c.vpt * vec - warp_cols >= p.cols)
      return "a balanced staged CTA has a warp to spare";
  } else if (fit && !c.staged && c.cluster == 1 && c.team > 32) {
    if (c.team % 32) return "a fitted CTA is not whole warps";
    if (int64_t(c.team - 32) * c.vpt * vec >= p.cols) return "a fitted CTA has a warp to spare";
  } else if (c.team != team) {
    return "team is not a power of two";
  }
  if (c.threads % 32 || c.threads > 1024 || c.threads % c.team) return "threads";
  if (c.team > 32 && c.threads != c.team) return "a team above a warp shares its CTA";
  if (c.cluster < 1 || c.cluster > lim.max_cluster) return "cluster";
  if (c.cluster > 1 && c.threads != c.team) return "clustered CTA holds several rows";
  if (!c.staged && c.vpt != 1 && c.vpt != 2 && c.vpt != 4 && c.vpt != 8) return "vpt not a bucket";
  if (!c.staged && c.vpt > p.max_vpt) return "vpt above the kernel family's tile";
  if (c.staged) {
    if (c.cluster < 2) return "a staged row not clustered";
    // The staged tile, or a power-of-two multiple of it up to the widest, and
    // wider only when the half-width tile would need more than 16 CTAs (the
    // wide geometry: its own tile, below).
    const int widest = std::max(p.staged_vpt, p.staged_vpt_max);
    // 256-thread CTAs holding every tensor's tile in shared memory, or the
    // wide geometry (its CTA, tile and shared part) where those need more
    // than max_cluster CTAs at the widest tile.
    // (The wide CTA doubles up to 1024 threads while max_cluster of it do
    // not cover the row.)
    const bool wide = p.staged_wide_team > 0 && team >= p.staged_wide_team && team != 256;
    if (!wide && (c.vpt < p.staged_vpt || c.vpt > widest || c.vpt % p.staged_vpt || !is_pow2(c.vpt / p.staged_vpt)))
      return "a staged row not at a staged tile";
    if (!wide && c.vpt > p.staged_vpt && int64_t(lim.max_cluster) * team * (c.vpt / 2) * vec >= p.cols)
      return "a staged row at a wider tile than it needs";
    if (!wide && team != 256) return "a staged row not in 256-thread CTAs";
    if (wide && (team % p.staged_wide_team ||
                 (team > p.staged_wide_team && int64_t(lim.max_cluster) * (team / 2) * c.vpt * vec >= p.cols)))
      return "a wide CTA bigger than the row needs";
    if (c.staged_smem_vpt != (wide ? p.staged_wide_smem_vpt : p.staged_tensors * c.vpt))
      return "vectors a thread in shared memory";
    if (wide && (c.vpt != p.staged_wide_vpt ||
                 (!p.staged_wide_first && int64_t(lim.max_cluster) * 256 * widest * vec >= p.cols)))
      return "the wide staged geometry where 256-thread CTAs hold the row";
    if (c.smem_bytes != p.scratch_bytes + size_t(c.staged_smem_vpt) * c.team * 16 || c.smem_bytes > lim.max_smem_per_block)
      return "staged shared memory";
  } else if (c.cluster > 1 && c.vpt != p.cluster_vpt) {
    return "a clustered row not at the clustered kernels' tile";
  }
  if (int64_t(c.cluster) * c.team * c.vpt * vec < p.cols) return "tiles do not cover the row";
  // No CTA of a cluster may be entirely idle (its share starts past the row).
  if (c.cluster > 1 && int64_t(c.cluster - 1) * c.team * c.vpt * vec >= p.cols) return "idle CTA in the cluster";
  if (c.row_blocks * (c.threads / c.team) < p.rows) return "rows not covered";
  if (c.grid != c.row_blocks * c.cluster) return "grid";
  return nullptr;
}

void reg_sweep(const RegTile& tile, const DeviceLimits& lim, int64_t max_n, int64_t step,
               const RowTuning& tune = default_row_tuning()) {
  const int vec = 16 / tile.x_bytes;
  // What the family holds: a 1024-thread CTA at its largest tile, or a
  // cluster of as many 1024-thread CTAs as the device allows at its
  // clustered tile.
  int64_t cap_vecs = std::max(int64_t(1024) * tile.max_vpt, int64_t(lim.max_cluster) * 1024 * tile.cluster_vpt);
  // ... or, staged, a cluster of 256-thread CTAs (the only staged CTA) at
  // the widest staged tile the default tuning allows rows no register tile
  // holds.
  const int widest = std::max(tile.staged_vpt, std::min(tile.staged_vpt_max, default_row_tuning().reg_staged_vpt_max_beyond));
  if (tile.staged_vpt > 0 && lim.max_cluster > 1 &&
      kScratch + size_t(tile.staged_tensors) * 256 * widest * 16 <= lim.max_smem_per_block)
    cap_vecs = std::max(cap_vecs, int64_t(lim.max_cluster) * 256 * widest);
  // ... or in the wide geometry's CTAs at its tile, up to 1024 threads.
  for (int64_t wt = tile.wide_team; tile.staged_vpt > 0 && wt > 256 && wt <= 1024 && lim.max_cluster > 1; wt *= 2)
    if (kScratch + size_t(tile.wide_smem_vpt) * wt * 16 <= lim.max_smem_per_block)
      cap_vecs = std::max(cap_vecs, int64_t(lim.max_cluster) * wt * tile.wide_vpt);
  const int64_t capacity = cap_vecs * vec;
  for_each_shape(max_n, step, [&](int64_t rows, int64_t n) -> std::string {
    RegRowProblem p;
    p.rows = rows;
    p.cols = n;
    p.x_elem_bytes = tile.x_bytes;
    p.max_vpt = tile.max_vpt;
    p.cluster_vpt = tile.cluster_vpt;
    p.staged_vpt = tile.staged_vpt;
    p.staged_vpt_max = tile.staged_vpt_max;
    p.staged_tensors = tile.staged_tensors;
    p.staged_wide_team = tile.wide_team;
    p.staged_wide_vpt = tile.wide_vpt;
    p.staged_wide_smem_vpt = tile.wide_smem_vpt;
    p.staged_wide_first = tile.wide_first;
    p.scratch_bytes = kScratch;
    RegRowConfig c;
    const bool ok = choose_reg_row_config(p, lim, tune, &c);
    const char* why = nullptr;
    if (ok != (n <= capacity)) why = ok ? "accepted a row beyond the capacity" : "refused a row that fits";
    else if (ok && (why = check_reg_row_config(c, p, lim)) == nullptr)
      why = broken_reg_invariant(c, p, lim, tune.reg_staged_balance != 0, tune.reg_fit_team != 0);
    return why == nullptr ? std::string() : why + (": " + describe(c, p));
  });
}

class RegConfigSweep : public testing::TestWithParam<RegTile> {};

TEST_P(RegConfigSweep, EveryNUpTo2Pow21IsValidOrRefusedOnH200) { reg_sweep(GetParam(), DeviceLimits{}, kSweepMaxN, 1); }
TEST_P(RegConfigSweep, ValidWithPortableClusterOf8) {
  DeviceLimits lim;
  lim.max_cluster = 8;
  reg_sweep(GetParam(), lim, kSweepMaxN, 7);
}
// Staged CTAs fitted to the row (reg_staged_balance): the same capacity,
// every staged CTA whole warps with none to spare.
TEST_P(RegConfigSweep, BalancedStagedCtasAreValidOnH200) {
  RowTuning t = default_row_tuning();
  t.reg_staged_balance = 1;
  reg_sweep(GetParam(), DeviceLimits{}, kSweepMaxN, 3, t);
}
TEST_P(RegConfigSweep, BalancedStagedCtasAreValidWithPortableClusterOf8) {
  DeviceLimits lim;
  lim.max_cluster = 8;
  RowTuning t = default_row_tuning();
  t.reg_staged_balance = 1;
  reg_sweep(GetParam(), lim, kSweepMaxN, 7, t);
}
// Unclustered teams fitted to the row (reg_fit_team, the default since the
// forty-seventh session): the same capacity, every such CTA whole warps with
// none to spare; and, the knob off, the power-of-two CTAs.
TEST_P(RegConfigSweep, FittedTeamsAreValidOnH200) {
  RowTuning t = default_row_tuning();
  ASSERT_EQ(t.reg_fit_team, 1);
  reg_sweep(GetParam(), DeviceLimits{}, kSweepMaxN, 3, t);
}
TEST_P(RegConfigSweep, PowerOfTwoTeamsAreValidOnH200) {
  RowTuning t = default_row_tuning();
  t.reg_fit_team = 0;
  reg_sweep(GetParam(), DeviceLimits{}, kSweepMaxN, 3, t);
}
// The widths the knob is for: bf16 5120 at 4 vectors a thread (640
// vectors: 160 threads, not 256), 2560 (320: 96, not 128, 384 slots), and
// a row a power of two already holds exactly (4096: 128 either way).
TEST(RegRowFit, ModelWidthsTakeTheFewestWarps) {
  const RowTuning fit = default_row_tuning();
  RowTuning pow2 = fit;
  pow2.reg_fit_team = 0;
  for (const auto& [cols, pow2_team, fit_team] : {std::tuple<int64_t, int, int>{5120, 256, 160}, {2560, 128, 96}, {4096, 128, 128}}) {
    RegRowProblem p;
    p.rows = 16384;
    p.cols = cols;
    p.x_elem_bytes = 2;
    p.max_vpt = 4;
    p.cluster_vpt = 4;
    p.scratch_bytes = kScratch;
    RegRowConfig a, b;
    ASSERT_TRUE(choose_reg_row_config(p, DeviceLimits{}, pow2, &a));
    ASSERT_TRUE(choose_reg_row_config(p, DeviceLimits{}, fit, &b));
    EXPECT_EQ(a.team, pow2_team) << cols;
    EXPECT_EQ(b.team, fit_team) << cols;
    EXPECT_EQ(b.threads, fit_team) << cols;
    EXPECT_EQ(b.vpt, 4) << cols;
    EXPECT_EQ(b.cluster, 1) << cols;
    EXPECT_EQ(b.row_blocks, p.rows) << cols;
    EXPECT_EQ(check_reg_row_config(b, p, DeviceLimits{}), nullptr) << cols;
    // A team a warp wider is refused, as is one that does not cover the row.
    RegRowConfig wider = b, narrower = b;
    wider.team = wider.threads = b.team + 32;
    narrower.team = narrower.threads = b.team - 32;
    if ((wider.team & (wider.team - 1)) != 0) {
      EXPECT_NE(check_reg_row_config(wider, p, DeviceLimits{}), nullptr) << cols;
    }
    EXPECT_NE(check_reg_row_config(narrower, p, DeviceLimits{}), nullptr) << cols;
  }
}

TEST_P(RegConfigSweep, ValidWithoutClusters) {
  DeviceLimits lim;
  lim.max_cluster = 1;
  reg_sweep(GetParam(), lim, kSweepMaxN, 7);
}

INSTANTIATE_TEST_SUITE_P(Tiles, RegConfigSweep,
                         testing::Values(RegTile{2, 8, 8, 8}, RegTile{2, 8, 8, 16}, RegTile{2, 8, 4, 8},
                                         RegTile{2, 4, 2, 0}, RegTile{2, 2, 2, 0}, RegTile{4, 8, 8, 0},
                                         RegTile{4, 8, 8, 8}, RegTile{4, 8, 8, 16}, RegTile{4, 4, 4, 0},
                                         RegTile{2, 8, 8, 0}, RegTile{2, 8, 8, 8, 32}, RegTile{2, 8, 4, 8, 32},
                                         RegTile{2, 2, 2, 8, 32}, RegTile{4, 8, 8, 8, 32},
                                         // softmax backward: y and dy staged, or y alone in 512-thread CTAs
                                         RegTile{2, 4, 4, 8, 0, 2, 512, 8, 8}, RegTile{4, 4, 4, 8, 0, 2, 512, 8, 8},
                                         RegTile{4, 4, 4, 8, 0, 2, 1024, 8, 8},
                                         // softmax forward: x staged, or split 12 + 4 in 512-thread CTAs
                                         RegTile{2, 8, 4, 16, 0, 1, 512, 16, 12}, RegTile{4, 8, 4, 16, 0, 1, 512, 16, 12},
                                         RegTile{2, 8, 4, 16, 0, 1, 512, 16, 12, true},
                                         RegTile{2, 4, 4, 8, 0, 2, 512, 8, 8, true}),
                         reg_tile_name);

// reg_fill_max_team bounds the decode spread, not the wider tiles: raised,
// the 8K row spreads to 1024 threads at 1 vector (the plan to dd5bc91); the
// training-sized rows keep their plans either way.
TEST(RegConfigShapes, DecodeSpreadCap) {
  RegRowProblem p;
  p.cols = 8192;
  p.x_elem_bytes = 2;
  RegRowConfig c;
  RowTuning t = default_row_tuning();
  t.reg_fill_max_team = 1024;
  p.rows = 1;
  ASSERT_TRUE(choose_reg_row_config(p, DeviceLimits{}, t, &c));
  EXPECT_EQ(c.team, 1024);
  EXPECT_EQ(c.vpt, 1);
  for (int64_t rows : {int64_t(256), int64_t(32768)}) {
    p.rows = rows;
    RegRowConfig capped, wide;
    ASSERT_TRUE(choose_reg_row_config(p, DeviceLimits{}, default_row_tuning(), &capped));
    ASSERT_TRUE(choose_reg_row_config(p, DeviceLimits{}, t, &wide));
    EXPECT_EQ(capped.team, wide.team) << rows;
    EXPECT_EQ(capped.vpt, wide.vpt) << rows;
  }
}

TEST(RegConfigShapes, DisabledByTuning) {
  RowTuning t = default_row_tuning();
  t.reg_enable = 0;
  RegRowProblem p;
  p.rows = 8;
  p.cols = 4096;
  RegRowConfig c;
  EXPECT_FALSE(choose_reg_row_config(p, DeviceLimits{}, t, &c));
}

TEST(RegConfigShapes, TypicalShapes) {
  // Expected layouts of bf16 rows; -1: not checked.
  struct Shape {
    const char* why;
    int64_t rows, n;
    int team, vpt, cluster, threads;
  };
  const Shape shapes[] = {
      {"short rows: sub-warp teams sharing a CTA", 1 << 20, 256, 8, 4, -1, 256},
      {"a 4K row at training batch: one 128-thread CTA per row, 4 vectors each", 65536, 4096, 128, 4, 1, -1},
      {"past 256 threads at 4 vectors: 8 vectors per thread", 16384, 16384, 256, 8, 1, -1},
      {"... then up to 512 threads", 8192, 32768, 512, 8, 1, -1},
      {"then one 1024-thread CTA", 4096, 65536, 1024, 8, 1, -1},
      {"then clusters of them", 2048, 131072, 1024, 8, 2, -1},
      {"decode (one row): spread over more threads, one vector each", 1, 4096, 512, 1, -1, -1},
      {"decode: 256 threads at 2K", 1, 2048, 256, 1, -1, -1},
      {"decode: teams of at most 512 threads (reg_fill_max_team), 2 vectors at 8K", 1, 8192, 512, 2, 1, 512},
      {"... at 64 rows too", 64, 8192, 512, 2, 1, 512},
      {"decode, 16K: the target tile (4 vectors) in a team up to the cap (512), not the largest tile", 1, 16384, 512, 4,
       1, 512},
      {"... not past decode sizes (rows x 512 threads at the fill threshold)", 4096, 16384, 256, 8, 1, 256},
      {"long rows: 1M bf16 takes the whole 16 x 1024 x 8 tile", 256, 1 << 20, 1024, 8, 16, -1},
  };
  RegRowConfig c;
  for (const Shape& s : shapes) {
    RegRowProblem p;
    p.rows = s.rows;
    p.cols = s.n;
    p.x_elem_bytes = 2;
    ASSERT_TRUE(choose_reg_row_config(p, DeviceLimits{}, default_row_tuning(), &c)) << s.why;
    EXPECT_EQ(c.team, s.team) << s.why;
    EXPECT_EQ(c.vpt, s.vpt) << s.why;
    if (s.cluster >= 0) {
      EXPECT_EQ(c.cluster, s.cluster) << s.why;
    }
    if (s.threads >= 0) {
      EXPECT_EQ(c.threads, s.threads) << s.why;
    }
  }
  // 1M fp32 does not fit: the staged kernel's business.
  RegRowProblem p;
  p.rows = 256;
  p.cols = 1 << 20;
  p.x_elem_bytes = 4;
  EXPECT_FALSE(choose_reg_row_config(p, DeviceLimits{}, default_row_tuning(), &c));
}

// ---------------------------------------------------------------------------
// Chunked two-pass rows (choose_chunk_row_config): valid for every N and
// every tuning the tools may pass, clusters only as large as the row needs,
// and no staging beyond the chunk.
struct ChunkCase {
  int elem_bytes, tensors;
  int64_t cta_kb, stage_kb;
  int threads;
};

void chunk_sweep(const ChunkCase& k, const DeviceLimits& lim, int64_t max_n, int64_t step) {
  RowTuning t = default_row_tuning();
  t.chunk_cta_bytes = k.cta_kb << 10;
  t.chunk_stage_bytes = k.stage_kb << 10;
  t.chunk_threads = k.threads;
  for_each_shape(max_n, step, [&](int64_t rows, int64_t n) -> std::string {
    ChunkRowProblem p;
    p.rows = rows;
    p.cols = n;
    p.elem_bytes = k.elem_bytes;
    p.tensors = k.tensors;
    p.scratch_bytes = 1024;
    const ChunkRowConfig c = choose_chunk_row_config(p, lim, t);
    const char* why = check_chunk_row_config(c, p, lim);
    const int64_t row_bytes = ceil_div(n, c.vec) * 16 * k.tensors;
    if (why == nullptr && c.cluster > 1 && row_bytes <= int64_t(c.cluster / 2) * t.chunk_cta_bytes)
      why = "a cluster larger than the row needs";
    if (why == nullptr && c.cluster < std::min(16, lim.max_cluster) && row_bytes > int64_t(c.cluster) * t.chunk_cta_bytes)
      why = "chunks above the target although the cluster could grow";
    if (why == nullptr && int64_t(c.stage_vecs) * 16 * k.tensors > t.chunk_stage_bytes) why = "staging beyond the tuning";
    return why == nullptr ? std::string()
                          : std::string(why) + " (N " + std::to_string(n) + ", rows " + std::to_string(rows) +
                                ", cluster " + std::to_string(c.cluster) + ")";
  });
}

class ChunkConfigSweep : public testing::TestWithParam<ChunkCase> {};

TEST_P(ChunkConfigSweep, EveryNUpTo2Pow21IsValidOnH200) { chunk_sweep(GetParam(), DeviceLimits{}, kSweepMaxN, 1); }
TEST_P(ChunkConfigSweep, ValidWithPortableClusterOf8AndWithoutClusters) {
  DeviceLimits lim;
  lim.max_cluster = 8;
  chunk_sweep(GetParam(), lim, kSweepMaxN, 7);
  lim.max_cluster = 1;
  chunk_sweep(GetParam(), lim, kSweepMaxN, 7);
}

INSTANTIATE_TEST_SUITE_P(Softmax, ChunkConfigSweep,
                         testing::Values(ChunkCase{2, 1, 128, 96, 512}, ChunkCase{4, 1, 128, 96, 512},
                                         ChunkCase{2, 2, 128, 96, 512}, ChunkCase{4, 2, 16, 8, 128},
                                         ChunkCase{2, 1, 1, 300, 1024}, ChunkCase{4, 2, 1 << 20, 0, 64}));

TEST(ChunkConfig, StagingIsClampedToTheSharedMemoryLimit) {
  ChunkRowProblem p;
  p.rows = 3;
  p.cols = int64_t(1) << 24;
  p.elem_bytes = 4;
  p.tensors = 2;
  p.scratch_bytes = 1024;
  RowTuning t = default_row_tuning();
  t.chunk_stage_bytes = int64_t(1) << 30;
  const DeviceLimits lim;
  const ChunkRowConfig c = choose_chunk_row_config(p, lim, t);
  EXPECT_EQ(check_chunk_row_config(c, p, lim), nullptr);
  EXPECT_LE(c.smem_bytes, lim.max_smem_per_block);
  EXPECT_EQ(c.cluster, 16);
  EXPECT_EQ(c.grid, 3 * 16);
}

// The clamp of a persistent clustered grid (core::launch_row_kernel): the
// clusters asked for where they are resident, else the resident ones in
// whole multiples (the shifted norm backward's classes), at least one.
TEST(LaunchedClusters, ClampKeepsWholeMultiples) {
  EXPECT_EQ(launched_clusters(24, 30, 1), 24);  // all resident
  EXPECT_EQ(launched_clusters(24, 30, 8), 24);
  EXPECT_EQ(launched_clusters(33, 30, 1), 30);  // bf16 64K, 33 clusters of 4 where 30 fit
  EXPECT_EQ(launched_clusters(40, 30, 4), 28);
  EXPECT_EQ(launched_clusters(40, 30, 8), 24);
  EXPECT_EQ(launched_clusters(16, 7, 8), 8);    // fewer resident than one class each: 8, one running later
  EXPECT_EQ(launched_clusters(16, 7, 0), 7);    // (a multiple below 1 is 1)
  for (int64_t m : {1, 2, 4, 8})
    for (int64_t resident = 1; resident <= 40; ++resident)
      for (int64_t want = m; want <= 48; want += m) {
        const int64_t n = launched_clusters(want, resident, m);
        EXPECT_EQ(n % m, 0) << want << " " << resident << " " << m;
        EXPECT_LE(n, want);
        EXPECT_GE(n, m);
        if (want <= resident) {
          EXPECT_EQ(n, want);
        } else if (resident >= m) {
          EXPECT_GT(n + m, resident);  // the most whole multiples that fit
        }
      }
}

}  // namespace
}  // namespace quack
