// quack-cpp public host API.
//
// One named-field Args struct and one function per op and direction. Pointers
// are raw device pointers; sizes and strides are int64 element counts; every
// call is asynchronous on the given stream. A call first validates its
// arguments (can_implement) and returns a Status naming the offending argument;
// nothing is launched then. The library never prints and never exits.
#pragma once

#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

namespace quack {

// Element types of tensors crossing the API.
enum class DType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

inline constexpr int dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }
const char* dtype_name(DType t);

enum class Code : int32_t {
  kSuccess = 0,
  kInvalidArgument,   // a shape, stride, pointer or value is outside the contract
  kUnsupported,       // a valid request this build or device cannot serve
  kCudaError,         // the CUDA runtime reported an error at launch
};

// Result of every call. `message` names the argument and what was expected.
struct [[nodiscard]] Status {
  Code code = Code::kSuccess;
  std::string message;

  bool ok() const { return code == Code::kSuccess; }
  static Status success() { return {}; }
};

// A row-major matrix view: row r, column c lives at ptr + r * row_stride + c.
// Columns are always contiguous (unit stride); row_stride >= cols.
struct MatrixRef {
  const void* ptr = nullptr;
  DType dtype = DType::kFloat32;
  int64_t row_stride = 0;  // in elements
};
struct MutMatrixRef {
  void* ptr = nullptr;
  DType dtype = DType::kFloat32;
  int64_t row_stride = 0;  // in elements
};
// A contiguous vector of length N (weights, biases).
struct VectorRef {
  const void* ptr = nullptr;
  DType dtype = DType::kFloat32;
};

