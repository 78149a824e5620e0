// Host tests of RMSNorm's argument validation (quack::can_implement) and of
// the calls that must not reach the GPU (rows = 0, rejected arguments).
//
// can_implement never dereferences a pointer, so plain addresses stand in for
// device memory here; rmsnorm_fwd is only called where validation (or the
// empty problem) returns before any CUDA call.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <regex>
#include <string>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"

namespace quack {
namespace {

constexpr int64_t kRows = 4;
constexpr int64_t kCols = 1000;

// A 256-byte-aligned stand-in address for buffer number `i`, plus `bytes`.
void* addr(int i, uintptr_t bytes = 0) { return reinterpret_cast<void*>((uintptr_t(i + 1) << 24) + bytes); }

RMSNormFwdArgs minimal_args() {
  RMSNormFwdArgs a;
  a.rows = kRows;
  a.cols = kCols;
  a.x = {addr(0), DType::kBFloat16, kCols};
  a.out = {addr(1), DType::kBFloat16, kCols};
  return a;
}

RMSNormFwdArgs full_args() {
  RMSNormFwdArgs a = minimal_args();
  a.residual = {addr(2), DType::kFloat32, kCols + 24};
  a.weight = {addr(3), DType::kFloat32};
  a.bias = {addr(4), DType::kBFloat16};
  a.residual_out = {addr(5), DType::kFloat32, kCols + 8};
  a.rstd = static_cast<float*>(addr(6));
  a.eps = 1e-5f;
  a.weight_offset = 1.0f;
  return a;
}

// Expects can_implement (and rmsnorm_fwd, which validates first and so never
// reaches the GPU) to reject `a`, naming `arg` at the start of the message.
void expect_invalid(const RMSNormFwdArgs& a, const std::string& arg) {
  const Status st = can_implement(a);
  EXPECT_EQ(st.code, Code::kInvalidArgument) << "expected " << arg << " to be rejected";
  EXPECT_EQ(st.message.rfind(arg + ":", 0), 0u) << "message should name '" << arg << "': " << st.message;
  const Status launch = rmsnorm_fwd(a, nullptr);
  EXPECT_EQ(launch.code, Code::kInvalidArgument);
  EXPECT_EQ(launch.message, st.message);
}

void expect_ok(const RMSNormFwdArgs& a) {
  const Status st = can_implement(a);
  EXPECT_TRUE(st.ok()) << st.message;
  EXPECT_TRUE(st.message.empty());
}

TEST(RMSNormFwdValidate, AcceptsValidArguments) {
  expect_ok(minimal_args());
  expect_ok(full_args());
  for (const DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    RMSNormFwdArgs a = full_args();
    a.x.dtype = a.out.dtype = a.residual.dtype = a.residual_out.dtype = a.weight.dtype = a.bias.dtype = t;
    expect_ok(a);
  }
  RMSNormFwdArgs a = minimal_args();
  a.cols = 1;
  a.x.row_stride = a.out.row_stride = 1;
  expect_ok(a);  // N = 1
  a = minimal_args();
  a.eps = 0.0f;
  a.weight_offset = -1.0f;
  expect_ok(a);
  a = minimal_args();
  a.rows = int64_t(1) << 40;  // rows and strides are 64-bit; nothing is touched here
  a.cols = int64_t(1) << 20;
  a.x.row_stride = a.out.row_stride = int64_t(1) << 20;
  a.out.ptr = reinterpret_cast<void*>(uintptr_t(1) << 62);  // (past x's 2^61 bytes)
  expect_ok(a);
  a.x.row_stride = int64_t(1) << 34;  // 2^75 bytes of rows: no address space holds them
  expect_invalid(a, "x");
}

TEST(RMSNormFwdValidate, AcceptsElementAlignedPointersAndOddStrides) {
  // Aligned to the element but not to a 16-byte vector: the element-wise path.
  RMSNormFwdArgs a = full_args();
  a.x.ptr = addr(0, 2);
  a.x.row_stride = kCols + 1;
  a.out.ptr = addr(1, 6);
  a.out.row_stride = kCols + 3;
  a.residual.ptr = addr(2, 4);
  a.residual.row_stride = kCols + 5;
  a.weight.ptr = addr(3, 12);
  a.bias.ptr = addr(4, 2);
  a.residual_out.ptr = addr(5, 4);
  a.rstd = static_cast<float*>(addr(6, 4));
  expect_ok(a);
}

TEST(RMSNormFwdValidate, RowsZeroAllowsNullPointers) {
  RMSNormFwdArgs a;
  a.rows = 0;
  a.cols = 4096;
  expect_ok(a);
  a = full_args();
  a.rows = 0;
  a.x.ptr = nullptr;
  a.out.ptr = nullptr;
  expect_ok(a);
}

TEST(RMSNormFwdValidate, RejectsBadShapes) {
  RMSNormFwdArgs a = minimal_args();
  a.cols = 0;
  expect_invalid(a, "cols");
  a.cols = -3;
  expect_invalid(a, "cols");
  a = minimal_args();
  a.rows = 0;
  a.cols = 0;  // N >= 1 even when there are no rows
  expect_invalid(a, "cols");
  a = minimal_args();
  a.rows = -1;
  expect_invalid(a, "rows");
}

TEST(RMSNormFwdValidate, RefusesRowsLongerThanTheKernelsServe) {
  RMSNormFwdArgs a = minimal_args();
  a.rows = 1;
  a.cols = kRowMaxCols;
  a.x.row_stride = a.out.row_stride = a.cols;
  a.out.ptr = reinterpret_cast<void*>(uintptr_t(1) << 40);  // (2 GB rows: out apart from x)
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
  a.cols = kRowMaxCols + 1;
  a.x.row_stride = a.out.row_stride = a.cols;
  const Status st = can_implement(a);
  EXPECT_EQ(st.code, Code::kUnsupported);
  EXPECT_EQ(st.message.rfind("cols:", 0), 0u) << st.message;
  EXPECT_EQ(rmsnorm_fwd(a, nullptr).code, Code::kUnsupported);  // refused before any CUDA call
}

TEST(RMSNormFwdValidate, RejectsNullRequiredPointers) {
  RMSNormFwdArgs a = full_args();
  a.x.ptr = nullptr;
  expect_invalid(a, "x");
  a = full_args();
  a.out.ptr = nullptr;
  expect_invalid(a, "out");
  a = full_args();
  a.rows = 1;
  a.x.ptr = nullptr;
  expect_invalid(a, "x");
}

TEST(RMSNormFwdValidate, RejectsRowStrideBelowN) {
  {
    RMSNormFwdArgs a = full_args();
    a.x.row_stride = kCols - 1;
    expect_invalid(a, "x");
    a.x.row_stride = 0;
    expect_invalid(a, "x");
    a.x.row_stride = -kCols;
    expect_invalid(a, "x");
  }
  {
    RMSNormFwdArgs a = full_args();
    a.out.row_stride = kCols - 1;
    expect_invalid(a, "out");
  }
  {
    RMSNormFwdArgs a = full_args();
    a.residual.row_stride = 1;
    expect_invalid(a, "residual");
  }
  {
    RMSNormFwdArgs a = full_args();
    a.residual_out.row_stride = kCols - 8;
    expect_invalid(a, "residual_out");
  }
}

TEST(RMSNormFwdValidate, RejectsInvalidDtypeCodes) {
  for (const int code : {-1, 3, 99}) {
    const DType bad = static_cast<DType>(code);
    SCOPED_TRACE("dtype code " + std::to_string(code));
    RMSNormFwdArgs a = full_args();
    a.x.dtype = bad;
    expect_invalid(a, "x");
    a = full_args();
    a.out.dtype = bad;
    expect_invalid(a, "out");
    a = full_args();
    a.residual.dtype = bad;
    expect_invalid(a, "residual");
    a = full_args();
    a.residual_out.dtype = bad;
    expect_invalid(a, "residual_out");
    a = full_args();
    a.weight.dtype = bad;
    expect_invalid(a, "weight");
    a = full_args();
    a.bias.dtype = bad;
    expect_invalid(a, "bias");
  }
}

TEST(RMSNormFwdValidate, RejectsPointersNotAlignedToTheirElement) {
  RMSNormFwdArgs a = full_args();
  a.x.ptr = addr(0, 1);  // bf16 at an odd address
  expect_invalid(a, "x");
  a = full_args();
  a.out.ptr = addr(1, 1);
  expect_invalid(a, "out");
  a = full_args();
  a.residual.ptr = addr(2, 2);  // fp32 at 2 mod 4
  expect_invalid(a, "residual");
  a = full_args();
  a.residual_out.ptr = addr(5, 6);
  expect_invalid(a, "residual_out");
  a = full_args();
  a.weight.ptr = addr(3, 2);
  expect_invalid(a, "weight");
  a = full_args();
  a.bias.ptr = addr(4, 1);
  expect_invalid(a, "bias");
  a = full_args();
  a.rstd = static_cast<float*>(addr(6, 2));
  expect_invalid(a, "rstd");
}

TEST(RMSNormFwdValidate, RejectsBadScalars) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const float eps : {-1e-6f, -inf, inf, nan}) {
    RMSNormFwdArgs a = minimal_args();
    a.eps = eps;
    expect_invalid(a, "eps");
  }
  for (const float wo : {inf, -inf, nan}) {
    RMSNormFwdArgs a = full_args();
    a.weight_offset = wo;
    expect_invalid(a, "weight_offset");
  }
}

