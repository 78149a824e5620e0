// Host tests of RMSNorm / LayerNorm backward's dispatch table: which kernel
// serves a call on an H200 (DeviceLimits{}), read back through
// norm_bwd_plan_description, and the pipelined kernel's configuration
// invariants for every row length it serves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

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
  DType w;                // kind of weight (ignored without one)
  bool weight = true;
  bool dres_out = false;
  int64_t x_offset = 0;   // elements past a 256-byte boundary (1: misaligned)
  int bias = -1;          // dbias asked for (-1: for LayerNorm only, as the benchmarks do)
  int64_t pad = 0;        // every matrix's row stride is N + pad
  bool offset_all = false;  // every matrix at x_offset, not h's alone
};

// Arguments with fake device pointers (the plan reads none: only their
// alignment), rows of exactly N elements, dweight (and dbias) asked for.
RMSNormBwdArgs args_of(const Call& c, bool layernorm) {
  auto at = test::fake_device_ptr;
  RMSNormBwdArgs a;
  a.rows = c.rows;
  a.cols = c.cols;
  const int64_t stride = c.cols + c.pad, off = c.offset_all ? c.x_offset : 0;
  a.h = {at(1, c.x_offset, c.x), c.x, stride};
  a.dy = {at(2, off, c.x), c.x, stride};
  a.dx = {at(3, off, c.x), c.x, stride};
  if (c.weight) {
    a.weight = {at(4, 0, c.w), c.w};
    a.dweight = {at(5, 0, c.w), c.w};
  }
  if (c.bias > 0 || (c.bias < 0 && layernorm)) a.dbias = {at(6, 0, c.w), c.w};
  if (c.dres_out) a.dresidual_out = {at(7, off, c.x), c.x, stride};
  a.rstd = static_cast<const float*>(at(8, 0, kF32));
  return a;
}

struct Kernel {
  std::string kind;  // "pipe", "reg", "grid", "general" or "split"
  int team = 0, threads = 0, cluster = 0, vpt = 0, stages = 0;
  int64_t grid = 0, smem = 0;
  int ranks = 0, groups = 0, tile_vecs = 0, lag = 0, rows = 0;  // "grid"
  std::string text;
};

Kernel plan(const Call& c, bool layernorm = false) {
  Kernel k;
  k.text = norm_bwd_plan_description(args_of(c, layernorm), layernorm, DeviceLimits{});
  char kind[16] = {};
  long long grid = 0, smem = 0;
  std::sscanf(k.text.c_str(), "%15s", kind);
  k.kind = kind;
  if (k.kind == "pipe" &&
      std::sscanf(k.text.c_str(), "pipe team=%d threads=%d cluster=%d vpt=%d stages=%d grid=%lld smem=%lld", &k.team,
                  &k.threads, &k.cluster, &k.vpt, &k.stages, &grid, &smem) != 7)
    ADD_FAILURE() << "unparsed plan: " << k.text;
  if (k.kind == "grid" &&
      std::sscanf(k.text.c_str(), "grid ranks=%d groups=%d tile_vecs=%d stages=%d lag=%d rows=%d smem=%lld",
                  &k.ranks, &k.groups, &k.tile_vecs, &k.stages, &k.lag, &k.rows, &smem) != 7)
    ADD_FAILURE() << "unparsed plan: " << k.text;
  k.grid = grid;
  k.smem = smem;
  return k;
}

// The plan for `call` is the pipelined kernel in this layout.
struct PipeLayout {
  int team, threads, cluster, vpt, stages;
  int64_t grid;
};
void expect_pipe(const Call& call, bool layernorm, const PipeLayout& want) {
  const Kernel k = plan(call, layernorm);
  SCOPED_TRACE(k.text);
  EXPECT_EQ(k.kind, "pipe");
  EXPECT_EQ(k.team, want.team);
  EXPECT_EQ(k.threads, want.threads);
  EXPECT_EQ(k.cluster, want.cluster);
  EXPECT_EQ(k.vpt, want.vpt);
  EXPECT_EQ(k.stages, want.stages);
  EXPECT_EQ(k.grid, want.grid);
}

class NormBwdPlan : public testing::Test {
 protected:
  void TearDown() override { set_row_tuning(nullptr); }
  // The defaults with a CTA a team and as many CTAs an SM as fit (the
  // layouts before bwd_pipe_ctas_per_sm and bwd_pipe_min_threads were on;
  // SharedCtasAtOneAnSm has the defaults').
  static RowTuning ctas_of_their_own() {
    RowTuning t = default_row_tuning();
    t.bwd_pipe_ctas_per_sm = t.bwd_pipe_min_threads = 0;
    t.bwd_pipe_big_cta = 0;
    return t;
  }
  // The 2-vector tile at every row length (the defaults take 4 vectors for
  // long 16-bit rows: DefaultsTakeFourVectorsByRowLength), no grid kernel
  // (rows past 128K keep the cluster layouts these tests describe), a CTA
  // a team, as many an SM as fit.
  void two_vector_tile() {
    two_ = ctas_of_their_own();
    two_.bwd_pipe_vpt16 = 2;
    two_.bwd_grid = 0;
    set_row_tuning(&two_);
  }
  // The defaults without the grid kernel (GridKernelCells: with it).
  void no_grid() {
    two_ = default_row_tuning();
    two_.bwd_grid = 0;
    set_row_tuning(&two_);
  }
  RowTuning two_{};
};

// The cells the 2-vector tile serves with the pipelined kernel (RMSNorm
// without dbias, LayerNorm with it, as the benchmarks call them; src/
// config.cpp cites the sweep): 2 vectors a thread (16 16-bit / 8 fp32
// elements), two stages, teams of up to a warp sharing 256-thread CTAs and
// larger teams owning theirs, every resident CTA launched (132 SMs: 1024
// threads an SM, 768 for CTAs of up to 256 threads -- the small-CTA
// kernel's 80 registers -- fewer where the shared memory runs out).
TEST_F(NormBwdPlan, PipelinedCells) {
  two_vector_tile();
  struct Cell {
    Call call;
    bool ln;
    int team, threads, vpt, stages;
    int64_t grid;
  };
  const Cell cells[] = {
      // CTAs of up to 256 threads: the small-CTA kernel, 768 threads an SM.
      {{262144, 1024, kBF16, kBF16}, false, 64, 64, 2, 2, 12 * 132},  // (15 by shared memory)
      {{65536, 4096, kBF16, kBF16}, false, 256, 256, 2, 2, 3 * 132},
      {{16384, 16384, kBF16, kBF16}, false, 1024, 1024, 2, 2, 132},
      {{65536, 4096, kF16, kF16}, false, 256, 256, 2, 2, 3 * 132},
      {{262144, 1024, kF32, kF32}, false, 128, 128, 2, 2, 6 * 132},
      {{32768, 8192, kF32, kF32}, false, 1024, 1024, 2, 2, 132},
      {{32768, 8192, kF32, kF32}, true, 1024, 1024, 2, 2, 132},
      {{65536, 4096, kF32, kF32}, true, 512, 512, 2, 2, 2 * 132},
      // 16-bit rows with fp32 weights: the weight is fp32 in shared memory
      // in any case.
      {{32768, 8192, kBF16, kF32}, false, 512, 512, 2, 2, 2 * 132},
      // Sub-warp teams share a CTA; a row of one vector takes one thread.
      {{1048576, 256, kBF16, kBF16}, false, 16, 256, 2, 2, 3 * 132},
      {{1000000, 8, kF16, kF16}, false, 1, 256, 1, 2, 3 * 132},
      // Fewer row blocks than resident CTAs: one CTA a row block.
      {{7, 1024, kBF16, kBF16}, false, 64, 64, 2, 2, 7},
      // LayerNorm's 16-bit rows (with dbias), the training layout's fp32
      // weight and bias.
      {{262144, 1024, kBF16, kF32}, true, 64, 64, 2, 2, 12 * 132},  // 18 KB a CTA
      {{65536, 4096, kBF16, kF32}, true, 256, 256, 2, 2, 3 * 132},  // 69 KB a CTA
      {{65536, 4096, kBF16, kBF16}, true, 256, 256, 2, 2, 3 * 132},
      {{32768, 8192, kF16, kF32}, true, 512, 512, 2, 2, 132},
  };
  for (const Cell& c : cells) expect_pipe(c.call, c.ln, {c.team, c.threads, 1, c.vpt, c.stages, c.grid});
}

// Rows past one CTA at 2 vectors a thread: clusters of the CTA with the most
// threads resident an SM (1024, or 256 where 1024 threads' stages do not
// fit: dbias sums, dresidual_out), as few CTAs as cover the row (not only
// powers of two), one cluster a row,
// as many clusters as the SMs hold (the launch clamps them further to what
// the GPCs hold).
TEST_F(NormBwdPlan, ClusteredPipelinedCells) {
  two_vector_tile();
  struct Cell {
    Call call;
    bool ln;
    int threads, cluster;
    int64_t grid;
  };
  const Cell cells[] = {
      {{8192, 32768, kBF16, kBF16}, false, 1024, 2, 132},
      {{4096, 65536, kBF16, kBF16}, false, 1024, 4, 132},
      {{1024, 262144, kBF16, kBF16}, false, 1024, 16, 128},
      {{4096, 65536, kBF16, kF32}, false, 1024, 4, 132},
      {{4096, 40000, kBF16, kBF16}, false, 1024, 3, 132},  // 5000 vectors: 3 CTAs of 2048
      {{16384, 16384, kF32, kF32}, false, 1024, 2, 132},
      {{4096, 65536, kF32, kF32}, false, 1024, 8, 128},
      {{4096, 65536, kF32, kF32}, true, 1024, 8, 128},  // LayerNorm with dbias: 208 KB a CTA
      {{2048, 131072, kF32, kF32}, false, 1024, 16, 128},
      // The 1024-thread CTA's stages do not fit: 256-thread CTAs, 3 an SM
      // (69 KB each), over 512-thread ones, 1 an SM (137 KB).
      {{16384, 16384, kBF16, kBF16, true, false, 0, 1}, false, 256, 4, 3 * 132},     // dbias
      {{8192, 32768, kBF16, kBF16, true, true}, false, 256, 8, 392},                 // dresidual_out: 49 of 8
      {{16384, 16384, kF32, kF32, true, true, 0, 1}, false, 256, 8, 392},            // both
      // ... unless those need a cluster of more than 16.
      {{2048, 131072, kBF16, kBF16, true, false, 0, 1}, false, 512, 16, 128},
      // Fewer rows than clusters that fit.
      {{5, 65536, kBF16, kBF16}, false, 1024, 4, 20},
      // LayerNorm's 16-bit rows with fp32 weight and bias (dbias: 256-thread
      // CTAs, as RMSNorm's with it).
      {{16384, 16384, kBF16, kF32}, true, 256, 4, 3 * 132},
      {{4096, 65536, kBF16, kF32}, true, 256, 16, 384},
      {{8192, 32768, kF16, kF32}, true, 256, 8, 392},
  };
  for (const Cell& c : cells) expect_pipe(c.call, c.ln, {c.threads, c.threads, c.cluster, 2, 2, c.grid});
}