// ---------------------------------------------------------------------------
// RMSNorm forward
//   h   = x + residual                       (fp32; residual optional)
//   rstd = 1 / sqrt(mean(h^2) + eps)
//   out = h * rstd * (weight + weight_offset) + bias
// weight and bias are optional; an absent weight is a scale of exactly 1
// (weight_offset then has no effect: it offsets a weight, Gemma's (1 + w)).
// residual_out (optional) receives h in its own dtype (pre-norm residual
// stream). rstd (optional) receives one fp32 per row.
struct RMSNormFwdArgs {
  int64_t rows = 0;  // M (0 is allowed: nothing is launched)
  int64_t cols = 0;  // N >= 1
  MatrixRef x;
  MatrixRef residual;        // ptr == nullptr: none
  VectorRef weight;          // ptr == nullptr: none
  VectorRef bias;            // ptr == nullptr: none
  MutMatrixRef out;
  MutMatrixRef residual_out; // ptr == nullptr: not written
  float* rstd = nullptr;     // [rows] fp32, optional
  float eps = 1e-6f;
  float weight_offset = 0.0f;
  // Optional device memory (rmsnorm_fwd_workspace_bytes(args) bytes, 16-byte
  // aligned, not used by another call at the same time). Rows of at least
  // kNormFwdWorkspaceMinCols columns may then take the grid kernel: a row spread
  // over every SM, its CTAs exchanging their partial sums through this
  // memory (fp32 and 16-bit x with fp32 weights at 1M columns are much
  // faster so). Its size grows with the rows: at most 16 bytes a row for
  // every 8192 columns (about 1/1000 of x's bytes). Without one (nullptr)
  // every row takes the other kernels: the results are the same within
  // rounding, only the speed differs.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Checks everything that can be checked without touching device memory.
Status can_implement(const RMSNormFwdArgs& args);
// *bytes: the device memory the call may use in args.workspace (0: none;
// args.workspace is then ignored). Validates args first, the workspace
// fields aside.
Status rmsnorm_fwd_workspace_bytes(const RMSNormFwdArgs& args, size_t* bytes);
// Validates, then launches on `stream`.
Status rmsnorm_fwd(const RMSNormFwdArgs& args, cudaStream_t stream);
// The shortest row (columns) that can need a forward workspace: below it
// the workspace queries return 0 whatever the arguments.
inline constexpr int64_t kNormFwdWorkspaceMinCols = int64_t(64) << 10;

// ---------------------------------------------------------------------------
// RMSNorm backward: the gradients of RMSNormFwdArgs' outputs, from the
// forward's normalised input h (x, or residual_out when the forward had a
// residual) and its rstd:
//   xhat = h * rstd,  g = dy * (weight + weight_offset)   (g = dy without a weight)
//   dh   = rstd * (g - xhat * mean(g * xhat)) + dresidual_out
//   dx = dh in dx's dtype; dresidual (optional) = dh in its own dtype
//   dweight = sum over rows of dy * xhat,  dbias = sum over rows of dy
// dweight and dbias are accumulated in fp32 and are deterministic: per-CTA
// partial sums in `workspace`, then a fixed-order reduction; bit-identical
// run after run on the same device. No float atomics.
struct MutVectorRef {
  void* ptr = nullptr;
  DType dtype = DType::kFloat32;
};

struct RMSNormBwdArgs {
  int64_t rows = 0;  // M (0 is allowed: the weight gradients are zeroed)
  int64_t cols = 0;  // N >= 1
  MatrixRef h;               // the forward's normalised input
  MatrixRef dy;              // gradient of out
  MatrixRef dresidual_out;   // ptr == nullptr: none (gradient arriving on residual_out)
  VectorRef weight;          // ptr == nullptr: none
  const float* rstd = nullptr;  // [rows] fp32, from the forward
  MutMatrixRef dx;
  MutMatrixRef dresidual;    // ptr == nullptr: not written
  MutVectorRef dweight;      // ptr == nullptr: not computed (needs weight)
  MutVectorRef dbias;        // ptr == nullptr: not computed
  float weight_offset = 0.0f;
  void* workspace = nullptr;    // rmsnorm_bwd_workspace_bytes(args) bytes, 16-byte aligned
  size_t workspace_bytes = 0;
};

Status can_implement(const RMSNormBwdArgs& args);
// *bytes: the device memory the call needs in args.workspace: the weight
// gradients' partial sums, and for aligned rows of one dtype longer than
// 128K (with or without dweight / dbias) the row sums the CTAs of a row
// exchange (asked for also where one register cluster runs the row instead:
// 16-bit rows of 240K-256K without dbias); 0 when neither dweight nor dbias
// is asked for and no row sums are exchanged. Depends on the shape, dtypes,
// alignment, the gradients asked for and the current device only.
Status rmsnorm_bwd_workspace_bytes(const RMSNormBwdArgs& args, size_t* bytes);
Status rmsnorm_bwd(const RMSNormBwdArgs& args, cudaStream_t stream);

// ---------------------------------------------------------------------------
// LayerNorm: RMSNorm's arguments and options with the row's mean removed
// first (the same kernels, in their centred mode):
//   h    = x + residual                           (fp32; residual optional)
//   mean = mean(h),  rstd = 1 / sqrt(mean((h - mean)^2) + eps)
//   out  = (h - mean) * rstd * (weight + weight_offset) + bias
// The variance is taken about the mean from the held values (no
// mean(h^2) - mean^2 cancellation). mean (optional) receives one fp32 per
// row, as rstd. weight_offset = 1 gives Megatron's LayerNorm1P (1 + w).
struct LayerNormFwdArgs : RMSNormFwdArgs {
  float* mean = nullptr;  // [rows] fp32, optional
  LayerNormFwdArgs() { eps = 1e-5f; }  // torch.nn.LayerNorm's default
};
Status can_implement(const LayerNormFwdArgs& args);
Status layernorm_fwd_workspace_bytes(const LayerNormFwdArgs& args, size_t* bytes);
Status layernorm_fwd(const LayerNormFwdArgs& args, cudaStream_t stream);

// LayerNorm backward, from the forward's h, mean and rstd:
//   xhat = (h - mean) * rstd,  g = dy * (weight + weight_offset)
//   dh   = rstd * (g - mean(g) - xhat * mean(g * xhat)) + dresidual_out
//   dweight = sum over rows of dy * xhat,  dbias = sum over rows of dy
// Everything else (outputs, determinism, the workspace) as RMSNormBwdArgs.
struct LayerNormBwdArgs : RMSNormBwdArgs {
  const float* mean = nullptr;  // [rows] fp32, from the forward
};
Status can_implement(const LayerNormBwdArgs& args);
Status layernorm_bwd_workspace_bytes(const LayerNormBwdArgs& args, size_t* bytes);
Status layernorm_bwd(const LayerNormBwdArgs& args, cudaStream_t stream);

// ---------------------------------------------------------------------------
// Softmax and log-softmax over each row (the last dimension), forward
//   softmax:     out = exp(x - max(x)) / sum(exp(x - max(x)))
//   log_softmax: out = x - max(x) - log(sum(exp(x - max(x))))
// in fp32 arithmetic; out in x's dtype. Rows with NaN give NaN; a row of all
// -inf gives NaN (as torch); +inf entries give NaN in their row (as torch).
struct SoftmaxFwdArgs {
  int64_t rows = 0;  // M (0 is allowed: nothing is launched)
  int64_t cols = 0;  // N >= 1
  MatrixRef x;
  MutMatrixRef out;  // x's dtype
  bool log = false;  // log_softmax
  // Optional device memory (softmax_fwd_workspace_bytes(args) bytes, 16-byte
  // aligned, not used by another call at the same time). Rows of at least
  // kSoftmaxFwdWorkspaceMinCols columns may then take the grid kernel: a
  // row spread over every SM, its CTAs exchanging their (max, sum of
  // exponentials) pairs through this memory. Its size grows with the rows:
  // 16 bytes a row for every 8192 columns (about 1/1000 of x's bytes).
  // Without one (nullptr) every row takes the other kernels: the results
  // are the same within rounding, only the speed differs.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};
// Backward from the forward's output y and the incoming gradient dy:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
// y, dy and dx share one dtype.
struct SoftmaxBwdArgs {
  int64_t rows = 0;
  int64_t cols = 0;
  MatrixRef y;
  MatrixRef dy;
  MutMatrixRef dx;
  bool log = false;
  // Optional device memory (softmax_bwd_workspace_bytes(args) bytes, 16-byte
  // aligned, not used by another call at the same time), as the forward's:
  // rows of at least kSoftmaxBwdWorkspaceMinCols columns may then take the
  // grid kernel, its CTAs exchanging each row's sum(dy * y) (log-softmax:
  // sum(dy)) through this memory: 8 bytes a row for every 8192 columns.
  // Without one (nullptr) every row takes the other kernels: the results
  // are the same within rounding, only the speed differs.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

Status can_implement(const SoftmaxFwdArgs& args);
// *bytes: the device memory the call may use in args.workspace (0: none;
// args.workspace is then ignored). Validates args first, the workspace
// fields aside.
Status softmax_fwd_workspace_bytes(const SoftmaxFwdArgs& args, size_t* bytes);
Status softmax_fwd(const SoftmaxFwdArgs& args, cudaStream_t stream);
// The shortest row (columns) that can need a forward workspace: below it
// the workspace query returns 0 whatever the arguments.
inline constexpr int64_t kSoftmaxFwdWorkspaceMinCols = int64_t(64) << 10;
Status can_implement(const SoftmaxBwdArgs& args);
// *bytes: the device memory the backward may use in args.workspace (0:
// none), as softmax_fwd_workspace_bytes.
Status softmax_bwd_workspace_bytes(const SoftmaxBwdArgs& args, size_t* bytes);
Status softmax_bwd(const SoftmaxBwdArgs& args, cudaStream_t stream);
// The shortest row that can need a backward workspace.
inline constexpr int64_t kSoftmaxBwdWorkspaceMinCols = int64_t(64) << 10;

// ---------------------------------------------------------------------------
// Cross-entropy over rows of logits (the class dimension is the row), as
// torch.nn.functional.cross_entropy for 2-D logits, plus z_loss and softcap.
// With x' = softcap * tanh(x / softcap) (softcap > 0; else x' = x),
// lse = log sum_c exp(x'_c), w the class weights (all 1 when absent), eps
// the label smoothing and t the row's target:
//   ce_row = (1 - eps) w_t (lse - x'_t) + (eps / V) sum_c w_c (lse - x'_c)
//   z_row  = z_loss * lse^2                      (PaLM's auxiliary loss)
// Rows whose target is ignore_index count nothing (loss 0, gradient 0).
// Reduction kNone writes ce_row + z_row per row; kSum their sum; kMean
// sum(ce_row) / W + sum(z_row) / R, where W is the sum of w_t over counted
// rows (torch's denominator: NaN when it is 0, as torch's 0 / 0) and R the
// number of counted rows. A target outside [0, V) that is not ignore_index
// makes its row's loss and gradient NaN (so the total too); it is never used
// as an address. lse (optional) receives the row's log-sum-exp in fp32.
// dlogits (optional) receives d(loss)/d(logits) times the upstream gradient
// dloss (kNone: one fp32 per row; otherwise one fp32; nullptr: 1), in the
// logits' dtype; it may be the logits buffer itself (in place: same pointer
// and stride). Everything is computed in fp32; the loss is deterministic
// (fixed summation order, no atomics). No host synchronisation: all scalars
// (the denominators, dloss) stay on the device.
//
// Vocabulary sharding (tensor parallelism, quack_cpp.distributed): logits may
// hold only the classes [class_offset, class_offset + cols) of num_classes;
// target, weight ([num_classes]) and V in the formulas above are then the
// whole vocabulary's. A shard cannot write the loss alone; instead a call
// writes either
//   shard_stats [rows][4] fp32: {m, s, d, x'_t} -- the shard's max of x', the
//     sum of exp(x' - m), the sum of x'_c (of w_c x'_c with class weights and
//     label smoothing) and x'_t when t lies in the shard (else 0); across
//     shards, lse = M + log sum_r s_r exp(m_r - M) with M = max_r m_r;
// or, given lse_in [rows] (the whole row's lse), dlogits of the shard's
// classes (times dloss), from the logits and lse_in alone.
// Both modes are also valid unsharded (num_classes = 0: cols, offset 0).
// The third mode combines the shards: given combine_stats, every shard's
// shard_stats gathered shard-major ([combine_shards][rows][4], 16-byte
// aligned; an all-gather's layout), a call writes loss and lse exactly as for
// whole logits (cols = V, the whole vocabulary; num_classes 0 or V; logits
// null, not read; softcap is the shards' business and ignored here). The
// shards are merged in index order: the same bits on every rank.
enum class IndexDType : int32_t { kInt32 = 0, kInt64 = 1 };
enum class Reduction : int32_t { kNone = 0, kMean = 1, kSum = 2 };

struct CrossEntropyArgs {
  int64_t rows = 0;  // M (0 is allowed: kMean gives NaN, kSum 0, as torch)
  int64_t cols = 0;  // V >= 1
  MatrixRef logits;
  const void* target = nullptr;  // [rows] class indices
  IndexDType target_dtype = IndexDType::kInt64;
  int64_t target_stride = 1;     // in elements, >= 0
  const float* weight = nullptr;  // [cols] fp32 class weights, optional
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::kMean;
  float label_smoothing = 0.0f;  // in [0, 1]
  float z_loss = 0.0f;           // >= 0
  float softcap = 0.0f;          // > 0: cap the logits first; 0: off
  float* loss = nullptr;         // kNone: [rows], else [1]; optional
  float* lse = nullptr;          // [rows], optional
  MutMatrixRef dlogits;          // optional, the logits' dtype
  const float* dloss = nullptr;  // upstream gradient (see above), optional
  void* workspace = nullptr;     // cross_entropy_workspace_bytes(args) bytes, 16-byte aligned
  size_t workspace_bytes = 0;
  // Vocabulary sharding (see above); 0 / 0: the logits hold every class.
  int64_t class_offset = 0;
  int64_t num_classes = 0;
  float* shard_stats = nullptr;   // [rows][4], 16-byte aligned: the statistics mode
  const float* lse_in = nullptr;  // [rows]: the gradient-from-lse mode
  const float* combine_stats = nullptr;  // [combine_shards][rows][4]: the combine mode
  int64_t combine_shards = 0;
};
Status can_implement(const CrossEntropyArgs& args);
// *bytes: device memory the call needs in args.workspace (a mean's
// denominators when its gradient needs them; the rows' terms of a reduced
// loss); depends on the shape and options (dlogits given or not) only.
Status cross_entropy_workspace_bytes(const CrossEntropyArgs& args, size_t* bytes);
Status cross_entropy(const CrossEntropyArgs& args, cudaStream_t stream);

// dlogits *= dloss, for a gradient cross_entropy wrote with dloss = nullptr
// (a unit upstream factor) before the factor was known: per_row, row r is
// scaled by dloss[r], otherwise every row by dloss[0]. Rows whose factor is
// exactly 1 are not read or written (read on the device: no synchronisation).
struct CrossEntropyGradScaleArgs {
  int64_t rows = 0;
  int64_t cols = 0;
  MutMatrixRef dlogits;
  const float* dloss = nullptr;  // per_row: [rows]; else [1]
  bool per_row = false;
};
Status can_implement(const CrossEntropyGradScaleArgs& args);
Status cross_entropy_scale_grad(const CrossEntropyGradScaleArgs& args, cudaStream_t stream);

// Library version, "major.minor.patch".
const char* version();

}  // namespace quack