// The optional workspace: 16-byte aligned when given; its query validates
// the call first and answers 0 for rows shorter than any grid serves
// without touching a device. (Its size against the call's need is checked
// at launch, on the GPU: RMSNormFwdGpuGridWorkspace.)
// An output may be an input's very matrix (in place: out or residual_out
// over x or the residual with the same pointer, dtype and row stride); any
// other overlap with an input, and any between outputs (rstd, the
// workspace, LayerNorm's mean included), is refused naming the output.
TEST(RMSNormFwdValidate, OutputsInPlaceOrDisjoint) {
  RMSNormFwdArgs a = full_args();
  char* x = static_cast<char*>(const_cast<void*>(a.x.ptr));
  char* res = static_cast<char*>(const_cast<void*>(a.residual.ptr));
  a.out = {x, a.x.dtype, a.x.row_stride};
  a.residual_out = {res, a.residual.dtype, a.residual.row_stride};
  expect_ok(a);  // the residual stream updated in place, out over x
  a.residual_out.row_stride = kCols + 8;  // the residual's pointer, another pitch
  expect_invalid(a, "residual_out");
  a = full_args();
  a.out = {x, DType::kFloat32, kCols};  // x's pointer and pitch, another dtype
  expect_invalid(a, "out");
  a = full_args();
  a.out.ptr = x + 2;  // one bf16 element on
  expect_invalid(a, "out");
  a = full_args();
  a.weight = {static_cast<char*>(a.out.ptr) + 64, DType::kFloat32};  // read by every row: never in place
  expect_invalid(a, "out");
  a = full_args();
  a.residual_out.ptr = static_cast<char*>(a.out.ptr) + 1024;  // two outputs
  expect_invalid(a, "residual_out");
  a = full_args();
  a.rstd = reinterpret_cast<float*>(x + 64);
  expect_invalid(a, "rstd");
  a = full_args();
  a.workspace = res;
  a.workspace_bytes = 256;
  expect_invalid(a, "workspace");
  a.workspace = addr(9);
  expect_ok(a);
  a = full_args();
  a.rows = 0;  // nothing addressed: anything goes
  a.out.ptr = x + 2;
  expect_ok(a);

  LayerNormFwdArgs l;
  static_cast<RMSNormFwdArgs&>(l) = full_args();
  l.mean = l.rstd + 1;
  const Status st = can_implement(l);
  EXPECT_EQ(st.code, Code::kInvalidArgument);
  EXPECT_EQ(st.message.rfind("mean: overlaps rstd", 0), 0u) << st.message;
  l.mean = static_cast<float*>(addr(7));
  EXPECT_TRUE(can_implement(l).ok()) << can_implement(l).message;
}