// Rows past a cluster of 16 at 2 vectors a thread (fp32 from 128K), rows
// whose stages fit no cluster of 16 (16-bit 256K with dbias, RMSNorm or
// LayerNorm), misaligned rows, long rows, and the knobs.
TEST_F(NormBwdPlan, OtherKernels) {
  no_grid();
  EXPECT_EQ(plan({1024, 262144, kBF16, kF32}, true).kind, "reg");  // LayerNorm (dbias): past a cluster of 16
  EXPECT_EQ(plan({1024, 262144, kF32, kF32}).kind, "reg");
  EXPECT_EQ(plan({1024, 131080, kF32, kF32}).kind, "reg");
  EXPECT_EQ(plan({1024, 262144, kBF16, kBF16, true, false, 0, 1}).kind, "reg");  // with dbias
  EXPECT_EQ(plan({1024, 262144, kBF16, kBF16, true, true}).kind, "reg");         // dresidual_out
  EXPECT_EQ(plan({4096, 1000, kBF16, kBF16, true, false, 1}).kind, "general");
  EXPECT_EQ(plan({8, 1 << 20, kBF16, kBF16}).kind, "split");
  {
    RowTuning t = default_row_tuning();
    t.bwd_grid = 0;
    t.bwd_pipe_cluster = 1;
    set_row_tuning(&t);
    EXPECT_EQ(plan({8192, 32768, kBF16, kBF16}).kind, "reg");
    EXPECT_EQ(plan({16384, 16384, kBF16, kBF16, true, false, 0, 1}).kind, "reg");  // 1024 threads do not fit
    EXPECT_EQ(plan({16384, 16384, kBF16, kBF16}).kind, "pipe");
    t.bwd_pipe_cluster = 4;
    set_row_tuning(&t);
    EXPECT_EQ(plan({4096, 65536, kBF16, kBF16}).kind, "pipe");
    EXPECT_EQ(plan({4096, 65544, kBF16, kBF16}).kind, "reg");
  }
  for (int bits : {0, 1, 2}) {
    RowTuning t = default_row_tuning();
    t.bwd_grid = 0;
    t.bwd_pipe = bits;
    set_row_tuning(&t);
    EXPECT_EQ(plan({65536, 4096, kBF16, kBF16}).kind, (bits & 1) ? "pipe" : "reg") << bits;
    EXPECT_EQ(plan({65536, 4096, kF32, kF32}).kind, (bits & 2) ? "pipe" : "reg") << bits;
  }
}

// The small-CTA kernel (" small_cta": 80 registers, the dbias sums in
// registers) serves CTAs of up to 256 threads, one CTA a row or clusters,
// with or without dbias; not fp16 LayerNorm (not built: it spills), and not
// with its knobs off.
TEST_F(NormBwdPlan, SmallCtaKernel) {
  two_vector_tile();
  auto small = [](const Call& c, bool ln) {
    const Kernel k = plan(c, ln);
    EXPECT_EQ(k.kind, "pipe") << k.text;
    return k.text.find(" small_cta") != std::string::npos;
  };
  EXPECT_TRUE(small({262144, 1024, kBF16, kF32}, true));
  EXPECT_TRUE(small({65536, 4096, kBF16, kF32}, true));
  EXPECT_TRUE(small({16384, 16384, kBF16, kF32}, true));            // clusters of 256 threads
  EXPECT_FALSE(small({65536, 4096, kF32, kF32}, true));             // 512-thread CTAs
  EXPECT_TRUE(small({262144, 1024, kF32, kF32}, true));
  EXPECT_TRUE(small({65536, 4096, kBF16, kBF16, true, false, 0, 1}, false));  // RMSNorm with dbias
  EXPECT_TRUE(small({65536, 4096, kBF16, kBF16}, false));           // and without
  EXPECT_FALSE(small({16384, 16384, kBF16, kBF16}, false));         // 1024-thread CTAs
  EXPECT_FALSE(small({65536, 4096, kF16, kF32}, true));             // fp16 LayerNorm
  EXPECT_TRUE(small({65536, 4096, kF16, kF16, true, false, 0, 1}, false));    // fp16 RMSNorm
  // 12 64-thread CTAs an SM (768 threads: the kernel's register budget), not
  // the 15 their shared memory allows.
  EXPECT_EQ(plan({262144, 1024, kBF16, kF32}, true).grid, 12 * 132);
  RowTuning t = two_;
  t.bwd_pipe_db_regs = 0;
  set_row_tuning(&t);
  EXPECT_FALSE(small({65536, 4096, kBF16, kF32}, true));
  EXPECT_TRUE(small({65536, 4096, kBF16, kBF16}, false));
  t.bwd_pipe_small_cta = 0;
  set_row_tuning(&t);
  EXPECT_FALSE(small({65536, 4096, kBF16, kBF16}, false));
  EXPECT_EQ(plan({65536, 4096, kBF16, kBF16}).grid, 4 * 132);  // 1024 threads an SM at 64 registers
}

// The knobs: one vector a thread, up to three stages, the sub-warp teams' CTA.
TEST_F(NormBwdPlan, KnobsSelectTileStagesAndCta) {
  RowTuning t = ctas_of_their_own();
  t.bwd_pipe_vpt16 = 1;
  t.bwd_pipe_stages = 3;
  t.bwd_pipe_threads = 128;
  set_row_tuning(&t);
  const Kernel k = plan({65536, 4096, kBF16, kBF16});
  EXPECT_EQ(k.kind, "pipe") << k.text;
  EXPECT_EQ(k.team, 512) << k.text;
  EXPECT_EQ(k.vpt, 1) << k.text;
  EXPECT_EQ(k.stages, 3) << k.text;
  // A row that needs two vectors at 1024 threads still gets them.
  const Kernel wide = plan({16384, 16384, kBF16, kBF16});
  EXPECT_EQ(wide.vpt, 2) << wide.text;
  const Kernel small = plan({1048576, 256, kBF16, kBF16});
  EXPECT_EQ(small.threads, 128) << small.text;
  // Clusters of smaller CTAs (2-vector tile): two of 512 threads an SM.
  t = ctas_of_their_own();
  t.bwd_pipe_vpt16 = 2;
  t.bwd_pipe_cluster_threads = 600;
  set_row_tuning(&t);
  const Kernel half = plan({4096, 65536, kBF16, kBF16});
  EXPECT_EQ(half.threads, 512) << half.text;
  EXPECT_EQ(half.cluster, 8) << half.text;
  EXPECT_EQ(half.grid, 264) << half.text;
}

// Rows shorter than bwd_pipe_wide_min_cols with dbias (RMSNorm; LayerNorm
// takes 4 vectors from 1K anyway) whose 2-vector tile is one 512-thread
// 64-register CTA with more than a quarter of its threads idle take the
// 4-vector small CTA (bwd_pipe_wide_idle_db): bf16 4097-6128; not 6136 (a
// quarter idle), not fp32 (2 vectors asked), not with the knob off. (Rows
// without dbias: WideTileForIdleCtasWithoutDbias.)
TEST_F(NormBwdPlan, WideTileForIdleDbiasCtas) {
  EXPECT_EQ(default_row_tuning().bwd_pipe_wide_idle_db, 1);
  const auto db = [](int64_t n, DType x) { return Call{65536, n, x, x, true, false, 0, 1}; };
  for (const int64_t n : {4104, 4608, 5120, 5128, 6128}) {
    const Kernel k = plan(db(n, kBF16));
    EXPECT_EQ(k.vpt, 4) << n << " " << k.text;
    EXPECT_EQ(k.threads, 256) << n << " " << k.text;
    EXPECT_EQ(k.cluster, 1) << n << " " << k.text;
    EXPECT_NE(k.text.find("small_cta"), std::string::npos) << n << " " << k.text;
    const Kernel f16 = plan(db(n, kF16));
    EXPECT_EQ(f16.vpt, 4) << n << " " << f16.text;
  }
  for (const int64_t n : {4096, 6136, 6144, 7168, 8192}) {
    const Kernel k = plan(db(n, kBF16));
    EXPECT_EQ(k.vpt, 2) << n << " " << k.text;
  }
  // Odd rows: the shifted tile of N + 7 columns, likewise.
  const Kernel odd = plan(db(5001, kBF16));
  EXPECT_EQ(odd.vpt, 4) << odd.text;
  EXPECT_NE(odd.text.find("shifted"), std::string::npos) << odd.text;
  const Kernel f32 = plan(db(2560, kF32));
  EXPECT_EQ(f32.vpt, 2) << f32.text;
  RowTuning off = default_row_tuning();
  off.bwd_pipe_wide_idle_db = 0;
  set_row_tuning(&off);
  const Kernel k = plan(db(5120, kBF16));
  EXPECT_EQ(k.vpt, 2) << k.text;
  EXPECT_EQ(k.threads, 512) << k.text;
  set_row_tuning(nullptr);
}

// Without dbias the same, where at least 15/32 of the 512-thread CTA's
// threads are idle (bwd_pipe_wide_idle32): bf16 and fp16 4097-4352 (the
// shifted tile of N + 7 columns for odd N); 4353 (273 of 512 busy) on keeps
// 2 vectors, as fp32 does, and with the knob at 32 every row does.
TEST_F(NormBwdPlan, WideTileForIdleCtasWithoutDbias) {
  EXPECT_EQ(default_row_tuning().bwd_pipe_wide_idle32, 15);
  for (const int64_t n : {4097, 4104, 4200, 4345, 4352}) {
    for (const DType x : {kBF16, kF16}) {
      const Kernel k = plan({65536, n, x, x});
      EXPECT_EQ(k.vpt, 4) << n << " " << k.text;
      EXPECT_EQ(k.threads, 256) << n << " " << k.text;
      EXPECT_EQ(k.cluster, 1) << n << " " << k.text;
      EXPECT_NE(k.text.find("small_cta"), std::string::npos) << n << " " << k.text;
    }
  }
  for (const int64_t n : {4096, 4353, 4360, 4592, 4608, 5120, 6128, 8192}) {
    const Kernel k = plan({65536, n, kBF16, kBF16});
    EXPECT_EQ(k.vpt, 2) << n << " " << k.text;
  }
  const Kernel nodb = plan({65536, 4360, kBF16, kBF16});
  EXPECT_EQ(nodb.threads, 512) << nodb.text;
  const Kernel f32 = plan({65536, 2100, kF32, kF32});
  EXPECT_EQ(f32.vpt, 2) << f32.text;
  RowTuning off = default_row_tuning();
  off.bwd_pipe_wide_idle32 = 32;
  set_row_tuning(&off);
  const Kernel k = plan({65536, 4104, kBF16, kBF16});
  EXPECT_EQ(k.vpt, 2) << k.text;
  EXPECT_EQ(k.threads, 512) << k.text;
  set_row_tuning(nullptr);
}

