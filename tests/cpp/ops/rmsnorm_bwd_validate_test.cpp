// Host tests of RMSNorm backward: argument validation (quack::can_implement
// for RMSNormBwdArgs; rmsnorm_bwd validates first, so a rejected call never
// reaches the GPU), the register-resident configuration for every N, and the
// workspace the plan asks for. can_implement never dereferences a pointer,
// so plain addresses stand in for device memory.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"

namespace quack {
namespace {

constexpr int64_t kRows = 4;
constexpr int64_t kCols = 1000;

void* addr(int i, uintptr_t bytes = 0) { return reinterpret_cast<void*>((uintptr_t(i + 1) << 24) + bytes); }

RMSNormBwdArgs args() {
  RMSNormBwdArgs a;
  a.rows = kRows;
  a.cols = kCols;
  a.h = {addr(0), DType::kBFloat16, kCols};
  a.dy = {addr(1), DType::kBFloat16, kCols};
  a.weight = {addr(2), DType::kFloat32};
  a.rstd = static_cast<const float*>(addr(3));
  a.dx = {addr(4), DType::kBFloat16, kCols};
  a.dweight = {addr(5), DType::kFloat32};
  a.dbias = {addr(6), DType::kBFloat16};
  a.workspace = addr(64);  // (1 GB of it: past every other operand's address)
  a.workspace_bytes = size_t(1) << 30;
  return a;
}

void expect_invalid(const RMSNormBwdArgs& a, const std::string& arg, Code code = Code::kInvalidArgument) {
  const Status st = can_implement(a);
  EXPECT_EQ(st.code, code) << "expected " << arg << " to be rejected";
  EXPECT_EQ(st.message.rfind(arg + ":", 0), 0u) << "message should name '" << arg << "': " << st.message;
  const Status l = rmsnorm_bwd(a, nullptr);
  EXPECT_EQ(l.code, code);
  EXPECT_EQ(l.message, st.message);
  if (arg != "workspace") {  // the size query comes before the workspace exists
    size_t bytes = 123;
    const Status w = rmsnorm_bwd_workspace_bytes(a, &bytes);
    EXPECT_EQ(w.message, st.message);
    EXPECT_EQ(bytes, 0u);
  }
}

TEST(RMSNormBwdValidate, ValidArgumentsPass) {
  EXPECT_TRUE(can_implement(args()).ok());
  RMSNormBwdArgs a = args();
  a.weight = {};
  a.dweight = {};
  a.dbias = {};
  a.workspace = nullptr;  // no weight gradients: no workspace
  EXPECT_TRUE(can_implement(a).ok());
}

TEST(RMSNormBwdValidate, ShapeErrorsNameRowsOrCols) {
  RMSNormBwdArgs a = args();
  a.rows = -2;
  expect_invalid(a, "rows");
  a = args();
  a.cols = 0;
  expect_invalid(a, "cols");
  a.cols = kRowMaxCols + 1;
  a.h.row_stride = a.dy.row_stride = a.dx.row_stride = a.cols;
  expect_invalid(a, "cols", Code::kUnsupported);
}

// The required matrices, by name: a null pointer and overlapping rows.
MatrixRef* required_input(RMSNormBwdArgs& a, const std::string& name) { return name == "h" ? &a.h : &a.dy; }

TEST(RMSNormBwdValidate, OperandErrorsNameTheOperand) {
  for (const char* name : {"h", "dy"}) {
    RMSNormBwdArgs a = args();
    required_input(a, name)->ptr = nullptr;
    expect_invalid(a, name);
    a = args();
    required_input(a, name)->row_stride = kCols - 1;
    expect_invalid(a, name);
  }
  {
    RMSNormBwdArgs a = args();
    a.dx.ptr = nullptr;
    expect_invalid(a, "dx");
    a = args();
    a.dx.row_stride = kCols - 1;
    expect_invalid(a, "dx");
  }
  RMSNormBwdArgs a = args();
  a.h.ptr = addr(0, 1);  // not aligned to a bf16 element
  expect_invalid(a, "h");
  a = args();
  a.dresidual_out = {addr(8), DType::kFloat16, kCols - 5};
  expect_invalid(a, "dresidual_out");
  a = args();
  a.dresidual = {addr(8), DType(7), kCols};
  expect_invalid(a, "dresidual");
  a = args();
  a.weight.ptr = addr(2, 2);  // not aligned to an fp32 element
  expect_invalid(a, "weight");
  a = args();
  a.dweight.dtype = DType(9);
  expect_invalid(a, "dweight");
  a = args();
  a.dbias.ptr = addr(6, 1);
  expect_invalid(a, "dbias");
}

// dx and dresidual may be h's, dy's or dresidual_out's very matrix (the
// same pointer, dtype and row stride; allowed as before) and may overlap
// nothing else; the weight gradients and the workspace overlap nothing. The
// error names the output.
TEST(RMSNormBwdValidate, OutputsInPlaceOrDisjoint) {
  RMSNormBwdArgs a = args();
  char* dy = static_cast<char*>(const_cast<void*>(a.dy.ptr));
  a.dx = {dy, a.dy.dtype, a.dy.row_stride};  // in place of dy
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
  a.dx.ptr = dy + 2;  // one element on
  expect_invalid(a, "dx");
  a = args();
  a.dresidual_out = {addr(8), DType::kFloat32, kCols};
  a.dresidual = {addr(8), DType::kFloat32, kCols};  // the residual's gradient accumulated in place
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
  a.dresidual = {addr(8), DType::kBFloat16, kCols};  // same pointer, another dtype
  expect_invalid(a, "dresidual");
  a = args();
  a.dweight = {static_cast<char*>(const_cast<void*>(a.weight.ptr)) + 64, DType::kFloat32};  // over the weight
  expect_invalid(a, "dweight");
  a = args();
  a.dbias = {a.dweight.ptr, DType::kBFloat16};  // two outputs
  expect_invalid(a, "dbias");
  a = args();
  a.dx = {const_cast<float*>(a.rstd), DType::kBFloat16, kCols};  // over rstd
  expect_invalid(a, "dx");
  a = args();
  a.workspace = static_cast<char*>(a.dx.ptr) + 4096;  // inside dx
  a.workspace_bytes = size_t(1) << 20;
  const Status st = can_implement(a);
  EXPECT_EQ(st.code, Code::kInvalidArgument);
  EXPECT_EQ(st.message.rfind("workspace:", 0), 0u) << st.message;
  a = args();
  a.rows = 0;  // nothing addressed
  a.dx.ptr = dy + 2;
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
}

TEST(RMSNormBwdValidate, RstdWeightGradientsAndWorkspace) {
  RMSNormBwdArgs a = args();
  a.rstd = nullptr;
  expect_invalid(a, "rstd");
  a = args();
  a.rstd = static_cast<const float*>(addr(3, 2));
  expect_invalid(a, "rstd");
  a = args();
  a.weight = {};
  expect_invalid(a, "dweight");  // a weight gradient without a weight
  a = args();
  a.workspace = nullptr;
  expect_invalid(a, "workspace");
  size_t bytes = 1;
  // The size query does not need the workspace (here it fails further on,
  // without a GPU, at the device query -- never on the workspace).
  const Status q = rmsnorm_bwd_workspace_bytes(a, &bytes);
  EXPECT_EQ(q.message.rfind("workspace", 0), std::string::npos) << q.message;
  a = args();
  a.workspace = addr(7, 8);
  expect_invalid(a, "workspace");
  a = args();
  a.weight_offset = std::numeric_limits<float>::infinity();
  expect_invalid(a, "weight_offset");
  // rows = 0: valid without rstd or workspace (the gradients are zeros).
  a = args();
  a.rows = 0;
  a.rstd = nullptr;
  a.workspace = nullptr;
  EXPECT_TRUE(can_implement(a).ok());
  EXPECT_EQ(rmsnorm_bwd_workspace_bytes(a, DeviceLimits{}), 0u);
}

TEST(RMSNormBwdWorkspace, OnePartialRowPerClusterOrGeneralCta) {
  const DeviceLimits lim;
  RMSNormBwdArgs a = args();
  for (int64_t n : {int64_t(1), int64_t(256), int64_t(1000), int64_t(4096), int64_t(65536), int64_t(262144)}) {
    a.rows = (int64_t(1) << 24) / n + 1;
    a.cols = a.h.row_stride = a.dy.row_stride = a.dx.row_stride = n;
    const size_t bytes = rmsnorm_bwd_workspace_bytes(a, lim);
    EXPECT_GT(bytes, 0u);
    EXPECT_EQ(bytes % (size_t(n) * 8), 0u) << n;
    EXPECT_LE(bytes / (size_t(n) * 8), size_t(lim.num_sms) * 32) << n;
  }
  // Without weight gradients: nothing, but for rows the grid kernel serves
  // (past 128K), whose exchange rings the workspace holds -- also where a
  // 16-CTA register cluster runs instead (16-bit 256K without dbias): the
  // size follows the grid's configuration, not the options.
  a.dweight = {};
  a.dbias = {};
  a.cols = a.h.row_stride = a.dy.row_stride = a.dx.row_stride = 524288;
  NormGridConfig g;
  ASSERT_TRUE(choose_norm_bwd_grid_config(a.rows, a.cols, 2, false, lim, default_row_tuning(), &g));
  EXPECT_EQ(rmsnorm_bwd_workspace_bytes(a, lim), g.exchange_bytes);
  for (const int64_t n : {int64_t(131080), int64_t(262144)}) {
    a.cols = a.h.row_stride = a.dy.row_stride = a.dx.row_stride = n;
    ASSERT_TRUE(choose_norm_bwd_grid_config(a.rows, a.cols, 2, false, lim, default_row_tuning(), &g));
    EXPECT_EQ(rmsnorm_bwd_workspace_bytes(a, lim), g.exchange_bytes) << n;
  }
  a.cols = a.h.row_stride = a.dy.row_stride = a.dx.row_stride = 131072;
  EXPECT_EQ(rmsnorm_bwd_workspace_bytes(a, lim), 0u);  // a cluster of 8 holds the row: nothing exchanged
  a.cols = a.h.row_stride = a.dy.row_stride = a.dx.row_stride = 65536;
  EXPECT_EQ(rmsnorm_bwd_workspace_bytes(a, lim), 0u);
  // Misaligned rows take the general kernel: at most 256 MB of partial rows.
  a = args();
  a.cols = a.h.row_stride = a.dy.row_stride = a.dx.row_stride = int64_t(1) << 22;
  a.h.ptr = addr(0, 2);
  a.rows = 1000;
  EXPECT_LE(rmsnorm_bwd_workspace_bytes(a, lim), size_t(256) << 20);
}

// Every N up to 2^19 (beyond the register kernel's reach: refused), for
// 16-bit and fp32 rows, at several row counts.
TEST(RMSNormBwdConfig, ValidForEveryNOrRefusedBeyondTheTiles) {
  const DeviceLimits lim;
  int failures = 0;
  for (int es : {2, 4}) {
    const int vec = 16 / es, max_vpt = 16 / vec;
    const int64_t capacity = int64_t(16) * 1024 * max_vpt * vec;
    for (int64_t n = 1; n <= (int64_t(1) << 19) && failures < 10; n += (n < 4096 ? 1 : 37)) {
      for (int64_t rows : {int64_t(1), int64_t(7), int64_t(4096), int64_t(1) << 20}) {
        RegRowProblem p;
        p.rows = rows;
        p.cols = n;
        p.x_elem_bytes = es;
        p.max_vpt = max_vpt;
        p.scratch_bytes = 1024;
        RegRowConfig c;
        const bool ok = choose_norm_bwd_config(p, lim, &c);
        const char* why = nullptr;
        if (ok != (n <= capacity)) why = ok ? "accepted beyond the capacity" : "refused a row that fits";
        else if (ok) why = check_norm_bwd_config(c, p, lim);
        if (why != nullptr) {
          ADD_FAILURE() << why << " (N " << n << ", rows " << rows << ", bytes " << es << ")";
          ++failures;
        }
      }
    }
  }
}

}  // namespace
}  // namespace quack

