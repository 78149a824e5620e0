// Host tests of RMSNorm / LayerNorm forward's dispatch table: which kernel
// serves a call on an H200 (DeviceLimits{}), read back through
// norm_fwd_plan_description (the string rmsnorm_sweep prints). The cells
// pinned at the default tuning are the ones src/config.cpp cites; the others
// check that the tuning knobs the sweeps turn (the dtype bits of reg_staged
// and reg_staged_early_w) select what they say and nothing else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"
#include "support/plan_args.hpp"

namespace quack {
namespace {

using test::kBF16;
using test::kF16;
using test::kF32;

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
  auto at = test::fake_device_ptr;
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
  // (balance: norm_staged_balance; the scans below check the rules' own
  // power-of-two CTAs, BalancedStagedCtasFitTheRow the fitted ones.)
  void tune(int staged, int early_w, int balance = 0) {
    RowTuning t = default_row_tuning();
    t.reg_staged = staged;
    t.reg_staged_early_w = early_w;
    t.norm_staged_balance = balance;
    set_row_tuning(&t);
  }
};

TEST_F(NormFwdPlan, DefaultCells) {
  for (bool ln : {false, true}) {
    SCOPED_TRACE(ln ? "LayerNorm" : "RMSNorm");
    // Register-held, one CTA, up to 512 threads at 8 vectors.
    EXPECT_EQ(plan({16384, 16384, kBF16, kBF16}, ln).kind, "reg");
    EXPECT_EQ(plan({8192, 32768, kBF16, kBF16}, ln).kind, "reg");
    EXPECT_EQ(plan({32768, 8192, kF32, kF32}, ln).kind, "reg");
    // 16-bit rows that need a 1024-thread team, RMSNorm's fp32 rows from
    // those that need 512: staged clusters of 256-thread CTAs, 8 vectors a
    // thread; fp32 rows load the weight early, 16-bit ones late. LayerNorm's
    // fp32 rows stay in registers.
    struct Cell {
      int64_t rows, cols;
      DType dt;
      int cluster;
      bool early;
    };
    for (const Cell& c : {Cell{4096, 65536, kBF16, 4, false}, Cell{4096, 65536, kF16, 4, false},
                          Cell{1024, 262144, kBF16, 16, false}, Cell{6710, 40000, kBF16, 3, false},
                          Cell{16384, 16384, kF32, 2, true}, Cell{10922, 24576, kF32, 3, true},
                          Cell{4096, 65536, kF32, 8, true},
                          Cell{2048, 131072, kF32, 16, true}}) {
      const Kernel k = plan({c.rows, c.cols, c.dt, c.dt}, ln);
      if (ln && c.dt == kF32) {
        EXPECT_EQ(k.kind, "reg") << k.text;
        continue;
      }
      EXPECT_EQ(k.kind, "stage") << k.text;
      EXPECT_EQ(k.threads, 256) << k.text;
      EXPECT_EQ(k.vpt, 8) << k.text;
      EXPECT_EQ(k.cluster, c.cluster) << k.text;
      EXPECT_EQ(k.early_w, c.early) << k.text;
    }
    // fp32 weights of 16-bit x: staged, late.
    const Kernel w32 = plan({4096, 65536, kBF16, kF32}, ln);
    EXPECT_TRUE(w32.kind == "stage" && !w32.early_w) << w32.text;
    // Beyond a 16-CTA staged cluster at 8 vectors: 16 vectors a thread
    // (LayerNorm's fp32 rows stay in registers) ...
    for (const Cell& c : {Cell{1024, 262144, kF32, 16, false}, Cell{512, 524288, kBF16, 16, false}}) {
      const Kernel k = plan({c.rows, c.cols, c.dt, c.dt}, ln);
      if (ln && c.dt == kF32) {
        EXPECT_EQ(k.kind, "reg") << k.text;
        continue;
      }
      EXPECT_TRUE(k.kind == "stage" && k.threads == 256 && k.vpt == 16 && k.cluster == 16 && !k.early_w) << k.text;
    }
    // ... beyond that register-held clusters of 1024-thread CTAs, and 32
    // vectors only where no register tile holds the row (16-bit x with fp32
    // weights cluster at 4 vectors: 512K elements).
    EXPECT_EQ(plan({512, 524288, kF32, kF32}, ln).kind, "reg");
    EXPECT_EQ(plan({256, 1 << 20, kBF16, kBF16}, ln).kind, "reg");
    const Kernel m = plan({256, 1 << 20, kBF16, kF32}, ln);
    EXPECT_TRUE(m.kind == "stage" && m.vpt == 32 && m.cluster == 16 && !m.early_w) << m.text;
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

// norm_fit_team (on by default: the model-widths sweep, src/config.cpp):
// unclustered register rows of model widths in the fewest whole warps that
// hold the row at its tile -- bf16 5120 in 160 threads x 4 vectors, not 256,
// 2560 in 96, 7168 in 224, 12288 in 192 x 8 -- both ops, with or without a
// residual stream; powers of two unchanged; off, the power of two above.
TEST_F(NormFwdPlan, ModelWidthsTakeFittedCtas) {
  for (bool ln : {false, true}) {
    SCOPED_TRACE(ln ? "LayerNorm" : "RMSNorm");
    struct Cell {
      int64_t cols;
      int fitted, pow2, vpt;  // without a residual stream
    };
    for (const Cell& c : {Cell{2560, 96, 128, 4}, Cell{5120, 160, 256, 4}, Cell{6144, 192, 256, 4},
                          Cell{7168, 224, 256, 4}, Cell{12288, 192, 256, 8}, Cell{4096, 128, 128, 4},
                          Cell{8192, 256, 256, 4}}) {
      for (bool res : {false, true}) {
        SCOPED_TRACE("N " + std::to_string(c.cols) + (res ? " residual" : ""));
        const Call call{4096, c.cols, kBF16, kBF16, res};
        set_row_tuning(nullptr);
        const Kernel fit = plan(call, ln);
        RowTuning t = default_row_tuning();
        t.norm_fit_team = 0;
        t.reg_fit_team = 0;
        set_row_tuning(&t);
        const Kernel p2 = plan(call, ln);
        // softmax's and cross-entropy's knob (on by default) leaves the norms alone
        t.reg_fit_team = 1;
        set_row_tuning(&t);
        const Kernel p2_too = plan(call, ln);
        ASSERT_TRUE(fit.kind == "reg" && p2.kind == "reg" && fit.cluster == 1 && p2.cluster == 1) << fit.text << " / "
                                                                                                 << p2.text;
        EXPECT_EQ(fit.vpt, p2.vpt) << "the tile is the power of two's: " << fit.text;
        // (the residual stream's tile is at most 4 vectors)
        const int need = int((c.cols / 8 + fit.vpt - 1) / fit.vpt);
        EXPECT_EQ(fit.threads, (need + 31) / 32 * 32) << fit.text;
        int pow2 = 1;
        while (pow2 < need) pow2 *= 2;
        EXPECT_EQ(p2.threads, pow2) << p2.text;
        EXPECT_EQ(p2_too.text, p2.text);
        if (!res) {
          EXPECT_TRUE(fit.threads == c.fitted && p2.threads == c.pow2 && fit.vpt == c.vpt) << fit.text << " / "
                                                                                           << p2.text;
        }
      }
    }
  }
}

// norm_fwd_vpt16_min_cols (off by default, unmeasured): 16-bit rows from
// that many elements aim for 8 vectors a thread, as the softmax forward's
// -- bf16 4096 in a 64-thread team instead of 128 x 4 -- both ops, any
// 16-bit weight; fp32 x, shorter rows and the residual stream's 4-vector
// tile as before.
TEST_F(NormFwdPlan, SixteenBitRowsFromTheKnobTakeEightVectors) {
  for (bool ln : {false, true}) {
    SCOPED_TRACE(ln ? "LayerNorm" : "RMSNorm");
    const Kernel off = plan({65536, 4096, kBF16, kBF16}, ln);
    EXPECT_TRUE(off.kind == "reg" && off.threads == 128 && off.vpt == 4) << off.text;
    RowTuning t = default_row_tuning();
    t.norm_fwd_vpt16_min_cols = 2048;
    set_row_tuning(&t);
    for (const DType w : {kBF16, kF32}) {
      const Kernel k = plan({65536, 4096, kBF16, w}, ln);
      EXPECT_TRUE(k.kind == "reg" && k.vpt == 8 && k.threads * k.vpt * 8 >= 4096) << k.text;
    }
    const Kernel f16 = plan({32768, 8192, kF16, kF16}, ln);
    EXPECT_TRUE(f16.kind == "reg" && f16.threads == 128 && f16.vpt == 8) << f16.text;
    const Kernel shorter = plan({262144, 1024, kBF16, kBF16}, ln);
    EXPECT_EQ(shorter.vpt, 4) << shorter.text;
    const Kernel f32 = plan({65536, 4096, kF32, kF32}, ln);
    EXPECT_TRUE(f32.threads == 256 && f32.vpt == 4) << f32.text;
    const Kernel res = plan({65536, 4096, kBF16, kBF16, true}, ln);
    EXPECT_EQ(res.vpt, 4) << "the residual stream's tile caps it: " << res.text;
    set_row_tuning(nullptr);
  }
}

TEST_F(NormFwdPlan, DtypeBitsSelectWhatIsStaged) {
  const Call bf16{4096, 65536, kBF16, kBF16}, f32{4096, 65536, kF32, kF32};
  for (int bits = 0; bits < 4; ++bits) {
    tune(bits, 3);
    EXPECT_EQ(plan(bf16).kind, bits & 1 ? "stage" : "reg") << bits;
    EXPECT_EQ(plan(f32).kind, bits & 2 ? "stage" : "reg") << bits;
  }
  EXPECT_EQ(plan({4096, 65536, kF16, kF16}).kind, "stage");
}

TEST_F(NormFwdPlan, LayerNormHasItsOwnDtypeBits) {
  const Call bf16{4096, 65536, kBF16, kBF16}, f32{4096, 65536, kF32, kF32};
  for (int ln_bits = 0; ln_bits < 4; ++ln_bits) {
    RowTuning t = default_row_tuning();
    t.reg_staged = 3;
    t.ln_staged = ln_bits;
    set_row_tuning(&t);
    EXPECT_EQ(plan(bf16, true).kind, ln_bits & 1 ? "stage" : "reg") << ln_bits;
    EXPECT_EQ(plan(f32, true).kind, ln_bits & 2 ? "stage" : "reg") << ln_bits;
    // RMSNorm ignores them.
    EXPECT_EQ(plan(bf16).kind, "stage");
    EXPECT_EQ(plan(f32).kind, "stage");
  }
  // ... and LayerNorm stages only what reg_staged allows as well.
  RowTuning t = default_row_tuning();
  t.reg_staged = 1;
  t.ln_staged = 3;
  set_row_tuning(&t);
  EXPECT_EQ(plan(f32, true).kind, "reg");
}

TEST_F(NormFwdPlan, WideStagedTilesFollowTheirKnobs) {
  const Call bf16_512k{512, 524288, kBF16, kBF16}, bf16_1m{256, 1 << 20, kBF16, kBF16},
      bf16_1m_w32{256, 1 << 20, kBF16, kF32};  // (no register tile holds it)
  RowTuning t = default_row_tuning();
  t.reg_staged_vpt_max = 8;  // rows a register tile holds: 8 vectors only
  set_row_tuning(&t);
  EXPECT_EQ(plan(bf16_512k).kind, "reg");
  EXPECT_EQ(plan(bf16_1m_w32, true).vpt, 32);
  EXPECT_EQ(plan(bf16_1m).kind, "reg");
  t.reg_staged_vpt_max = 32;
  set_row_tuning(&t);
  EXPECT_EQ(plan(bf16_512k).vpt, 16);  // the narrowest tile that fits
  EXPECT_EQ(plan(bf16_1m).vpt, 32);
  t.reg_staged_vpt_max_beyond = 16;  // no staged tile holds it
  set_row_tuning(&t);
  EXPECT_EQ(plan(bf16_1m_w32, true).kind, "general");
  EXPECT_EQ(plan(bf16_1m_w32).kind, "general");
  // The early weight is for the 8-vector tile only.
  t = default_row_tuning();
  t.reg_staged_early_w = 3;
  set_row_tuning(&t);
  EXPECT_FALSE(plan(bf16_512k).early_w);
  EXPECT_FALSE(plan({1024, 262144, kF32, kF32}).early_w);
  EXPECT_TRUE(plan({2048, 131072, kF32, kF32}).early_w);
}

TEST_F(NormFwdPlan, EarlyWeightBitsByDtype) {
  for (int bits = 0; bits < 4; ++bits) {
    tune(3, bits);
    for (DType dt : {kBF16, kF16, kF32}) {
      const Kernel k = plan({4096, 65536, dt, dt});
      EXPECT_EQ(k.kind, "stage") << k.text;
      EXPECT_EQ(k.early_w, bool(bits & (dt == kF32 ? 2 : 1))) << "bits " << bits << ": " << k.text;
      // The early weight and the batched late one are exclusive, and the
      // text names one of them only (reg_w_batch is on by default).
      EXPECT_NE(k.early_w, k.text.find("w batch") != std::string::npos) << k.text;
    }
    // fp32 weights of 16-bit x would take twice the registers: never early.
    EXPECT_FALSE(plan({4096, 65536, kBF16, kF32}).early_w);
    // Register-held rows: never.
    EXPECT_FALSE(plan({16384, 16384, kBF16, kBF16}).early_w);
  }
}

// Two staged rows a cluster (RowTuning::reg_staged_pair): by default
// LayerNorm's 16-bit rows with fp32 parameters at the 8-vector staged tile
// in clusters of 8 CTAs or more (128K-256K columns), where the pairs' CTAs
// still fill every SM once (three 66 KB CTAs an SM: 396 CTAs on an H200);
// never fp32 x, the wider tiles, the early-weight instance or rows without
// parameters.
TEST_F(NormFwdPlan, TwoStagedRowsAClusterShareTheirParameters) {
  auto pair = [](const Kernel& k) { return k.text.find(" 2 rows") != std::string::npos; };
  for (DType x : {kBF16, kF16}) {
    const Kernel k = plan({2048, 131072, x, kF32}, true);
    EXPECT_TRUE(k.kind == "stage" && k.vpt == 8 && k.cluster == 8 && pair(k) && !k.early_w) << k.text;
    const Kernel big = plan({1024, 262144, x, kF32}, true);
    EXPECT_TRUE(big.cluster == 16 && pair(big)) << big.text;
    const Kernel six = plan({2730, 98304, x, kF32}, true);
    EXPECT_TRUE(six.kind == "stage" && six.cluster == 6 && !pair(six)) << six.text;  // below 8 CTAs
    EXPECT_FALSE(pair(plan({2048, 131072, x, x}, true)));  // parameters in x's dtype
    EXPECT_FALSE(pair(plan({2048, 131072, x, kF32})));     // RMSNorm
    EXPECT_FALSE(pair(plan({512, 524288, x, kF32}, true)));  // 16 vectors a thread
  }
  // The full wave: ceil(rows / 2) clusters of 8 against 3 x 132 CTA slots.
  EXPECT_TRUE(pair(plan({99, 131072, kBF16, kF32}, true)));
  EXPECT_FALSE(pair(plan({98, 131072, kBF16, kF32}, true)));
  EXPECT_FALSE(pair(plan({1, 131072, kBF16, kF32}, true)));
  RowTuning t = default_row_tuning();
  t.reg_staged_pair_full_wave = 0;
  set_row_tuning(&t);
  EXPECT_TRUE(pair(plan({2, 131072, kBF16, kF32}, true)));
  EXPECT_TRUE(pair(plan({3, 131072, kBF16, kF32}, true)));
  EXPECT_FALSE(pair(plan({1, 131072, kBF16, kF32}, true)));  // one row: nothing to pair
  // The cluster floor.
  t = default_row_tuning();
  t.reg_staged_pair_min_cluster = 4;
  set_row_tuning(&t);
  EXPECT_TRUE(pair(plan({4096, 65536, kBF16, kF32}, true)));
  EXPECT_FALSE(pair(plan({6710, 40000, kBF16, kF32}, true)));  // a cluster of 3
  // Each bit: the op and the parameters' dtype.
  for (int bits = 0; bits < 16; ++bits) {
    t = default_row_tuning();
    t.reg_staged_pair = bits;
    t.reg_staged_pair_min_cluster = 2;
    t.reg_staged_early_w = 0;
    set_row_tuning(&t);
    EXPECT_EQ(pair(plan({4096, 65536, kBF16, kBF16})), bool(bits & 1)) << bits;
    EXPECT_EQ(pair(plan({4096, 65536, kBF16, kF32})), bool(bits & 2)) << bits;
    EXPECT_EQ(pair(plan({4096, 65536, kBF16, kBF16}, true)), bool(bits & 4)) << bits;
    EXPECT_EQ(pair(plan({4096, 65536, kBF16, kF32}, true)), bool(bits & 8)) << bits;
    EXPECT_FALSE(pair(plan({2048, 131072, kF32, kF32}, true)));
    EXPECT_FALSE(pair(plan({2048, 131072, kF32, kF32})));
  }
  // The early weight (x's dtype) keeps one row; an fp32 weight is never early.
  t = default_row_tuning();
  t.reg_staged_pair = 15;
  t.reg_staged_early_w = 3;
  set_row_tuning(&t);
  const Kernel early = plan({2048, 131072, kBF16, kBF16});
  EXPECT_TRUE(early.early_w && !pair(early)) << early.text;
  EXPECT_TRUE(pair(plan({2048, 131072, kBF16, kF32})));
}

// reg_w_batch = 2 by default (src/config.cpp cites the sweep): the batch
// ahead where the kernel has the registers for it (ops::staged_w_ahead: two
// rows a cluster, or tiles past 8 vectors), the batched loop elsewhere; 1
// never says "ahead", and the early weight takes neither.
TEST_F(NormFwdPlan, WeightBatchAheadWhereTheRegistersAllow) {
  auto ahead = [](const Kernel& k) { return k.text.find(" w batch ahead") != std::string::npos; };
  auto batched = [](const Kernel& k) { return k.text.find(" w batch") != std::string::npos; };
  for (DType x : {kBF16, kF16}) {
    // LayerNorm's pairs (fp32 parameters): the cells the sweep measured.
    for (int64_t n : {131072, 196608, 262144}) {
      const Kernel k = plan({(int64_t(1) << 28) / n, n, x, kF32}, true);
      EXPECT_TRUE(k.kind == "stage" && k.text.find(" 2 rows") != std::string::npos && ahead(k)) << k.text;
    }
    // One row a cluster at 8 vectors: batched, not ahead.
    const Kernel one = plan({4096, 65536, x, x});
    EXPECT_TRUE(one.kind == "stage" && one.vpt == 8 && batched(one) && !ahead(one)) << one.text;
    // 16 vectors a thread: ahead.
    const Kernel wide = plan({512, 524288, x, x});
    EXPECT_TRUE(wide.kind == "stage" && wide.vpt == 16 && ahead(wide)) << wide.text;
  }
  // fp32 rows load the weight early: neither loop.
  const Kernel early = plan({4096, 65536, kF32, kF32});
  EXPECT_TRUE(early.early_w && !batched(early)) << early.text;
  RowTuning t = default_row_tuning();
  t.reg_w_batch = 1;
  set_row_tuning(&t);
  const Kernel one = plan({1024, 262144, kBF16, kF32}, true);
  EXPECT_TRUE(batched(one) && !ahead(one)) << one.text;
}

// norm_staged_balance fits a staged row's CTAs to it (whole warps, the
// fewest that cover the row at the same cluster and tile; by default for
// fp32 x only, bit 1, as the forty-second session's sweep found; bit 0
// does 16-bit x): bf16 N = 70000 (8750 vectors) in 5 x 224 threads at 8
// vectors instead of 5 x 256, one row a cluster and two (LayerNorm's fp32
// parameters, two rows a cluster from clusters of 2 here), the early
// weight; fp32 N = 24580 (6145 vectors) in 4 x 224 (was 4 x 256); powers of
// two unchanged; the shared memory follows the CTA.
TEST_F(NormFwdPlan, BalancedStagedCtasFitTheRow) {
  auto smem = [](const Kernel& k) {
    const size_t at = k.text.find("smem");
    return at == std::string::npos ? -1 : std::atoi(k.text.c_str() + at + 4);
  };
  RowTuning t = default_row_tuning();
  t.reg_staged_pair_min_cluster = 2;
  t.reg_staged_pair_full_wave = 0;
  t.reg_staged_early_w = 3;
  t.norm_staged_balance = 0;
  set_row_tuning(&t);
  const Kernel rms0 = plan({300, 70000, kBF16, kBF16}), ln0 = plan({300, 70000, kBF16, kF32}, true);
  const Kernel f0 = plan({300, 24580, kF32, kF32}), p0 = plan({300, 65536, kBF16, kBF16});
  t.norm_staged_balance = 3;
  set_row_tuning(&t);
  const Kernel rms = plan({300, 70000, kBF16, kBF16}), ln = plan({300, 70000, kBF16, kF32}, true);
  const Kernel f = plan({300, 24580, kF32, kF32}), p = plan({300, 65536, kBF16, kBF16});
  EXPECT_TRUE(rms0.kind == "stage" && rms0.threads == 256 && rms0.cluster == 5 && rms0.vpt == 8 && rms0.early_w)
      << rms0.text;
  EXPECT_TRUE(rms.kind == "stage" && rms.threads == 224 && rms.cluster == 5 && rms.vpt == 8 && rms.early_w) << rms.text;
  EXPECT_EQ(smem(rms0) - smem(rms), 32 * 8 * 16) << "a warp's 8 vectors fewer a CTA";
  EXPECT_TRUE(ln0.threads == 256 && ln0.text.find(" 2 rows") != std::string::npos) << ln0.text;
  EXPECT_TRUE(ln.kind == "stage" && ln.threads == 224 && ln.cluster == 5 && ln.text.find(" 2 rows") != std::string::npos)
      << ln.text;
  EXPECT_EQ(smem(ln0) - smem(ln), 2 * 32 * 8 * 16) << "two rows: a warp's 8 vectors of each fewer a CTA";
  EXPECT_TRUE(f0.kind == "stage" && f0.threads == 256 && f0.cluster == 4 && f0.vpt == 8) << f0.text;
  EXPECT_TRUE(f.kind == "stage" && f.threads == 224 && f.cluster == 4 && f.vpt == 8) << f.text;
  EXPECT_TRUE(p0.threads == 256 && p.threads == 256 && p.cluster == p0.cluster) << p.text;
  // The defaults: fp32 balanced, 16-bit not (and softmax's knob, on, does
  // not reach the norms).
  set_row_tuning(nullptr);
  EXPECT_EQ(plan({300, 24580, kF32, kF32}).threads, 224);
  EXPECT_EQ(plan({300, 70000, kBF16, kBF16}).threads, 256);
}

// A pair's configuration: its shared memory holds both rows and the wider
// scratch, its row blocks cover the rows, and only staged rows at the
// staged tile take it (check_reg_row_config).
TEST(RegRowConfigPairs, CheckedLikeEveryStagedLayout) {
  const DeviceLimits lim;
  RegRowProblem prob;
  prob.rows = 1001;
  prob.cols = 65536;
  prob.x_elem_bytes = 2;
  prob.max_vpt = 8;
  prob.staged_vpt = 8;
  prob.staged_vpt_max = 32;
  prob.scratch_bytes = 640;
  prob.staged_rows = 2;
  prob.staged_pair_scratch_bytes = 800;
  RowTuning t = default_row_tuning();
  RegRowConfig c;
  ASSERT_TRUE(choose_reg_row_config(prob, lim, t, &c));
  ASSERT_EQ(check_reg_row_config(c, prob, lim), nullptr);
  EXPECT_TRUE(c.staged && c.rows_per_cluster == 2 && c.cluster == 4 && c.vpt == 8);
  EXPECT_EQ(c.row_blocks, 501);
  EXPECT_EQ(c.grid, 501 * 4);
  EXPECT_EQ(c.smem_bytes, size_t(800) + 2 * 256 * 8 * 16);
  RegRowConfig bad = c;
  bad.smem_bytes = 640 + 256 * 8 * 16;  // one row's staging
  EXPECT_NE(check_reg_row_config(bad, prob, lim), nullptr);
  bad = c;
  bad.row_blocks = 500;
  bad.grid = 500 * 4;
  EXPECT_NE(check_reg_row_config(bad, prob, lim), nullptr);
  bad = c;
  bad.rows_per_cluster = 3;
  EXPECT_NE(check_reg_row_config(bad, prob, lim), nullptr);
  RegRowProblem single = prob;
  single.staged_rows = 1;
  EXPECT_NE(check_reg_row_config(c, single, lim), nullptr);
  // Without the problem's leave: one row a cluster.
  ASSERT_TRUE(choose_reg_row_config(single, lim, t, &c));
  EXPECT_TRUE(c.staged && c.rows_per_cluster == 1 && c.row_blocks == 1001) << c.rows_per_cluster;
  EXPECT_EQ(check_reg_row_config(c, single, lim), nullptr);
}

// The small-CTA instance (kSmallCta, RowTuning::reg_small_cta): 8-vector
// tiles of 16-bit x with an fp32 weight in CTAs of at most 256 threads, and
// nothing else; the knob turns it off.
TEST_F(NormFwdPlan, SmallCtaInstanceForEightVectorFp32WeightTiles) {
  auto small = [](const Kernel& k) { return k.text.find("small cta") != std::string::npos; };
  for (bool ln : {false, true}) {
    SCOPED_TRACE(ln ? "LayerNorm" : "RMSNorm");
    for (DType x : {kBF16, kF16}) {
      const Kernel k = plan({16384, 16384, x, kF32}, ln);
      EXPECT_TRUE(k.kind == "reg" && k.threads == 256 && k.cluster == 1 && k.vpt == 8 && small(k)) << k.text;
      EXPECT_FALSE(small(plan({16384, 16384, x, x}, ln)));  // 16-bit weights: the 64-register tile's loops suffice
      EXPECT_FALSE(small(plan({8192, 32768, x, kF32}, ln)));  // 512-thread teams (or staged)
      const Kernel four = plan({32768, 8192, x, kF32}, ln);  // 4 vectors a thread
      EXPECT_TRUE(four.vpt < 8 && !small(four)) << four.text;
    }
    EXPECT_FALSE(small(plan({16384, 16384, kF32, kF32}, ln)));
    RowTuning t = default_row_tuning();
    t.reg_small_cta = 0;
    set_row_tuning(&t);
    EXPECT_FALSE(small(plan({16384, 16384, kBF16, kF32}, ln)));
    set_row_tuning(nullptr);
  }
}

// Lean rows (kLean, RowTuning::reg_lean): a plan is lean exactly where its
// register tile is unclustered, 1 or 2 vectors a thread, one team owning its
// CTA, and the row exactly that tile -- decode-sized calls at the model
// widths; the knob off, never.
TEST_F(NormFwdPlan, LeanRowsAreExactlyTheOneTeamTilesThatTheRowFills) {
  auto lean = [](const Kernel& k) { return k.text.find(" lean") != std::string::npos; };
  for (bool ln : {false, true}) {
    SCOPED_TRACE(ln ? "LayerNorm" : "RMSNorm");
    // The decode shapes the latency benchmark times (bf16, weight in x's
    // dtype or fp32).
    for (const Call& c : {Call{1, 2048, kBF16, kBF16}, Call{64, 4096, kBF16, kF32}, Call{1, 8192, kBF16, kBF16},
                          Call{1024, 2048, kBF16, kBF16}, Call{4, 4096, kBF16, kBF16, true}, Call{1, 1024, kF32, kF32}})
      EXPECT_TRUE(lean(plan(c, ln))) << plan(c, ln).text;
    // Not the tile's width, misaligned (element-wise), or the knob off.
    EXPECT_FALSE(lean(plan({1, 2056, kBF16, kBF16}, ln))) << plan({1, 2056, kBF16, kBF16}, ln).text;
    EXPECT_FALSE(lean(plan({1, 2048, kBF16, kBF16, false, 1}, ln))) << plan({1, 2048, kBF16, kBF16, false, 1}, ln).text;
    RowTuning t = default_row_tuning();
    t.reg_lean = 0;
    set_row_tuning(&t);
    EXPECT_FALSE(lean(plan({1, 2048, kBF16, kBF16}, ln)));
    set_row_tuning(nullptr);
    // The rule, over a scan of widths and batch sizes.
    for (DType x : {kBF16, kF32}) {
      const int64_t vec = 16 / dtype_size(x);
      for (int64_t rows : {1, 64, 4096}) {
        for (int64_t cols = vec; cols <= 16384; cols += vec) {
          const Kernel k = plan({rows, cols, x, x}, ln);
          int team = 0;
          std::sscanf(k.text.c_str(), "%*s team %d", &team);
          const bool rule = k.kind == "reg" && k.cluster == 1 && k.vpt <= 2 && team == k.threads && team % 32 == 0 &&
                            int64_t(k.vpt) * team * vec == cols;
          ASSERT_EQ(lean(k), rule) << "rows " << rows << " N " << cols << ": " << k.text;
        }
      }
    }
  }
}

// Every N from 1 to 2^21 (stride 1 to 16K, then 97) at every dtype mask:
// a staged plan only for an allowed dtype, in a cluster of 2-16 CTAs of 256
// threads at 8 vectors a thread (16 past a 16-CTA cluster at 8) whose tiles
// cover the row with no idle CTA, and every row a 16-CTA staged cluster
// holds at 16 that needs a 1024-thread register team (fp32: 512) is staged.
TEST_F(NormFwdPlan, ScanOfStagedRows) {
  for (int staged : {1, 2, 3}) {
    tune(staged, 3);
    for (DType dt : {kBF16, kF32}) {
      const int vec = 16 / dtype_size(dt);
      const bool bit = staged & (dt == kF32 ? 2 : 1);
      const int64_t per_cta = int64_t(256) * 8 * vec;
      for (int64_t n = vec; n <= (int64_t(1) << 21); n += n < 16384 ? vec : 97 * vec) {
        const Kernel k = plan({64, n, dt, dt});
        const int64_t above = dt == kF32 ? 256 : 512;
        const bool want = bit && n > above * 8 * vec && n <= 32 * per_cta;
        ASSERT_EQ(k.kind == "stage", want) << "N = " << n << ": " << k.text;
        if (!want) continue;
        const int vpt = n <= 16 * per_cta ? 8 : 16;
        const int64_t cta = per_cta / 8 * vpt;
        ASSERT_TRUE(k.threads == 256 && k.vpt == vpt && k.cluster >= 2 && k.cluster <= 16) << "N = " << n << ": " << k.text;
        ASSERT_GE(k.cluster * cta, n) << k.text;
        ASSERT_LT((k.cluster - 1) * cta, n) << "idle CTA: " << k.text;
      }
    }
  }
}

// The grid forward (ops/norm_fwd_grid.cuh) takes a row only where the call
// passes a workspace; the defaults send it fp32 rows from 256K columns and
// 16-bit rows from 512K, whatever their weights' dtype (src/config.cpp,
// fwd_grid_min_cols16 / 32, fwd_grid_keep_reg 0). The workspace query
// answers for the grid whether or not one is set.
TEST_F(NormFwdPlan, GridServesLongRowsWithAWorkspace) {
  const DeviceLimits lim;
  auto with_ws = [](RMSNormFwdArgs a) {
    a.workspace = test::fake_device_ptr(9, 0, kF32);
    a.workspace_bytes = size_t(1) << 20;
    return a;
  };
  auto text = [&](const RMSNormFwdArgs& a, bool ln) { return norm_fwd_plan_description(a, ln, lim); };
  for (const bool ln : {false, true}) {
    SCOPED_TRACE(ln ? "LayerNorm" : "RMSNorm");
    struct Cell {
      int64_t rows, cols;
      DType x, w;
      bool grid;
      int rows_a_step;
    };
    for (const Cell& c : {Cell{256, 1 << 20, kF32, kF32, true, 1}, Cell{256, 1 << 20, kBF16, kF32, true, 2},
                          Cell{256, 1 << 20, kF16, kF32, true, 2}, Cell{512, 524292, kF32, kF32, true, 1},
                          Cell{256, 1 << 20, kBF16, kBF16, true, 2}, Cell{512, 524288, kF32, kF32, true, 1},
                          Cell{1024, 262144, kF32, kF32, true, 1}, Cell{1024, 262143, kF32, kF32, false, 0},
                          Cell{512, 524288, kBF16, kF32, true, 2}, Cell{512, 524288, kBF16, kBF16, true, 2},
                          Cell{512, 524287, kBF16, kBF16, false, 0}, Cell{682, 393216, kBF16, kF32, false, 0},
                          Cell{1024, 262144, kBF16, kBF16, false, 0}, Cell{4096, 65536, kF32, kF32, false, 0}}) {
      const RMSNormFwdArgs a = args_of({c.rows, c.cols, c.x, c.w});
      const std::string p = text(with_ws(a), ln);
      EXPECT_EQ(p.rfind("grid", 0) == 0, c.grid) << c.cols << " " << dtype_name(c.x) << " " << p;
      if (c.grid) {
        EXPECT_NE(p.find("rows " + std::to_string(c.rows_a_step)), std::string::npos) << p;
        // The same call without a workspace takes the other kernels; the
        // query sizes the logs either way.
        EXPECT_NE(text(a, ln).rfind("grid", 0), 0u) << text(a, ln);
        NormGridConfig g;
        ASSERT_TRUE(choose_norm_fwd_grid_config(c.rows, c.cols, dtype_size(c.x), ln, lim, default_row_tuning(), &g));
        EXPECT_EQ(norm_fwd_workspace_bytes(a, ln, lim), g.exchange_bytes);
        EXPECT_GT(g.exchange_bytes, 0u);
      }
    }
    // No grid for a residual stream, misaligned x, x and out in different
    // dtypes, a weight and a bias in different dtypes; no workspace then.
    RMSNormFwdArgs r = args_of({256, 1 << 20, kF32, kF32, true});
    EXPECT_NE(text(with_ws(r), ln).rfind("grid", 0), 0u);
    EXPECT_EQ(norm_fwd_workspace_bytes(r, ln, lim), 0u);
    RMSNormFwdArgs m = args_of({256, 1 << 20, kF32, kF32, false, 1});
    EXPECT_EQ(norm_fwd_workspace_bytes(m, ln, lim), 0u);
    RMSNormFwdArgs o = args_of({256, 1 << 20, kBF16, kF32});
    o.out.dtype = kF32;
    EXPECT_EQ(norm_fwd_workspace_bytes(o, ln, lim), 0u);
    RMSNormFwdArgs b = args_of({256, 1 << 20, kBF16, kF32});
    b.bias = {test::fake_device_ptr(6, 0, kBF16), kBF16};
    EXPECT_EQ(norm_fwd_workspace_bytes(b, ln, lim), 0u);
    b.bias.dtype = kF32;
    EXPECT_GT(norm_fwd_workspace_bytes(b, ln, lim), 0u);
    // Short rows never need one, whatever the tuning.
    RowTuning t = default_row_tuning();
    t.fwd_grid_min_cols16 = t.fwd_grid_min_cols32 = 1;
    t.fwd_grid_keep_reg = 0;
    set_row_tuning(&t);
    EXPECT_EQ(norm_fwd_workspace_bytes(args_of({4096, kNormFwdWorkspaceMinCols - 8, kF32, kF32}), ln, lim), 0u);
    EXPECT_GT(norm_fwd_workspace_bytes(args_of({4096, kNormFwdWorkspaceMinCols, kF32, kF32}), ln, lim), 0u);
    // keep_reg 0: bf16 1M with a bf16 weight leaves its cluster too.
    EXPECT_EQ(text(with_ws(args_of({256, 1 << 20, kBF16, kBF16})), ln).rfind("grid", 0), 0u);
    t.fwd_grid = 1;  // 16-bit rows only
    set_row_tuning(&t);
    EXPECT_NE(text(with_ws(args_of({256, 1 << 20, kF32, kF32})), ln).rfind("grid", 0), 0u);
    set_row_tuning(nullptr);
  }
}

// Every forward grid layout the chooser returns keeps the kernel's
// invariants (check_norm_fwd_grid_config), over lengths, dtypes, row
// counts and the tuning's stages, lag and rows a step.
TEST(NormFwdGridConfig, Invariants) {
  const DeviceLimits lim;
  int served = 0;
  for (const int eb : {2, 4})
    for (const bool centre : {false, true})
      for (const int stages : {2, 3, 8, 13})
        for (const int lag : {1, 2, 7})
          for (const auto& [rows16, rows32] : {std::pair{1, 1}, {2, 2}, {4, 1}, {7, 2}})
            for (const int64_t rows : {int64_t(1), int64_t(3), int64_t(131), int64_t(100000)})
              for (int64_t cols = kNormFwdWorkspaceMinCols - 1; cols <= (int64_t(1) << 21); cols = cols * 5 / 3 + 7) {
                RowTuning t = default_row_tuning();
                t.fwd_grid_min_cols16 = t.fwd_grid_min_cols32 = 1;
                t.fwd_grid_stages16 = t.fwd_grid_stages32 = stages;
                t.fwd_grid_lag = lag;
                t.fwd_grid_rows16 = rows16;
                t.fwd_grid_rows32 = rows32;
                NormGridConfig c;
                if (!choose_norm_fwd_grid_config(rows, cols, eb, centre, lim, t, &c)) {
                  // Refused only below the floor or where a row needs more
                  // CTAs (of 8192 elements) than there are SMs.
                  EXPECT_TRUE(cols < kNormFwdWorkspaceMinCols || (cols + 8191) / 8192 > lim.num_sms) << cols;
                  continue;
                }
                ++served;
                SCOPED_TRACE(std::to_string(cols) + " cols, " + std::to_string(eb) + "-byte x");
                EXPECT_EQ(check_norm_fwd_grid_config(c, rows, cols, eb, lim, centre), nullptr);
                EXPECT_GE(cols, kNormFwdWorkspaceMinCols);
                EXPECT_LE(c.grid, lim.num_sms);
                EXPECT_EQ(c.smem_bytes,
                          norm_fwd_grid_header(c.rows * (centre ? 2 : 1)) + size_t(c.stages) * size_t(c.tile_vecs) * 16);
                // (the header's room for 8 words a rank only where a step has more than 4)
                EXPECT_EQ(norm_fwd_grid_header(c.rows * (centre ? 2 : 1)) == kNormGridHeader,
                          c.rows * (centre ? 2 : 1) <= 4);
                EXPECT_LE(c.smem_bytes + 1024, lim.smem_per_sm);  // (1 KB reserved a CTA)
                EXPECT_LE(c.stages, std::min(stages, kNormGridStagesMax));
                EXPECT_LE((c.lag + 1) * c.rows, c.stages);
                // Rows a step: the most of 4, 2, 1 that the knob asks for,
                // the kernels are built for (16-bit rows 4, fp32 rows 2)
                // and two steps and a row of the stages hold.
                const int asked = eb == 2 ? rows16 : rows32, built = eb == 2 ? 4 : 2;
                int want = 1;
                for (const int r : {4, 2})
                  if (want == 1 && r <= asked && r <= built && c.stages >= 2 * r + 1) want = r;
                EXPECT_EQ(c.rows, want);
                // The exchange log: a slot a step of every group, covering
                // the group's rows (the first group has the most).
                const int64_t group_rows = (rows + c.groups - 1) / c.groups;
                EXPECT_EQ(c.steps, (group_rows + c.rows - 1) / c.rows);
                const size_t log = size_t(c.groups) * size_t(c.steps) * c.ranks * c.rows * (centre ? 2 : 1) * 8;
                EXPECT_GE(c.exchange_bytes, log);
                EXPECT_LT(c.exchange_bytes, log + 16);
              }
  EXPECT_GT(served, 200);
  // The floor, the switch and the row tags.
  NormGridConfig c;
  RowTuning t = default_row_tuning();
  t.fwd_grid_min_cols16 = t.fwd_grid_min_cols32 = 1;
  EXPECT_FALSE(choose_norm_fwd_grid_config(16, kNormFwdWorkspaceMinCols - 1, 2, false, lim, t, &c));
  EXPECT_TRUE(choose_norm_fwd_grid_config(16, kNormFwdWorkspaceMinCols, 2, false, lim, t, &c));
  EXPECT_FALSE(choose_norm_fwd_grid_config(int64_t(1) << 31, kNormFwdWorkspaceMinCols, 2, false, lim, t, &c));
  t.fwd_grid = 0;
  EXPECT_FALSE(choose_norm_fwd_grid_config(16, 1 << 20, 2, false, lim, t, &c));
  // The defaults: fp32 rows from 256K columns, 16-bit ones from 512K; one
  // fp32 row of 1M over 128 CTAs in 6 stages of 32 KB, a 16-bit one in 8 of
  // 16 KB, two rows a step.
  EXPECT_FALSE(choose_norm_fwd_grid_config(16, 262143, 4, false, lim, default_row_tuning(), &c));
  EXPECT_TRUE(choose_norm_fwd_grid_config(16, 262144, 4, false, lim, default_row_tuning(), &c));
  EXPECT_FALSE(choose_norm_fwd_grid_config(16, 524287, 2, false, lim, default_row_tuning(), &c));
  EXPECT_TRUE(choose_norm_fwd_grid_config(16, 524288, 2, false, lim, default_row_tuning(), &c));
  ASSERT_TRUE(choose_norm_fwd_grid_config(256, 1 << 20, 4, false, lim, default_row_tuning(), &c));
  EXPECT_EQ(c.ranks, 128);
  EXPECT_EQ(c.groups, 1);
  EXPECT_EQ(c.stages, 6);
  EXPECT_EQ(c.rows, 1);
  ASSERT_TRUE(choose_norm_fwd_grid_config(256, 1 << 20, 2, true, lim, default_row_tuning(), &c));
  EXPECT_EQ(c.ranks, 128);
  EXPECT_EQ(c.stages, 8);
  EXPECT_EQ(c.rows, 2);
  EXPECT_EQ(c.lag, 2);
  EXPECT_EQ(c.steps, 128);  // one group: 256 rows, two a step
  EXPECT_EQ(c.exchange_bytes, size_t(128) * 128 * 2 * 2 * 8);
  // 132 ranks (one CTA on each of 132 SMs) are the most: 132 x 8192 fp32
  // columns are served, one more vector is not.
  t = default_row_tuning();
  EXPECT_TRUE(choose_norm_fwd_grid_config(1, int64_t(132) * 8192, 4, true, lim, t, &c));
  EXPECT_EQ(c.grid, 132);
  EXPECT_FALSE(choose_norm_fwd_grid_config(1, int64_t(132) * 8192 + 4, 4, true, lim, t, &c));
}

// Shifted rows (RowTuning::shifted_rows bit 2, on by default since the
// forty-eighth session): rows that are not whole 16-byte vectors, every
// operand's row at x's offset, take the register plan of N + VEC - 1
// columns where it is one unclustered CTA (" shifted") -- never staged:
// where the aligned plan stages x in a cluster, the widest register CTA --
// else the element-wise staged kernel; an fp32 residual of 16-bit x shares
// the offsets in elements; 16-bit x with an fp32 weight takes 8 vectors
// only in the small CTA, else 4; a weight not 16-byte aligned, or an
// operand at another offset, keeps the element-wise kernel.
TEST_F(NormFwdPlan, ShiftedRowsTakeTheRegisterPlanOfTheirVectors) {
  auto at = test::fake_device_ptr;
  auto contiguous = [&](int64_t rows, int64_t cols, DType x, DType w, bool res, DType r) {
    RMSNormFwdArgs a;
    a.rows = rows;
    a.cols = cols;
    a.x = {at(1, 0, x), x, cols};
    a.weight = {at(2, 0, w), w};
    a.bias = {at(6, 0, w), w};
    a.out = {at(3, 0, x), x, cols};
    if (res) {
      a.residual = {at(4, 0, r), r, cols};
      a.residual_out = {at(5, 0, r), r, cols};
    }
    return a;
  };
  EXPECT_EQ(default_row_tuning().shifted_rows & 4, 4) << "on since the forty-eighth session's sweep";
  for (bool ln : {false, true}) {
    SCOPED_TRACE(ln ? "LayerNorm" : "RMSNorm");
    struct Cell {
      int64_t cols;
      DType x, w;
      bool res;
      DType r;
    };
    for (const Cell& c : {Cell{4100, kBF16, kBF16, false, kBF16}, Cell{4101, kBF16, kBF16, true, kBF16},
                          Cell{5003, kBF16, kF32, true, kF32}, Cell{1001, kF32, kF32, true, kF32},
                          Cell{3, kF16, kF16, false, kF16}, Cell{32001, kBF16, kBF16, false, kBF16},
                          Cell{2051, kBF16, kF32, false, kBF16}}) {
      const int64_t vec = 16 / dtype_size(c.x);
      SCOPED_TRACE("N " + std::to_string(c.cols));
      const RMSNormFwdArgs a = contiguous(4096, c.cols, c.x, c.w, c.res, c.r);
      RowTuning off = default_row_tuning();
      off.shifted_rows &= ~4;
      set_row_tuning(&off);
      EXPECT_NE(norm_fwd_plan_description(a, ln, DeviceLimits{}).find("(element-wise)"), std::string::npos)
          << "bit 2 off: element by element";
      set_row_tuning(nullptr);
      const std::string got = norm_fwd_plan_description(a, ln, DeviceLimits{});
      // the aligned plan of the row's vectors (a pitch that keeps x's
      // rows whole: the plan reads only the shape and the alignment), at
      // the shifted rows' 8-vector threshold
      RMSNormFwdArgs b = contiguous(4096, c.cols + vec - 1, c.x, c.w, c.res, c.r);
      b.x.row_stride = b.out.row_stride = (c.cols + vec - 1 + vec - 1) / vec * vec;
      if (c.res) b.residual.row_stride = b.residual_out.row_stride = b.x.row_stride;
      RowTuning v16 = default_row_tuning();
      v16.norm_fwd_vpt16_min_cols = v16.norm_fwd_shift_vpt16_min_cols;
      set_row_tuning(&v16);
      const std::string aligned = norm_fwd_plan_description(b, ln, DeviceLimits{});
      set_row_tuning(nullptr);
      EXPECT_EQ(got.rfind("reg", 0), 0u) << got;
      if (c.res && dtype_size(c.x) == 2) {
        // (16-bit x with a residual stream: 2 vectors a thread, the
        // shifted tiles' cap, ops::rmsnorm_reg_shift_max_vpt)
        int team = 0, thr = 0, cl = 0, vpt = 0;
        ASSERT_EQ(std::sscanf(got.c_str(), "reg team %d thr %d cl %d vpt %d", &team, &thr, &cl, &vpt), 4) << got;
        const int64_t nvec = (c.cols + vec - 1 + vec - 1) / vec;
        EXPECT_TRUE(cl == 1 && vpt == 2 && thr == (nvec + 63) / 64 * 32) << got;
        EXPECT_NE(got.find(" shifted"), std::string::npos) << got;
      } else {
        EXPECT_EQ(got, aligned + " shifted");
      }
    }
    // Rows whose aligned plan is staged (fp32 RMSNorm from 16K) take the
    // widest register CTA, unstaged: 1024 threads at 8 vectors for N =
    // 32001 (LayerNorm's fp32 rows are not staged: the aligned plan).
    set_row_tuning(nullptr);
    {
      const std::string got = norm_fwd_plan_description(contiguous(8388, 32001, kF32, kF32, false, kF32), ln,
                                                        DeviceLimits{});
      EXPECT_EQ(got.rfind("reg     team 1024 thr 1024 cl  1 vpt  8 ", 0), 0u) << got;
      EXPECT_NE(got.find(" shifted"), std::string::npos) << got;
      if (!ln) {
        const std::string aligned = norm_fwd_plan_description(contiguous(8388, 32004, kF32, kF32, false, kF32), ln,
                                                              DeviceLimits{});
        EXPECT_EQ(aligned.rfind("stage", 0), 0u) << "the aligned row is staged: " << aligned;
      }
    }
    // Shifted 16-bit rows from norm_fwd_shift_vpt16_min_cols (3000 by
    // default) take 8 vectors a thread where the aligned row of the same
    // width takes 4 (bf16 4100: 96 threads at 8, not 160 at 4); below it
    // (2050, where 8 lost) and with the knob off, 4.
    {
      EXPECT_EQ(default_row_tuning().norm_fwd_shift_vpt16_min_cols, 3000);
      EXPECT_EQ(default_row_tuning().norm_fwd_vpt16_min_cols, 0) << "aligned rows: off";
      const std::string on = norm_fwd_plan_description(contiguous(4096, 4100, kBF16, kBF16, false, kBF16), ln,
                                                       DeviceLimits{});
      EXPECT_EQ(on.rfind("reg     team   96 thr   96 cl  1 vpt  8 ", 0), 0u) << on;
      const std::string aligned = norm_fwd_plan_description(contiguous(4096, 4104, kBF16, kBF16, false, kBF16), ln,
                                                            DeviceLimits{});
      EXPECT_EQ(aligned.rfind("reg     team  160 thr  160 cl  1 vpt  4 ", 0), 0u) << aligned;
      const std::string below = norm_fwd_plan_description(contiguous(4096, 2050, kBF16, kBF16, false, kBF16), ln,
                                                          DeviceLimits{});
      EXPECT_NE(below.find(" vpt  4 "), std::string::npos) << below;
      EXPECT_NE(below.find(" shifted"), std::string::npos) << below;
      RowTuning off = default_row_tuning();
      off.norm_fwd_shift_vpt16_min_cols = 0;
      set_row_tuning(&off);
      const std::string was = norm_fwd_plan_description(contiguous(4096, 4100, kBF16, kBF16, false, kBF16), ln,
                                                        DeviceLimits{});
      EXPECT_EQ(was.rfind("reg     team  160 thr  160 cl  1 vpt  4 ", 0), 0u) << was;
      off.norm_fwd_shift_vpt16_min_cols = 3000;
      off.norm_fwd_vpt16_min_cols = 1024;  // the smaller of the two applies
      set_row_tuning(&off);
      const std::string smaller = norm_fwd_plan_description(contiguous(4096, 2033, kBF16, kBF16, false, kBF16), ln,
                                                            DeviceLimits{});
      EXPECT_NE(smaller.find(" vpt  8 "), std::string::npos) << smaller;
      set_row_tuning(nullptr);
    }
    // 16-bit x with an fp32 weight past the small CTA: 4 vectors a thread
    // (the 8-vector tile's 1024-thread instance is not built for shifted
    // rows), in the fewest whole warps -- 2501 vectors, 626 threads.
    for (const int64_t n : {int64_t(20001), int64_t(32001)}) {
      const std::string got =
          norm_fwd_plan_description(contiguous(4096, n, kBF16, kF32, false, kBF16), ln, DeviceLimits{});
      int team = 0, thr = 0, cl = 0, vpt = 0;
      ASSERT_EQ(std::sscanf(got.c_str(), "reg team %d thr %d cl %d vpt %d", &team, &thr, &cl, &vpt), 4) << got;
      EXPECT_TRUE(cl == 1 && vpt == 4 && thr == ((n + 7 + 7) / 8 + 4 * 32 - 1) / (4 * 32) * 32) << got;
      EXPECT_NE(got.find(" shifted"), std::string::npos) << got;
    }
    // Refused: a row past one CTA's register tile (a cluster), a
    // misaligned weight, a residual at another offset.
    {
      const RMSNormFwdArgs a = contiguous(64, 300001, kBF16, kBF16, false, kBF16);
      const std::string got = norm_fwd_plan_description(a, ln, DeviceLimits{});
      EXPECT_EQ(got.find("shifted"), std::string::npos) << "N " << a.cols << ": " << got;
    }
    RMSNormFwdArgs w = contiguous(4096, 4100, kBF16, kBF16, false, kBF16);
    w.weight.ptr = at(2, 1, kBF16);
    EXPECT_NE(norm_fwd_plan_description(w, ln, DeviceLimits{}).find("(element-wise)"), std::string::npos);
    RMSNormFwdArgs r = contiguous(4096, 4100, kBF16, kBF16, true, kBF16);
    r.residual.ptr = at(4, 1, kBF16);
    EXPECT_NE(norm_fwd_plan_description(r, ln, DeviceLimits{}).find("(element-wise)"), std::string::npos);
    // A misaligned base with whole-vector pitches is shifted too.
    RMSNormFwdArgs m = contiguous(4096, 4096, kBF16, kBF16, true, kF32);
    m.x.ptr = at(1, 3, kBF16);
    m.out.ptr = at(3, 3, kBF16);
    m.residual.ptr = at(4, 3, kF32);
    m.residual_out.ptr = at(5, 3, kF32);
    EXPECT_NE(norm_fwd_plan_description(m, ln, DeviceLimits{}).find(" shifted"), std::string::npos);
    set_row_tuning(nullptr);
  }
}

}  // namespace
}  // namespace quack
