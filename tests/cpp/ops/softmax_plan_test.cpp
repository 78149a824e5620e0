// Host tests of softmax's dispatch table: which kernel serves an aligned row
// problem on an H200 (DeviceLimits{}) at the default tuning, read back
// through softmax_plan_description (the string the sweep prints). The cells
// pinned here are the ones the defaults in src/config.cpp cite
// (bench/results/2026-11-30-softmax-sweep.md, runs 3 and 6); the scan
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
  bool reg = false;
  int threads = 0, cluster = 0;
};

// Parses "reg   team T thr H cl C vpt V" or "chunk thr H cl C vecs .. staged ..".
Kernel plan(int64_t rows, int64_t cols, DType dt, bool backward) {
  const std::string s = softmax_plan_description(rows, cols, dt, backward, DeviceLimits{});
  Kernel k;
  int team = 0, vpt = 0;
  if (std::sscanf(s.c_str(), "reg team %d thr %d cl %d vpt %d", &team, &k.threads, &k.cluster, &vpt) == 4) {
    k.reg = true;
  } else if (std::sscanf(s.c_str(), "chunk thr %d cl %d", &k.threads, &k.cluster) != 2) {
    ADD_FAILURE() << "unparsed plan: " << s;
  }
  return k;
}

TEST(SoftmaxPlan, MeasuredForwardCells) {
  // Register-held, one CTA: 16-bit up to 64 KB rows, fp32 up to 128 KB.
  for (DType dt : {kBF16, kF16}) {
    const Kernel k = plan(8192, 32768, dt, false);
    EXPECT_TRUE(k.reg && k.cluster == 1) << "16-bit N = 32K forward: one register CTA (94.2-94.6%)";
  }
  const Kernel f32k = plan(8192, 32768, kF32, false);
  EXPECT_TRUE(f32k.reg && f32k.cluster == 1) << "fp32 N = 32K forward: one register CTA (97.1%)";
  // Chunked: 16-bit from 64K elements, any row the register tile would cluster.
  EXPECT_FALSE(plan(4096, 65536, kBF16, false).reg) << "bf16 N = 64K forward: chunked (88.5% vs 84.6%)";
  EXPECT_FALSE(plan(300, 70000, kBF16, false).reg) << "bf16 N = 70000 forward: chunked (71.3% vs 44.9%)";
  EXPECT_FALSE(plan(100, 40000, kF32, false).reg) << "fp32 N = 40000 forward: a clustered register tile";
  EXPECT_FALSE(plan(4096, 65536, kF32, false).reg) << "fp32 N = 64K forward: chunked (89.3% vs 63.0%)";
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
// the rest): a forward row is register-held only in one CTA and below 64K
// elements; whatever serves it names a cluster of 1..16.
TEST(SoftmaxPlan, ForwardRegisterRowsAreNeverClustered) {
  for (DType dt : {kF32, kBF16}) {
    for (int64_t n = 1; n <= (int64_t(1) << 21); n = n < 4096 ? n + 1 : n + 997) {
      for (int64_t cols : {n, n | 1}) {
        const Kernel k = plan(64, cols, dt, false);
        ASSERT_TRUE(k.cluster >= 1 && k.cluster <= 16) << "N = " << cols;
        if (k.reg) {
          ASSERT_EQ(k.cluster, 1) << "N = " << cols << " forward register rows split over a cluster";
          ASSERT_LT(cols, 65536) << "N = " << cols << " forward register rows of 64K elements or more";
        }
      }
    }
    for (int s = 0; s <= 21; ++s) {
      const Kernel k = plan(64, int64_t(1) << s, dt, false);
      EXPECT_EQ(k.reg, s < 16) << "N = 2^" << s << ": register-held below 64K elements, chunked from there";
    }
  }
}

// The A/B knob restores the clustered register forward (what the sweep's
// chunk_clustered_fwd=0,chunk_min_cols=.. measure).
TEST(SoftmaxPlan, TuningCanRestoreTheClusteredRegisterForward) {
  RowTuning t = default_row_tuning();
  t.chunk_clustered_fwd = 0;
  t.chunk_min_cols = int64_t(1) << 40;
  set_row_tuning(&t);
  const Kernel k = plan(300, 70000, kBF16, false);
  set_row_tuning(nullptr);
  EXPECT_TRUE(k.reg && k.cluster > 1) << "bf16 N = 70000 forward with the knobs off";
  EXPECT_FALSE(plan(300, 70000, kBF16, false).reg) << "defaults restored";
}

}  // namespace
}  // namespace quack