// LayerNorm backward shares the validation and adds the forward's mean.
namespace quack {
namespace {

LayerNormBwdArgs ln_args() {
  LayerNormBwdArgs a;
  static_cast<RMSNormBwdArgs&>(a) = args();
  a.mean = static_cast<const float*>(addr(8));
  return a;
}

TEST(LayerNormBwdValidate, NeedsTheForwardsMean) {
  EXPECT_TRUE(can_implement(ln_args()).ok());
  LayerNormBwdArgs a = ln_args();
  a.mean = nullptr;
  for (const Status& st : {can_implement(a), layernorm_bwd(a, nullptr)}) {
    EXPECT_EQ(st.code, Code::kInvalidArgument);
    EXPECT_EQ(st.message.rfind("mean: null pointer", 0), 0u) << st.message;
  }
  size_t bytes = 1;
  EXPECT_EQ(layernorm_bwd_workspace_bytes(a, &bytes).message.rfind("mean:", 0), 0u);
  EXPECT_EQ(bytes, 0u);
  a.mean = reinterpret_cast<const float*>(static_cast<const char*>(addr(8)) + 2);
  EXPECT_EQ(can_implement(a).message.rfind("mean: pointer is not 4-byte aligned", 0), 0u);
  // The shared checks name their arguments as for RMSNorm.
  a = ln_args();
  a.dx.row_stride = kCols - 1;
  EXPECT_EQ(can_implement(a).message.rfind("dx:", 0), 0u);
  // No rows: no mean needed.
  a = ln_args();
  a.rows = 0;
  a.mean = nullptr;
  EXPECT_TRUE(can_implement(a).ok());
}

// The plan: LayerNorm's fp32 rows take the 8-element register tile wherever
// the row fits a cluster of them (measured faster, src/rmsnorm_bwd.cu), so
// their CTAs are twice RMSNorm's and half as many are resident: half the
// partial rows. 16-bit rows, and fp32 rows past 1024 x 16 x 8 elements, take
// RMSNorm's tile. (The register kernel: the pipelined one, which serves
// N = 4096 by default, is off here.) Rows of 256K are the grid kernel's
// (asked for even where a cluster runs them): its exchange log first, a
// word a rank (of 8192 columns) a row, two for LayerNorm.
TEST(LayerNormBwdWorkspace, Fp32RowsTakeTheEightElementTileWhereTheyFit) {
  const DeviceLimits lim;
  RowTuning tune = default_row_tuning();
  tune.bwd_pipe = 0;
  set_row_tuning(&tune);
  struct Restore {
    ~Restore() { set_row_tuning(nullptr); }
  } restore;
  for (const DType t : {DType::kFloat32, DType::kBFloat16}) {
    for (const int64_t n : {int64_t(4096), int64_t(262144)}) {
      LayerNormBwdArgs a = ln_args();
      a.h.dtype = a.dy.dtype = a.dx.dtype = t;
      a.rows = int64_t(1) << 16;
      a.cols = a.h.row_stride = a.dy.row_stride = a.dx.row_stride = n;
      const size_t ln = layernorm_bwd_workspace_bytes(a, lim);
      const size_t rms = rmsnorm_bwd_workspace_bytes(static_cast<const RMSNormBwdArgs&>(a), lim);
      ASSERT_GT(ln, 0u);
      SCOPED_TRACE(std::string(dtype_name(t)) + " N = " + std::to_string(n));
      if (n == 262144) {
        const size_t log_words = size_t(a.rows) * size_t(n / 8192);
        EXPECT_GE(rms, log_words * 8);
        EXPECT_GE(ln, log_words * 16);
        EXPECT_EQ(ln - rms, log_words * 8);  // the same partial rows
        continue;
      }
      EXPECT_EQ(ln % (size_t(n) * 8), 0u);  // partial rows only: the register kernel
      EXPECT_EQ(ln * (t == DType::kFloat32 ? 2 : 1), rms);
    }
  }
}

}  // namespace
}  // namespace quack