// The defaults (bwd_pipe_min_threads = 512, bwd_pipe_ctas_per_sm = 1;
// src/config.cpp cites the sweep): at 2 vectors, teams above a warp share
// 512-thread CTAs, one an SM -- bf16 1024 / 2048 / 4096 eight / four / two
// to a CTA, 8192 its own --, the stages then as many as the knob allows;
// the 4-vector tile's clusters of two CTAs (bf16 16384) one an SM too.
// Teams of up to a warp (LayerNorm bf16 1024 at 4 vectors too) keep their
// 256-thread CTAs, and clusters of more than two their 256-thread small
// CTAs, as many an SM as fit. LayerNorm without dbias takes the 2-vector
// tile to share CTAs; with dbias it keeps its 4-vector small CTAs, as many
// an SM as fit, whatever the knobs. Rows too few to fill every SM with
// shared CTAs keep a CTA a team, uncapped.
TEST_F(NormBwdPlan, SharedCtasAtOneAnSm) {
  EXPECT_EQ(default_row_tuning().bwd_pipe_ctas_per_sm, 1);
  EXPECT_EQ(default_row_tuning().bwd_pipe_min_threads, 512);
  const auto rows = [](int64_t n) { return (int64_t(1) << 28) / n; };
  for (const bool ln : {false, true})
    for (const int64_t n : {1024, 2048, 4096, 8192}) {
      if (ln && n == 1024) continue;  // (below)
      const Kernel k = plan({rows(n), n, kBF16, kBF16, true, false, 0, 0}, ln);
      SCOPED_TRACE(std::to_string(n) + (ln ? " LayerNorm: " : " RMSNorm: ") + k.text);
      EXPECT_EQ(k.kind, "pipe");
      EXPECT_EQ(k.team, int(n / 16));
      EXPECT_EQ(k.threads, 512);
      EXPECT_EQ(k.vpt, 2);
      EXPECT_EQ(k.cluster, 1);
      EXPECT_EQ(k.grid, 132);
      EXPECT_EQ(k.stages, 2);
      EXPECT_EQ(k.text.find("small_cta"), std::string::npos);
    }
  for (const int64_t n : {1024, 2048, 4096}) {  // fp32 likewise
    const Kernel k = plan({rows(n), n, kF32, kF32});
    EXPECT_EQ(k.threads, 512) << k.text;
    EXPECT_EQ(k.grid, 132) << k.text;
  }
  const Kernel sub = plan({rows(256), 256, kBF16, kBF16});  // teams of 16
  EXPECT_EQ(sub.threads, 256) << sub.text;
  EXPECT_EQ(sub.grid, 3 * 132) << sub.text;
  // LayerNorm's 1K, whose 4-vector tile is a warp a row: 2 vectors, teams
  // of 64 sharing the 512-thread CTA, as RMSNorm's (src/config.cpp,
  // choose_norm_bwd_pipe_config).
  const Kernel ln1k = plan({rows(1024), 1024, kBF16, kBF16, true, false, 0, 0}, true);
  EXPECT_EQ(ln1k.vpt, 2) << ln1k.text;
  EXPECT_EQ(ln1k.team, 64) << ln1k.text;
  EXPECT_EQ(ln1k.threads, 512) << ln1k.text;
  EXPECT_EQ(ln1k.grid, 132) << ln1k.text;
  for (const bool ln : {false, true}) {
    const Kernel two = plan({rows(16384), 16384, kBF16, kBF16, true, false, 0, 0}, ln);
    EXPECT_EQ(two.vpt, 4) << two.text;
    EXPECT_EQ(two.threads, 256) << two.text;
    EXPECT_EQ(two.cluster, 2) << two.text;
    EXPECT_EQ(two.grid, 132) << two.text;
  }
  const Kernel four = plan({rows(32768), 32768, kBF16, kBF16});
  EXPECT_EQ(four.vpt, 4) << four.text;
  EXPECT_EQ(four.cluster, 4) << four.text;
  EXPECT_EQ(four.grid, 2 * 132) << four.text;
  const Kernel idle = plan({rows(5120), 5120, kBF16, kBF16, true, false, 0, 1});  // (bwd_pipe_wide_idle_db)
  EXPECT_EQ(idle.vpt, 4) << idle.text;
  EXPECT_EQ(idle.grid, 2 * 132) << idle.text;
  // LayerNorm with dbias: 2 vectors in shared 512-thread CTAs, one an SM,
  // as without dbias, but in the big-CTA kernel (bwd_pipe_big_cta = 1, the
  // default; NormBwdPlan.BigCtas); without it the plan of a CTA a team (but
  // with the experiment's bwd_pipe_share_db, off by default: the shared
  // CTA of the 64-register kernel).
  EXPECT_EQ(default_row_tuning().bwd_pipe_share_db, 0);
  EXPECT_EQ(default_row_tuning().bwd_pipe_big_cta, 1);
  const Call ln4k{65536, 4096, kBF16, kBF16};
  const PipeLayout shared_cta{256, 512, 1, 2, 2, 132};
  expect_pipe(ln4k, true, shared_cta);
  EXPECT_NE(plan(ln4k, true).text.find(" big_cta"), std::string::npos);
  RowTuning no_big = default_row_tuning();
  no_big.bwd_pipe_big_cta = 0;
  set_row_tuning(&no_big);
  RowTuning own = ctas_of_their_own();
  {
    const Kernel k = plan(ln4k, true);
    set_row_tuning(&own);
    EXPECT_EQ(k.text, plan(ln4k, true).text);
    EXPECT_EQ(k.vpt, 4) << k.text;
    EXPECT_EQ(k.threads, 128) << k.text;
    EXPECT_EQ(k.grid, 4 * 132) << k.text;
  }
  no_big.bwd_pipe_share_db = 1;
  set_row_tuning(&no_big);
  expect_pipe(ln4k, true, shared_cta);
  EXPECT_EQ(plan(ln4k, true).text.find("big_cta"), std::string::npos);
  set_row_tuning(nullptr);
  // 1000 rows of 1024: 125 shared CTAs would leave SMs idle, so a 64-thread
  // CTA a row, uncapped; 1056 rows fill the 132 SMs.
  const Kernel few = plan({1000, 1024, kBF16, kBF16});
  EXPECT_EQ(few.threads, 64) << few.text;
  EXPECT_EQ(few.grid, 1000) << few.text;
  const Kernel enough = plan({1056, 1024, kBF16, kBF16});
  EXPECT_EQ(enough.threads, 512) << enough.text;
  EXPECT_EQ(enough.grid, 132) << enough.text;
  // The knobs: up to four stages at one CTA an SM; the cap alone keeps a
  // CTA a team; 1024-thread shared CTAs.
  RowTuning t = default_row_tuning();
  t.bwd_pipe_stages = 4;
  set_row_tuning(&t);
  EXPECT_EQ(plan({65536, 4096, kBF16, kBF16, true, false, 0, 0}).stages, 4);
  t.bwd_pipe_stages = 2;
  t.bwd_pipe_min_threads = 0;
  set_row_tuning(&t);
  const Kernel cap = plan({32768, 8192, kBF16, kBF16, true, false, 0, 0});
  EXPECT_EQ(cap.threads, 512) << cap.text;
  EXPECT_EQ(cap.grid, 132) << cap.text;  // (2 an SM uncapped)
  const Kernel small = plan({65536, 4096, kBF16, kBF16, true, false, 0, 0});
  EXPECT_EQ(small.threads, 256) << small.text;
  EXPECT_EQ(small.grid, 3 * 132) << small.text;  // (uncapped below 512 threads)
  t.bwd_pipe_min_threads = 1024;
  set_row_tuning(&t);
  const Kernel big = plan({65536, 4096, kBF16, kBF16, true, false, 0, 0});
  EXPECT_EQ(big.threads, 1024) << big.text;
  EXPECT_EQ(big.team, 256) << big.text;
  set_row_tuning(&own);
  const Kernel d = plan({65536, 4096, kBF16, kBF16, true, false, 0, 0});
  EXPECT_EQ(d.threads, 256) << d.text;
  EXPECT_EQ(d.grid, 396) << d.text;
}

// The 4-vector tile (bwd_pipe_vpt16 = 4; a CTA a team, as many an SM as
// fit): 16-bit rows in small CTAs of
// 32 elements a thread, two 256-thread CTAs an SM (128 registers); clusters
// of 256-thread CTAs past one; fp32 rows and fp16 LayerNorm (no small-CTA
// kernel) keep 2 vectors, and so do rows whose small CTA is turned off.
// Shifted rows (odd N) share the 512-thread CTAs only in RMSNorm and only
// where the team's 2-vector tile is at least 7/8 full (src/config.cpp cites
// the sweep): 1017 (its tile full) and 2001 (98%) share; 1500 and 3001
// (73%) keep a CTA a team, as does every LayerNorm row of them.
TEST_F(NormBwdPlan, ShiftedRowsShareOnlyFullRmsNormTiles) {
  const auto rows = [](int64_t n) { return (int64_t(1) << 28) / n; };
  for (const bool ln : {false, true})
    for (const int64_t n : {1017, 1500, 2001, 3001}) {
      const Kernel k = plan({rows(n), n, kBF16, kBF16, true, false, 0, 0}, ln);
      SCOPED_TRACE(std::to_string(n) + (ln ? " LayerNorm: " : " RMSNorm: ") + k.text);
      ASSERT_EQ(k.kind, "pipe");
      EXPECT_NE(k.text.find("shifted"), std::string::npos);
      if (ln && n == 1017) continue;  // (its 4-vector tile of a warp: DefaultsTakeFourVectorsByRowLength)
      EXPECT_EQ(k.vpt, 2);
      const bool full = n == 1017 || n == 2001;
      EXPECT_EQ(k.threads, !ln && full ? 512 : k.team);
      EXPECT_EQ(k.text.find("small_cta") == std::string::npos, !ln && full);
    }
  // Aligned rows' teams of the same widths share in both norms.
  for (const bool ln : {false, true}) {
    const Kernel k = plan({rows(2048), 2048, kBF16, kBF16, true, false, 0, 0}, ln);
    EXPECT_EQ(k.threads, 512) << k.text;
  }
}

