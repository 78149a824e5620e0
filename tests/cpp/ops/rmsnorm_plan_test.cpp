// Host tests of RMSNorm / LayerNorm forward's dispatch table: which kernel
// serves a call on an H200 (DeviceLimits{}), read back through
// norm_fwd_plan_description (the string rmsnorm_sweep prints). The cells
// pinned at the default tuning are the ones src/config.cpp cites; the others
// check that the tuning knobs the sweeps turn (reg_staged's dtype bits,
// reg_staged_vpt, reg_staged_early_w) select what they say and nothing else.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"

namespace quack {
namespace {

constexpr DType kF32 = DType::kFloat32;
constexpr DType kBF16 = DType::kBFloat16;
constexpr DType kF16 = DType::kFloat16;

struct Call {
  int64_t rows, cols;
  DType x;
  DType w;
  bool residual = false;
  int64_t x_offset = 0;  // elements past a 256-byte boundary
};

// Arguments with fake device pointers (the plan reads none: only their
// alignment), rows of exactly N elements unless N breaks 16-byte rows.
RMSNormFwdArgs args_of(const Call& c) {
  auto at = [](uintptr_t slot, int64_t off, DType t) {  // never dereferenced
    return reinterpret_cast<void*>((uintptr_t(1) << 40) + (slot << 36) + uintptr_t(off * dtype_size(t)));
  };
  RMSNormFwdArgs a;
  a.rows = c.rows;
  a.cols = c.cols;
  a.x = {at(1, c.x_offset, c.x), c.x, c.cols};
  a.weight = {at(2, 0, c.w), c.w};
  a.out = {at(3, 0, c.x), c.x, c.cols};
  if (c.residual) {
    a.residual = {at(4, 0, c.x), c.x, c.cols};
    a.residual_out = {at(5, 0, c.x), c.x, c.cols};
  }
  return a;
}

struct Kernel {
  std::string kind;  // "stage", "reg" or "general"
  int threads = 0, cluster = 0, vpt = 0;
  bool early_w = false;
  std::string text;
};

Kernel plan(const Call& c, bool layernorm = false) {
  Kernel k;
  k.text = norm_fwd_plan_description(args_of(c), layernorm, DeviceLimits{});
  char kind[16] = {};
  int team = 0;
  if (std::sscanf(k.text.c_str(), "%15s team %d thr %d cl %d vpt %d", kind, &team, &k.threads, &k.cluster, &k.vpt) != 5)
    ADD_FAILURE() << "unparsed plan: " << k.text;
  k.kind = kind;
  k.early_w = k.text.find("early w") != std::string::npos;
  return k;
}

// Installs a tuning for one test.
class NormFwdPlan : public testing::Test {
 protected:
  void TearDown() override { set_row_tuning(nullptr); }
  void tune(int staged, int vpt, int early_w) {
    RowTuning t = default_row_tuning();
    t.reg_staged = staged;
    t.reg_staged_vpt = vpt;
    t.reg_staged_early_w = early_w;
    set_row_tuning(&t);
  }
};

TEST_F(NormFwdPlan, DefaultCells) {
  for (bool ln : {false, true}) {
    SCOPED_TRACE(ln ? "LayerNorm" : "RMSNorm");
    // Register-held, one CTA, up to 512 threads at 8 vectors.
    EXPECT_EQ(plan({16384, 16384, kBF16, kBF16}, ln).kind, "reg");
    EXPECT_EQ(plan({8192, 32768, kBF16, kBF16}, ln).kind, "reg");
    // 16-bit rows that need a 1024-thread team: staged clusters of
    // 256-thread CTAs at the default tile.
    const int vpt = default_row_tuning().reg_staged_vpt;
    for (DType dt : {kBF16, kF16}) {
      const Kernel k = plan({4096, 65536, dt, dt}, ln);
      EXPECT_EQ(k.kind, "stage") << k.text;
      EXPECT_EQ(k.threads, 256) << k.text;
      EXPECT_EQ(k.vpt, vpt) << k.text;
      EXPECT_EQ(k.cluster, 65536 / (256 * vpt * 8)) << k.text;
    }
    // A residual stream is never staged.
    EXPECT_EQ(plan({4096, 65536, kBF16, kBF16, true}, ln).kind, "reg");
    // Misaligned x: the general kernel, element-wise.
    const Kernel g = plan({64, 4096, kBF16, kBF16, false, 1}, ln);
    EXPECT_EQ(g.kind, "general") << g.text;
    EXPECT_NE(g.text.find("element-wise"), std::string::npos) << g.text;
    // 1M fp32 is beyond every register and staged tile: the general kernel.
    EXPECT_EQ(plan({256, 1 << 20, kF32, kF32}, ln).kind, "general");
  }
}

TEST_F(NormFwdPlan, DtypeBitsSelectWhatIsStaged) {
  const Call bf16{4096, 65536, kBF16, kBF16}, f32{4096, 65536, kF32, kF32};
  tune(0, 8, 0);
  EXPECT_EQ(plan(bf16).kind, "reg");
  EXPECT_EQ(plan(f32).kind, "reg");
  tune(1, 8, 0);
  EXPECT_EQ(plan(bf16).kind, "stage");
  EXPECT_EQ(plan(f32).kind, "reg");
  tune(2, 8, 0);
  EXPECT_EQ(plan(bf16).kind, "reg");
  EXPECT_EQ(plan(f32).kind, "stage");
  tune(3, 8, 0);
  EXPECT_EQ(plan(bf16).kind, "stage");
  EXPECT_EQ(plan(f32).kind, "stage");
  EXPECT_EQ(plan({4096, 65536, kF16, kF16}).kind, "stage");
}

TEST_F(NormFwdPlan, TileKnob) {
  for (int vpt : {8, 16}) {
    tune(3, vpt, 0);
    // bf16 256K: 32768 vectors over 256-thread CTAs at vpt vectors each.
    const Kernel b = plan({1024, 262144, kBF16, kBF16});
    EXPECT_EQ(b.kind, "stage") << b.text;
    EXPECT_EQ(b.vpt, vpt) << b.text;
    EXPECT_EQ(b.cluster, 32768 / (256 * vpt)) << b.text;
    // fp32 64K: 16384 vectors.
    const Kernel f = plan({4096, 65536, kF32, kF32});
    EXPECT_EQ(f.kind, "stage") << f.text;
    EXPECT_EQ(f.cluster, 16384 / (256 * vpt)) << f.text;
    // A row a cluster of 16 cannot hold at this tile is not staged.
    const int64_t too_long = int64_t(16) * 256 * vpt * 8 + 8;
    EXPECT_NE(plan({64, too_long, kBF16, kBF16}).kind, "stage") << "N = " << too_long;
  }
  // A tile the kernel is not built with: nothing is staged.
  tune(3, 12, 0);
  EXPECT_EQ(plan({4096, 65536, kBF16, kBF16}).kind, "reg");
  EXPECT_EQ(plan({4096, 65536, kF32, kF32}).kind, "reg");
}

TEST_F(NormFwdPlan, EarlyWeightsOnlyAtTheEightVectorTileInXsDtype) {
  tune(3, 8, 1);
  for (DType dt : {kBF16, kF16, kF32}) {
    const Kernel k = plan({4096, 65536, dt, dt});
    EXPECT_TRUE(k.kind == "stage" && k.early_w) << k.text;
  }
  // fp32 weights of 16-bit x would take twice the registers: late.
  const Kernel w32 = plan({4096, 65536, kBF16, kF32});
  EXPECT_TRUE(w32.kind == "stage" && !w32.early_w) << w32.text;
  // Register-held rows and the 16-vector tile: never.
  EXPECT_FALSE(plan({16384, 16384, kBF16, kBF16}).early_w);
  tune(3, 16, 1);
  const Kernel k16 = plan({4096, 65536, kBF16, kBF16});
  EXPECT_TRUE(k16.kind == "stage" && !k16.early_w) << k16.text;
  tune(3, 8, 0);
  EXPECT_FALSE(plan({4096, 65536, kBF16, kBF16}).early_w);
}

// Every N from 1 to 2^21 (stride 1 to 16K, then 97) at every tuning the
// sweeps use: a plan exists, and a staged one is a cluster of 2-16 CTAs of
// 256 threads whose tiles cover the row with no idle CTA.
TEST_F(NormFwdPlan, ScanOfStagedRows) {
  for (int staged : {1, 2, 3}) {
    for (int vpt : {8, 16}) {
      tune(staged, vpt, 1);
      for (DType dt : {kBF16, kF32}) {
        const int vec = 16 / dtype_size(dt);
        for (int64_t n = 1; n <= (int64_t(1) << 21); n += n < 16384 ? 1 : 97) {
          const Kernel k = plan({64, n, dt, dt});
          if (k.kind != "stage") continue;
          const bool bit = staged & (dt == kF32 ? 2 : 1);
          ASSERT_TRUE(bit) << "staged against the dtype bits: " << k.text;
          ASSERT_TRUE(k.threads == 256 && k.vpt == vpt && k.cluster >= 2 && k.cluster <= 16) << "N = " << n << ": " << k.text;
          const int64_t per_cta = int64_t(256) * vpt * vec;
          ASSERT_GE(k.cluster * per_cta, n) << k.text;
          ASSERT_LT((k.cluster - 1) * per_cta, n) << "idle CTA: " << k.text;
        }
      }
    }
  }
}

}  // namespace
}  // namespace quack
