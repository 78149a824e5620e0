// Host tests of cross-entropy's argument validation (quack::can_implement for
// CrossEntropyArgs and CrossEntropyGradScaleArgs; cross_entropy and
// cross_entropy_scale_grad validate first, so a rejected call never reaches
// the GPU), of the workspace size for every reduction and option, and of the
// plan the GPU tests rely on for their coverage (register team / CTA /
// cluster, streaming). can_implement never dereferences a pointer, so plain
// addresses stand in for device memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"

namespace quack {
namespace {

constexpr int64_t kRows = 4;
constexpr int64_t kCols = 1000;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Distinct 16 MB-apart addresses, 16-byte aligned unless `bytes` says otherwise.
void* addr(int i, uintptr_t bytes = 0) { return reinterpret_cast<void*>((uintptr_t(i + 1) << 24) + bytes); }
float* faddr(int i, uintptr_t bytes = 0) { return static_cast<float*>(addr(i, bytes)); }

// Every option on: weights, smoothing (so the workspace holds the totals),
// z_loss, softcap, lse, dlogits and dloss, a mean (workspace: totals + shares).
CrossEntropyArgs args() {
  CrossEntropyArgs a;
  a.rows = kRows;
  a.cols = kCols;
  a.logits = {addr(0), DType::kBFloat16, kCols};
  a.target = addr(1);
  a.target_dtype = IndexDType::kInt64;
  a.weight = faddr(2);
  a.reduction = Reduction::kMean;
  a.label_smoothing = 0.1f;
  a.z_loss = 1e-4f;
  a.softcap = 30.0f;
  a.loss = faddr(3);
  a.lse = faddr(4);
  a.dlogits = {addr(5), DType::kBFloat16, kCols};
  a.dloss = faddr(6);
  a.workspace = addr(7);
  a.workspace_bytes = size_t(1) << 20;
  return a;
}

CrossEntropyGradScaleArgs scale_args() {
  CrossEntropyGradScaleArgs a;
  a.rows = kRows;
  a.cols = kCols;
  a.dlogits = {addr(0), DType::kFloat16, kCols + 3};
  a.dloss = faddr(1);
  a.per_row = true;
  return a;
}

// Expects validation (and the call, which validates first and so never
// reaches the GPU) to reject `a`, naming `arg` at the start of the message.
void expect_invalid(const CrossEntropyArgs& a, const std::string& arg, Code code = Code::kInvalidArgument) {
  const Status st = can_implement(a);
  EXPECT_EQ(st.code, code) << "expected " << arg << " to be rejected";
  EXPECT_EQ(st.message.rfind(arg + ":", 0), 0u) << "message should name '" << arg << "': " << st.message;
  const Status l = cross_entropy(a, nullptr);
  EXPECT_EQ(l.code, code);
  EXPECT_EQ(l.message, st.message);
}

void expect_invalid(const CrossEntropyGradScaleArgs& a, const std::string& arg, Code code = Code::kInvalidArgument) {
  const Status st = can_implement(a);
  EXPECT_EQ(st.code, code) << "expected " << arg << " to be rejected";
  EXPECT_EQ(st.message.rfind(arg + ":", 0), 0u) << "message should name '" << arg << "': " << st.message;
  const Status l = cross_entropy_scale_grad(a, nullptr);
  EXPECT_EQ(l.code, code);
  EXPECT_EQ(l.message, st.message);
}

TEST(CrossEntropyValidate, ValidArgumentsPass) {
  EXPECT_TRUE(can_implement(args()).ok());
  // The minimal call: logits and target only (no outputs at all is allowed).
  CrossEntropyArgs a;
  a.rows = kRows;
  a.cols = kCols;
  a.logits = {addr(0), DType::kFloat32, kCols};
  a.target = addr(1);
  a.reduction = Reduction::kNone;
  EXPECT_TRUE(can_implement(a).ok());
  // int32 targets need 4-byte alignment only; a stride of 0 (one shared
  // target) and any ignore_index are allowed.
  a.target_dtype = IndexDType::kInt32;
  a.target = addr(1, 4);
  a.target_stride = 0;
  a.ignore_index = 5;
  EXPECT_TRUE(can_implement(a).ok());
  // The bounds of the scalar options are inclusive; softcap 0 is "off".
  a = args();
  a.label_smoothing = 0.0f;
  EXPECT_TRUE(can_implement(a).ok());
  a.label_smoothing = 1.0f;
  a.z_loss = 0.0f;
  a.softcap = 0.0f;
  EXPECT_TRUE(can_implement(a).ok());
  // Rows may be padded, and misaligned by an element (the streaming kernel).
  a = args();
  a.logits = {addr(0, 2), DType::kBFloat16, kCols + 1};
  a.dlogits = {addr(5, 6), DType::kBFloat16, kCols + 7};
  EXPECT_TRUE(can_implement(a).ok());
  EXPECT_TRUE(can_implement(scale_args()).ok());
}

TEST(CrossEntropyValidate, ShapeErrorsNameRowsOrCols) {
  CrossEntropyArgs a = args();
  a.rows = -1;
  expect_invalid(a, "rows");
  a = args();
  a.cols = 0;
  expect_invalid(a, "cols");
  a = args();
  a.cols = kRowMaxCols + 1;
  a.logits.row_stride = a.dlogits.row_stride = a.cols;
  expect_invalid(a, "cols", Code::kUnsupported);
  // The size query checks the shape too.
  size_t bytes = 7;
  a = args();
  a.rows = -3;
  Status st = cross_entropy_workspace_bytes(a, &bytes);
  EXPECT_EQ(st.code, Code::kInvalidArgument);
  EXPECT_EQ(st.message.rfind("rows:", 0), 0u) << st.message;
  a = args();
  a.cols = -1;
  st = cross_entropy_workspace_bytes(a, &bytes);
  EXPECT_EQ(st.message.rfind("cols:", 0), 0u) << st.message;
  EXPECT_EQ(cross_entropy_workspace_bytes(args(), nullptr).message.rfind("bytes:", 0), 0u);

  CrossEntropyGradScaleArgs s = scale_args();
  s.rows = -1;
  expect_invalid(s, "rows");
  s = scale_args();
  s.cols = 0;
  expect_invalid(s, "cols");
}

TEST(CrossEntropyValidate, LogitsAndTargetErrorsNameTheOperand) {
  CrossEntropyArgs a = args();
  a.logits.ptr = nullptr;
  expect_invalid(a, "logits");
  a = args();
  a.logits.row_stride = kCols - 1;
  expect_invalid(a, "logits");
  a = args();
  a.logits.ptr = addr(0, 1);  // not aligned to a bf16 element
  expect_invalid(a, "logits");
  a = args();
  a.logits.dtype = static_cast<DType>(7);
  expect_invalid(a, "logits");

  a = args();
  a.target = nullptr;
  expect_invalid(a, "target");
  a = args();
  a.target = addr(1, 4);  // int64 at a 4-byte offset
  expect_invalid(a, "target");
  a.target_dtype = IndexDType::kInt32;
  EXPECT_TRUE(can_implement(a).ok());
  a.target = addr(1, 2);  // int32 at a 2-byte offset
  expect_invalid(a, "target");
  a = args();
  a.target_dtype = static_cast<IndexDType>(2);
  expect_invalid(a, "target_dtype");
  a = args();
  a.target_stride = -1;
  expect_invalid(a, "target_stride");
}

TEST(CrossEntropyValidate, OptionErrorsNameTheOption) {
  CrossEntropyArgs a = args();
  a.weight = faddr(2, 2);
  expect_invalid(a, "weight");
  a = args();
  a.reduction = static_cast<Reduction>(3);
  expect_invalid(a, "reduction");
  a = args();
  a.reduction = static_cast<Reduction>(-1);
  expect_invalid(a, "reduction");
  for (const float eps : {-0.1f, 1.5f, std::nextafter(1.0f, 2.0f), kNaN, kInf, -kInf}) {
    a = args();
    a.label_smoothing = eps;
    expect_invalid(a, "label_smoothing");
  }
  for (const float z : {-1e-4f, kInf, kNaN}) {
    a = args();
    a.z_loss = z;
    expect_invalid(a, "z_loss");
  }
  for (const float c : {-1.0f, kNaN, kInf}) {
    a = args();
    a.softcap = c;
    expect_invalid(a, "softcap");
  }
}

TEST(CrossEntropyValidate, OutputErrorsNameTheOutput) {
  CrossEntropyArgs a = args();
  a.loss = faddr(3, 2);
  expect_invalid(a, "loss");
  a = args();
  a.lse = faddr(4, 1);
  expect_invalid(a, "lse");

  a = args();
  a.dlogits.row_stride = kCols - 1;
  expect_invalid(a, "dlogits");
  a = args();
  a.dlogits.ptr = addr(5, 1);
  expect_invalid(a, "dlogits");
  a = args();
  a.dlogits.dtype = static_cast<DType>(9);
  expect_invalid(a, "dlogits");
  a = args();
  a.dlogits.dtype = DType::kFloat16;  // logits are bf16
  expect_invalid(a, "dlogits");

  a = args();
  a.dloss = faddr(6, 2);
  expect_invalid(a, "dloss");
  a = args();
  a.dlogits = {};  // an upstream gradient only scales dlogits
  expect_invalid(a, "dloss");
  a.dloss = nullptr;  // forward only
  EXPECT_TRUE(can_implement(a).ok());
}

// In place is the same pointer and row stride; any other overlap of the two
// (byte ranges first element .. last element) is refused.
TEST(CrossEntropyValidate, DlogitsInPlaceOrDisjoint) {
  const int64_t es = 2;  // bf16
  CrossEntropyArgs a = args();
  a.dlogits = {const_cast<void*>(a.logits.ptr), a.logits.dtype, a.logits.row_stride};
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
  a.logits.row_stride = a.dlogits.row_stride = kCols + 24;  // padded, still in place
  EXPECT_TRUE(can_implement(a).ok());
  a.dlogits.row_stride = kCols + 8;  // same pointer, another stride
  expect_invalid(a, "dlogits");

  // Shifted by one element: overlaps.
  a = args();
  a.dlogits.ptr = static_cast<char*>(const_cast<void*>(a.logits.ptr)) + es;
  expect_invalid(a, "dlogits");
  // dlogits ending inside logits' first row.
  a.dlogits.ptr = static_cast<char*>(const_cast<void*>(a.logits.ptr)) - ((kRows - 1) * kCols + 1) * es;
  expect_invalid(a, "dlogits");
  // dlogits interleaved into logits' row gaps: the ranges overlap (refused,
  // although no element is shared).
  a = args();
  a.logits.row_stride = a.dlogits.row_stride = 2 * kCols;
  a.dlogits.ptr = static_cast<char*>(const_cast<void*>(a.logits.ptr)) + kCols * es;
  expect_invalid(a, "dlogits");
  // Adjacent on either side: disjoint.
  a = args();
  a.dlogits.ptr = static_cast<char*>(const_cast<void*>(a.logits.ptr)) + kRows * kCols * es;
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
  a.dlogits.ptr = static_cast<char*>(const_cast<void*>(a.logits.ptr)) - kRows * kCols * es;
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
  // With no rows nothing is addressed: any dlogits passes.
  a = args();
  a.rows = 0;
  a.dlogits.ptr = static_cast<char*>(const_cast<void*>(a.logits.ptr)) + es;
  EXPECT_TRUE(can_implement(a).ok());
}

// Every other output (loss, lse, shard_stats, the workspace) overlaps no
// operand and no other output; the error names the output. (dlogits: the
// test above.)
TEST(CrossEntropyValidate, OutputsOverlapNothing) {
  CrossEntropyArgs a = args();
  a.loss = faddr(1, 8);  // inside target
  expect_invalid(a, "loss");
  a = args();
  a.lse = faddr(0, 64);  // inside the logits
  expect_invalid(a, "lse");
  a = args();
  a.lse = faddr(3);  // lse over loss: two outputs
  expect_invalid(a, "lse");
  a = args();
  a.workspace = addr(5, 256);  // inside dlogits
  expect_invalid(a, "workspace");
  a = args();
  a.loss = faddr(6);  // over dloss
  expect_invalid(a, "loss");
  a = args();
  a.loss = faddr(2, (kCols - 1) * 4);  // the weight's last class
  expect_invalid(a, "loss");
  a.loss = faddr(2, kCols * 4);  // just past it
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
  // The statistics mode: shard_stats over the weight of every class.
  a = args();
  a.num_classes = 3 * kCols;
  a.class_offset = kCols;
  a.loss = a.lse = nullptr;
  a.dlogits = {};
  a.dloss = nullptr;
  a.shard_stats = faddr(2, 16 * 300);  // past the shard's cols weights, inside num_classes'
  expect_invalid(a, "shard_stats");
  a.shard_stats = faddr(8);
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
  // loss and dloss: a float a row with reduction none, else one.
  a = args();
  a.loss = faddr(6, 4);  // right after dloss's first float
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;  // mean: one each
  a.reduction = Reduction::kSum;
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
  a.reduction = Reduction::kNone;  // a row each
  expect_invalid(a, "loss");
  // The target's rows at its stride: (rows - 1) * stride + 1 indices.
  a = args();
  a.target_stride = 10;
  a.loss = faddr(1, ((kRows - 1) * 10) * 8);  // the last row's index
  expect_invalid(a, "loss");
  a.loss = faddr(1, ((kRows - 1) * 10 + 1) * 8);  // just past it
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
  // No rows: nothing is addressed.
  a = args();
  a.rows = 0;
  a.lse = faddr(0);
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
}

// cross_entropy_scale_grad: the factors every row reads lie apart from
// dlogits (a row would read one another had scaled); the error names the
// output, dlogits.
TEST(CrossEntropyScaleValidate, DlossApartFromDlogits) {
  CrossEntropyGradScaleArgs a = scale_args();
  a.dloss = faddr(0, 64);  // inside dlogits
  expect_invalid(a, "dlogits");
  a.per_row = false;  // one factor, still inside
  expect_invalid(a, "dlogits");
  const uintptr_t end = ((kRows - 1) * (kCols + 3) + kCols) * 2;  // one past dlogits' last byte
  a.dloss = faddr(0, (end + 3) / 4 * 4);  // the next float
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
  a.per_row = true;
  a.dloss = faddr(0, (end + 3) / 4 * 4 - 4 * kRows);  // a row's factors ending inside dlogits
  expect_invalid(a, "dlogits");
}

TEST(CrossEntropyValidate, WorkspaceErrors) {
  CrossEntropyArgs a = args();
  size_t need = 0;
  ASSERT_TRUE(cross_entropy_workspace_bytes(a, &need).ok());
  ASSERT_GT(need, 0u);
  a.workspace = nullptr;
  expect_invalid(a, "workspace");
  a = args();
  a.workspace = addr(7, 8);  // 8-byte aligned only
  expect_invalid(a, "workspace");
  a = args();
  a.workspace_bytes = need - 1;
  expect_invalid(a, "workspace_bytes");
  a.workspace_bytes = need;
  EXPECT_TRUE(can_implement(a).ok());
  // No workspace needed: none checked.
  a = args();
  a.reduction = Reduction::kNone;
  a.weight = nullptr;
  a.workspace = addr(7, 3);
  a.workspace_bytes = 0;
  EXPECT_TRUE(can_implement(a).ok());
  a.workspace = nullptr;
  EXPECT_TRUE(can_implement(a).ok());
  // No rows: nothing to check (a reduced loss over nothing needs no totals).
  a = args();
  a.rows = 0;
  a.target = nullptr;
  a.workspace = nullptr;
  a.workspace_bytes = 0;
  EXPECT_TRUE(can_implement(a).ok());
}

// Workspace: 16 bytes of totals (W, R, sum w) for a mean with a gradient
// (which divides by W and R), or for class weights with smoothing; then, for
// a reduced loss that is written, one fp32 share per row -- two arrays for a
// mean (cross-entropy and z-loss terms, the second 16-byte aligned), whose
// finish kernel computes W and R itself; rounded up to 16 bytes.
TEST(CrossEntropyWorkspace, BytesForEveryReductionAndOption) {
  auto bytes = [](Reduction red, int64_t rows, bool weight, float eps, bool loss, bool grad = true) {
    CrossEntropyArgs a = args();
    a.reduction = red;
    a.rows = rows;
    a.weight = weight ? faddr(2) : nullptr;
    a.label_smoothing = eps;
    a.loss = loss ? faddr(3) : nullptr;
    if (!grad) {
      a.dlogits = {};
      a.dloss = nullptr;
    }
    a.workspace = nullptr;  // the query does not need one
    size_t b = 12345;
    const Status st = cross_entropy_workspace_bytes(a, &b);
    EXPECT_TRUE(st.ok()) << st.message;
    return b;
  };
  auto round16 = [](size_t b) { return (b + 15) / 16 * 16; };
  for (const int64_t rows : {int64_t(0), int64_t(1), int64_t(3), int64_t(4), int64_t(7), int64_t(289), int64_t(100000)}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    // One row's reduced loss is written by its own kernel: no shares
    // (RowTuning::ce_one_row_loss).
    const size_t shares = rows == 1 ? 0 : size_t(rows) * 4;
    // The scalar kernels' parts: one per 16384 rows (or classes), 16 bytes
    // each, between the totals and the shares when there is more than one.
    const int64_t parts = std::max<int64_t>({int64_t(1), (rows + 16383) / 16384, (kCols + 16383) / 16384});
    auto layout = [&](size_t totals, size_t sh, bool two_arrays) {
      const size_t head = totals + ((totals || sh) && parts > 1 ? size_t(parts) * 16 : 0);
      return two_arrays ? round16(round16(head + sh) + sh) : round16(head + sh);
    };
    for (const bool weight : {false, true}) {
      for (const float eps : {0.0f, 0.1f}) {
        const size_t tfs = weight && eps != 0.0f ? 16 : 0;  // totals for smoothing's sum of the weights
        SCOPED_TRACE(std::string(weight ? "weight" : "no weight") + ", eps " + std::to_string(eps));
        for (const bool grad : {true, false}) {
          SCOPED_TRACE(grad ? "gradient" : "no gradient");
          // none: the totals only for weighted smoothing's sum of the weights.
          EXPECT_EQ(bytes(Reduction::kNone, rows, weight, eps, true, grad), layout(tfs, 0, false));
          EXPECT_EQ(bytes(Reduction::kNone, rows, weight, eps, false, grad), layout(tfs, 0, false));
          // mean: the totals with a gradient (or for smoothing's sum of the
          // weights), two share arrays when the loss is written.
          const size_t tm = grad ? 16 : tfs;
          EXPECT_EQ(bytes(Reduction::kMean, rows, weight, eps, true, grad), layout(tm, shares, true));
          EXPECT_EQ(bytes(Reduction::kMean, rows, weight, eps, false, grad), layout(tm, 0, false));
          // sum: one share array when the loss is written; the totals as for none.
          EXPECT_EQ(bytes(Reduction::kSum, rows, weight, eps, true, grad), layout(tfs, shares, false));
          EXPECT_EQ(bytes(Reduction::kSum, rows, weight, eps, false, grad), layout(tfs, 0, false));
        }
      }
    }
  }
  // Worked values: 289 rows, mean with a gradient: 16 + 1156 = 1172 -> 1184,
  // + 1156 = 2340 -> 2352; without: 1156 -> 1168, + 1156 = 2324 -> 2336;
  // sum: 1156 -> 1168.
  EXPECT_EQ(bytes(Reduction::kMean, 289, false, 0.0f, true), 2352u);
  EXPECT_EQ(bytes(Reduction::kMean, 289, false, 0.0f, true, false), 2336u);
  EXPECT_EQ(bytes(Reduction::kSum, 289, false, 0.0f, true), 1168u);
  EXPECT_EQ(bytes(Reduction::kSum, 4, false, 0.0f, true), 16u);
  // One row: the totals alone with a gradient, nothing without; the shares
  // (16 + 4 -> 32, + 4 -> 48; 4 -> 16, + 4 -> 32) with ce_one_row_loss off.
  EXPECT_EQ(bytes(Reduction::kMean, 1, false, 0.0f, true), 16u);
  EXPECT_EQ(bytes(Reduction::kMean, 1, false, 0.0f, true, false), 0u);
  EXPECT_EQ(bytes(Reduction::kSum, 1, false, 0.0f, true, false), 0u);
  RowTuning off = default_row_tuning();
  off.ce_one_row_loss = 0;
  set_row_tuning(&off);
  const size_t off_grad = bytes(Reduction::kMean, 1, false, 0.0f, true);
  const size_t off_plain = bytes(Reduction::kMean, 1, false, 0.0f, true, false);
  const size_t off_sum = bytes(Reduction::kSum, 1, false, 0.0f, true, false);
  set_row_tuning(nullptr);
  EXPECT_EQ(off_grad, 48u);
  EXPECT_EQ(off_plain, 32u);
  EXPECT_EQ(off_sum, 16u);
  // 100000 rows: 7 parts: 16 + 112 + 400000 = 400128, + 400000 = 800128;
  // without a gradient 112 + 400000 = 400112, + 400000 = 800112.
  EXPECT_EQ(bytes(Reduction::kMean, 100000, false, 0.0f, true), 800128u);
  EXPECT_EQ(bytes(Reduction::kMean, 100000, false, 0.0f, true, false), 800112u);
}

// Vocabulary shards: the offset inside the vocabulary, one mode a call, and
// each mode's outputs; the statistics need no workspace, the gradient from
// lse the totals only.
TEST(CrossEntropyValidate, ShardModes) {
  auto shard = [] {
    CrossEntropyArgs a = args();
    a.loss = nullptr;
    a.lse = nullptr;
    a.dlogits = {};
    a.dloss = nullptr;
    a.class_offset = 2 * kCols;  // [2000, 3000) of 3001 classes
    a.num_classes = 3 * kCols + 1;
    a.shard_stats = faddr(8);
    return a;
  };
  EXPECT_TRUE(can_implement(shard()).ok()) << can_implement(shard()).message;
  size_t bytes = 1;
  ASSERT_TRUE(cross_entropy_workspace_bytes(shard(), &bytes).ok());
  EXPECT_EQ(bytes, 0u);
  CrossEntropyArgs a = shard();
  a.class_offset = 2 * kCols + 2;  // [2002, 3002) past 3001 classes
  expect_invalid(a, "class_offset");
  a = shard();
  a.class_offset = -1;
  expect_invalid(a, "class_offset");
  a = shard();
  a.num_classes = -5;
  expect_invalid(a, "num_classes");
  a = shard();
  a.num_classes = 0;
  expect_invalid(a, "class_offset");  // an offset needs num_classes
  a = shard();
  a.shard_stats = nullptr;
  expect_invalid(a, "num_classes");  // a shard cannot write the loss
  a = shard();
  a.shard_stats = faddr(8, 8);
  expect_invalid(a, "shard_stats");
  a = shard();
  a.loss = faddr(3);
  expect_invalid(a, "loss");
  a = shard();
  a.lse = faddr(4);
  expect_invalid(a, "lse");
  a = shard();
  a.dlogits = {addr(5), DType::kBFloat16, kCols};
  expect_invalid(a, "dlogits");
  a = shard();
  a.lse_in = faddr(9);
  expect_invalid(a, "shard_stats");  // both modes
  // The gradient from lse.
  auto grad = [&] {
    CrossEntropyArgs g = shard();
    g.shard_stats = nullptr;
    g.lse_in = faddr(9);
    g.dlogits = {addr(5), DType::kBFloat16, kCols};
    g.dloss = faddr(6);
    return g;
  };
  EXPECT_TRUE(can_implement(grad()).ok()) << can_implement(grad()).message;
  ASSERT_TRUE(cross_entropy_workspace_bytes(grad(), &bytes).ok());
  EXPECT_EQ(bytes, 16u);  // a mean's totals; no shares, no lse
  a = grad();
  a.dlogits = {};
  a.dloss = nullptr;
  expect_invalid(a, "dlogits");
  a = grad();
  a.lse_in = faddr(9, 2);
  expect_invalid(a, "lse_in");
  a = grad();
  a.loss = faddr(3);
  expect_invalid(a, "loss");
  a = grad();
  a.lse = faddr(4);
  expect_invalid(a, "lse");
  // Unsharded, both modes are valid too.
  a = grad();
  a.class_offset = 0;
  a.num_classes = 0;
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
}

// The combine mode: the shards' statistics in, loss and lse of the whole
// vocabulary out; no logits, no gradient.
TEST(CrossEntropyValidate, CombineMode) {
  auto combine = [] {
    CrossEntropyArgs a = args();  // kMean, loss and lse
    a.logits = {nullptr, DType::kBFloat16, 0};
    a.dlogits = {};
    a.dloss = nullptr;
    a.combine_stats = faddr(8);
    a.combine_shards = 3;
    return a;
  };
  EXPECT_TRUE(can_implement(combine()).ok()) << can_implement(combine()).message;
  size_t bytes = 0;
  ASSERT_TRUE(cross_entropy_workspace_bytes(combine(), &bytes).ok());
  // The totals (class-weighted smoothing's sum of the weights), then the 4
  // rows' cross-entropy terms and their z-loss terms (a mean).
  EXPECT_EQ(bytes, 48u);
  CrossEntropyArgs a = combine();
  a.num_classes = kCols;  // equal to cols: allowed
  EXPECT_TRUE(can_implement(a).ok()) << can_implement(a).message;
  a = combine();
  a.logits = {addr(1), DType::kBFloat16, kCols};
  expect_invalid(a, "logits");
  a = combine();
  a.combine_shards = 0;
  expect_invalid(a, "combine_shards");
  a = combine();
  a.combine_stats = nullptr;  // shards without statistics
  expect_invalid(a, "combine_shards");
  a = combine();
  a.combine_stats = faddr(8, 4);
  expect_invalid(a, "combine_stats");
  a = combine();
  a.shard_stats = faddr(9);
  expect_invalid(a, "shard_stats");
  a = combine();
  a.lse_in = faddr(9);
  expect_invalid(a, "lse_in");
  a = combine();
  a.dlogits = {addr(5), DType::kBFloat16, kCols};
  expect_invalid(a, "dlogits");
  a = combine();
  a.num_classes = 3 * kCols;
  expect_invalid(a, "num_classes");
  a = combine();
  a.num_classes = kCols;
  a.class_offset = 1;
  expect_invalid(a, "class_offset");
  a = combine();
  a.combine_shards = int64_t(1) << 60;
  expect_invalid(a, "combine_shards");
}

// The plain options' gradient of long rows takes two passes; without an lse
// output the workspace holds the rows' lse between them (16-byte aligned,
// after the shares).
TEST(CrossEntropyWorkspace, TwoPassGradientHoldsLse) {
  const int64_t split = default_row_tuning().ce_grad_split_min_cols;
  auto bytes = [&](int64_t cols, float softcap, bool weight, float eps, bool lse, bool grad) {
    CrossEntropyArgs a = args();
    a.rows = 7;
    a.cols = cols;
    a.logits.row_stride = a.dlogits.row_stride = cols;
    a.softcap = softcap;
    a.weight = weight ? faddr(2) : nullptr;
    a.label_smoothing = eps;
    a.lse = lse ? faddr(4) : nullptr;
    if (!grad) {
      a.dlogits = {};
      a.dloss = nullptr;
    }
    a.reduction = Reduction::kSum;  // shares: 7 rows, 28 -> 32 bytes
    size_t b = 0;
    EXPECT_TRUE(cross_entropy_workspace_bytes(a, &b).ok());
    return b;
  };
  auto parts_bytes = [](int64_t cols) {
    const int64_t parts = (cols + 16383) / 16384;
    return parts > 1 ? size_t(parts) * 16 : size_t(0);
  };
  // Weighted smoothing needs the totals (16 bytes) and is not plain.
  const size_t before = parts_bytes(split) + 32;
  EXPECT_EQ(bytes(split, 0.0f, false, 0.1f, false, true), before + 32);  // + 7 lse, 28 -> 32
  EXPECT_EQ(bytes(split, 0.0f, true, 0.0f, false, true), before + 32);   // weights alone are plain
  EXPECT_EQ(bytes(split, 0.0f, false, 0.0f, true, true), before);        // the caller's lse
  EXPECT_EQ(bytes(split, 30.0f, false, 0.0f, false, true), before);      // softcap: fused
  EXPECT_EQ(bytes(split, 0.0f, true, 0.1f, false, true), 16 + before);   // weighted smoothing: fused
  EXPECT_EQ(bytes(split, 0.0f, false, 0.0f, false, false), before);      // no gradient
  EXPECT_EQ(bytes(split - 1, 0.0f, false, 0.0f, false, true), parts_bytes(split - 1) + 32);
}

// Fewer rows than the bulk-copy kernel wants: the plain forward streams rows
// of 48 KB and more (bf16 from 24576 classes, fp32 from 12288), and keeps
// the register tiles below.
TEST(CrossEntropyPlan, PlainForwardStreamsLongRows) {
  const DeviceLimits lim;
  const int64_t rows = default_row_tuning().ce_fwd_bulk_min_rows - 1;
  EXPECT_EQ(cross_entropy_plan_description(rows, 24576, DType::kBFloat16, lim, true), "fwd-stream whole");
  EXPECT_EQ(cross_entropy_plan_description(rows, 12288, DType::kFloat32, lim, true), "fwd-stream whole");
  EXPECT_EQ(cross_entropy_plan_description(rows, 24575, DType::kBFloat16, lim, true).rfind("reg", 0), 0u);
  EXPECT_EQ(cross_entropy_plan_description(rows, 12287, DType::kFloat32, lim, true).rfind("reg", 0), 0u);
  // A general option's gradient keeps the fused row kernels (staged, for
  // these rows); its forward alone, the register tiles.
  EXPECT_EQ(cross_entropy_plan_description(rows, 50304, DType::kBFloat16, lim, false, true).rfind("stage", 0), 0u);
  EXPECT_EQ(cross_entropy_plan_description(rows, 50304, DType::kBFloat16, lim, true, true).rfind("reg", 0), 0u);
}

// Lean forward rows (ce_reg_kernel's kLean, RowTuning::reg_lean bit 2): a
// plain forward's plan is lean exactly where its register tile is
// unclustered, 1 or 2 vectors a thread, one team owning its CTA and the row
// exactly that tile; never a gradient, a general option's forward or
// shifted rows, never with the bit off.
TEST(CrossEntropyPlan, LeanForwardRowsAreExactlyTheOneTeamTilesThatTheRowFills) {
  const DeviceLimits lim;
  auto text = [&](int64_t rows, int64_t cols, DType dt, bool forward = true, bool general = false,
                  bool shifted = false) {
    return cross_entropy_plan_description(rows, cols, dt, lim, forward, general, shifted);
  };
  auto lean = [](const std::string& t) { return t.find(" lean") != std::string::npos; };
  EXPECT_TRUE(lean(text(1, 2048, DType::kBFloat16))) << text(1, 2048, DType::kBFloat16);
  EXPECT_TRUE(lean(text(16, 4096, DType::kBFloat16))) << text(16, 4096, DType::kBFloat16);
  EXPECT_FALSE(lean(text(1, 2048, DType::kBFloat16, false))) << "gradient: " << text(1, 2048, DType::kBFloat16, false);
  EXPECT_FALSE(lean(text(1, 2048, DType::kBFloat16, true, true))) << "softcap: " << text(1, 2048, DType::kBFloat16, true, true);
  EXPECT_FALSE(lean(text(1, 2047, DType::kBFloat16, true, false, true))) << text(1, 2047, DType::kBFloat16, true, false, true);
  EXPECT_FALSE(lean(text(1, 2056, DType::kBFloat16))) << text(1, 2056, DType::kBFloat16);
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    const int64_t vec = 16 / dtype_size(dt);
    for (int64_t rows : {1, 16, 4096}) {
      for (int64_t cols = vec; cols <= 16384; cols += vec) {
        const std::string t = text(rows, cols, dt);
        int team = 0, thr = 0, cl = 0, vpt = 0;
        const bool reg = std::sscanf(t.c_str(), "reg team %d thr %d cl %d vpt %d", &team, &thr, &cl, &vpt) == 4;
        const bool rule = reg && cl == 1 && vpt <= 2 && team == thr && team % 32 == 0 && int64_t(vpt) * team * vec == cols;
        ASSERT_EQ(lean(t), rule) << "rows " << rows << " N " << cols << ": " << t;
      }
    }
  }
  RowTuning t = default_row_tuning();
  t.reg_lean = 3;  // the norms' and softmax's bits alone
  set_row_tuning(&t);
  EXPECT_FALSE(lean(text(1, 2048, DType::kBFloat16)));
  set_row_tuning(nullptr);
}

// reg_staged_balance (on by default since the forty-second session's sweep:
// the bf16 fused gradient at 50304 classes 79.1 -> 82.4% of copy) fits the staged fused
// gradient's CTAs to the row: GPT-NeoX's 50304 classes (6288 bf16 vectors)
// in 2 x 224 threads at 16 vectors instead of 2 x 256 (12.5% of the
// staging idle), fp32 (12576) in 4 x 224; Qwen's 151936 and Llama 3's
// 128256 already fill 256-thread CTAs (18992 bf16 vectors: 5 x 256 x 16
// hold 20480, and 4.6 CTAs' worth needs 238 threads at 5).
TEST(CrossEntropyPlan, BalancedStagedCtasFitTheRow) {
  const DeviceLimits lim;
  RowTuning t = default_row_tuning();
  t.reg_staged_balance = 1;
  set_row_tuning(&t);
  EXPECT_EQ(cross_entropy_plan_description(4096, 50304, DType::kBFloat16, lim, false),
            "stage team  224 thr  224 cl  2 vpt 16");
  EXPECT_EQ(cross_entropy_plan_description(4096, 50304, DType::kFloat32, lim, false),
            "stage team  224 thr  224 cl  4 vpt 16");
  EXPECT_EQ(cross_entropy_plan_description(4096, 151936, DType::kBFloat16, lim, false),
            "stage team  256 thr  256 cl  5 vpt 16");
  EXPECT_EQ(cross_entropy_plan_description(4096, 128256, DType::kBFloat16, lim, false),
            "stage team  256 thr  256 cl  4 vpt 16");
  t.reg_staged_balance = 0;
  set_row_tuning(&t);
  EXPECT_EQ(cross_entropy_plan_description(4096, 50304, DType::kBFloat16, lim, false),
            "stage team  256 thr  256 cl  2 vpt 16");
  set_row_tuning(nullptr);
  EXPECT_EQ(cross_entropy_plan_description(4096, 50304, DType::kBFloat16, lim, false),
            "stage team  224 thr  224 cl  2 vpt 16")
      << "the default";
}

// Many rows in the bulk window (16-bit 8 KB to 128 KB, fp32 4 KB to 128 KB:
// src/config.cpp): the plain forward (and the two-pass gradient's forward)
// takes the bulk-copy kernel; shorter or longer rows, fewer rows, a general
// option or a fused gradient keep the row kernels.
TEST(CrossEntropyPlan, ManyPlainRowsInTheWindowTakeTheBulkKernel) {
  const DeviceLimits lim;
  const RowTuning t = default_row_tuning();
  const int64_t many = t.ce_fwd_bulk_min_rows;
  ASSERT_GT(many, 0);
  const int64_t lo2 = t.ce_fwd_bulk_min_bytes2 / 2, lo4 = t.ce_fwd_bulk_min_bytes4 / 4;
  const int64_t hi2 = t.ce_fwd_bulk_max_bytes / 2, hi4 = t.ce_fwd_bulk_max_bytes / 4;
  for (const DType dt : {DType::kBFloat16, DType::kFloat16}) {
    EXPECT_EQ(cross_entropy_plan_description(many, lo2, dt, lim, true), "fwd-bulk whole");
    EXPECT_EQ(cross_entropy_plan_description(many, hi2, dt, lim, true), "fwd-bulk whole");
    EXPECT_EQ(cross_entropy_plan_description(many, lo2 - 8, dt, lim, true).rfind("reg", 0), 0u);
    EXPECT_EQ(cross_entropy_plan_description(many, hi2 + 8, dt, lim, true), "fwd-stream whole");
  }
  EXPECT_EQ(cross_entropy_plan_description(many, lo4, DType::kFloat32, lim, true), "fwd-bulk whole");
  EXPECT_EQ(cross_entropy_plan_description(many, hi4, DType::kFloat32, lim, true), "fwd-bulk whole");
  EXPECT_EQ(cross_entropy_plan_description(many, lo4 - 4, DType::kFloat32, lim, true).rfind("reg", 0), 0u);
  EXPECT_EQ(cross_entropy_plan_description(many, hi4 + 4, DType::kFloat32, lim, true), "fwd-stream whole");
  EXPECT_EQ(cross_entropy_plan_description(many, 262144, DType::kBFloat16, lim, true), "fwd-stream whole");
  EXPECT_EQ(cross_entropy_plan_description(many - 1, 16384, DType::kBFloat16, lim, true).rfind("reg", 0), 0u);
  EXPECT_EQ(cross_entropy_plan_description(many, 16384, DType::kBFloat16, lim, true, true).rfind("reg", 0), 0u);
  EXPECT_EQ(cross_entropy_plan_description(many, 16384, DType::kBFloat16, lim, false).rfind("reg", 0), 0u);
  // (The two-pass gradient's forward, with staging off.)
  RowTuning unstaged = t;
  unstaged.ce_staged_grad = 0;
  set_row_tuning(&unstaged);
  EXPECT_EQ(cross_entropy_plan_description(many, 50304, DType::kBFloat16, lim, false), "2-pass: fwd-bulk whole");
  EXPECT_EQ(cross_entropy_plan_description(many, 262144, DType::kBFloat16, lim, false), "2-pass: fwd-stream whole");
  set_row_tuning(nullptr);
  // Off, and the kernel's 1 KB floor whatever the tuning.
  RowTuning off = t;
  off.ce_fwd_bulk_min_rows = 0;
  set_row_tuning(&off);
  EXPECT_EQ(cross_entropy_plan_description(many, 16384, DType::kBFloat16, lim, true).rfind("reg", 0), 0u);
  RowTuning wide = t;
  wide.ce_fwd_bulk_min_bytes2 = 0;
  set_row_tuning(&wide);
  EXPECT_EQ(cross_entropy_plan_description(many, 512, DType::kBFloat16, lim, true), "fwd-bulk whole");
  EXPECT_EQ(cross_entropy_plan_description(many, 504, DType::kBFloat16, lim, true).rfind("reg", 0), 0u);
  set_row_tuning(nullptr);
}

// Without staging (ce_staged_grad = 0), or past what a 16-CTA cluster
// stages, the plain options' gradient of long rows takes two passes.
TEST(CrossEntropyPlan, LongPlainGradientsTakeTwoPasses) {
  const DeviceLimits lim;
  RowTuning t = default_row_tuning();
  t.ce_staged_grad = 0;
  set_row_tuning(&t);
  const int64_t split = t.ce_grad_split_min_cols;
  const std::string two = cross_entropy_plan_description(1024, split, DType::kBFloat16, lim, false);
  EXPECT_EQ(two.rfind("2-pass: ", 0), 0u) << two;
  EXPECT_EQ(two.substr(8), cross_entropy_plan_description(1024, split, DType::kBFloat16, lim, true));
  const std::string one = cross_entropy_plan_description(1024, split - 1, DType::kBFloat16, lim, false);
  EXPECT_EQ(one.rfind("reg", 0), 0u) << one;
  set_row_tuning(nullptr);
  // 16 CTAs of 256 threads at 16 vectors hold 524288 16-bit logits.
  EXPECT_EQ(cross_entropy_plan_description(8192, 524288, DType::kBFloat16, lim, false),
            "stage team  256 thr  256 cl 16 vpt 16");
  EXPECT_EQ(cross_entropy_plan_description(8192, 524289, DType::kBFloat16, lim, false), "2-pass: fwd-stream whole");
  EXPECT_EQ(cross_entropy_plan_description(8192, 262145, DType::kFloat32, lim, false), "2-pass: fwd-stream whole");
}

// The default tuning stages every fused gradient of aligned rows from
// ce_staged_min_cols classes that a cluster of 2..16 CTAs of 256 threads
// holds at 16 vectors a thread (at 8 where one CTA of 16 would hold it):
// the plain options' (ahead of the two-pass gradient) and the general ones'
// (ahead of the register clusters); the forward never.
TEST(CrossEntropyPlan, FusedGradientsOfLongRowsAreStaged) {
  const DeviceLimits lim;
  const RowTuning d = default_row_tuning();
  ASSERT_EQ(d.ce_staged_vpt, 16);
  ASSERT_EQ(d.ce_staged_clusters, -1);  // one cluster a row (persistent measured slower, 8be4e96)
  auto plan = [&](int64_t cols, DType dt, bool general = false) {
    return cross_entropy_plan_description(8192, cols, dt, lim, false, general);
  };
  const int64_t lo = d.ce_staged_min_cols;
  // 16-bit: 4096 vectors (32768 elements) a CTA at 16 a thread, 2048 at 8.
  EXPECT_EQ(plan(32000, DType::kBFloat16), "stage team  256 thr  256 cl  2 vpt 8");
  EXPECT_EQ(plan(32768, DType::kBFloat16), "stage team  256 thr  256 cl  2 vpt 8");
  // (CTAs fitted to the row: reg_staged_balance; 4097 vectors in 2 x 160.)
  EXPECT_EQ(plan(32769, DType::kBFloat16), "stage team  160 thr  160 cl  2 vpt 16");
  EXPECT_EQ(plan(50304, DType::kBFloat16), "stage team  224 thr  224 cl  2 vpt 16");
  EXPECT_EQ(plan(128256, DType::kBFloat16), "stage team  256 thr  256 cl  4 vpt 16");
  EXPECT_EQ(plan(151936, DType::kFloat16), "stage team  256 thr  256 cl  5 vpt 16");
  EXPECT_EQ(plan(262144, DType::kBFloat16), "stage team  256 thr  256 cl  8 vpt 16");
  EXPECT_EQ(plan(524288, DType::kBFloat16), "stage team  256 thr  256 cl 16 vpt 16");
  EXPECT_EQ(plan(128256, DType::kBFloat16, true), "stage team  256 thr  256 cl  4 vpt 16");
  // fp32: 4096 vectors of 4 elements a CTA at 16.
  EXPECT_EQ(plan(16384, DType::kFloat32), "stage team  256 thr  256 cl  2 vpt 8");
  EXPECT_EQ(plan(32000, DType::kFloat32), "stage team  256 thr  256 cl  2 vpt 16");
  EXPECT_EQ(plan(65537, DType::kFloat32), "stage team  224 thr  224 cl  5 vpt 16");
  EXPECT_EQ(plan(151936, DType::kFloat32, true), "stage team  256 thr  256 cl 10 vpt 16");
  EXPECT_EQ(plan(262144, DType::kFloat32), "stage team  256 thr  256 cl 16 vpt 16");
  // Below the window, rows one register CTA holds, and the forward.
  EXPECT_EQ(plan(lo - 1, DType::kFloat32).rfind("reg", 0), 0u) << plan(lo - 1, DType::kFloat32);
  EXPECT_EQ(plan(16384, DType::kBFloat16).rfind("reg", 0), 0u) << plan(16384, DType::kBFloat16);
  EXPECT_EQ(cross_entropy_plan_description(8192, 128256, DType::kBFloat16, lim, true), "fwd-stream whole");
  // The dtype bits, CTAs wider than the staged kernels are built for, and
  // the tuned tile.
  RowTuning t = d;
  t.ce_staged_grad = 2;  // fp32 only
  set_row_tuning(&t);
  EXPECT_EQ(plan(128256, DType::kBFloat16), "2-pass: fwd-stream whole");
  EXPECT_EQ(plan(128256, DType::kBFloat16, true).rfind("reg", 0), 0u);
  EXPECT_EQ(plan(32000, DType::kFloat32), "stage team  256 thr  256 cl  2 vpt 16");
  t.ce_staged_grad = 1;  // 16-bit only
  set_row_tuning(&t);
  EXPECT_EQ(plan(32000, DType::kFloat32), "2-pass: fwd-bulk whole");
  EXPECT_EQ(plan(50304, DType::kFloat16), "stage team  224 thr  224 cl  2 vpt 16");
  t = d;
  t.reg_staged_team = 512;
  set_row_tuning(&t);
  EXPECT_EQ(plan(128256, DType::kBFloat16), "2-pass: fwd-stream whole");
  t = d;
  t.ce_staged_vpt = 12;  // not a tile the kernel is built with
  set_row_tuning(&t);
  EXPECT_EQ(plan(128256, DType::kBFloat16), "2-pass: fwd-stream whole");
  t = d;
  t.ce_staged_vpt = 8;
  set_row_tuning(&t);
  EXPECT_EQ(plan(128256, DType::kBFloat16), "stage team  256 thr  256 cl  8 vpt 8");
  EXPECT_EQ(plan(262151, DType::kBFloat16), "stage team  256 thr  256 cl  9 vpt 16");
  EXPECT_EQ(plan(65537, DType::kFloat32), "stage team  256 thr  256 cl  9 vpt 8");
  set_row_tuning(nullptr);
}

TEST(CrossEntropyValidate, NoRowsWithNothingToWriteIsANoOp) {
  // reduction none, or no loss: nothing is launched (host CI has no GPU).
  CrossEntropyArgs a;
  a.rows = 0;
  a.cols = 17;
  a.reduction = Reduction::kNone;
  EXPECT_TRUE(cross_entropy(a, nullptr).ok());
  a.reduction = Reduction::kMean;  // no loss pointer: no reduced value to write
  EXPECT_TRUE(cross_entropy(a, nullptr).ok());
  CrossEntropyGradScaleArgs s;
  s.rows = 0;
  s.cols = 17;
  EXPECT_TRUE(cross_entropy_scale_grad(s, nullptr).ok());
}

TEST(CrossEntropyScaleValidate, ErrorsNameTheArgument) {
  CrossEntropyGradScaleArgs a = scale_args();
  a.dlogits.ptr = nullptr;
  expect_invalid(a, "dlogits");
  a = scale_args();
  a.dlogits.row_stride = kCols - 1;
  expect_invalid(a, "dlogits");
  a = scale_args();
  a.dlogits.ptr = addr(0, 1);
  expect_invalid(a, "dlogits");
  a = scale_args();
  a.dlogits.dtype = static_cast<DType>(5);
  expect_invalid(a, "dlogits");
  a = scale_args();
  a.dloss = nullptr;
  expect_invalid(a, "dloss");
  a.per_row = false;
  expect_invalid(a, "dloss");
  a = scale_args();
  a.dloss = faddr(1, 2);
  expect_invalid(a, "dloss");
  // An fp32 gradient misaligned by an element is fine (element-wise kernel).
  a = scale_args();
  a.dlogits = {addr(0, 4), DType::kFloat32, kCols + 1};
  EXPECT_TRUE(can_implement(a).ok());
}

// The kernel each shape of tests/cpp/ops/cross_entropy_test.cu takes on an
// H100/H200 (default DeviceLimits, default tuning), so that the GPU cases
// keep covering every path: a register team inside a CTA, a whole CTA per
// row, a cluster per row, and the streaming kernel beyond the register tiles
// (misaligned rows stream too; the plan assumes aligned rows), and the
// staged clusters -- which the GPU tests' staging-off suite
// (CrossEntropyGpuUnstaged) turns back into register clusters. The plans of
// the fused gradient with a general option (softcap or class-weighted
// smoothing), as those cases have; the plain options' two passes:
// LongPlainGradientsTakeTwoPasses.
TEST(CrossEntropyPlan, GpuTestShapesCoverEveryKernel) {
  const DeviceLimits lim;
  struct Want {
    int64_t rows, cols;
    DType dtype;
    const char* kind;      // "team": team < threads; "cta": one CTA; "cluster"; "stage"; "stream"
    const char* unstaged;  // the kind with ce_staged_grad = 0
  };
  const Want wants[] = {
      {7, 1, DType::kFloat32, "team", "team"},          {289, 7, DType::kFloat32, "team", "team"},
      {289, 100, DType::kBFloat16, "team", "team"},     {289, 200, DType::kFloat16, "team", "team"},
      {289, 1000, DType::kBFloat16, "cta", "cta"},      {289, 4096, DType::kFloat32, "cta", "cta"},
      {7, 32000, DType::kBFloat16, "stage", "cta"},     {7, 32000, DType::kFloat32, "stage", "cluster"},
      {7, 50304, DType::kBFloat16, "stage", "cluster"}, {7, 128256, DType::kFloat16, "stage", "cluster"},
      {3, 262144, DType::kFloat32, "stage", "cluster"}, {3, 262144, DType::kBFloat16, "stage", "cluster"},
      {2, 300000, DType::kFloat32, "stream", "stream"}, {2, 600000, DType::kBFloat16, "stream", "stream"},
  };
  RowTuning off = default_row_tuning();
  off.ce_staged_grad = 0;
  struct Restore {
    ~Restore() { set_row_tuning(nullptr); }
  } restore;
  for (const bool staged : {true, false}) {
    set_row_tuning(staged ? nullptr : &off);
    for (const Want& w : wants) {
      const std::string d = cross_entropy_plan_description(w.rows, w.cols, w.dtype, lim, false, true);
      SCOPED_TRACE(std::to_string(w.rows) + " x " + std::to_string(w.cols) + " " + dtype_name(w.dtype) + ": " + d +
                   (staged ? "" : " (staging off)"));
      const std::string kind = staged ? w.kind : w.unstaged;
      if (kind == "stream" || kind == "stage") {
        EXPECT_EQ(d.rfind(kind, 0), 0u);
        continue;
      }
      ASSERT_EQ(d.rfind("reg", 0), 0u);
      int team = 0, threads = 0, cluster = 0, vpt = 0;
      ASSERT_EQ(std::sscanf(d.c_str(), "reg team %d thr %d cl %d vpt %d", &team, &threads, &cluster, &vpt), 4);
      if (kind == "team") {
        EXPECT_TRUE(team < threads && cluster == 1);
      } else if (kind == "cta") {
        EXPECT_TRUE(team == threads && cluster == 1);
      } else {
        EXPECT_GT(cluster, 1);
      }
    }
  }
}

// The plain forward (no gradient, softcap or weighted smoothing) takes the
// 8-vector tile for 16-bit rows of 4K-16K, as the softmax forward (shorter
// rows may keep 4 for a 32-thread team: 1000 classes do); the
// fused gradient keeps 4 (8 spills there).
// Shifted rows (odd V: each row's first logit inside a 16-byte vector,
// logits and dlogits at the same offset) take the plan of V + VEC - 1
// columns -- the register tiles, or the staged fused gradient where it
// stages those; never the bulk or two-pass kernels (whole vectors) -- and
// plain forwards of ce_fwd_stream_min_bytes or more the streaming forward
// (kShift: the head apart), where RowTuning::shifted_rows' bit 1 allows
// (on by default since the forty-fourth session's sweep); with the bit off,
// the element-wise streaming kernel.
TEST(CrossEntropyPlan, ShiftedRowsTakeTheRegisterTiles) {
  const DeviceLimits lim;
  EXPECT_EQ(default_row_tuning().shifted_rows & 2, 2);
  RowTuning off = default_row_tuning();
  off.shifted_rows = 0;
  set_row_tuning(&off);
  struct Mode {
    bool forward, general;
    bool wide() const { return forward && !general; }  // the plain forward's kernels
  };
  const Mode modes[] = {{true, false}, {false, false}, {false, true}, {true, true}};
  const int64_t vocabs[] = {1, 7, 1001, 4097, 32001, 50257, 128257, 151937};
  for (DType dt : {DType::kBFloat16, DType::kFloat32})
    for (const Mode m : modes)
      for (int64_t v : vocabs)
        EXPECT_EQ(cross_entropy_plan_description(4096, v, dt, lim, m.forward, m.general, true), "stream")
            << "the bit off, V = " << v;
  RowTuning t = default_row_tuning();
  t.shifted_rows = 2;
  set_row_tuning(&t);
  struct Restore {
    ~Restore() { set_row_tuning(nullptr); }
  } restore;
  for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
    const int64_t vec = 16 / dtype_size(dt);
    for (const Mode m : modes) {
      for (int64_t v : vocabs) {
        const std::string s = cross_entropy_plan_description(4096, v, dt, lim, m.forward, m.general, true);
        SCOPED_TRACE("V = " + std::to_string(v) + (m.forward ? " forward" : " gradient") +
                     (m.general ? ", general" : "") + ": " + s);
        if (m.wide() && v * dtype_size(dt) >= t.ce_fwd_stream_min_bytes) {
          EXPECT_EQ(s, "fwd-stream");
          continue;
        }
        int team = 0, threads = 0, cluster = 0, vpt = 0;
        ASSERT_EQ(std::sscanf(s.c_str(), "%*s team %d thr %d cl %d vpt %d", &team, &threads, &cluster, &vpt), 4);
        // The tiles cover the row from the vector before its first logit.
        EXPECT_GE(int64_t(cluster) * team * vpt * vec, v + vec - 1);
        if (s.rfind("stage", 0) == 0) {
          // The staged fused gradient, as aligned rows of V + VEC - 1.
          EXPECT_FALSE(m.forward);
          EXPECT_EQ(s, cross_entropy_plan_description(4096, v + vec - 1, dt, lim, false, m.general));
        } else {
          EXPECT_LE(vpt, m.wide() ? 8 : 4);
          if (cluster > 1) {
            EXPECT_EQ(vpt, 4);
          }
        }
      }
    }
    // Past 16 register CTAs: the streaming kernel.
    EXPECT_EQ(cross_entropy_plan_description(4096, 16 * 1024 * 4 * vec + 1, dt, lim, false, false, true), "stream");
  }
}

