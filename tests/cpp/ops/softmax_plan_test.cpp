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
  // Register-held, one CTA: 16-bit rows up to 32K elements, fp32 up to 16K.
  for (DType dt : {kBF16, kF16}) {
    const Kernel k = plan(8192, 32768, dt, false);
    EXPECT_TRUE(k.reg && !k.staged && k.cluster == 1) << "16-bit N = 32K forward: one register CTA (94.2-94.6%)";
  }
  const Kernel f32k = plan(16384, 16384, kF32, false);
  EXPECT_TRUE(f32k.reg && !f32k.staged && f32k.cluster == 1) << "fp32 N = 16K forward: one register CTA";
  // Staged: rows past those, in clusters of 256-thread CTAs holding 16
  // vectors (256 bytes) a thread, up to 16 CTAs.
  struct Cell {
    int64_t rows, cols;
    DType dt;
    int cluster;
  };
  for (const Cell& c : {Cell{4096, 65536, kBF16, 2}, Cell{300, 70000, kBF16, 3}, Cell{2048, 131072, kF16, 4},
                        Cell{1024, 262144, kBF16, 8}, Cell{512, 524288, kBF16, 16}, Cell{8192, 32768, kF32, 2},
                        Cell{100, 40000, kF32, 3}, Cell{4096, 65536, kF32, 4}, Cell{1024, 262144, kF32, 16}}) {
    const Kernel k = plan(c.rows, c.cols, c.dt, false);
    EXPECT_TRUE(k.staged && k.threads == 256 && k.vpt == 16 && k.cluster == c.cluster)
        << dtype_name(c.dt) << " N = " << c.cols << " forward: staged in " << c.cluster << " x 256 threads";
  }
  // Chunked: past 16 such CTAs.
  EXPECT_FALSE(plan(256, 1048576, kBF16, false).reg) << "bf16 N = 1M forward: chunked";
  EXPECT_FALSE(plan(256, 524296, kBF16, false).reg) << "bf16 N = 512K + 8 forward: chunked (17 CTAs)";
  EXPECT_FALSE(plan(256, 262148, kF32, false).reg) << "fp32 N = 256K + 4 forward: chunked (17 CTAs)";
}

// softmax_staged_fwd picks the dtypes (bit 0 16-bit, bit 1 fp32; 0 none),
// softmax_staged_vpt the tile: the A/B the sweep runs.
TEST(SoftmaxPlan, TuningSelectsTheStagedDtypesAndTile) {
  RowTuning t = default_row_tuning();
  t.softmax_staged_fwd = 1;
  set_row_tuning(&t);
  const Kernel f = plan(4096, 65536, kF32, false);
  t.softmax_staged_fwd = 3;
  t.softmax_staged_vpt = 8;
  set_row_tuning(&t);
  const Kernel b8 = plan(4096, 65536, kBF16, false);
  t.softmax_staged_vpt = 12;  // not a tile the kernel is built with: no staging
  set_row_tuning(&t);
  const Kernel b12 = plan(4096, 65536, kBF16, false);
  t.softmax_staged_vpt = 16;
  t.softmax_staged_fwd = 0;
  set_row_tuning(&t);
  const Kernel b = plan(4096, 65536, kBF16, false);
  set_row_tuning(nullptr);
  EXPECT_FALSE(f.reg) << "fp32 N = 64K chunked when only 16-bit rows are staged";
  EXPECT_TRUE(b8.staged && b8.vpt == 8 && b8.cluster == 4) << "bf16 N = 64K staged in 4 x 256 threads at 8 vectors";
  EXPECT_FALSE(b12.reg) << "bf16 N = 64K with an unbuilt tile";
  EXPECT_FALSE(b.reg) << "bf16 N = 64K chunked with staging off";
  EXPECT_TRUE(plan(4096, 65536, kBF16, false).staged) << "defaults restored";
}

// Every N up to 2^21 (powers of two, their neighbours, and a stride through
// the rest): a forward row is register-held in one CTA (16-bit up to 32K
// elements, fp32 up to 16K), staged beyond that in a cluster of 2..16
// 256-thread CTAs whose tiles cover the row, or chunked past 16 of those;
// whatever serves it names a cluster of 1..16.
TEST(SoftmaxPlan, ForwardRowsAreOneCtaStagedOrChunked) {
  for (DType dt : {kF32, kBF16}) {
    const int vec = dt == kF32 ? 4 : 8;
    const int64_t reg_max = dt == kF32 ? 16384 : 32768;
    for (int64_t n = 1; n <= (int64_t(1) << 21); n = n < 4096 ? n + 1 : n + 997) {
      for (int64_t cols : {n, n | 1}) {
        const Kernel k = plan(64, cols, dt, false);
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
          ASSERT_GT(cols, int64_t(16) * 256 * 16 * vec) << "N = " << cols << ": chunked where 16 staged CTAs hold it";
        }
      }
    }
    for (int s = 0; s <= 21; ++s) {
      const Kernel k = plan(64, int64_t(1) << s, dt, false);
      const int first = dt == kF32 ? 15 : 16;  // the first staged power of two
      const bool staged = s >= first && s <= first + 3;
      EXPECT_EQ(k.reg, s < first || staged) << "N = 2^" << s;
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