TEST_F(NormBwdPlan, FourVectorTileInSmallCtas) {
  RowTuning t = ctas_of_their_own();
  t.bwd_pipe_vpt16 = 4;
  t.bwd_pipe_vpt32 = 4;
  t.bwd_pipe_wide_min_cols = t.bwd_pipe_wide_min_cols_ln = 0;
  set_row_tuning(&t);
  for (const bool ln : {false, true}) {
    const Kernel k4 = plan({65536, 4096, kBF16, kF32}, ln);
    EXPECT_EQ(k4.kind, "pipe") << k4.text;
    EXPECT_EQ(k4.vpt, 4) << k4.text;
    EXPECT_EQ(k4.team, 128) << k4.text;
    EXPECT_EQ(k4.cluster, 1) << k4.text;
    EXPECT_NE(k4.text.find("small_cta"), std::string::npos) << k4.text;
    EXPECT_EQ(k4.grid, 4 * 132) << k4.text;  // 512 threads an SM
    const Kernel k8 = plan({32768, 8192, kBF16, kF32}, ln);
    EXPECT_EQ(k8.vpt, 4) << k8.text;
    EXPECT_EQ(k8.threads, 256) << k8.text;
    EXPECT_EQ(k8.grid, 2 * 132) << k8.text;
    const Kernel k16 = plan({16384, 16384, kBF16, kF32}, ln);
    EXPECT_EQ(k16.vpt, 4) << k16.text;
    EXPECT_EQ(k16.threads, 256) << k16.text;
    EXPECT_EQ(k16.cluster, 2) << k16.text;
    const Kernel k64 = plan({4096, 65536, kBF16, kBF16}, ln);
    EXPECT_EQ(k64.vpt, 4) << k64.text;
    EXPECT_EQ(k64.cluster, 8) << k64.text;
    EXPECT_EQ(plan({65536, 4096, kF32, kF32}, ln).vpt, 2);  // fp32: 2 at most
  }
  EXPECT_EQ(plan({65536, 4096, kF16, kF32}, true).vpt, 2);    // fp16 LayerNorm
  EXPECT_EQ(plan({65536, 4096, kF16, kF16}, false).vpt, 4);   // fp16 RMSNorm
  t.bwd_pipe_db_regs = 0;  // LayerNorm's dbias: no small CTA, so 2 vectors
  set_row_tuning(&t);
  EXPECT_EQ(plan({65536, 4096, kBF16, kF32}, true).vpt, 2);
}

// Every row length up to 300K, every dtype, weight, staged-tensor count and
// dbias: a valid configuration (the tiles cover the row, shared memory fits,
// the grid is resident, clusters own whole CTAs), or a refusal only where no
// CTA of 256-1024 threads holds two stages within a cluster of 16.
// Checks every row length up to 300K, every dtype, weight, staged-tensor
// count and dbias under `tune` (16-bit rows built up to max_vpt vectors).
void check_pipe_invariants(const DeviceLimits& lim, const RowTuning& tune, int max_vpt) {
  int64_t served = 0, clustered = 0, wide = 0, fitted = 0, shared = 0;
  for (int xb : {2, 4})
    for (int wb : {0, 2, 4})  // the caller's weight: none, 16-bit, fp32 (held as fp32 alike)
      for (int tensors : {2, 3})
        for (int64_t n = 1; n <= 300000; n += (n < 600 ? 1 : n < 20000 ? 37 : 997)) {
          if (wb == 2 && xb == 4) continue;
          NormBwdPipeProblem prob;
          prob.rows = 100000;
          prob.cols = n;
          prob.x_elem_bytes = xb;
          const bool weight = wb > 0;
          prob.weight = weight;
          prob.tensors = tensors;
          prob.max_vpt = xb == 2 ? max_vpt : 2;
          prob.db = (n & 1) != 0;
          prob.scratch_bytes = 1024;
          RegRowConfig c;
          const int64_t vec = 16 / xb, nvec = (n + vec - 1) / vec;
          const bool ok = choose_norm_bwd_pipe_config(prob, lim, tune, &c);
          const std::string what = "n=" + std::to_string(n) + " xb=" + std::to_string(xb) +
                                   " weight=" + std::to_string(weight) + " tensors=" + std::to_string(tensors);
          if (!ok) {
            int64_t team = 1;
            while (team * 2 < nvec) team *= 2;  // the team at 2 vectors
            const int threads = team <= 32 ? 256 : int(team);
            bool fits = team <= 1024 && norm_bwd_pipe_smem_bytes(prob, 2, threads, 2) <= lim.max_smem_per_block;
            for (int t = 1024; t >= 256; t /= 2)
              fits |= t < team && (nvec + 2 * t - 1) / (2 * t) <= 16 &&
                      norm_bwd_pipe_smem_bytes(prob, 2, t, 2) <= lim.max_smem_per_block;
            ASSERT_FALSE(fits) << what;
            continue;
          }
          ++served;
          clustered += c.cluster > 1;
          const char* why = check_norm_bwd_pipe_config(c, prob, lim);
          ASSERT_EQ(why, nullptr) << why << ": " << what;
          EXPECT_EQ(c.stages, 2) << what;
          if (c.cluster > 1) {
            EXPECT_LT(int64_t(c.cluster - 1) * c.threads * c.vpt, nvec) << what;  // no idle CTA
          }
          if (c.vpt == 4) {
            EXPECT_TRUE(xb == 2 && c.small_cta && c.threads <= 256) << what;
            ++wide;
          }
          // A row of one CTA: the power of two at or above its vectors at
          // the tile, or (bwd_pipe_fit_team) the fewest whole warps.
          if (c.cluster == 1 && c.team > 32) {
            const int64_t need = (nvec + c.vpt - 1) / c.vpt;
            int64_t pow2 = 1;
            while (pow2 < need) pow2 *= 2;
            EXPECT_EQ(c.team, tune.bwd_pipe_fit_team ? (need + 31) / 32 * 32 : pow2) << what;
            // its own CTA, or (bwd_pipe_min_threads; a power of two at 2
            // vectors) one it shares
            const bool shares = tune.bwd_pipe_min_threads > c.team && c.team == pow2 && c.vpt <= 2;
            EXPECT_EQ(c.threads, shares ? std::min(tune.bwd_pipe_min_threads, 1024) : c.team) << what;
            fitted += c.team != pow2;
            shared += shares;
          }
          // bwd_pipe_ctas_per_sm: the 2-vector tile's CTAs of 512 threads
          // or more and the 4-vector tile's clusters of two, that many an
          // SM at most (the launch's own clamp aside).
          if (tune.bwd_pipe_ctas_per_sm > 0 && (c.vpt == 4 ? c.cluster == 2 : c.threads >= 512)) {
            EXPECT_LE(c.grid, std::max<int64_t>(c.cluster, int64_t(tune.bwd_pipe_ctas_per_sm) * lim.num_sms)) << what;
          }
          // bwd_pipe_big_cta (2: every row; 1, the default: LayerNorm's with
          // dbias, none here): exactly the 512-thread 2-vector CTAs, one an
          // SM, their shared memory the stages alone.
          // bwd_pipe_lead_threads: a row's statistics copied by one thread
          // a warp in CTAs of at least that many threads, teams of whole
          // warps or within one.
          EXPECT_EQ(c.lead_stats, tune.bwd_pipe_lead_threads > 0 && c.threads >= tune.bwd_pipe_lead_threads) << what;
          if (c.lead_stats) {
            EXPECT_TRUE(c.team < 32 ? 32 % c.team == 0 : c.team % 32 == 0) << what;
          }
          const bool big = tune.bwd_pipe_big_cta >= 2 && c.vpt == 2 && c.cluster == 1 && c.threads == 512;
          EXPECT_EQ(c.big_cta, big) << what;
          if (big) {
            EXPECT_FALSE(c.small_cta) << what;
            EXPECT_LE(c.grid, lim.num_sms) << what;
            EXPECT_EQ(c.smem_bytes, prob.scratch_bytes + size_t(c.stages) * size_t(tensors * 32 + 8) * 512) << what;
          }
        }
  if (tune.bwd_pipe_fit_team) {
    EXPECT_GT(fitted, 1000) << fitted;
  }
  if (tune.bwd_pipe_min_threads > 0) {
    EXPECT_GT(shared, 1000) << shared;
  }
  EXPECT_GT(served, 12000) << served;  // (of about 14000 problems)
  EXPECT_GT(clustered, 3000) << clustered;
  if (max_vpt == 4) EXPECT_GT(wide, 3000) << wide;
  else EXPECT_EQ(wide, 0);
}

// check_pipe_invariants under `tune`, then with the 4-vector tile asked for
// at every row length and built (16-bit rows).
void check_pipe_invariants_both_tiles(RowTuning tune) {
  check_pipe_invariants(DeviceLimits{}, tune, 2);
  tune.bwd_pipe_vpt16 = 4;
  tune.bwd_pipe_wide_min_cols = tune.bwd_pipe_wide_min_cols_ln = 0;
  check_pipe_invariants(DeviceLimits{}, tune, 4);
}

TEST_F(NormBwdPlan, PipelinedConfigInvariants) {
  check_pipe_invariants(DeviceLimits{}, default_row_tuning(), 2);
}

// The same with the big-CTA kernel for every row (bwd_pipe_big_cta = 2):
// every 512-thread 2-vector CTA of aligned rows is one.
TEST_F(NormBwdPlan, PipelinedConfigInvariantsBigCtas) {
  RowTuning tune = default_row_tuning();
  tune.bwd_pipe_big_cta = 2;
  check_pipe_invariants_both_tiles(tune);
}

// The same with a row's statistics copied by one thread a warp in every
// CTA (bwd_pipe_lead_threads = 1), teams below a warp included (the
// defaults' invariants above check it at 1024, the 1024-thread CTAs alone).
TEST_F(NormBwdPlan, PipelinedConfigInvariantsLeadStats) {
  RowTuning tune = default_row_tuning();
  tune.bwd_pipe_lead_threads = 1;
  check_pipe_invariants_both_tiles(tune);
}

// The same with the 4-vector tile asked for and built (16-bit rows).
TEST_F(NormBwdPlan, PipelinedConfigInvariantsFourVectors) {
  RowTuning tune = default_row_tuning();
  tune.bwd_pipe_vpt16 = 4;
  tune.bwd_pipe_wide_min_cols = tune.bwd_pipe_wide_min_cols_ln = 0;
  check_pipe_invariants(DeviceLimits{}, tune, 4);
}