TEST(CrossEntropyPlan, PlainForwardTakesTheWideTile) {
  const DeviceLimits lim;
  RowTuning t = default_row_tuning();
  t.ce_fwd_bulk_min_rows = 0;  // the register tiles, not the bulk-copy kernel
  set_row_tuning(&t);
  struct Restore {
    ~Restore() { set_row_tuning(nullptr); }
  } restore;
  const int64_t rows = 4096;
  for (const int64_t cols : {int64_t(4096), int64_t(8192), int64_t(16384)}) {
    int team = 0, threads = 0, cluster = 0, vpt = 0;
    const std::string wide = cross_entropy_plan_description(rows, cols, DType::kBFloat16, lim, true);
    SCOPED_TRACE(std::to_string(cols) + ": " + wide);
    ASSERT_EQ(std::sscanf(wide.c_str(), "reg team %d thr %d cl %d vpt %d", &team, &threads, &cluster, &vpt), 4);
    EXPECT_EQ(vpt, 8);
    const std::string fused = cross_entropy_plan_description(rows, cols, DType::kBFloat16, lim, false);
    ASSERT_EQ(std::sscanf(fused.c_str(), "reg team %d thr %d cl %d vpt %d", &team, &threads, &cluster, &vpt), 4);
    EXPECT_LE(vpt, 4);
  }
}

}  // namespace
}  // namespace quack