TEST(RMSNormFwdValidate, WorkspaceAlignmentAndItsQuery) {
  RMSNormFwdArgs a = minimal_args();
  a.workspace = addr(8, 8);
  a.workspace_bytes = 4096;
  expect_invalid(a, "workspace");
  a.workspace = addr(8, 16);
  expect_ok(a);
  a.workspace = nullptr;
  a.workspace_bytes = 12345;  // ignored without a pointer
  expect_ok(a);
  size_t bytes = 1;
  Status st = rmsnorm_fwd_workspace_bytes(minimal_args(), &bytes);
  EXPECT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(bytes, 0u);
  LayerNormFwdArgs l;
  static_cast<RMSNormFwdArgs&>(l) = minimal_args();
  bytes = 1;
  st = layernorm_fwd_workspace_bytes(l, &bytes);
  EXPECT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(bytes, 0u);
  RMSNormFwdArgs bad = minimal_args();
  bad.eps = -1.0f;
  st = rmsnorm_fwd_workspace_bytes(bad, &bytes);
  EXPECT_EQ(st.code, Code::kInvalidArgument);
  EXPECT_EQ(st.message.rfind("eps:", 0), 0u) << st.message;
  st = rmsnorm_fwd_workspace_bytes(minimal_args(), nullptr);
  EXPECT_EQ(st.code, Code::kInvalidArgument);
  EXPECT_EQ(st.message.rfind("bytes:", 0), 0u) << st.message;
}