// A row's statistics copied by one thread a warp (bwd_pipe_lead_threads):
// by default at 1024, the measured threshold, in the 1024-thread CTAs
// alone -- fp32 5120-131072, one CTA or clusters --, never in the bf16
// rows' CTAs of 512 or fewer. The knob changes nothing else of the plan:
// at 0 every plan is the same, less " lead_stats"; at 1 every pipelined
// plan has it (teams of 8 and 16 threads, 4-vector tiles, clusters, big
// CTAs).
TEST_F(NormBwdPlan, LeadStats) {
  EXPECT_EQ(default_row_tuning().bwd_pipe_lead_threads, 1024);
  const auto rows = [](int64_t n) { return (int64_t(1) << 28) / n; };
  RowTuning off = default_row_tuning(), all = default_row_tuning();
  off.bwd_pipe_lead_threads = 0;
  all.bwd_pipe_lead_threads = 1;
  const std::string tag = " lead_stats";
  auto without_tag = [&](std::string s) {
    const size_t at = s.find(tag);
    if (at != std::string::npos) s.erase(at, tag.size());
    return s;
  };
  int led = 0, pipes = 0;
  for (const DType x : {kBF16, kF32})
    for (const int64_t n : {200, 1000, 4096, 5120, 8192, 16384, 65536, 131072, 4101})
      for (const bool ln : {false, true}) {
        const Call call{n == 4101 ? 600 : rows(n), n, x, x, true, false, n == 4101 ? 1 : 0};
        const Kernel k = plan(call, ln);
        SCOPED_TRACE(std::to_string(n) + (x == kF32 ? " fp32" : " bf16") + (ln ? " LayerNorm: " : " RMSNorm: ") +
                     k.text);
        if (k.kind != "pipe") continue;
        ++pipes;
        const bool lead = k.text.find(tag) != std::string::npos;
        EXPECT_EQ(lead, k.threads == 1024);
        if (x == kF32 && n >= 5120 && n <= 131072) {
          EXPECT_TRUE(lead);
        }
        if (x == kBF16) {
          EXPECT_FALSE(lead);
        }
        led += lead;
        set_row_tuning(&off);
        EXPECT_EQ(plan(call, ln).text, without_tag(k.text));
        set_row_tuning(&all);
        const std::string every = plan(call, ln).text;
        EXPECT_NE(every.find(tag), std::string::npos) << every;
        EXPECT_EQ(without_tag(every), without_tag(k.text));
        set_row_tuning(nullptr);  // (the defaults: 1024, as asserted above)
      }
  EXPECT_GE(led, 10);
  EXPECT_GE(pipes, 30);
}

// The big-CTA kernel (bwd_pipe_big_cta). By default (1) LayerNorm's rows
// with dbias: its bf16 1024-8192 and fp32 512-4096 teams share 512-thread
// big CTAs, one an SM (bf16 1024-8192 took 4-vector small CTAs without it),
// every other row the plan it had without the kernel (0). At 2, every
// 512-thread 2-vector CTA -- teams of bf16 1024-4096 sharing one, 8192's
// own, fp32 512-4096 --, at up to bwd_pipe_big_stages stages, its shared
// memory the stages alone. Never: clusters (bf16 16384), teams of a warp or
// less (256), shifted rows (no kShift form: the plan without the kernel),
// rows too few to fill the SMs with shared CTAs (a CTA a team).
TEST_F(NormBwdPlan, BigCtas) {
  EXPECT_EQ(default_row_tuning().bwd_pipe_big_cta, 1);
  EXPECT_EQ(default_row_tuning().bwd_pipe_big_stages, 2);
  const auto rows = [](int64_t n) { return (int64_t(1) << 28) / n; };
  const int64_t kScratch = 1024;  // (ops/rmsnorm_bwd.cuh, kRMSNormBwdScratchBytes)
  RowTuning none = default_row_tuning();
  none.bwd_pipe_big_cta = 0;
  // The defaults: LayerNorm with dbias alone.
  for (const DType x : {kBF16, kF32})
    for (const int64_t n : {512, 1024, 2048, 4096, 8192}) {
      for (const int bias : {0, 1})
        for (const bool ln : {false, true}) {
          const Call call{rows(n), n, x, x, true, false, 0, bias};
          const Kernel k = plan(call, ln);
          SCOPED_TRACE(std::to_string(n) + (x == kF32 ? " fp32" : " bf16") + (ln ? " LayerNorm" : " RMSNorm") +
                       (bias ? " with dbias: " : ": ") + k.text);
          const bool big = ln && bias && (x == kF32 ? n <= 4096 : n >= 1024);
          EXPECT_EQ(k.text.find(" big_cta") != std::string::npos, big);
          if (big) {
            EXPECT_EQ(k.team, int(n / (x == kF32 ? 8 : 16)));
            EXPECT_EQ(k.threads, 512);
            EXPECT_EQ(k.vpt, 2);
            EXPECT_EQ(k.grid, 132);
            EXPECT_EQ(k.stages, 2);
            EXPECT_EQ(k.smem, kScratch + 2 * (2 * 32 + 8) * 512);
          } else {
            set_row_tuning(&none);
            EXPECT_EQ(k.text, plan(call, ln).text);
            set_row_tuning(nullptr);
          }
        }
    }
  // Every row (2), at stages 2 and 4.
  RowTuning t = default_row_tuning();
  t.bwd_pipe_big_cta = 2;
  for (const int stages : {2, 4}) {
    t.bwd_pipe_big_stages = stages;
    set_row_tuning(&t);
    for (const bool ln : {false, true})
      for (const int64_t n : {1024, 2048, 4096, 8192}) {
        const Kernel k = plan({rows(n), n, kBF16, kBF16}, ln);
        SCOPED_TRACE(std::to_string(n) + (ln ? " LayerNorm (dbias): " : " RMSNorm: ") + k.text);
        EXPECT_NE(k.text.find(" big_cta"), std::string::npos);
        EXPECT_EQ(k.team, int(n / 16));
        EXPECT_EQ(k.threads, 512);
        EXPECT_EQ(k.vpt, 2);
        EXPECT_EQ(k.grid, 132);
        EXPECT_EQ(k.stages, stages);
        EXPECT_EQ(k.smem, kScratch + stages * (2 * 32 + 8) * 512);
      }
    for (const int64_t n : {512, 1024, 2048, 4096}) {
      const Kernel k = plan({rows(n), n, kF32, kF32, true, true});  // (dresidual_out: three tensors staged)
      EXPECT_NE(k.text.find(" big_cta"), std::string::npos) << k.text;
      EXPECT_EQ(k.smem, kScratch + stages * (3 * 32 + 8) * 512) << k.text;
    }
    for (const Call& c : {Call{rows(16384), 16384, kBF16, kBF16}, Call{rows(256), 256, kBF16, kBF16},
                          Call{1000, 1024, kBF16, kBF16}, Call{rows(4096), 4096, kBF16, kBF16, true, false, 1}})
      for (const bool ln : {false, true}) {
        const Kernel k = plan(c, ln);
        EXPECT_EQ(k.text.find("big_cta"), std::string::npos) << k.text;
        if (c.x_offset == 1) {  // shifted rows: the plan without the kernel
          set_row_tuning(&none);
          EXPECT_EQ(k.text, plan(c, ln).text);
          set_row_tuning(&t);
        }
      }
  }
  set_row_tuning(nullptr);
}

// Rows of one CTA fitted to the row (bwd_pipe_fit_team), both tiles.
TEST_F(NormBwdPlan, PipelinedConfigInvariantsFittedTeams) {
  RowTuning tune = default_row_tuning();
  tune.bwd_pipe_fit_team = 1;
  check_pipe_invariants_both_tiles(tune);
}

// bwd_pipe_fit_team at model widths: bf16 RMSNorm 5120 (640 vectors at 2)
// in 320 threads, not 512, its stages 5/8 of the bytes, three CTAs an SM
// instead of two; LayerNorm bf16 5120 at 4 vectors in 160 small-CTA
// threads, not 256; fp32 6144 in 768, not 1024; the powers of two and the
// clustered rows unchanged. (Measured with a CTA a team, as many an SM as
// fit: so compared.)
TEST_F(NormBwdPlan, FittedTeamsAtModelWidths) {
  struct Cell {
    int64_t cols;
    DType x;
    bool ln;
    int pow2, fitted;
  };
  for (const Cell& c : {Cell{5120, kBF16, false, 512, 320}, Cell{2560, kBF16, false, 256, 160},
                        Cell{6144, kBF16, false, 512, 384}, Cell{12288, kBF16, false, 1024, 768},
                        Cell{5120, kBF16, true, 256, 160}, Cell{6144, kF32, false, 1024, 768},
                        Cell{3072, kF32, true, 512, 384}, Cell{4096, kBF16, false, 256, 256},
                        Cell{8192, kF32, false, 1024, 1024}, Cell{16384, kBF16, false, 256, 256}}) {
    const Call call{(int64_t(1) << 28) / c.cols, c.cols, c.x, c.x};
    SCOPED_TRACE("N " + std::to_string(c.cols) + (c.ln ? " LayerNorm" : " RMSNorm"));
    RowTuning t = ctas_of_their_own();
    set_row_tuning(&t);
    const Kernel p2 = plan(call, c.ln);
    t.bwd_pipe_fit_team = 1;
    set_row_tuning(&t);
    const Kernel fit = plan(call, c.ln);
    ASSERT_TRUE(p2.kind == "pipe" && fit.kind == "pipe") << p2.text << " / " << fit.text;
    EXPECT_TRUE(p2.team == c.pow2 && p2.threads == c.pow2) << p2.text;
    EXPECT_TRUE(fit.team == c.fitted && fit.threads == c.fitted) << fit.text;
    EXPECT_TRUE(fit.vpt == p2.vpt && fit.cluster == p2.cluster && fit.stages == p2.stages) << fit.text;
    if (c.fitted == c.pow2) {
      EXPECT_EQ(fit.text, p2.text);
    } else {
      EXPECT_LT(fit.smem, p2.smem) << fit.text;
      EXPECT_GE(fit.grid, p2.grid) << "fewer CTAs resident: " << fit.text;
    }
  }
  set_row_tuning(nullptr);
}

