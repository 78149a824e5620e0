// Host tests of softmax's dispatch table: which kernel serves an aligned row
// problem on an H200 (DeviceLimits{}) at the default tuning, read back
// through softmax_plan_description (the string the sweep prints). The cells
// pinned here are the ones the defaults in src/config.cpp cite
// (bench/results/2026-11-30-softmax-sweep.md, runs 3, 6 and 7); the scan
// checks the rule for every N instead of a few.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "quack/core/config.hpp"

namespace quack {
namespace {

constexpr DType kF32 = DType::kFloat32;
constexpr DType kBF16 = DType::kBFloat16;
constexpr DType kF16 = DType::kFloat16;

struct Kernel {
  bool reg = false;     // register-resident kernel (staged or not)
  bool staged = false;  // ... with x staged in shared memory
  int threads = 0, cluster = 0, vpt = 0;
};

// Parses "reg   team T thr H cl C vpt V", "stage team T thr H cl C vpt V" or
// "chunk thr H cl C vecs .. staged ..".
Kernel plan(int64_t rows, int64_t cols, DType dt, bool backward) {
  const std::string s = softmax_plan_description(rows, cols, dt, backward, DeviceLimits{});
  Kernel k;
  int team = 0;
  if (std::sscanf(s.c_str(), "reg team %d thr %d cl %d vpt %d", &team, &k.threads, &k.cluster, &k.vpt) == 4) {
    k.reg = true;
  } else if (std::sscanf(s.c_str(), "stage team %d thr %d cl %d vpt %d", &team, &k.threads, &k.cluster, &k.vpt) == 4) {
    k.reg = k.staged = true;
  } else if (std::sscanf(s.c_str(), "chunk thr %d cl %d", &k.threads, &k.cluster) != 2) {
    ADD_FAILURE() << "unparsed plan: " << s;
  }
  return k;
}

TEST(SoftmaxPlan, MeasuredForwardCells) {
  // Register-held, one CTA: 16-bit up to 64 KB rows, fp32 up to 128 KB.
  for (DType dt : {kBF16, kF16}) {
    const Kernel k = plan(8192, 32768, dt, false);
    EXPECT_TRUE(k.reg && !k.staged && k.cluster == 1) << "16-bit N = 32K forward: one register CTA (94.2-94.6%)";
  }
  const Kernel f32k = plan(8192, 32768, kF32, false);
  EXPECT_TRUE(f32k.reg && !f32k.staged && f32k.cluster == 1) << "fp32 N = 32K forward: one register CTA (97.1%)";
  // Staged: 16-bit rows past 32K elements, in clusters of 256-thread CTAs
  // holding 64 elements a thread, up to 16 CTAs (N = 256K).
  struct Cell {
    int64_t rows, cols;
    int cluster;
  };
  for (const Cell& c : {Cell{4096, 65536, 4}, Cell{300, 70000, 5}, Cell{2048, 131072, 8}, Cell{1024, 262144, 16}}) {
    for (DType dt : {kBF16, kF16}) {
      const Kernel k = plan(c.rows, c.cols, dt, false);
      EXPECT_TRUE(k.staged && k.threads == 256 && k.vpt == 8 && k.cluster == c.cluster)
          << "16-bit N = " << c.cols << " forward: staged in " << c.cluster << " x 256 threads";
    }
  }
  // Chunked: 16-bit past 256K elements; fp32 rows the register tile would
  // cluster, and from 64K elements.
  EXPECT_FALSE(plan(256, 1048576, kBF16, false).reg) << "bf16 N = 1M forward: chunked";
  EXPECT_FALSE(plan(256, 262152, kBF16, false).reg) << "bf16 N = 256K + 8 forward: chunked (17 CTAs)";
  EXPECT_FALSE(plan(100, 40000, kF32, false).reg) << "fp32 N = 40000 forward: chunked (79.5% vs 51.0%)";
  EXPECT_FALSE(plan(4096, 65536, kF32, false).reg) << "fp32 N = 64K forward: chunked (89.3% vs 63.0%)";
}

// softmax_staged_fwd = 3 stages fp32 rows too (64 elements = 16 vectors a
// thread), and 0 none: the A/B the sweep runs.
TEST(SoftmaxPlan, TuningSelectsTheStagedDtypes) {
  RowTuning t = default_row_tuning();
  t.softmax_staged_fwd = 3;
  set_row_tuning(&t);
  const Kernel f = plan(4096, 65536, kF32, false);
  const Kernel f32k = plan(8192, 32768, kF32, false);
  t.softmax_staged_fwd = 0;
  set_row_tuning(&t);
  const Kernel b = plan(4096, 65536, kBF16, false);
  set_row_tuning(nullptr);
  EXPECT_TRUE(f.staged && f.vpt == 16 && f.cluster == 4) << "fp32 N = 64K staged in 4 x 256 threads";
  EXPECT_TRUE(f32k.staged && f32k.cluster == 2) << "fp32 N = 32K staged in 2 x 256 threads";
  EXPECT_FALSE(b.reg) << "bf16 N = 64K chunked with staging off";
  EXPECT_TRUE(plan(4096, 65536, kBF16, false).staged) << "defaults restored";
}

TEST(SoftmaxPlan, BackwardKeepsClusteredRegisterRowsUpTo2MB) {
  // The forward's rule is the forward's: the backward's clustered register
  // rows ran at 95-101% (runs 3, 5, 6) and stay.
  const Kernel b = plan(300, 70000, kBF16, true);
  EXPECT_TRUE(b.reg && b.cluster > 1) << "bf16 N = 70000 backward: clustered register rows (86.6%)";
  const Kernel b2 = plan(1024, 262144, kBF16, true);
  EXPECT_TRUE(b2.reg && b2.cluster > 1) << "bf16 N = 256K backward: 1 MB of y and dy, registers (96-97%)";
  EXPECT_FALSE(plan(1024, 262144, kF32, true).reg) << "fp32 N = 256K backward: 2 MB, chunked (87.9% vs 71.1%)";
}

// Every N up to 2^21 (powers of two, their neighbours, and a stride through
// the rest): a forward row is register-held in one CTA below 64K elements,
// or staged (16-bit, 32K < N <= 256K) in a cluster of 2..16 256-thread CTAs
// whose tiles cover the row; whatever serves it names a cluster of 1..16.
TEST(SoftmaxPlan, ForwardRegisterRowsAreOneCtaOrStaged) {
  for (DType dt : {kF32, kBF16}) {
    for (int64_t n = 1; n <= (int64_t(1) << 21); n = n < 4096 ? n + 1 : n + 997) {
      for (int64_t cols : {n, n | 1}) {
        const Kernel k = plan(64, cols, dt, false);
        ASSERT_TRUE(k.cluster >= 1 && k.cluster <= 16) << "N = " << cols;
        if (k.staged) {
          ASSERT_EQ(dt, kBF16) << "N = " << cols << ": fp32 staged by default";
          ASSERT_TRUE(cols > 32768 && cols <= 262144) << "N = " << cols << " staged";
          ASSERT_GE(k.cluster, 2) << "N = " << cols;
          ASSERT_GE(int64_t(k.cluster) * k.threads * k.vpt * 8, cols) << "N = " << cols << ": tiles short of the row";
          ASSERT_LT(int64_t(k.cluster - 1) * k.threads * k.vpt * 8, cols) << "N = " << cols << ": an idle CTA";
        } else if (k.reg) {
          ASSERT_EQ(k.cluster, 1) << "N = " << cols << " forward register rows split over a cluster";
          ASSERT_LT(cols, 65536) << "N = " << cols << " forward register rows of 64K elements or more";
        } else if (dt == kBF16) {
          ASSERT_TRUE(cols > 262144) << "N = " << cols << ": a 16-bit row of up to 256K elements chunked";
        }
      }
    }
    for (int s = 0; s <= 21; ++s) {
      const Kernel k = plan(64, int64_t(1) << s, dt, false);
      const bool staged = dt == kBF16 && s >= 16 && s <= 18;
      EXPECT_EQ(k.reg, s < 16 || staged) << "N = 2^" << s;
      EXPECT_EQ(k.staged, staged) << "N = 2^" << s;
    }
  }
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

}  // namespace
}  // namespace quack