TEST(RMSNormFwd, RowsZeroSucceedsWithoutTouchingTheGpu) {
  // Passes on a machine with no GPU at all: any CUDA call would fail there.
  RMSNormFwdArgs a;
  a.rows = 0;
  a.cols = 262144;
  const Status st = rmsnorm_fwd(a, nullptr);
  EXPECT_TRUE(st.ok()) << st.message;
  const Status full = [] {
    RMSNormFwdArgs b = full_args();
    b.rows = 0;
    return rmsnorm_fwd(b, nullptr);
  }();
  EXPECT_TRUE(full.ok()) << full.message;
}

TEST(RMSNormFwd, ReportsAMissingDeviceAsAStatus) {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0)
    GTEST_SKIP() << "a CUDA device is present (this checks the no-device path)";
  const Status st = rmsnorm_fwd(minimal_args(), nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.code, Code::kInvalidArgument);
  EXPECT_FALSE(st.message.empty());
}

TEST(Library, NamesAndVersion) {
  EXPECT_STREQ(dtype_name(DType::kFloat32), "float32");
  EXPECT_STREQ(dtype_name(DType::kFloat16), "float16");
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(dtype_size(DType::kFloat32), 4);
  EXPECT_EQ(dtype_size(DType::kFloat16), 2);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2);
  EXPECT_TRUE(std::regex_match(version(), std::regex(R"(\d+\.\d+\.\d+)"))) << version();
}

}  // namespace
}  // namespace quack

// LayerNorm forward: RMSNorm's validation, torch's eps default, and the
// optional mean output.
namespace quack {
namespace {

TEST(LayerNormFwdValidate, SharesRMSNormsChecksAndAddsTheMean) {
  LayerNormFwdArgs a;
  EXPECT_EQ(a.eps, 1e-5f);  // torch.nn.LayerNorm's default
  static_cast<RMSNormFwdArgs&>(a) = full_args();
  a.mean = static_cast<float*>(addr(7));
  EXPECT_TRUE(can_implement(a).ok());
  a.mean = nullptr;  // optional
  EXPECT_TRUE(can_implement(a).ok());
  a.mean = reinterpret_cast<float*>(static_cast<char*>(addr(7)) + 2);
  for (const Status& st : {can_implement(a), layernorm_fwd(a, nullptr)}) {
    EXPECT_EQ(st.code, Code::kInvalidArgument);
    EXPECT_EQ(st.message.rfind("mean: pointer is not 4-byte aligned", 0), 0u) << st.message;
  }
  a.mean = nullptr;
  a.eps = -1.0f;
  EXPECT_EQ(layernorm_fwd(a, nullptr).message.rfind("eps:", 0), 0u);
  a.eps = 1e-5f;
  a.out.row_stride = kCols - 1;
  EXPECT_EQ(can_implement(a).message.rfind("out:", 0), 0u);
}

}  // namespace
}  // namespace quack