// The defaults: 16-bit rows take the 4-vector tile from 16K columns in
// RMSNorm and 1K in LayerNorm (src/config.cpp cites the sweep), the
// 2-vector tile below; fp32 rows and fp16 LayerNorm (no small-CTA kernel)
// always 2. LayerNorm takes 2 where the 4-vector tile is one CTA of a team
// of a warp or more (1K-8K: its teams share 512-thread CTAs; with dbias, the
// big-CTA kernel's), shifted rows of more than a warp.
TEST_F(NormBwdPlan, DefaultsTakeFourVectorsByRowLength) {
  for (const DType t : {kBF16, kF16}) {
    EXPECT_EQ(plan({65536, 4096, t, kF32}).vpt, 2);
    EXPECT_EQ(plan({32768, 16376, t, kF32}).vpt, 2);
    EXPECT_EQ(plan({32768, 16384, t, kF32}).vpt, 4);
    EXPECT_EQ(plan({4096, 65536, t, t}).vpt, 4);
    EXPECT_EQ(plan({2048, 131072, t, t}).vpt, 4);
  }
  for (const int db : {0, 1}) {  // LayerNorm without and with dbias
    auto ln = [&](int64_t rows, int64_t cols, DType x) { return plan({rows, cols, x, kF32, true, false, 0, db}, true); };
    EXPECT_EQ(ln(65536, 1016, kBF16).vpt, 2);
    EXPECT_EQ(ln(65536, 1024, kBF16).vpt, 2);  // (its 4-vector team: a warp)
    EXPECT_EQ(ln(65536, 1017, kBF16).vpt, 4);  // (shifted rows of 1024 columns: a warp's 4 vectors stay)
    EXPECT_EQ(ln(65536, 4096, kBF16).vpt, 2);
    EXPECT_EQ(ln(32768, 8192, kBF16).vpt, 2);
    EXPECT_EQ(ln(16384, 16384, kBF16).vpt, 4);  // (clusters)
    EXPECT_EQ(ln(4096, 65536, kBF16).vpt, 4);
    EXPECT_EQ(ln(65536, 4096, kF16).vpt, 2);  // fp16 LayerNorm
  }
  EXPECT_EQ(plan({65536, 4096, kF32, kF32}, true).vpt, 2);
  EXPECT_EQ(plan({16384, 16384, kF32, kF32}).vpt, 2);
  // Thresholds of 0 (and a CTA a team): every row the 4-vector tile serves.
  RowTuning t = ctas_of_their_own();
  t.bwd_pipe_wide_min_cols = t.bwd_pipe_wide_min_cols_ln = 0;
  set_row_tuning(&t);
  EXPECT_EQ(plan({65536, 4096, kBF16, kF32}).vpt, 4);
  EXPECT_EQ(plan({65536, 512, kBF16, kF32}, true).vpt, 4);
}

// The pipelined kernel's walk of shifted rows (RowClasses, the kernel's own
// functions): every row of a class starts at one offset in its 16-byte
// vector -- the one RowClasses::shifts packs for the class --, P is the
// offset's period (rows P / 2 apart differ), and in a grid of whole classes
// (the plan's) every row is walked exactly once, by a CTA of its class,
// each class walking up to class 0's blocks as the kernel does.
TEST_F(NormBwdPlan, RowClassesWalkEveryRowOnce) {
  for (const int64_t es : {2, 4})
    for (int64_t stride = 1; stride <= 40; ++stride) {
      const int lg = RowClasses::period_log2(stride * es);
      ASSERT_LE(lg, RowClasses::kMaxLog2);
      const int64_t period = int64_t(1) << lg, pitch = stride * es;
      for (int64_t base = 0; base < 16; base += es) {
        // (a base far from 0: the address's low bits alone count)
        const uint64_t addr = 0x7f0000001000ull + uint64_t(base);
        const uint32_t packed = RowClasses::shifts(addr, pitch, int(es), lg);
        for (int64_t r = 0; r < 64; ++r) {
          EXPECT_EQ((base + r * pitch) % 16, (base + (r % period) * pitch) % 16) << es << " " << stride << " " << r;
          EXPECT_EQ(RowClasses::shift_of(packed, int(r % period)), (base + r * pitch) % 16 / es)
              << es << " " << stride << " " << base << " " << r;
        }
        if (lg > 0) {
          EXPECT_NE((base + (period / 2) * pitch) % 16, base % 16) << es << " " << stride;
        }
      }
    }
  for (int lg = 0; lg <= RowClasses::kMaxLog2; ++lg)
    for (const int64_t rows : {0, 1, 2, 5, 7, 8, 9, 31, 100, 1001})
      for (const int teams : {1, 3, 8})
        for (const unsigned per_class : {1u, 2u, 3u, 16u, 33u}) {
          const unsigned grid = per_class << lg;
          std::vector<int> visits(size_t(rows), 0);
          const int64_t bound = RowClasses::blocks(rows, 0, lg, teams);
          const int64_t step = RowClasses::step(grid, lg);
          ASSERT_EQ(step, int64_t(per_class));
          for (unsigned b = 0; b < grid; ++b) {
            const int c = RowClasses::of(b, lg);
            // class 0 has the most blocks
            EXPECT_LE(RowClasses::blocks(rows, c, lg, teams), bound);
            for (int64_t blk = int64_t(b >> lg); blk < bound; blk += step)
              for (int t = 0; t < teams; ++t) {
                const int64_t row = RowClasses::row(c, blk * teams + t, lg);
                if (row >= rows) continue;  // (the kernel's inactive rows)
                EXPECT_EQ(row % (int64_t(1) << lg), c);
                ++visits[size_t(row)];
              }
          }
          EXPECT_EQ(std::count(visits.begin(), visits.end(), 1), rows)
              << "lg=" << lg << " rows=" << rows << " teams=" << teams << " grid=" << grid;
        }
}

// Shifted rows (RowTuning::shifted_rows bit 4, on by default since the
// fifty-first session): rows that start inside a 16-byte vector, every matrix at one offset,
// take the pipelined kernel at the tile of N + VEC - 1 aligned columns
// where that tile is one CTA, its grid a whole number of CTAs for each of
// the P classes of rows (P = 16 / gcd(16, pitch bytes)); rows whose tile
// would be clustered, mixed offsets or dtypes stay element by element.
TEST_F(NormBwdPlan, ShiftedRows) {
  EXPECT_EQ(default_row_tuning().shifted_rows & 16, 16) << "on since the fifty-first session";
  {  // Off: odd rows take the general kernel.
    RowTuning off = default_row_tuning();
    off.shifted_rows &= ~16;
    set_row_tuning(&off);
    EXPECT_EQ(plan({65536, 4101, kBF16, kBF16}).kind, "general");
    EXPECT_EQ(plan({65536, 4101, kF32, kF32}, true).kind, "general");
    set_row_tuning(nullptr);
  }
  // Bit 5 (rows past one CTA, in clusters), on since the fifty-third
  // session; off, those rows go element by element.
  EXPECT_EQ(default_row_tuning().shifted_rows & 32, 32) << "on since the fifty-third session";
  {
    RowTuning off = default_row_tuning();
    off.shifted_rows &= ~32;
    set_row_tuning(&off);
    EXPECT_EQ(plan({65536, 8191, kBF16, kBF16, true, false, 0, 1}).kind, "general");
    EXPECT_EQ(plan({65536, 4101, kF32, kF32, true, true}, true).kind, "general");
    EXPECT_EQ(plan({65536, 4101, kBF16, kBF16}).kind, "pipe") << "one CTA: bit 4 alone";
    set_row_tuning(nullptr);
  }
  struct Cell {
    Call call;
    bool layernorm;
    int classes;  // 0: not shifted (the general kernel)
    int cluster = 1;
  };
  const Cell cells[] = {
      {{65536, 4101, kBF16, kBF16}, false, 8},
      {{65536, 4101, kBF16, kF32}, true, 8},
      {{65536, 4101, kF32, kF32}, false, 4},
      {{65536, 2001, kF32, kF32, true, true}, true, 4},  // dresidual_out
      {{65536, 4098, kBF16, kBF16}, false, 4},
      {{65536, 4100, kBF16, kBF16}, false, 2},
      {{65536, 4102, kF32, kF32}, false, 2},
      {{65536, 63, kBF16, kBF16}, false, 8},             // sub-warp teams
      {{3, 4101, kF16, kF16}, false, 8},                 // fewer rows than classes
      {{65536, 4096, kBF16, kBF16, true, false, 3, -1, 0, true}, false, 1},  // every row 3 elements in
      {{65536, 2000, kF16, kF16, true, false, 1, -1, 3, true}, true, 8},     // and an odd pitch
      {{65536, 4101, kBF16, kBF16, true, false, 1}, false, 0},  // h alone off by one element
      // Past one CTA (the tile of N + VEC - 1 columns needs more), clusters
      // of small CTAs: 4 vectors a thread from 16K columns (RMSNorm bf16),
      // 2 below; the cluster as few CTAs as cover the row.
      {{65536, 4101, kF32, kF32, true, true}, true, 4, 3},  // 1024-thread stages do not fit one CTA
      {{65536, 8191, kBF16, kBF16, true, false, 0, 1}, false, 8, 3},  // with dbias
      {{65536, 8191, kF32, kF32}, false, 4, 5},
      {{65536, 8191, kBF16, kF32}, true, 8, 2},
      {{65536, 16383, kBF16, kBF16}, false, 8, 3},
      {{65536, 32001, kF32, kF32}, true, 4, 16},
      {{5, 12287, kBF16, kBF16, true, false, 0, 1}, false, 8, 4},  // fewer rows than classes
      {{65536, 8191, kF16, kF16, true, false, 0, 1}, true, 0},  // fp16 LayerNorm: no small CTA
      {{65536, 65537, kF32, kF32}, false, 0},  // a cluster of more than 16
  };
  for (const Cell& c : cells) {
    const Kernel k = plan(c.call, c.layernorm);
    SCOPED_TRACE(std::to_string(c.call.cols) + (c.layernorm ? " LayerNorm: " : " RMSNorm: ") + k.text);
    if (c.classes == 0) {
      EXPECT_EQ(k.kind, "general");
      continue;
    }
    ASSERT_EQ(k.kind, "pipe");
    EXPECT_NE(k.text.find(" shifted classes=" + std::to_string(c.classes)), std::string::npos);
    EXPECT_EQ(k.cluster, c.cluster);
    EXPECT_EQ(k.grid % (c.classes * c.cluster), 0);
    // The tile of the N + VEC - 1 columns from the first element's vector,
    // rows of that length aligned (their pitch padded to whole vectors).
    const int vec = c.call.x == kF32 ? 4 : 8;
    Call aligned = c.call;
    aligned.cols = c.call.cols + vec - 1;
    aligned.pad = (vec - aligned.cols % vec) % vec;
    aligned.x_offset = 0;
    aligned.offset_all = false;
    // (without the big-CTA kernel, which has no shifted form)
    RowTuning no_big = default_row_tuning();
    no_big.bwd_pipe_big_cta = 0;
    set_row_tuning(&no_big);
    const Kernel a = plan(aligned, c.layernorm);
    set_row_tuning(nullptr);
    EXPECT_EQ(a.kind, "pipe") << a.text;
    if (c.cluster > 1) {
      // Small CTAs (256 threads, the small-CTA kernel) over a cluster, the
      // fewest that cover the N + VEC - 1 columns; as many clusters as are
      // resident at that tile, shared out by class, or a cluster a row of
      // each class where the rows are fewer.
      EXPECT_GT(a.cluster, 1) << "one CTA holds the aligned row: " << a.text;
      EXPECT_EQ(k.threads, 256);
      EXPECT_EQ(k.team, 256);
      EXPECT_NE(k.text.find("small_cta"), std::string::npos);
      const int64_t nvec = (c.call.cols + 2 * vec - 2) / vec;
      EXPECT_EQ(k.cluster, (nvec + 256 * k.vpt - 1) / (256 * k.vpt));
      const int64_t clusters = k.grid / k.cluster, class_rows = (c.call.rows + c.classes - 1) / c.classes;
      if (c.call.rows >= clusters) {
        // (kNormBwdPipeSmallCtaThreadsPerSm / kNormBwdPipeWideThreadsPerSm
        // threads an SM, or what the shared memory holds.)
        // (and the defaults' one an SM for 4-vector clusters of two, but
        // for LayerNorm with dbias)
        const bool db = c.call.bias > 0 || (c.call.bias < 0 && c.layernorm);
        int64_t per_sm = std::min<int64_t>(k.vpt == 4 ? 2 : 3, 233472 / (k.smem + 1024));
        const int cap = default_row_tuning().bwd_pipe_ctas_per_sm;
        if (cap > 0 && !(c.layernorm && db) && k.vpt == 4 && k.cluster == 2) per_sm = std::min<int64_t>(per_sm, cap);
        EXPECT_EQ(clusters, std::max<int64_t>(1, per_sm * 132 / k.cluster / c.classes) * c.classes);
      } else {
        EXPECT_EQ(clusters, class_rows * c.classes);
      }
      continue;
    }
    EXPECT_EQ(k.team, a.team) << a.text;
    EXPECT_EQ(k.threads, a.threads) << a.text;
    EXPECT_EQ(k.vpt, a.vpt) << a.text;
    EXPECT_EQ(k.stages, a.stages) << a.text;
    EXPECT_EQ(k.smem, a.smem) << a.text;
    EXPECT_EQ(a.text.find("shifted"), std::string::npos) << a.text;
    // The resident CTAs shared out by class (the aligned grid rounded down
    // to whole classes), or a CTA a row block of each class where the rows
    // are fewer.
    const int64_t teams = k.threads / k.team;
    const int64_t class_blocks = ((c.call.rows + c.classes - 1) / c.classes + teams - 1) / teams;
    if (a.grid < (c.call.rows + teams - 1) / teams) {
      EXPECT_EQ(k.grid, a.grid / c.classes * c.classes) << a.text;
    } else {
      EXPECT_EQ(k.grid, class_blocks * c.classes) << a.text;
    }
  }
  // The workspace holds a partial row for each launched CTA.
  RMSNormBwdArgs a = args_of({3, 4101, kF16, kF16}, false);
  EXPECT_GE(rmsnorm_bwd_workspace_bytes(a, DeviceLimits{}), size_t(8) * 4101 * 8);
  // Odd rows of every length up to 20K: the shifted pipelined kernel, in one
  // CTA wherever the aligned tile of N + VEC - 1 columns is one CTA, else in
  // a cluster of small CTAs.
  for (const DType x : {kBF16, kF32})
    for (int64_t n = 1; n <= 20000; n += (n < 300 ? 2 : 74)) {
      const Kernel k = plan({65536, n, x, x});
      const int vec = x == kF32 ? 4 : 8;
      Call aligned{65536, n + vec - 1, x, x};
      aligned.pad = (vec - aligned.cols % vec) % vec;
      const Kernel a = plan(aligned);
      const bool one_cta = a.kind == "pipe" && a.cluster == 1;
      ASSERT_EQ(k.kind, "pipe") << n << " " << k.text << " / " << a.text;
      EXPECT_NE(k.text.find("shifted"), std::string::npos) << n << " " << k.text;
      EXPECT_EQ(k.cluster == 1, one_cta) << n << " " << k.text << " / " << a.text;
      EXPECT_GE(int64_t(k.team) * k.vpt * vec * k.cluster, n + vec - 1) << n;
      if (!one_cta) {
        EXPECT_EQ(k.threads, 256) << n << " " << k.text;
      }
    }
}

