// Host tests of softmax's dispatch table: which kernel serves an aligned row
// problem on an H200 (DeviceLimits{}) at the default tuning, read back
// through softmax_plan_description (the string the sweep prints). The cells
// pinned here are the ones the defaults in src/config.cpp cite
// (bench/results/2026-11-30-softmax-sweep.md, runs 3, 6 and 7); the scan
// checks the rule for every N instead of a few.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <cstdlib>
#include <cstdio>
#include <string>

#include "quack/core/config.hpp"
#include "support/plan_args.hpp"
#include "support/staged_plan.hpp"

namespace quack {
namespace {

using test::kBF16;
using test::kF16;
using test::kF32;

struct Kernel {
  bool reg = false;     // register-resident kernel (staged or not)
  bool staged = false;  // ... with x staged in shared memory
  int regs = 0;         // ... vectors a thread in registers too (the wide geometry)
  int threads = 0, cluster = 0, vpt = 0;
  int base = 0;  // the CTA the rules chose: threads, or (staged) the power of two above them
  bool grid = false;  // a grid kernel (the call has the workspace it asks for)
};

// A staged plan's CTA as the defaults make it: `base` threads as the rules
// choose them, fitted to the row (reg_staged_balance, on by default since
// the forty-second session's sweep: the fewest whole warps that cover the
// row at the plan's cluster and tile, support/staged_plan.hpp).
bool fitted_cta(const Kernel& k, int base, int64_t cols, DType dt) {
  const int64_t vec = 16 / dtype_size(dt);
  return k.staged && k.base == base && k.threads == test::balanced_threads((cols + vec - 1) / vec, k.cluster, k.vpt);
}

// Parses "reg   team T thr H cl C vpt V", "stage team T thr H cl C vpt V" or
// "chunk thr H cl C vecs .. staged .."; a "grid ..." plan is only marked
// (grid_plan below parses it). workspace: the call passes the one the
// direction asks for (fp32 rows past 512K then take the grid kernels).
Kernel plan(int64_t rows, int64_t cols, DType dt, bool backward, bool workspace = true) {
  const std::string s = softmax_plan_description(rows, cols, dt, backward, DeviceLimits{}, workspace);
  Kernel k;
  int team = 0;
  if (std::sscanf(s.c_str(), "reg team %d thr %d cl %d vpt %d", &team, &k.threads, &k.cluster, &k.vpt) == 4) {
    k.reg = true;
  } else if (std::sscanf(s.c_str(), "stage team %d thr %d cl %d vpt %d", &team, &k.threads, &k.cluster, &k.vpt) == 4) {
    k.reg = k.staged = true;
    const size_t at = s.find(" regs ");
    if (at != std::string::npos) k.regs = std::atoi(s.c_str() + at + 6);
  } else if (s.rfind("grid ", 0) == 0) {
    k.grid = true;
  } else if (std::sscanf(s.c_str(), "chunk thr %d cl %d", &k.threads, &k.cluster) != 2) {
    ADD_FAILURE() << "unparsed plan: " << s;
  }
  k.base = k.threads;
  if (k.staged)
    while (k.base & (k.base - 1)) k.base += k.base & -k.base;  // the power of two above
  return k;
}

TEST(SoftmaxPlan, MeasuredForwardCells) {
  // Register-held, one CTA: 16-bit rows up to 32K elements, fp32 up to 16K.
  for (DType dt : {kBF16, kF16}) {
    const Kernel k = plan(8192, 32768, dt, false);
    EXPECT_TRUE(k.reg && !k.staged && k.cluster == 1) << "16-bit N = 32K forward: one register CTA (95.6-95.9%)";
  }
  const Kernel f32k = plan(16384, 16384, kF32, false);
  EXPECT_TRUE(f32k.reg && !f32k.staged && f32k.cluster == 1) << "fp32 N = 16K forward: one register CTA";
  // fp32 staged past that, in clusters of 256-thread CTAs holding 16
  // vectors (256 bytes) a thread, up to 16 CTAs.
  struct Cell {
    int64_t rows, cols;
    int cluster;
    const char* why;
  };
  for (const Cell& c : {Cell{8192, 32768, 2, "95.4% vs 95.8% in one register CTA"}, Cell{100, 40000, 3, "86.4% vs 79.9%"},
                        Cell{4096, 65536, 4, "95.9% vs 88.6%"}, Cell{2048, 131072, 8, "95.2% vs 87.5%"},
                        Cell{1024, 262144, 16, "90.2% vs 85.1%"}}) {
    const Kernel k = plan(c.rows, c.cols, kF32, false);
    EXPECT_TRUE(fitted_cta(k, 256, c.cols, kF32) && k.vpt == 16 && k.cluster == c.cluster)
        << "fp32 N = " << c.cols << " forward: staged in " << c.cluster << " x 256 threads (" << c.why << ")";
  }
  // 16-bit rows staged past 32K elements as fp32's, up to 16 CTAs
  // (softmax_ab.log, 5454870: bf16 64K / 128K / 256K / 512K 95.3 / 94.6 /
  // 93.2 / 88.1% staged against 88.7 / 82.0 / 78.2 / 76.9% chunked);
  // chunked past 16 CTAs, as fp32.
  for (DType dt : {kBF16, kF16}) {
    for (const Cell& c : {Cell{100, 40000, 2, "61.2-61.9% vs 61.3-61.6% in a register CTA"},
                          Cell{4096, 65536, 2, "95.3% vs 88.7% chunked"}, Cell{300, 70000, 3, "70.2-73.2% vs 73.5-74.3%"},
                          Cell{2048, 131072, 4, "94.6% vs 82.0%"}, Cell{1024, 262144, 8, "93.2% vs 78.2%"},
                          Cell{512, 524288, 16, "88.1% vs 76.9%"}}) {
      const Kernel k = plan(c.rows, c.cols, dt, false);
      EXPECT_TRUE(fitted_cta(k, 256, c.cols, dt) && k.vpt == 16 && k.cluster == c.cluster)
          << "16-bit N = " << c.cols << " forward: staged in " << c.cluster << " x 256 threads (" << c.why << ")";
    }
    // Past 16 of those, the wide geometry (512-thread CTAs, 12 vectors
    // staged and 4 in registers; 1024 threads where 16 of 512 do not hold
    // the row; forty-first session's sweep: bf16 1M 86.7% against 71.9%
    // chunked), chunked past 16 of 1024.
    const Kernel w = plan(256, 524296, dt, false), w1m = plan(256, 1048576, dt, false);
    EXPECT_TRUE(fitted_cta(w, 512, 524296, dt) && w.regs == 4 && w.cluster == 9) << "16-bit N = 512K + 8 forward: 9 x 512";
    EXPECT_TRUE(w1m.staged && w1m.regs == 4 && w1m.threads == 512 && w1m.cluster == 16) << "16-bit N = 1M: 16 x 512";
    EXPECT_FALSE(plan(256, 2097160, dt, false).reg) << "16-bit N = 2M + 8 forward: chunked (17 CTAs of 1024)";
  }
  // (fp32 rows past 512K take the grid where the call has a workspace:
  // TuningSelectsTheGridForward; without one, these.)
  const Kernel w = plan(256, 262148, kF32, false), w1m = plan(256, 1048576, kF32, false, false);
  EXPECT_TRUE(fitted_cta(w, 512, 262148, kF32) && w.regs == 4 && w.cluster == 9) << "fp32 N = 256K + 4 forward: 9 x 512";
  EXPECT_TRUE(w1m.staged && w1m.regs == 4 && w1m.threads == 1024 && w1m.cluster == 16) << "fp32 N = 1M: 16 x 1024";
  EXPECT_FALSE(plan(256, 1048580, kF32, false, false).reg) << "fp32 N = 1M + 4 forward: chunked";
}

// Rows of one register CTA take the fewest whole warps that cover them at
// their tile (reg_fit_team, the default since the forty-seventh session),
// not the power of two above: bf16 4100 (4096 + 4, shifted: 513 vectors)
// forward 128 -> 96 threads at 8 vectors, backward 256 -> 160 at 4 (77.7 ->
// 91.9% and 85.7 -> 101.5% of copy, H100, 7123574; src/config.cpp); the
// tile is the power of two's, and a row a power of two holds exactly keeps
// its CTA.
TEST(SoftmaxPlan, RowsOfOneCtaTakeTheFewestWarps) {
  ASSERT_EQ(default_row_tuning().reg_fit_team, 1);
  RowTuning pow2 = default_row_tuning();
  pow2.reg_fit_team = 0;
  struct Cell {
    int64_t cols;
    bool backward;
    int fitted, pow2;
  };
  for (const Cell& c : {Cell{4100, false, 96, 128}, Cell{4100, true, 160, 256}, Cell{5120, false, 96, 128},
                        Cell{5120, true, 160, 256}, Cell{8200, true, 288, 512}, Cell{4096, false, 64, 64},
                        Cell{4096, true, 128, 128}}) {
    SCOPED_TRACE("bf16 N = " + std::to_string(c.cols) + (c.backward ? " backward" : " forward"));
    const bool odd = c.cols % 8 != 0;
    set_row_tuning(nullptr);
    const std::string fs = softmax_plan_description(4096, c.cols, kBF16, c.backward, DeviceLimits{}, true, odd);
    set_row_tuning(&pow2);
    const std::string ps = softmax_plan_description(4096, c.cols, kBF16, c.backward, DeviceLimits{}, true, odd);
    set_row_tuning(nullptr);
    int ft = 0, fthr = 0, fcl = 0, fvpt = 0, pt = 0, pthr = 0, pcl = 0, pvpt = 0;
    ASSERT_EQ(std::sscanf(fs.c_str(), "reg team %d thr %d cl %d vpt %d", &ft, &fthr, &fcl, &fvpt), 4) << fs;
    ASSERT_EQ(std::sscanf(ps.c_str(), "reg team %d thr %d cl %d vpt %d", &pt, &pthr, &pcl, &pvpt), 4) << ps;
    EXPECT_TRUE(fcl == 1 && pcl == 1 && fvpt == pvpt) << fs << " / " << ps;
    EXPECT_TRUE(ft == c.fitted && fthr == c.fitted) << fs;
    EXPECT_TRUE(pt == c.pow2 && pthr == c.pow2) << ps;
    // whole warps, none to spare: (shifted rows plan vec - 1 more elements)
    const int64_t nvec = (c.cols + (odd ? 7 : 0) + 7) / 8;
    EXPECT_EQ(ft, (nvec + fvpt - 1) / fvpt + 31 - ((nvec + fvpt - 1) / fvpt + 31) % 32) << fs;
  }
}

// softmax_staged_fwd picks the dtypes (bit 0 16-bit, bit 1 fp32; 0 none),
// softmax_staged_vpt the tile: the A/B the sweep runs.
TEST(SoftmaxPlan, TuningSelectsTheStagedDtypesAndTile) {
  RowTuning t = default_row_tuning();
  t.softmax_staged_fwd = 3;
  set_row_tuning(&t);
  const Kernel b16 = plan(4096, 65536, kBF16, false);
  t.softmax_staged_vpt = 8;
  set_row_tuning(&t);
  const Kernel b8 = plan(4096, 65536, kBF16, false);
  t.softmax_staged_vpt = 12;  // not a tile the kernel is built with: no staging
  set_row_tuning(&t);
  const Kernel f12 = plan(4096, 65536, kF32, false);
  t.softmax_staged_vpt = 16;
  t.softmax_staged_fwd = 0;
  set_row_tuning(&t);
  const Kernel f = plan(4096, 65536, kF32, false);
  set_row_tuning(nullptr);
  EXPECT_TRUE(b16.staged && b16.vpt == 16 && b16.cluster == 2) << "bf16 N = 64K staged in 2 x 256 threads";
  EXPECT_TRUE(b8.staged && b8.vpt == 8 && b8.cluster == 4) << "bf16 N = 64K staged in 4 x 256 threads at 8 vectors";
  EXPECT_FALSE(f12.reg) << "fp32 N = 64K with an unbuilt tile: chunked";
  EXPECT_FALSE(f.reg) << "fp32 N = 64K chunked with staging off";
  EXPECT_TRUE(plan(4096, 65536, kF32, false).staged) << "defaults restored";
}

// Every N up to 2^21 (powers of two, their neighbours, and a stride through
// the rest): a forward row is register-held in one CTA (16-bit up to 32K
// elements, fp32 up to 16K); beyond, rows are staged in a cluster of 2..16
// 256-thread CTAs whose tiles cover the row, then of the wide geometry's
// 512 or 1024 threads, and chunked past 16 of those (without a workspace:
// the grid takes fp32 rows past 512K where the call has one). Whatever
// serves it names a cluster of 1..16.
TEST(SoftmaxPlan, ForwardRowsAreOneCtaStagedOrChunked) {
  for (DType dt : {kF32, kBF16}) {
    const bool f32 = dt == kF32;
    const int64_t reg_max = f32 ? 16384 : 32768;
    const int64_t vec = f32 ? 4 : 8;
    for (int64_t n = 1; n <= (int64_t(1) << 21); n = n < 4096 ? n + 1 : n + 997) {
      for (int64_t cols : {n, n | 1}) {
        const Kernel k = plan(64, cols, dt, false, false);
        ASSERT_TRUE(k.cluster >= 1 && k.cluster <= 16) << "N = " << cols;
        if (k.staged) {
          ASSERT_GT(cols, reg_max) << "N = " << cols << " staged";
          ASSERT_GE(k.cluster, 2) << "N = " << cols;
          ASSERT_GE(int64_t(k.cluster) * k.threads * k.vpt * vec, cols) << "N = " << cols << ": tiles short of the row";
          ASSERT_LT(int64_t(k.cluster - 1) * k.threads * k.vpt * vec, cols) << "N = " << cols << ": an idle CTA";
        } else if (k.reg) {
          ASSERT_EQ(k.cluster, 1) << "N = " << cols << " forward register rows split over a cluster";
          ASSERT_LE(cols, reg_max) << "N = " << cols << " forward register rows past one CTA's tile";
        } else {
          ASSERT_GT(cols, int64_t(16) * 1024 * 16 * vec) << "N = " << cols << ": chunked";
        }
      }
    }
    for (int s = 0; s <= 21; ++s) {
      const Kernel k = plan(64, int64_t(1) << s, dt, false, false);
      const bool staged = f32 ? s >= 15 && s <= 20 : s >= 16 && s <= 21;
      EXPECT_EQ(k.reg, s < (f32 ? 15 : 16) || staged) << "N = 2^" << s;
      EXPECT_EQ(k.staged, staged) << "N = 2^" << s;
    }
  }
}

// Backward rows up to one 1024-thread register CTA (4 vectors of y and dy
// a thread) stay there; longer ones stage y and dy in clusters of up to 16
// 256-thread CTAs at 8 vectors of each a thread (64 KB a CTA; softmax_sweep
// at 5d0508e: bf16 64K-256K 380-382 us against 397-404 in register
// clusters); past that they take the register cluster or the chunked
// kernel as before (fp32 256K at 16 vectors lost to the chunked kernel,
// 872-878 against 862 us). Rows past those 16 CTAs take the wide geometry
// (softmax_staged_bwd_wide = 512 since the forty-first session's sweep:
// fp32 256K 760.5 us against 857.4 chunked; the next test), and past 16 of
// its 1024-thread CTAs the register cluster or the chunked kernel.
TEST(SoftmaxPlan, BackwardRowsAreOneCtaStagedOrChunked) {
  struct Cell {
    DType dt;
    int64_t cols;
    int cluster, vpt;  // cluster 0: not staged; vpt 0: one register CTA
    int wide = 0;      // the wide geometry's CTA (0: the staged tile's 256)
  };
  for (const Cell& c : {Cell{kBF16, 32768, 1, 0}, Cell{kBF16, 32776, 3, 8}, Cell{kBF16, 65536, 4, 8},
                        Cell{kBF16, 131072, 8, 8}, Cell{kBF16, 262144, 16, 8}, Cell{kBF16, 262152, 9, 8, 512},
                        Cell{kBF16, 524288, 16, 8, 512}, Cell{kF16, 70000, 5, 8}, Cell{kF32, 16384, 1, 0},
                        Cell{kF32, 16388, 3, 8}, Cell{kF32, 65536, 8, 8}, Cell{kF32, 131072, 16, 8},
                        Cell{kF32, 131076, 9, 8, 512}, Cell{kF32, 262144, 16, 8, 512},
                        Cell{kF32, 524288, 16, 8, 1024}, Cell{kF32, 1048576, 0, 0}}) {
    const Kernel k = plan(1024, c.cols, c.dt, true);
    const std::string what = std::string(dtype_name(c.dt)) + " N = " + std::to_string(c.cols) + " backward";
    if (c.cluster == 0) {
      EXPECT_FALSE(k.staged) << what << ": past 16 staged CTAs (a register cluster or chunked, as before)";
      EXPECT_EQ(k.grid, c.dt == kF32 && c.cols > 524288) << what << ": fp32 rows past 512K, the grid by default";
    } else if (c.vpt == 0) {
      EXPECT_TRUE(k.reg && !k.staged && k.cluster == 1) << what << ": one register CTA";
    } else {
      const int threads = c.wide > 0 ? c.wide : 256;
      EXPECT_TRUE(fitted_cta(k, threads, c.cols, c.dt) && k.cluster == c.cluster && k.vpt == c.vpt &&
                  k.regs == (c.wide > 0 ? 8 : 0))
          << what << ": staged in " << c.cluster << " x " << threads << " threads at " << c.vpt
          << " vectors, got cl " << k.cluster << " vpt " << k.vpt << " thr " << k.threads;
    }
  }
}

// The wide staged geometry (softmax_staged_fwd_wide / _bwd_wide: CTAs of
// that many threads, doubled up to 1024 while 16 of them do not cover the
// row) for rows past 16 staged 256-thread CTAs: the backward's 8 vectors of
// y staged and 8 of dy in registers, the forward's 16 vectors of x, 12
// staged and 4 in registers; past 16 CTAs of 1024 threads, the kernels as
// before. Only at the tiles its kernels are built for (backward 8, forward
// 16).
TEST(SoftmaxPlan, TuningSelectsTheWideStagedGeometry) {
  struct Cell {
    DType dt;
    int64_t cols;
    bool backward;
    int cluster, threads;  // cluster 0: not wide
  };
  RowTuning t = default_row_tuning();
  t.softmax_staged_fwd_wide = 512;
  t.softmax_staged_bwd_wide = 512;
  set_row_tuning(&t);
  for (const Cell& c :
       {Cell{kBF16, 262144, true, 0, 0}, Cell{kBF16, 262152, true, 9, 512}, Cell{kBF16, 524288, true, 16, 512},
        Cell{kBF16, 524296, true, 9, 1024}, Cell{kBF16, 1048576, true, 16, 1024}, Cell{kBF16, 1048584, true, 0, 0},
        Cell{kF16, 300000, true, 10, 512}, Cell{kF32, 131072, true, 0, 0}, Cell{kF32, 131076, true, 9, 512},
        Cell{kF32, 262144, true, 16, 512}, Cell{kF32, 262148, true, 9, 1024}, Cell{kF32, 524292, true, 0, 0},
        Cell{kBF16, 524288, false, 0, 0}, Cell{kBF16, 524296, false, 9, 512}, Cell{kBF16, 1048576, false, 16, 512},
        Cell{kBF16, 1048584, false, 9, 1024}, Cell{kF16, 700001, false, 11, 512}, Cell{kF32, 262144, false, 0, 0},
        Cell{kF32, 262148, false, 9, 512}, Cell{kF32, 524288, false, 16, 512}, Cell{kF32, 1048576, false, 16, 1024},
        Cell{kF32, 1048580, false, 0, 0}}) {
    const Kernel k = plan(1024, c.cols, c.dt, c.backward, false);  // (no workspace: no grid)
    const std::string what = std::string(dtype_name(c.dt)) + " N = " + std::to_string(c.cols) +
                             (c.backward ? " backward" : " forward");
    if (c.cluster == 0) {
      EXPECT_EQ(k.regs, 0) << what << ": not the wide geometry";
    } else {
      EXPECT_TRUE(fitted_cta(k, c.threads, c.cols, c.dt) && k.cluster == c.cluster && k.vpt == (c.backward ? 8 : 16) &&
                  k.regs == (c.backward ? 8 : 4))
          << what << ": " << c.cluster << " x " << c.threads << " threads, got cl " << k.cluster << " vpt " << k.vpt
          << " thr " << k.threads << " regs " << k.regs;
    }
  }
  t.softmax_staged_bwd_wide = 1024;
  set_row_tuning(&t);
  const Kernel k1024 = plan(1024, 262144, kF32, true);
  t.softmax_staged_bwd_vpt = 16;
  t.softmax_staged_vpt = 8;
  set_row_tuning(&t);
  const Kernel b16 = plan(1024, 262144, kF32, true);
  const Kernel f8 = plan(1024, 524288, kF32, false);
  set_row_tuning(nullptr);
  EXPECT_TRUE(k1024.staged && k1024.regs == 8 && k1024.threads == 1024 && k1024.cluster == 8)
      << "fp32 N = 256K backward in 1024-thread CTAs: 8 of them";
  EXPECT_TRUE(b16.staged && b16.regs == 0 && b16.threads == 256 && b16.vpt == 16 && b16.cluster == 16)
      << "fp32 N = 256K backward at the 16-vector tile: 16 CTAs of y and dy, no wide geometry";
  EXPECT_EQ(f8.regs, 0) << "fp32 N = 512K forward at the 8-vector tile: no wide geometry";
  // softmax_staged_wide_first: the wide geometry wherever it makes a cluster.
  t = default_row_tuning();
  t.softmax_staged_fwd_wide = 512;
  t.softmax_staged_bwd_wide = 512;
  t.softmax_staged_wide_first = 1;  // 16-bit only
  set_row_tuning(&t);
  const Kernel fb = plan(1024, 262144, kBF16, false), fb64 = plan(1024, 65536, kBF16, false);
  const Kernel bb = plan(1024, 65536, kBF16, true), ff = plan(1024, 262144, kF32, false);
  set_row_tuning(nullptr);
  EXPECT_TRUE(fb.staged && fb.regs == 4 && fb.threads == 512 && fb.cluster == 4) << "bf16 256K forward wide first: 4 x 512";
  EXPECT_TRUE(fb64.staged && fb64.regs == 0 && fb64.cluster == 2)
      << "bf16 64K forward wide first: one wide CTA would hold it, so the staged tile (2 x 256)";
  EXPECT_TRUE(bb.staged && bb.regs == 8 && bb.threads == 512 && bb.cluster == 2) << "bf16 64K backward wide first: 2 x 512";
  EXPECT_TRUE(ff.staged && ff.regs == 0 && ff.threads == 256) << "fp32 rows without bit 1: the staged tile";
  const Kernel d = plan(1024, 262144, kF32, true);
  EXPECT_TRUE(d.staged && d.regs == 8 && d.threads == 512) << "defaults restored: the wide geometry at 512 threads";
}

// The grid forward (softmax_fwd_grid: bits as softmax_staged_fwd; by
// default fp32 rows past 512K, two a step -- the forty-first session's
// sweep: fp32 1M 88.8% against the wide geometry's 82.4, bf16 53.0 against
// 86.7; rows from softmax_fwd_grid_min_cols16 / 32) takes
// forward rows a cooperative grid of 512-thread CTAs holds at 8192
// elements a CTA -- up to 132 ranks, the SMs -- where the call has a
// workspace; the stages, lag and rows a step are the norm grid forward's.
// Parses "grid  ranks R groups G rows r stages S lag L tile T ...".
struct Grid {
  bool on = false;
  int ranks = 0, groups = 0, rows = 0, stages = 0, lag = 0;
  long long tile = 0;
};
Grid grid_plan(int64_t rows, int64_t cols, DType dt, bool backward = false, bool workspace = true) {
  const std::string s = softmax_plan_description(rows, cols, dt, backward, DeviceLimits{}, workspace);
  Grid g;
  g.on = std::sscanf(s.c_str(), "grid ranks %d groups %d rows %d stages %d lag %d tile %lld", &g.ranks, &g.groups,
                     &g.rows, &g.stages, &g.lag, &g.tile) == 6;
  EXPECT_EQ(g.on, s.rfind("grid", 0) == 0) << "unparsed plan: " << s;
  return g;
}

TEST(SoftmaxPlan, TuningSelectsTheGridForward) {
  struct Cell {
    DType dt;
    int64_t cols;
    int ranks, groups, rows, stages;  // ranks 0: not the grid
  };
  // The defaults: fp32 rows past 512K, two a step (6 stages of 32 KB: lag 1).
  EXPECT_FALSE(grid_plan(256, 1048576, kBF16).on) << "16-bit rows: off by default";
  EXPECT_FALSE(grid_plan(512, 524288, kF32).on) << "fp32 N = 512K: the wide geometry (even with the grid)";
  const Grid d1m = grid_plan(256, 1048576, kF32), d512k = grid_plan(512, 524292, kF32);
  EXPECT_TRUE(d1m.on && d1m.ranks == 128 && d1m.groups == 1 && d1m.rows == 2 && d1m.stages == 6 && d1m.lag == 1)
      << "fp32 N = 1M: 128 ranks, two rows a step; got ranks " << d1m.ranks << " rows " << d1m.rows << " stages "
      << d1m.stages << " lag " << d1m.lag;
  EXPECT_TRUE(d512k.on && d512k.ranks == 65 && d512k.rows == 2) << "fp32 N = 512K + 4: 65 ranks";
  EXPECT_FALSE(grid_plan(256, 1048576, kF32, false, false).on) << "no workspace, no grid";
  // The defaults come back however the test ends (its ASSERTs return early).
  struct RestoreTuning {
    ~RestoreTuning() { set_row_tuning(nullptr); }
  } restore;
  // The mechanics, both dtypes from 256K / 512K, fp32 one row a step.
  RowTuning t = default_row_tuning();
  t.softmax_fwd_grid = 3;
  t.softmax_fwd_grid_min_cols32 = 262144;
  t.softmax_fwd_grid_rows32 = 1;
  t.softmax_bwd_grid = 0;  // (the backward's own knob: the forward's does not reach it)
  set_row_tuning(&t);
  // 16-bit: 1024 vectors a rank (16 KB stages: 8 of them, the tuning's), two
  // rows a step; fp32: 2048 (32 KB stages: 6 fit beside the header; 7 of
  // 300001's 2028-vector tiles), one.
  for (const Cell& c : {Cell{kBF16, 1048576, 128, 1, 2, 8}, Cell{kF16, 1048576, 128, 1, 2, 8},
                        Cell{kBF16, 524288, 64, 2, 2, 8}, Cell{kBF16, 524289, 65, 2, 2, 8},
                        Cell{kBF16, 524280, 0, 0, 0, 0}, Cell{kBF16, 132 * 8192, 132, 1, 2, 8},
                        Cell{kBF16, 132 * 8192 + 8, 0, 0, 0, 0}, Cell{kBF16, 2097152, 0, 0, 0, 0},
                        Cell{kF32, 1048576, 128, 1, 1, 6}, Cell{kF32, 262144, 32, 4, 1, 6},
                        Cell{kF32, 300001, 37, 3, 1, 7}, Cell{kF32, 262140, 0, 0, 0, 0},
                        Cell{kF32, 132 * 8192, 132, 1, 1, 6}, Cell{kF32, 132 * 8192 + 4, 0, 0, 0, 0}}) {
    const Grid g = grid_plan(256, c.cols, c.dt);
    const std::string what = std::string(dtype_name(c.dt)) + " N = " + std::to_string(c.cols);
    if (c.ranks == 0) {
      EXPECT_FALSE(g.on) << what << ": not the grid (below its threshold, or more ranks than SMs)";
      continue;
    }
    EXPECT_TRUE(g.on && g.ranks == c.ranks && g.groups == c.groups && g.rows == c.rows && g.stages == c.stages &&
                g.lag == 2)
        << what << ": " << c.ranks << " ranks x " << c.groups << " groups, " << c.rows << " rows a step, " << c.stages
        << " stages; got ranks " << g.ranks << " groups " << g.groups << " rows " << g.rows << " stages " << g.stages
        << " lag " << g.lag;
    EXPECT_FALSE(grid_plan(256, c.cols, c.dt, false, false).on) << what << ": no workspace, no grid";
    EXPECT_FALSE(grid_plan(256, c.cols, c.dt, true).on) << what << ": the backward has no grid";
  }
  // The exchange: a (max, sum) pair (16 bytes) a rank a row of every step.
  NormGridConfig g;
  ASSERT_TRUE(choose_softmax_fwd_grid_config(256, 1048576, 2, DeviceLimits{}, t, &g));
  EXPECT_EQ(g.exchange_bytes, size_t(256) * 128 * 16);
  EXPECT_EQ(check_softmax_fwd_grid_config(g, 256, 1048576, 2, DeviceLimits{}), nullptr);
  g.exchange_bytes -= 16;
  EXPECT_NE(check_softmax_fwd_grid_config(g, 256, 1048576, 2, DeviceLimits{}), nullptr) << "a pair short";
  // A row group of 3 rows at two a step: the last step holds one.
  ASSERT_TRUE(choose_softmax_fwd_grid_config(3, 1048576, 2, DeviceLimits{}, t, &g));
  EXPECT_EQ(g.steps, 2);
  EXPECT_EQ(g.exchange_bytes, size_t(2) * 2 * 128 * 16);
  // The dtype bits and the thresholds.
  t.softmax_fwd_grid = 2;  // fp32 rows only
  t.softmax_fwd_grid_min_cols32 = 65536;
  set_row_tuning(&t);
  EXPECT_FALSE(grid_plan(256, 1048576, kBF16).on) << "16-bit rows without bit 0";
  const Grid f64k = grid_plan(4096, 65536, kF32);
  EXPECT_TRUE(f64k.on && f64k.ranks == 8 && f64k.groups == 16) << "fp32 N = 64K at a 64K threshold: 8 x 16";
  t.softmax_fwd_grid_min_cols32 = 1;
  set_row_tuning(&t);
  EXPECT_FALSE(grid_plan(4096, 65535, kF32).on) << "below kSoftmaxFwdWorkspaceMinCols, whatever the tuning";
  set_row_tuning(nullptr);
  EXPECT_EQ(grid_plan(256, 1048576, kF32).rows, 2) << "defaults restored";
  EXPECT_FALSE(grid_plan(256, 1048576, kBF16).on) << "defaults restored";
}

// The grid backward (softmax_bwd_grid: bits as softmax_fwd_grid; by
// default fp32 rows past 512K, the chunked kernel's): y's and dy's tiles a
// stage, a word a row (the dot) in the exchange, the norm grid backward's
// stages and lag (fp32: 3 stages of 64 KB; 16-bit: 6 of 32 KB, two rows a
// step), where the call has a workspace.
TEST(SoftmaxPlan, TuningSelectsTheGridBackward) {
  struct Cell {
    DType dt;
    int64_t cols;
    int ranks, groups, rows, stages, lag;  // ranks 0: not the grid
  };
  for (const DType dt : {kBF16, kF16})
    for (const int64_t cols : {int64_t(1048576), int64_t(524289), int64_t(65536)})
      EXPECT_FALSE(grid_plan(256, cols, dt, true).on) << dtype_name(dt) << " " << cols << ": off by default";
  const Grid d1m = grid_plan(256, 1048576, kF32, true), d512k = grid_plan(512, 524292, kF32, true);
  EXPECT_TRUE(d1m.on && d1m.ranks == 128 && d1m.groups == 1 && d1m.rows == 1 && d1m.stages == 3 && d1m.lag == 1)
      << "fp32 N = 1M by default: 128 ranks; got ranks " << d1m.ranks << " stages " << d1m.stages;
  EXPECT_TRUE(d512k.on && d512k.ranks == 65 && d512k.groups == 2) << "fp32 N = 512K + 4: 65 ranks x 2";
  EXPECT_FALSE(grid_plan(512, 524288, kF32, true).on) << "fp32 N = 512K: the staged wide geometry";
  EXPECT_FALSE(grid_plan(256, 1048576, kF32, true, false).on) << "no workspace, no grid";
  EXPECT_EQ(softmax_plan_description(256, 1048576, kF32, true, DeviceLimits{}, false).rfind("chunk", 0), 0u)
      << "without a workspace: the chunked kernel";
  struct RestoreTuning {
    ~RestoreTuning() { set_row_tuning(nullptr); }
  } restore;
  RowTuning t = default_row_tuning();
  t.softmax_bwd_grid = 3;
  t.softmax_bwd_grid_min_cols16 = t.softmax_bwd_grid_min_cols32 = 262144;
  set_row_tuning(&t);
  for (const Cell& c : {Cell{kF32, 1048576, 128, 1, 1, 3, 1}, Cell{kBF16, 1048576, 128, 1, 2, 6, 1},
                        Cell{kF16, 1048576, 128, 1, 2, 6, 1}, Cell{kF32, 262144, 32, 4, 1, 3, 1},
                        Cell{kBF16, 262144, 32, 4, 2, 6, 1}, Cell{kF32, 300001, 37, 3, 1, 3, 1},
                        Cell{kF32, 262140, 0, 0, 0, 0, 0}, Cell{kF32, 132 * 8192, 132, 1, 1, 3, 1},
                        Cell{kF32, 132 * 8192 + 4, 0, 0, 0, 0, 0}, Cell{kBF16, 2097152, 0, 0, 0, 0, 0}}) {
    const Grid g = grid_plan(256, c.cols, c.dt, true);
    const std::string what = std::string(dtype_name(c.dt)) + " N = " + std::to_string(c.cols);
    const std::string fwd = softmax_plan_description(256, c.cols, c.dt, false, DeviceLimits{});
    set_row_tuning(nullptr);
    EXPECT_EQ(fwd, softmax_plan_description(256, c.cols, c.dt, false, DeviceLimits{}))
        << what << ": the forward keeps its own knobs";
    set_row_tuning(&t);
    if (c.ranks == 0) {
      EXPECT_FALSE(g.on) << what << ": not the grid (below its threshold, or more ranks than SMs)";
      continue;
    }
    EXPECT_TRUE(g.on && g.ranks == c.ranks && g.groups == c.groups && g.rows == c.rows && g.stages == c.stages &&
                g.lag == c.lag)
        << what << ": got ranks " << g.ranks << " groups " << g.groups << " rows " << g.rows << " stages "
        << g.stages << " lag " << g.lag;
    EXPECT_FALSE(grid_plan(256, c.cols, c.dt, true, false).on) << what << ": no workspace, no grid";
  }
  // The exchange: a word (8 bytes) a rank a row of every step.
  NormGridConfig g;
  ASSERT_TRUE(choose_softmax_bwd_grid_config(256, 1048576, 4, DeviceLimits{}, t, &g));
  EXPECT_EQ(g.exchange_bytes, size_t(256) * 128 * 8);
  EXPECT_EQ(check_softmax_bwd_grid_config(g, 256, 1048576, 4, DeviceLimits{}), nullptr);
  g.exchange_bytes -= 8;
  EXPECT_NE(check_softmax_bwd_grid_config(g, 256, 1048576, 4, DeviceLimits{}), nullptr) << "a word short";
  ASSERT_TRUE(choose_softmax_bwd_grid_config(3, 1048576, 2, DeviceLimits{}, t, &g));
  EXPECT_EQ(g.steps, 2) << "3 rows at two a step: the last step holds one";
  EXPECT_EQ(g.exchange_bytes, size_t(2) * 2 * 128 * 8);
  EXPECT_EQ(check_softmax_fwd_grid_config(g, 3, 1048576, 2, DeviceLimits{}), std::string("smem != header + stages"))
      << "the forward's layout (one tile a stage) is not the backward's";
  t.softmax_bwd_grid = 2;  // fp32 rows only
  t.softmax_bwd_grid_min_cols32 = 1;
  set_row_tuning(&t);
  EXPECT_FALSE(grid_plan(256, 1048576, kBF16, true).on) << "16-bit rows without bit 0";
  EXPECT_FALSE(grid_plan(4096, 65535, kF32, true).on) << "below kSoftmaxBwdWorkspaceMinCols, whatever the tuning";
  const Grid f64k = grid_plan(4096, 65536, kF32, true);
  EXPECT_TRUE(f64k.on && f64k.ranks == 8 && f64k.groups == 16) << "fp32 N = 64K: 8 x 16";
}

// Every grid layout the chooser returns for softmax's backward keeps the
// kernel's invariants (check_softmax_bwd_grid_config).
TEST(SoftmaxBwdGridConfig, Invariants) {
  const DeviceLimits lim;
  int served = 0;
  for (const int eb : {2, 4})
    for (const int stages : {2, 3, 6, 13})
      for (const int lag : {1, 2, 7})
        for (const int rows16 : {1, 2, 4})
          for (const int64_t rows : {int64_t(1), int64_t(3), int64_t(131), int64_t(100000)})
            for (int64_t cols = kSoftmaxBwdWorkspaceMinCols - 1; cols <= (int64_t(1) << 21); cols = cols * 5 / 3 + 7) {
              RowTuning t = default_row_tuning();
              t.softmax_bwd_grid = 3;
              t.softmax_bwd_grid_min_cols16 = t.softmax_bwd_grid_min_cols32 = 1;
              t.bwd_grid_stages16 = t.bwd_grid_stages32 = stages;
              t.bwd_grid_lag = lag;
              t.bwd_grid_rows16 = rows16;
              NormGridConfig c;
              if (!choose_softmax_bwd_grid_config(rows, cols, eb, lim, t, &c)) {
                EXPECT_TRUE(cols < kSoftmaxBwdWorkspaceMinCols || (cols + 8191) / 8192 > lim.num_sms) << cols;
                continue;
              }
              ++served;
              SCOPED_TRACE(std::to_string(cols) + " cols, " + std::to_string(eb) + "-byte x");
              EXPECT_EQ(check_softmax_bwd_grid_config(c, rows, cols, eb, lim), nullptr);
              EXPECT_LE(c.grid, lim.num_sms);
              EXPECT_LE(c.smem_bytes + 1024, lim.smem_per_sm);  // (1 KB reserved a CTA)
              EXPECT_LE((c.lag + 1) * c.rows, c.stages);
              // fp32 rows one a step; 16-bit rows two where the knob asks and
              // two steps and a row fit the stages (the kernels built: 1, 2).
              EXPECT_EQ(c.rows, eb == 2 && rows16 >= 2 && c.stages >= 5 ? 2 : 1);
              EXPECT_GE(int64_t(c.ranks) * c.tile_vecs * (16 / eb), cols) << "the tiles cover the row";
              EXPECT_GE(c.exchange_bytes, size_t(c.groups) * size_t(c.steps) * size_t(c.ranks) * size_t(c.rows) * 8);
            }
  EXPECT_GT(served, 100);
}

// Every grid layout the chooser returns for softmax keeps the kernel's
// invariants (check_softmax_fwd_grid_config), over lengths, dtypes, row
// counts and the tuning's stages, lag and rows a step.
TEST(SoftmaxFwdGridConfig, Invariants) {
  const DeviceLimits lim;
  int served = 0;
  for (const int eb : {2, 4})
    for (const int stages : {2, 3, 8, 13})
      for (const int lag : {1, 2, 7})
        for (const auto& [rows16, rows32] : {std::pair{1, 1}, {2, 2}, {4, 1}, {1, 4}})
          for (const int64_t rows : {int64_t(1), int64_t(3), int64_t(131), int64_t(100000)})
            for (int64_t cols = kSoftmaxFwdWorkspaceMinCols - 1; cols <= (int64_t(1) << 21); cols = cols * 5 / 3 + 7) {
              RowTuning t = default_row_tuning();
              t.softmax_fwd_grid = 3;
              t.softmax_fwd_grid_min_cols16 = t.softmax_fwd_grid_min_cols32 = 1;
              t.fwd_grid_stages16 = t.fwd_grid_stages32 = stages;
              t.fwd_grid_lag = lag;
              t.fwd_grid_rows16 = rows16;
              t.softmax_fwd_grid_rows32 = rows32;
              NormGridConfig c;
              if (!choose_softmax_fwd_grid_config(rows, cols, eb, lim, t, &c)) {
                EXPECT_TRUE(cols < kSoftmaxFwdWorkspaceMinCols || (cols + 8191) / 8192 > lim.num_sms) << cols;
                continue;
              }
              ++served;
              SCOPED_TRACE(std::to_string(cols) + " cols, " + std::to_string(eb) + "-byte x");
              EXPECT_EQ(check_softmax_fwd_grid_config(c, rows, cols, eb, lim), nullptr);
              EXPECT_LE(c.grid, lim.num_sms);
              EXPECT_LE(c.smem_bytes + 1024, lim.smem_per_sm);  // (1 KB reserved a CTA)
              EXPECT_LE((c.lag + 1) * c.rows, c.stages);
              // Two rows a step at most (two words a row), in either dtype,
              // where the knob asks and two steps and a row fit the stages.
              EXPECT_EQ(c.rows, (eb == 2 ? rows16 : rows32) >= 2 && c.stages >= 5 ? 2 : 1);
              EXPECT_GE(int64_t(c.ranks) * c.tile_vecs * (16 / eb), cols) << "the tiles cover the row";
              EXPECT_GE(c.exchange_bytes, size_t(c.groups) * size_t(c.steps) * size_t(c.ranks) * size_t(c.rows) * 16);
            }
  EXPECT_GT(served, 100);
}

// softmax_staged_bwd picks the dtypes, softmax_staged_bwd_vpt the tile; off,
// long backward rows take the clustered register kernel or the chunked one.
TEST(SoftmaxPlan, TuningSelectsTheStagedBackward) {
  RowTuning t = default_row_tuning();
  t.softmax_staged_bwd_vpt = 16;
  set_row_tuning(&t);
  const Kernel b16 = plan(4096, 65536, kBF16, true);
  t.softmax_staged_bwd_vpt = 12;  // not a tile the kernel is built with: no staging
  set_row_tuning(&t);
  const Kernel b12 = plan(4096, 65536, kBF16, true);
  t.softmax_staged_bwd_vpt = 8;
  t.softmax_staged_bwd = 1;  // 16-bit only
  set_row_tuning(&t);
  const Kernel b1 = plan(4096, 65536, kBF16, true);
  const Kernel f1 = plan(4096, 65536, kF32, true);
  t.softmax_staged_bwd = 0;
  set_row_tuning(&t);
  const Kernel b0 = plan(4096, 65536, kBF16, true);
  set_row_tuning(nullptr);
  EXPECT_TRUE(b16.staged && b16.vpt == 16 && b16.cluster == 2) << "bf16 N = 64K backward at 16 vectors: 2 CTAs";
  EXPECT_TRUE(b12.reg && !b12.staged && b12.cluster == 2) << "bf16 N = 64K backward, unbuilt tile: register cluster";
  EXPECT_TRUE(b1.staged && b1.cluster == 4) << "bf16 N = 64K backward staged with bit 0";
  EXPECT_TRUE(f1.reg && !f1.staged && f1.cluster == 4) << "fp32 N = 64K backward not staged without bit 1";
  EXPECT_TRUE(b0.reg && !b0.staged && b0.cluster == 2) << "bf16 N = 64K backward with staging off";
  EXPECT_TRUE(plan(4096, 65536, kF32, true).staged) << "defaults restored";
}

// reg_staged_balance fits a staged row's CTAs to it: the same cluster and
// tile in the fewest whole warps that cover the row (on by default since
// the forty-second session's sweep; 0 turns it off). bf16 N = 70000 (8750 vectors): 3 x 256 threads x 16 vectors
// hold 12288, 3 x 192 hold 9216; 49152 (6144): 2 x 192; fp32 40000
// (10000): 3 x 224; powers of two already fill 256-thread CTAs. The
// backward likewise at its tile: bf16 70000 in 5 CTAs of 224 at 8 vectors
// of y and dy. The wide geometry too: bf16 1.1M forward (137500 vectors)
// in 9 CTAs of 1024 threads x 16 vectors fits 960.
TEST(SoftmaxPlan, TuningBalancesTheStagedCtas) {
  struct Cell {
    int64_t cols;
    DType dt;
    bool backward;
    int before, after, cluster, vpt;
  };
  const Cell cells[] = {{70000, kBF16, false, 256, 192, 3, 16}, {49152, kBF16, false, 256, 192, 2, 16},
                        {40000, kF32, false, 256, 224, 3, 16},  {65536, kBF16, false, 256, 256, 2, 16},
                        {262144, kF32, false, 256, 256, 16, 16}, {70000, kBF16, true, 256, 224, 5, 8},
                        {1100000, kBF16, false, 1024, 960, 9, 16}};
  RowTuning t = default_row_tuning();
  t.softmax_staged_fwd_wide = 512;
  t.reg_staged_balance = 0;
  for (const Cell& c : cells) {
    set_row_tuning(&t);
    const Kernel k0 = plan(300, c.cols, c.dt, c.backward);
    t.reg_staged_balance = 1;
    set_row_tuning(&t);
    const Kernel k1 = plan(300, c.cols, c.dt, c.backward);
    t.reg_staged_balance = 0;
    set_row_tuning(nullptr);
    const std::string what = std::string(dtype_name(c.dt)) + " N = " + std::to_string(c.cols) +
                             (c.backward ? " backward" : " forward");
    EXPECT_TRUE(k0.staged && k0.threads == c.before && k0.cluster == c.cluster && k0.vpt == c.vpt)
        << what << " unbalanced: " << k0.threads << " threads, cl " << k0.cluster << ", vpt " << k0.vpt;
    EXPECT_TRUE(k1.staged && k1.threads == c.after && k1.cluster == c.cluster && k1.vpt == c.vpt && k1.regs == k0.regs)
        << what << " balanced: " << k1.threads << " threads, cl " << k1.cluster << ", vpt " << k1.vpt;
  }
  EXPECT_EQ(plan(300, 70000, kBF16, false).threads, 192) << "defaults restored (balanced)";
}

// softmax_fwd_vpt16 sets the 16-bit forward's register tile from 512
// elements (8 by default; 4 with 128-thread CTAs is QuACK's geometry at
// bf16 N <= 3K); fp32 and shorter rows keep reg_vpt_target's 4.
TEST(SoftmaxPlan, TuningSetsThe16BitForwardTile) {
  const Kernel d = plan(262144, 1024, kBF16, false);
  const Kernel f = plan(262144, 1024, kF32, false);
  RowTuning t = default_row_tuning();
  t.softmax_fwd_vpt16 = 4;
  t.reg_small_threads = 128;
  set_row_tuning(&t);
  const Kernel q = plan(262144, 1024, kBF16, false);
  const Kernel q256 = plan(1048576, 256, kBF16, false);
  set_row_tuning(nullptr);
  EXPECT_TRUE(d.reg && d.vpt == 8 && d.threads == 256) << "bf16 N = 1K: 8 vectors a thread, teams of 16 in 256 threads";
  EXPECT_TRUE(f.reg && f.vpt == 4) << "fp32 N = 1K: 4 vectors a thread";
  EXPECT_TRUE(q.reg && q.vpt == 4 && q.threads == 128) << "bf16 N = 1K at softmax_fwd_vpt16=4: a warp a row, 128 threads";
  EXPECT_TRUE(q256.reg && q256.vpt == 4) << "bf16 N = 256 keeps 4 vectors";
  EXPECT_TRUE(plan(262144, 1024, kBF16, false).vpt == 8) << "defaults restored";
}

// The A/B knob restores the clustered register forward (what the sweep's
// chunk_clustered_fwd=0,chunk_min_cols=.. measure).
TEST(SoftmaxPlan, TuningCanRestoreTheClusteredRegisterForward) {
  RowTuning t = default_row_tuning();
  t.chunk_clustered_fwd = 0;
  t.chunk_min_cols = int64_t(1) << 40;
  t.softmax_staged_fwd = 0;
  set_row_tuning(&t);
  const Kernel k = plan(300, 70000, kBF16, false);
  set_row_tuning(nullptr);
  EXPECT_TRUE(k.reg && !k.staged && k.cluster > 1) << "bf16 N = 70000 forward with the knobs off";
  EXPECT_TRUE(plan(300, 70000, kBF16, false).staged) << "defaults restored";
}

// Shifted rows (each row's first element inside a 16-byte vector, every
// operand at the same offset: odd pitches, a misaligned base) are read from
// the vector that holds that element, so they cover up to N + VEC - 1
// columns: where RowTuning::shifted_rows allows (bit 0), they take the
// register or staged kernel the aligned rows of N + VEC - 1 columns take
// without a workspace (the grid kernel reads whole vectors), and where
// those would be chunked, the streaming kernel in shifted vectors. The
// vocabularies users meet are register-held or staged both ways. On by
// default since the forty-fourth session's sweep (config.cpp); with the bit
// off, the streaming kernel.
// Lean forward rows (kLean, RowTuning::reg_lean bit 1): a forward plan is
// lean exactly where its register tile is unclustered, 1 or 2 vectors a
// thread, one team owning its CTA and the row exactly that tile; never
// the backward, never with the bit off.
TEST(SoftmaxPlan, LeanForwardRowsAreExactlyTheOneTeamTilesThatTheRowFills) {
  auto text = [](int64_t rows, int64_t cols, DType dt, bool backward) {
    return softmax_plan_description(rows, cols, dt, backward, DeviceLimits{}, true);
  };
  auto lean = [](const std::string& t) { return t.find(" lean") != std::string::npos; };
  EXPECT_TRUE(lean(text(1, 2048, kBF16, false))) << text(1, 2048, kBF16, false);
  EXPECT_TRUE(lean(text(64, 8192, kBF16, false))) << text(64, 8192, kBF16, false);
  EXPECT_FALSE(lean(text(1, 2048, kBF16, true))) << "backward: " << text(1, 2048, kBF16, true);
  EXPECT_FALSE(lean(text(1, 2056, kBF16, false))) << text(1, 2056, kBF16, false);
  for (DType dt : {kBF16, kF16, kF32}) {
    const int64_t vec = 16 / dtype_size(dt);
    for (int64_t rows : {1, 64, 4096}) {
      for (int64_t cols = vec; cols <= 16384; cols += vec) {
        const std::string t = text(rows, cols, dt, false);
        int team = 0, thr = 0, cl = 0, vpt = 0;
        const bool reg = std::sscanf(t.c_str(), "reg team %d thr %d cl %d vpt %d", &team, &thr, &cl, &vpt) == 4;
        const bool rule = reg && cl == 1 && vpt <= 2 && team == thr && team % 32 == 0 && int64_t(vpt) * team * vec == cols;
        ASSERT_EQ(lean(t), rule) << "rows " << rows << " N " << cols << ": " << t;
      }
    }
  }
  RowTuning t = default_row_tuning();
  t.reg_lean = 1;  // the norms' bit alone
  set_row_tuning(&t);
  EXPECT_FALSE(lean(text(1, 2048, kBF16, false)));
  set_row_tuning(nullptr);
}

TEST(SoftmaxPlan, ShiftedRowsTakeTheRegisterPlanOfTheirVectors) {
  EXPECT_EQ(default_row_tuning().shifted_rows & 1, 1);
  RowTuning t = default_row_tuning();
  t.shifted_rows = 0;
  set_row_tuning(&t);
  for (DType dt : {kF32, kBF16})
    for (bool backward : {false, true})
      for (int64_t n : {int64_t(7), int64_t(4100), int64_t(50257)})
        EXPECT_EQ(softmax_plan_description(4096, n, dt, backward, DeviceLimits{}, true, true), "stream, shifted vectors")
            << "the bit off: N = " << n;
  t.shifted_rows = 1;
  set_row_tuning(&t);
  for (DType dt : {kF32, kF16, kBF16}) {
    const int64_t vec = 16 / dtype_size(dt);
    for (bool backward : {false, true}) {
      for (int64_t n : {int64_t(1), int64_t(3), int64_t(7), int64_t(100), int64_t(1001), int64_t(4100),
                        int64_t(8191), int64_t(32001), int64_t(50257), int64_t(65541), int64_t(128257),
                        int64_t(262143), int64_t(300001), int64_t(700001), int64_t(1048577), int64_t(2000001)}) {
        const std::string got = softmax_plan_description(4096, n, dt, backward, DeviceLimits{}, true, true);
        const std::string aligned = softmax_plan_description(4096, n + vec - 1, dt, backward, DeviceLimits{}, false);
        if (aligned.rfind("reg", 0) == 0 || aligned.rfind("stage", 0) == 0)
          EXPECT_EQ(got, aligned) << "N = " << n << (backward ? " backward" : " forward");
        else
          EXPECT_EQ(got, "stream, shifted vectors") << "N = " << n << (backward ? " backward" : " forward") << ": "
                                                    << aligned;
      }
    }
  }
  for (DType dt : {kF32, kBF16})
    for (bool backward : {false, true})
      for (int64_t n : {int64_t(4100), int64_t(32001), int64_t(50257), int64_t(128257)}) {
        const std::string got = softmax_plan_description(4096, n, dt, backward, DeviceLimits{}, true, true);
        EXPECT_TRUE(got.rfind("reg", 0) == 0 || got.rfind("stage", 0) == 0)
            << "N = " << n << (backward ? " backward: " : " forward: ") << got;
      }
  set_row_tuning(nullptr);
}

}  // namespace
}  // namespace quack
