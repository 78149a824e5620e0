// Host tests of softmax's argument validation (quack::can_implement for
// SoftmaxFwdArgs / SoftmaxBwdArgs) and of the calls that must not reach the
// GPU (rows = 0, rejected arguments). can_implement never dereferences a
// pointer, so plain addresses stand in for device memory.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"

namespace quack {
namespace {

constexpr int64_t kRows = 4;
constexpr int64_t kCols = 1000;

void* addr(int i, uintptr_t bytes = 0) { return reinterpret_cast<void*>((uintptr_t(i + 1) << 24) + bytes); }

SoftmaxFwdArgs fwd_args() {
  SoftmaxFwdArgs a;
  a.rows = kRows;
  a.cols = kCols;
  a.x = {addr(0), DType::kBFloat16, kCols};
  a.out = {addr(1), DType::kBFloat16, kCols};
  return a;
}

SoftmaxBwdArgs bwd_args() {
  SoftmaxBwdArgs a;
  a.rows = kRows;
  a.cols = kCols;
  a.y = {addr(0), DType::kFloat16, kCols};
  a.dy = {addr(1), DType::kFloat16, kCols + 8};
  a.dx = {addr(2), DType::kFloat16, kCols};
  a.log = true;
  return a;
}

// Expects validation (and the launch, which validates first and so never
// reaches the GPU) to reject `a`, naming `arg` at the start of the message.
template <class Args, class Launch>
void expect_invalid(const Args& a, const std::string& arg, Launch&& launch, Code code = Code::kInvalidArgument) {
  const Status st = can_implement(a);
  EXPECT_EQ(st.code, code) << "expected " << arg << " to be rejected";
  EXPECT_EQ(st.message.rfind(arg + ":", 0), 0u) << "message should name '" << arg << "': " << st.message;
  const Status l = launch(a);
  EXPECT_EQ(l.code, code);
  EXPECT_EQ(l.message, st.message);
}
auto fwd = [](const SoftmaxFwdArgs& a) { return softmax_fwd(a, nullptr); };
auto bwd = [](const SoftmaxBwdArgs& a) { return softmax_bwd(a, nullptr); };

TEST(SoftmaxValidate, ValidArgumentsPass) {
  EXPECT_TRUE(can_implement(fwd_args()).ok());
  EXPECT_TRUE(can_implement(bwd_args()).ok());
}

TEST(SoftmaxValidate, ShapeErrorsNameRowsOrCols) {
  SoftmaxFwdArgs a = fwd_args();
  a.rows = -1;
  expect_invalid(a, "rows", fwd);
  a = fwd_args();
  a.cols = 0;
  expect_invalid(a, "cols", fwd);
  a.cols = kRowMaxCols + 1;
  a.x.row_stride = a.out.row_stride = a.cols;
  expect_invalid(a, "cols", fwd, Code::kUnsupported);
  SoftmaxBwdArgs b = bwd_args();
  b.cols = -3;
  expect_invalid(b, "cols", bwd);
}

TEST(SoftmaxValidate, OperandErrorsNameTheOperand) {
  SoftmaxFwdArgs a = fwd_args();
  a.x.ptr = nullptr;
  expect_invalid(a, "x", fwd);
  a = fwd_args();
  a.out.row_stride = kCols - 1;
  expect_invalid(a, "out", fwd);
  a = fwd_args();
  a.x.ptr = addr(0, 1);  // not aligned to a bf16 element
  expect_invalid(a, "x", fwd);
  a = fwd_args();
  a.out.dtype = DType::kFloat32;
  expect_invalid(a, "out", fwd);
  a = fwd_args();
  a.x.dtype = static_cast<DType>(7);
  expect_invalid(a, "x", fwd);

  SoftmaxBwdArgs b = bwd_args();
  b.y.ptr = nullptr;
  expect_invalid(b, "y", bwd);
  b = bwd_args();
  b.dy.dtype = DType::kFloat32;
  expect_invalid(b, "dy", bwd);
  b = bwd_args();
  b.dx.dtype = DType::kBFloat16;
  expect_invalid(b, "dx", bwd);
  b = bwd_args();
  b.dx.row_stride = 5;
  expect_invalid(b, "dx", bwd);
}

// The forward's workspace: a pointer that is not 16-byte aligned is
// rejected whatever the row (before any device is touched); the workspace
// query validates the arguments and its own output pointer first, and asks
// for nothing below kSoftmaxFwdWorkspaceMinCols columns or without rows.
TEST(SoftmaxValidate, WorkspaceErrorsNameTheWorkspace) {
  SoftmaxFwdArgs a = fwd_args();
  a.workspace = addr(2, 8);
  a.workspace_bytes = 1 << 20;
  expect_invalid(a, "workspace", fwd);
  a.workspace = addr(2);
  EXPECT_TRUE(can_implement(a).ok());
  size_t bytes = 123;
  EXPECT_EQ(softmax_fwd_workspace_bytes(a, nullptr).message.rfind("bytes:", 0), 0u);
  a.workspace = addr(2, 4);
  Status st = softmax_fwd_workspace_bytes(a, &bytes);
  EXPECT_EQ(st.message.rfind("workspace:", 0), 0u) << st.message;
  EXPECT_EQ(bytes, 0u);
  a = fwd_args();
  a.cols = 0;
  bytes = 123;
  st = softmax_fwd_workspace_bytes(a, &bytes);
  EXPECT_EQ(st.message.rfind("cols:", 0), 0u) << st.message;
  EXPECT_EQ(bytes, 0u);
  a = fwd_args();  // 1000 columns: below the grid's floor, no device asked
  bytes = 123;
  EXPECT_TRUE(softmax_fwd_workspace_bytes(a, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
  a.rows = 0;
  a.cols = kSoftmaxFwdWorkspaceMinCols;
  a.x.row_stride = a.out.row_stride = a.cols;
  bytes = 123;
  EXPECT_TRUE(softmax_fwd_workspace_bytes(a, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
}

// The backward's workspace likewise (softmax_bwd_workspace_bytes).
TEST(SoftmaxValidate, BackwardWorkspaceErrorsNameTheWorkspace) {
  SoftmaxBwdArgs b = bwd_args();
  b.workspace = addr(3, 8);
  b.workspace_bytes = 1 << 20;
  expect_invalid(b, "workspace", bwd);
  b.workspace = addr(3);
  EXPECT_TRUE(can_implement(b).ok()) << can_implement(b).message;
  size_t bytes = 123;
  EXPECT_EQ(softmax_bwd_workspace_bytes(b, nullptr).message.rfind("bytes:", 0), 0u);
  b.workspace = addr(3, 4);
  Status st = softmax_bwd_workspace_bytes(b, &bytes);
  EXPECT_EQ(st.message.rfind("workspace:", 0), 0u) << st.message;
  EXPECT_EQ(bytes, 0u);
  b = bwd_args();
  b.dy.dtype = DType::kFloat32;
  bytes = 123;
  st = softmax_bwd_workspace_bytes(b, &bytes);
  EXPECT_EQ(st.message.rfind("dy:", 0), 0u) << st.message;
  EXPECT_EQ(bytes, 0u);
  b = bwd_args();  // 1000 columns: below the grid's floor, no device asked
  bytes = 123;
  EXPECT_TRUE(softmax_bwd_workspace_bytes(b, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
  b.rows = 0;
  b.cols = kSoftmaxBwdWorkspaceMinCols;
  b.y.row_stride = b.dy.row_stride = b.dx.row_stride = b.cols;
  bytes = 123;
  EXPECT_TRUE(softmax_bwd_workspace_bytes(b, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
  // Over y, dy or dx: refused naming the workspace.
  for (int i = 0; i < 3; ++i) {
    b = bwd_args();
    b.workspace = static_cast<char*>(addr(i)) + 512;
    b.workspace_bytes = 64;
    expect_invalid(b, "workspace", bwd);
  }
  b = bwd_args();
  b.workspace = addr(5);
  b.workspace_bytes = SIZE_MAX;  // from far past the tensors: disjoint however long
  EXPECT_TRUE(can_implement(b).ok()) << can_implement(b).message;
}

// An output may be an input's very matrix (in place: the same pointer,
// dtype and row stride); any other overlap -- their byte ranges, first
// element to last -- is refused naming the output, and so is a workspace
// over x or out: kernels of different rows would read what another wrote.
TEST(SoftmaxValidate, OutputsInPlaceOrDisjoint) {
  const int64_t es = 2;  // bf16
  SoftmaxFwdArgs f = fwd_args();
  char* x = static_cast<char*>(const_cast<void*>(f.x.ptr));
  f.out = {x, f.x.dtype, f.x.row_stride};
  EXPECT_TRUE(can_implement(f).ok()) << can_implement(f).message;
  f.out.ptr = x + es;  // one element on: row r's output over row r's input
  expect_invalid(f, "out", fwd);
  f.out = {x, f.x.dtype, kCols + 8};  // the same pointer, another pitch
  expect_invalid(f, "out", fwd);
  f.out = {x - (kRows - 1) * kCols * es - es, f.x.dtype, kCols};  // ending in x's first row
  expect_invalid(f, "out", fwd);
  f.out.ptr = x + kRows * kCols * es;  // adjacent: disjoint
  EXPECT_TRUE(can_implement(f).ok()) << can_implement(f).message;
  f.rows = 0;  // nothing addressed: anything goes
  f.out.ptr = x + es;
  EXPECT_TRUE(can_implement(f).ok());
  f = fwd_args();
  f.rows = 1;  // one row: its pitch is no part of the matrix, in place at any pitch
  f.out = {x, f.x.dtype, kCols + 64};
  EXPECT_TRUE(can_implement(f).ok()) << can_implement(f).message;
  f = fwd_args();
  f.workspace = x + 256;
  f.workspace_bytes = 1024;
  expect_invalid(f, "workspace", fwd);
  f.workspace_bytes = SIZE_MAX;  // (a size past INT64_MAX still counts)
  expect_invalid(f, "workspace", fwd);
  f.workspace = static_cast<char*>(addr(5));
  EXPECT_TRUE(can_implement(f).ok()) << can_implement(f).message;

  SoftmaxBwdArgs b = bwd_args();
  char* dy = static_cast<char*>(const_cast<void*>(b.dy.ptr));
  b.dx = {dy, b.dy.dtype, b.dy.row_stride};  // in place of dy (its padded pitch)
  EXPECT_TRUE(can_implement(b).ok()) << can_implement(b).message;
  b.dx = {const_cast<void*>(b.y.ptr), b.y.dtype, b.y.row_stride};  // in place of y
  EXPECT_TRUE(can_implement(b).ok()) << can_implement(b).message;
  b.dx.row_stride = kCols + 8;  // y's pointer, dy's pitch
  expect_invalid(b, "dx", bwd);
  b.dx = {dy + 16, b.dy.dtype, b.dy.row_stride};
  expect_invalid(b, "dx", bwd);
}

TEST(SoftmaxValidate, NoRowsIsANoOpWithoutPointers) {
  SoftmaxFwdArgs a;
  a.rows = 0;
  a.cols = 17;
  EXPECT_TRUE(softmax_fwd(a, nullptr).ok());
  SoftmaxBwdArgs b;
  b.rows = 0;
  b.cols = 17;
  EXPECT_TRUE(softmax_bwd(b, nullptr).ok());
}

}  // namespace
}  // namespace quack