// The grid kernel (src/config.cpp: aligned rows of one dtype, fp32 past
// 128K columns, but 16-bit rows a 16-CTA register cluster keeps): one 512-thread CTA an SM of
// at most 16 elements a thread (16-bit: 1024 vectors, fp32: 2048), as few
// ranks as cover the row with tiles spread evenly, as many row groups as
// the SMs hold (never more than the rows), 6 stages of 32 KB for 16-bit
// rows, two rows a step and a lag of 1 step (2 rows in flight past it),
// and for fp32 rows the 3 of 64 KB that fit, a row a step and a lag of 1.
TEST_F(NormBwdPlan, GridKernelCells) {
  struct Cell {
    Call call;
    bool ln;
    int ranks, groups, tile_vecs, stages, lag, rows;
  };
  const Cell cells[] = {
      {{256, 1 << 20, kBF16, kBF16}, false, 128, 1, 1024, 6, 1, 2},
      {{256, 1 << 20, kBF16, kF32}, true, 128, 1, 1024, 6, 1, 2},
      {{256, 1 << 20, kF32, kF32}, false, 128, 1, 2048, 3, 1, 1},
      {{512, 524288, kBF16, kBF16}, false, 64, 2, 1024, 6, 1, 2},
      {{512, 524288, kBF16, kF32}, true, 64, 2, 1024, 6, 1, 2},
      {{1024, 262144, kF32, kF32}, true, 32, 4, 2048, 3, 1, 1},
      {{512, 524288, kF32, kF32}, false, 64, 2, 2048, 3, 1, 1},
      {{2048, 131080, kF32, kF32}, false, 17, 7, 1928, 3, 1, 1},  // 32770 vectors over 17 ranks
      {{3, 270336, kF16, kF16}, false, 33, 3, 1024, 6, 1, 2},     // fewer rows than groups
      {{8, 1 << 20, kBF16, kBF16, true, true}, false, 128, 1, 1024, 6, 1, 2},  // dresidual_out (read from global)
      {{8, 1 << 20, kBF16, kBF16, false}, false, 128, 1, 1024, 6, 1, 2},       // no weight
  };
  for (const Cell& c : cells) {
    const Kernel k = plan(c.call, c.ln);
    SCOPED_TRACE(k.text);
    // (kind, ranks, groups, tile vectors, stages, lag, rows a step, shared memory)
    EXPECT_EQ(std::make_tuple(k.kind, k.ranks, k.groups, k.tile_vecs, k.stages, k.lag, k.rows, k.smem),
              std::make_tuple(std::string("grid"), c.ranks, c.groups, c.tile_vecs, c.stages, c.lag, c.rows,
                              int64_t(kNormGridHeader) + int64_t(c.stages) * c.tile_vecs * 32));
  }
  // Not served: misaligned rows, more ranks than SMs (bf16 2M; 1M on a
  // 114-SM H100 PCIe), rows up to 128K, mixed dtypes.
  EXPECT_EQ(plan({8, 1 << 20, kBF16, kBF16, true, false, 1}).kind, "split");
  EXPECT_EQ(plan({8, 1 << 21, kBF16, kBF16}).kind, "split");
  {
    DeviceLimits pcie;
    pcie.num_sms = 114;
    EXPECT_EQ(norm_bwd_plan_description(args_of({8, 1 << 20, kBF16, kBF16}, false), false, pcie).rfind("split", 0), 0u);
    EXPECT_EQ(norm_bwd_plan_description(args_of({8, 786432, kBF16, kBF16}, false), false, pcie).rfind("grid", 0), 0u);
  }
  EXPECT_EQ(plan({1024, 131072, kBF16, kBF16}).kind, "pipe");
  EXPECT_EQ(plan({1024, 131072, kF32, kF32}).kind, "pipe");
  EXPECT_EQ(plan({1024, 131076, kF32, kF32}).kind, "grid");
  EXPECT_EQ(plan({1024, 131080, kBF16, kBF16}).kind, "grid");
  EXPECT_EQ(plan({1024, 163840, kBF16, kBF16}).kind, "grid");  // pipe: a cluster of 10
  EXPECT_EQ(plan({1024, 196608, kBF16, kBF16}, true).kind, "grid");
  // 16-bit rows in a full 16-CTA register cluster: the grid too by default
  // (bwd_grid_keep_cluster16 = 0) ...
  EXPECT_EQ(plan({1024, 262144, kBF16, kBF16}).kind, "grid");  // with dweight
  EXPECT_EQ(plan({1024, 262144, kBF16, kBF16, false}).kind, "grid");  // without a weight
  EXPECT_EQ(plan({1024, 262144, kBF16, kBF16, true, false, 0, 1}).kind, "grid");
  EXPECT_EQ(plan({1024, 262144, kBF16, kF32}, true).kind, "grid");  // LayerNorm: dbias
  EXPECT_EQ(plan({1024, 262144, kBF16, kBF16}, true).kind, "grid");
  EXPECT_EQ(plan({1024, 262144, kF32, kF32}).kind, "grid");
  EXPECT_EQ(plan({1024, 262152, kBF16, kBF16}).kind, "grid");
  {
    // ... and the knob keeps such clusters where no dbias is asked for.
    RowTuning t = default_row_tuning();
    t.bwd_grid_keep_cluster16 = 16;
    set_row_tuning(&t);
    EXPECT_EQ(plan({1024, 262144, kBF16, kBF16}).kind, "pipe");  // with dweight
    EXPECT_EQ(plan({1024, 262144, kBF16, kBF16, false}).kind, "pipe");  // without a weight
    EXPECT_EQ(plan({1024, 262144, kBF16, kBF16, true, false, 0, 1}).kind, "grid");  // dbias
    EXPECT_EQ(plan({1024, 262144, kF32, kF32}).kind, "grid");  // fp32: no such rule
    t.bwd_grid_keep_cluster16 = 10;  // 160K's cluster of 10 kept too
    set_row_tuning(&t);
    EXPECT_EQ(plan({1024, 163840, kBF16, kBF16}).kind, "pipe");
    EXPECT_EQ(plan({1024, 131080, kBF16, kBF16}).kind, "grid");  // a cluster of 9
    set_row_tuning(nullptr);
  }
  {
    RMSNormBwdArgs a = args_of({8, 1 << 20, kBF16, kBF16}, false);
    a.dy.dtype = kF32;
    EXPECT_EQ(norm_bwd_plan_description(a, false, DeviceLimits{}).rfind("split", 0), 0u);
  }
  // The knobs: the dtype bits, the threshold, the stages and the lag.
  for (int bits : {0, 1, 2, 3}) {
    RowTuning t = default_row_tuning();
    t.bwd_grid = bits;
    set_row_tuning(&t);
    EXPECT_EQ(plan({256, 1 << 20, kBF16, kBF16}).kind, (bits & 1) ? "grid" : "split") << bits;
    EXPECT_EQ(plan({256, 1 << 20, kF32, kF32}).kind, (bits & 2) ? "grid" : "split") << bits;
  }
  RowTuning t = default_row_tuning();
  t.bwd_grid_min_cols16 = t.bwd_grid_min_cols32 = 1;
  set_row_tuning(&t);
  Kernel k = plan({4096, 4096, kBF16, kBF16});
  EXPECT_EQ(k.kind, "grid") << k.text;
  EXPECT_EQ(k.ranks, 1) << k.text;
  EXPECT_EQ(k.groups, 132) << k.text;
  EXPECT_EQ(k.tile_vecs, 512) << k.text;
  // A 1-element row is not 16-byte aligned past row 0: no grid kernel (the
  // shifted pipelined rows, bit 4).
  k = plan({7, 1, kF32, kF32});
  EXPECT_EQ(k.kind, "pipe") << k.text;
  EXPECT_NE(k.text.find(" shifted classes=4"), std::string::npos) << k.text;
  t.bwd_grid_stages16 = 2;
  t.bwd_grid_lag = 5;
  set_row_tuning(&t);
  k = plan({256, 1 << 20, kBF16, kBF16});
  EXPECT_EQ(k.stages, 2) << k.text;
  EXPECT_EQ(k.lag, 1) << k.text;
  EXPECT_EQ(k.rows, 1) << k.text;  // 2 stages hold no two steps of 2 rows
  t.bwd_grid_stages16 = 8;
  set_row_tuning(&t);
  k = plan({256, 1 << 20, kBF16, kBF16});
  EXPECT_EQ(k.stages, 6) << k.text;  // 6 of 32 KB fit after the header
  EXPECT_EQ(k.rows, 2) << k.text;
  EXPECT_EQ(k.lag, 1) << k.text;  // (lag + 1) 2-row steps and a row in flight in 6 stages
  t.bwd_grid_stages16 = 5;
  set_row_tuning(&t);
  k = plan({256, 1 << 20, kBF16, kBF16});
  EXPECT_EQ(std::make_tuple(k.stages, k.rows, k.lag), std::make_tuple(5, 2, 1)) << k.text;
  t.bwd_grid_stages16 = 4;  // no room for 2 steps of 2 rows and one in flight: a row a step
  set_row_tuning(&t);
  k = plan({256, 1 << 20, kBF16, kBF16});
  EXPECT_EQ(std::make_tuple(k.stages, k.rows, k.lag), std::make_tuple(4, 1, 2)) << k.text;
  t.bwd_grid_stages16 = 8;
  t.bwd_grid_rows16 = 1;
  set_row_tuning(&t);
  k = plan({256, 1 << 20, kBF16, kBF16});
  EXPECT_EQ(std::make_tuple(k.stages, k.rows, k.lag), std::make_tuple(6, 1, 4)) << k.text;
  t.bwd_grid_rows16 = 7;  // clamped to 2
  set_row_tuning(&t);
  EXPECT_EQ(plan({256, 1 << 20, kBF16, kBF16}).rows, 2);
  EXPECT_EQ(plan({256, 1 << 20, kF32, kF32}).rows, 1);  // fp32: a row a step
}

// Every configuration the grid chooser returns passes its checks, covers
// the row with nonempty tiles, and sizes the exchange logs; it declines
// exactly the rows that need more ranks than there are SMs.
TEST_F(NormBwdPlan, GridConfigInvariants) {
  const DeviceLimits lim;
  RowTuning tunes[4] = {default_row_tuning(), default_row_tuning(), default_row_tuning(), default_row_tuning()};
  for (RowTuning& t : tunes) t.bwd_grid_min_cols16 = t.bwd_grid_min_cols32 = 1;
  tunes[1].bwd_grid_stages16 = tunes[1].bwd_grid_stages32 = 2;
  tunes[2].bwd_grid_lag = 7;
  tunes[2].bwd_grid_stages16 = tunes[2].bwd_grid_stages32 = 8;
  tunes[3].bwd_grid_lag = 0;
  tunes[3].bwd_grid_rows16 = 1;
  const int64_t cols_list[] = {1, 7, 8, 9, 1000, 8191, 8192, 8193, 65537, 131073, 262147, 500009,
                               1 << 20, 1081344, 1081345, 2162688, 2162689, 3 << 20};
  int served = 0;
  for (const RowTuning& t : tunes)
    for (const int eb : {2, 4})
      for (const bool centre : {false, true})
        for (const int64_t cols : cols_list)
          for (const int64_t rows : {int64_t(1), int64_t(3), int64_t(7), int64_t(200), int64_t(65536)}) {
            NormGridConfig c;
            const bool ok = choose_norm_bwd_grid_config(rows, cols, eb, centre, lim, t, &c);
            const int64_t vec = 16 / eb, nvec = (cols + vec - 1) / vec;
            const int64_t ranks = (nvec + int64_t(kNormGridCtaThreads) * kNormGridCtaElems / vec - 1) /
                                  (int64_t(kNormGridCtaThreads) * kNormGridCtaElems / vec);
            SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " eb " +
                         std::to_string(eb));
            EXPECT_EQ(ok, ranks <= lim.num_sms);
            if (!ok) continue;
            ++served;
            const char* why = check_norm_bwd_grid_config(c, rows, cols, eb, lim, centre);
            EXPECT_EQ(why, nullptr) << why;
            EXPECT_EQ(c.ranks, ranks);
            EXPECT_LE(c.groups, rows);
            EXPECT_EQ(c.exchange_bytes % 16, 0u);
            const int64_t group_rows = (rows + c.groups - 1) / c.groups;
            EXPECT_EQ(c.steps, (group_rows + c.rows - 1) / c.rows);
            const size_t log_bytes = size_t(c.groups) * size_t(c.steps) * c.ranks * c.rows * (centre ? 16 : 8);
            EXPECT_GE(c.exchange_bytes, log_bytes);
            EXPECT_LT(c.exchange_bytes, log_bytes + 16);
            // Two rows a step where the stages hold them and the step's
            // exchange words stay within a word a thread (LayerNorm's 132
            // ranks at 1081344 columns: 528 words, a row a step).
            const bool narrow = 2 * ranks * (centre ? 2 : 1) <= kNormBwdGridMaxStepWords;
            EXPECT_EQ(c.rows, eb == 2 && c.stages >= 5 && t.bwd_grid_rows16 >= 2 && narrow ? 2 : 1);
            EXPECT_LE(int64_t(c.ranks) * c.rows * (centre ? 2 : 1), kNormBwdGridMaxStepWords);
            EXPECT_LE((c.lag + 1) * c.rows, c.stages);
          }
  EXPECT_GT(served, 100);
  // The tuning's own switch and threshold, and rows past the 32-bit tags.
  NormGridConfig c;
  RowTuning off = default_row_tuning();
  off.bwd_grid = 0;
  EXPECT_FALSE(choose_norm_bwd_grid_config(256, 1 << 20, 2, false, lim, off, &c));
  EXPECT_FALSE(choose_norm_bwd_grid_config(256, 131072, 4, false, lim, default_row_tuning(), &c));
  EXPECT_TRUE(choose_norm_bwd_grid_config(256, 131073, 4, false, lim, default_row_tuning(), &c));
  EXPECT_FALSE(choose_norm_bwd_grid_config(256, 131072, 2, false, lim, default_row_tuning(), &c));
  EXPECT_TRUE(choose_norm_bwd_grid_config(256, 131073, 2, false, lim, default_row_tuning(), &c));
  EXPECT_FALSE(choose_norm_bwd_grid_config(int64_t(1) << 31, 131073, 2, false, lim, default_row_tuning(), &c));
  // A device of more SMs than the header's collected words cover: 145 ranks
  // of 8192 bf16 columns are refused, 144 served.
  DeviceLimits big = lim;
  big.num_sms = 160;
  EXPECT_FALSE(choose_norm_bwd_grid_config(1, int64_t(145) * 8192, 2, true, big, default_row_tuning(), &c));
  ASSERT_TRUE(choose_norm_bwd_grid_config(1, int64_t(144) * 8192, 2, true, big, default_row_tuning(), &c));
  EXPECT_EQ(c.ranks, kNormGridMaxRanks);
  EXPECT_EQ(check_norm_bwd_grid_config(c, 1, int64_t(144) * 8192, 2, big, true), nullptr);
  c.ranks = c.ranks + 1;
  c.grid = c.ranks;
  const char* why = check_norm_bwd_grid_config(c, 1, int64_t(145) * 8192, 2, big, true);
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::strstr(why, "collected words"), nullptr) << why;
}

// The workspace covers the grid kernel (its logs, then a partial row a
// group) and the plan it falls back to, with and without weight gradients
// (the logs are needed for dx alone).
TEST_F(NormBwdPlan, GridWorkspaceCoversItsFallback) {
  for (const bool ln : {false, true})
    for (const bool grads : {false, true}) {
      RMSNormBwdArgs a = args_of({256, 1 << 20, kBF16, kBF16}, ln);
      if (!grads) a.dweight = {}, a.dbias = {};
      const DeviceLimits lim;
      NormGridConfig g;
      ASSERT_TRUE(choose_norm_bwd_grid_config(256, 1 << 20, 2, ln, lim, default_row_tuning(), &g));
      const size_t with = ln ? layernorm_bwd_workspace_bytes(LayerNormBwdArgs{a}, lim) : rmsnorm_bwd_workspace_bytes(a, lim);
      no_grid();
      const size_t without = ln ? layernorm_bwd_workspace_bytes(LayerNormBwdArgs{a}, lim) : rmsnorm_bwd_workspace_bytes(a, lim);
      set_row_tuning(nullptr);
      EXPECT_GE(with, without);
      EXPECT_GE(with, g.exchange_bytes + (grads ? size_t(g.groups) << 23 : 0));
    }
}

}  // namespace
}  // namespace quack
