// quack_cpp._C: the host API of quack/quack.hpp for Python.
//
// Tensors cross as raw device pointers (Python ints), element strides and
// dtype codes (0 float32, 1 float16, 2 bfloat16: quack::DType's values), so
// this module knows nothing of torch. The Python layer (quack_cpp/) allocates
// through torch, picks the stream and checks shapes; this layer only packs an
// Args struct, calls the library, and turns a failed Status into an exception:
//
//   Code::kInvalidArgument -> ValueError          (a value outside the contract)
//   Code::kUnsupported     -> NotImplementedError (valid, but this build or GPU
//                                                  cannot serve it; a subclass
//                                                  of RuntimeError)
//   Code::kCudaError       -> RuntimeError        (the CUDA runtime failed)
//
// Every message starts with the Python-facing op name, then the library's
// message, which names the offending argument.
#include <nanobind/nanobind.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "quack/quack.hpp"

namespace nb = nanobind;

namespace {

[[noreturn]] void raise_status(const quack::Status& st, const char* op) {
  const std::string msg = std::string(op) + ": " + st.message;
  switch (st.code) {
    case quack::Code::kInvalidArgument:
      throw nb::value_error(msg.c_str());
    case quack::Code::kUnsupported:
      PyErr_SetString(PyExc_NotImplementedError, msg.c_str());
      throw nb::python_error();
    default:
      throw std::runtime_error(msg);
  }
}

// Scalars arrive as Python floats (double). Taking double and narrowing here
// keeps nanobind's overload resolution to one pass (a float parameter would
// reject 1e-6 in the exact pass and convert it only in a second one), and a
// value outside float's range is rejected instead of being converted with
// undefined behaviour.
float to_float(double v, const char* op, const char* name) {
  if (!(std::fabs(v) <= double(FLT_MAX))) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    throw nb::value_error((std::string(op) + ": " + name + " must be finite and within float32's range, got " +
                           buf).c_str());
  }
  return float(v);
}

constexpr const char* kRMSNorm = "quack_cpp.rmsnorm";
constexpr const char* kLayerNorm = "quack_cpp.layernorm";

template <typename T>
const T* cptr(uintptr_t p) { return reinterpret_cast<const T*>(p); }

quack::RMSNormFwdArgs rmsnorm_fwd_args(int64_t rows, int64_t cols,
                                       uintptr_t x_ptr, int32_t x_dtype, int64_t x_stride,
                                       uintptr_t res_ptr, int32_t res_dtype, int64_t res_stride,
                                       uintptr_t w_ptr, int32_t w_dtype,
                                       uintptr_t b_ptr, int32_t b_dtype,
                                       uintptr_t out_ptr, int32_t out_dtype, int64_t out_stride,
                                       uintptr_t res_out_ptr, int32_t res_out_dtype, int64_t res_out_stride,
                                       uintptr_t rstd_ptr, double eps, double weight_offset,
                                       const char* op = kRMSNorm) {
  // DType has a fixed int32 underlying type, so any code converts; the
  // library rejects unknown codes by name.
  quack::RMSNormFwdArgs a;
  a.rows = rows;
  a.cols = cols;
  a.x = {cptr<void>(x_ptr), quack::DType(x_dtype), x_stride};
  a.residual = {cptr<void>(res_ptr), quack::DType(res_dtype), res_stride};
  a.weight = {cptr<void>(w_ptr), quack::DType(w_dtype)};
  a.bias = {cptr<void>(b_ptr), quack::DType(b_dtype)};
  a.out = {reinterpret_cast<void*>(out_ptr), quack::DType(out_dtype), out_stride};
  a.residual_out = {reinterpret_cast<void*>(res_out_ptr), quack::DType(res_out_dtype), res_out_stride};
  a.rstd = reinterpret_cast<float*>(rstd_ptr);
  a.eps = to_float(eps, op, "eps");
  a.weight_offset = to_float(weight_offset, op, "weight_offset");
  return a;
}

void rmsnorm_fwd(int64_t rows, int64_t cols,
                 uintptr_t x_ptr, int32_t x_dtype, int64_t x_stride,
                 uintptr_t res_ptr, int32_t res_dtype, int64_t res_stride,
                 uintptr_t w_ptr, int32_t w_dtype,
                 uintptr_t b_ptr, int32_t b_dtype,
                 uintptr_t out_ptr, int32_t out_dtype, int64_t out_stride,
                 uintptr_t res_out_ptr, int32_t res_out_dtype, int64_t res_out_stride,
                 uintptr_t rstd_ptr, double eps, double weight_offset, uintptr_t stream) {
  const quack::RMSNormFwdArgs a = rmsnorm_fwd_args(
      rows, cols, x_ptr, x_dtype, x_stride, res_ptr, res_dtype, res_stride, w_ptr, w_dtype, b_ptr, b_dtype,
      out_ptr, out_dtype, out_stride, res_out_ptr, res_out_dtype, res_out_stride, rstd_ptr, eps, weight_offset);
  const quack::Status st = quack::rmsnorm_fwd(a, reinterpret_cast<cudaStream_t>(stream));
  if (!st.ok()) raise_status(st, kRMSNorm);
}

// The same arguments through can_implement only: nothing touches a device.
void rmsnorm_fwd_check(int64_t rows, int64_t cols,
                       uintptr_t x_ptr, int32_t x_dtype, int64_t x_stride,
                       uintptr_t res_ptr, int32_t res_dtype, int64_t res_stride,
                       uintptr_t w_ptr, int32_t w_dtype,
                       uintptr_t b_ptr, int32_t b_dtype,
                       uintptr_t out_ptr, int32_t out_dtype, int64_t out_stride,
                       uintptr_t res_out_ptr, int32_t res_out_dtype, int64_t res_out_stride,
                       uintptr_t rstd_ptr, double eps, double weight_offset, uintptr_t /*stream*/) {
  const quack::RMSNormFwdArgs a = rmsnorm_fwd_args(
      rows, cols, x_ptr, x_dtype, x_stride, res_ptr, res_dtype, res_stride, w_ptr, w_dtype, b_ptr, b_dtype,
      out_ptr, out_dtype, out_stride, res_out_ptr, res_out_dtype, res_out_stride, rstd_ptr, eps, weight_offset);
  const quack::Status st = quack::can_implement(a);
  if (!st.ok()) raise_status(st, kRMSNorm);
}

// LayerNorm forward: rmsnorm_fwd's arguments plus the mean output (last).
// check_only: can_implement alone, no device touched.

void layernorm_fwd(int64_t rows, int64_t cols,
                   uintptr_t x_ptr, int32_t x_dtype, int64_t x_stride,
                   uintptr_t res_ptr, int32_t res_dtype, int64_t res_stride,
                   uintptr_t w_ptr, int32_t w_dtype,
                   uintptr_t b_ptr, int32_t b_dtype,
                   uintptr_t out_ptr, int32_t out_dtype, int64_t out_stride,
                   uintptr_t res_out_ptr, int32_t res_out_dtype, int64_t res_out_stride,
                   uintptr_t rstd_ptr, double eps, double weight_offset, uintptr_t stream, uintptr_t mean_ptr,
                   bool check_only) {
  quack::LayerNormFwdArgs a;
  static_cast<quack::RMSNormFwdArgs&>(a) = rmsnorm_fwd_args(
      rows, cols, x_ptr, x_dtype, x_stride, res_ptr, res_dtype, res_stride, w_ptr, w_dtype, b_ptr, b_dtype,
      out_ptr, out_dtype, out_stride, res_out_ptr, res_out_dtype, res_out_stride, rstd_ptr, eps, weight_offset,
      kLayerNorm);
  a.mean = reinterpret_cast<float*>(mean_ptr);
  const quack::Status st =
      check_only ? quack::can_implement(a) : quack::layernorm_fwd(a, reinterpret_cast<cudaStream_t>(stream));
  if (!st.ok()) raise_status(st, kLayerNorm);
}

// Either norm's forward with a workspace (the Python front calls it for rows
// of at least kNormFwdWorkspaceMinCols columns): rmsnorm_fwd's arguments,
// then LayerNorm's mean output (centre; 0 for RMSNorm), the workspace and
// the mode: 0 launches on `stream`, 2 returns the workspace bytes the launch
// may use (0: none; ws_ptr ignored).
size_t norm_fwd_ws(bool centre, int64_t rows, int64_t cols,
                   uintptr_t x_ptr, int32_t x_dtype, int64_t x_stride,
                   uintptr_t res_ptr, int32_t res_dtype, int64_t res_stride,
                   uintptr_t w_ptr, int32_t w_dtype,
                   uintptr_t b_ptr, int32_t b_dtype,
                   uintptr_t out_ptr, int32_t out_dtype, int64_t out_stride,
                   uintptr_t res_out_ptr, int32_t res_out_dtype, int64_t res_out_stride,
                   uintptr_t rstd_ptr, double eps, double weight_offset, uintptr_t stream, uintptr_t mean_ptr,
                   uintptr_t ws_ptr, size_t ws_bytes, int mode) {
  const char* op = centre ? kLayerNorm : kRMSNorm;
  quack::LayerNormFwdArgs a;
  static_cast<quack::RMSNormFwdArgs&>(a) = rmsnorm_fwd_args(
      rows, cols, x_ptr, x_dtype, x_stride, res_ptr, res_dtype, res_stride, w_ptr, w_dtype, b_ptr, b_dtype,
      out_ptr, out_dtype, out_stride, res_out_ptr, res_out_dtype, res_out_stride, rstd_ptr, eps, weight_offset, op);
  a.mean = reinterpret_cast<float*>(mean_ptr);
  a.workspace = reinterpret_cast<void*>(ws_ptr);
  a.workspace_bytes = ws_bytes;
  const quack::RMSNormFwdArgs& r = a;
  size_t bytes = 0;
  quack::Status st;
  if (mode == 2) st = centre ? quack::layernorm_fwd_workspace_bytes(a, &bytes) : quack::rmsnorm_fwd_workspace_bytes(r, &bytes);
  else st = centre ? quack::layernorm_fwd(a, reinterpret_cast<cudaStream_t>(stream))
                   : quack::rmsnorm_fwd(r, reinterpret_cast<cudaStream_t>(stream));
  if (!st.ok()) raise_status(st, op);
  return bytes;
}

// Both RMSNorm entry points take the same keyword-capable argument list.
template <typename Fn>
void def_rmsnorm_fwd(nb::module_& m, const char* name, Fn* fn, const char* doc) {
  m.def(name, fn, nb::arg("rows"), nb::arg("cols"), nb::arg("x_ptr"), nb::arg("x_dtype"), nb::arg("x_stride"),
        nb::arg("res_ptr"), nb::arg("res_dtype"), nb::arg("res_stride"), nb::arg("w_ptr"), nb::arg("w_dtype"),
        nb::arg("b_ptr"), nb::arg("b_dtype"), nb::arg("out_ptr"), nb::arg("out_dtype"), nb::arg("out_stride"),
        nb::arg("res_out_ptr"), nb::arg("res_out_dtype"), nb::arg("res_out_stride"), nb::arg("rstd_ptr"),
        nb::arg("eps"), nb::arg("weight_offset"), nb::arg("stream"), doc);
}

// RMSNorm / LayerNorm backward: one entry point each, three modes over the
// same arguments (0: launch on `stream`; 1: can_implement only, no device
// touched; 2: the workspace query, whose size it returns). LayerNorm's takes
// the forward's mean last.
#define QUACK_NORM_BWD_PARAMS                                                                              \
  int64_t rows, int64_t cols, uintptr_t h_ptr, int32_t h_dtype, int64_t h_stride, uintptr_t dy_ptr,         \
      int32_t dy_dtype, int64_t dy_stride, uintptr_t dro_ptr, int32_t dro_dtype, int64_t dro_stride,        \
      uintptr_t w_ptr, int32_t w_dtype, uintptr_t rstd_ptr, uintptr_t dx_ptr, int32_t dx_dtype,             \
      int64_t dx_stride, uintptr_t dres_ptr, int32_t dres_dtype, int64_t dres_stride, uintptr_t dw_ptr,     \
      int32_t dw_dtype, uintptr_t db_ptr, int32_t db_dtype, double weight_offset, uintptr_t ws_ptr,          \
      size_t ws_bytes, int mode, uintptr_t stream
#define QUACK_NORM_BWD_ARGS                                                                                   \
  rows, cols, h_ptr, h_dtype, h_stride, dy_ptr, dy_dtype, dy_stride, dro_ptr, dro_dtype, dro_stride, w_ptr,  \
      w_dtype, rstd_ptr, dx_ptr, dx_dtype, dx_stride, dres_ptr, dres_dtype, dres_stride, dw_ptr, dw_dtype,     \
      db_ptr, db_dtype, weight_offset, ws_ptr, ws_bytes, mode, stream

// Fills the shared fields; mode and stream are the callers'.
void fill_norm_bwd_args(quack::RMSNormBwdArgs& a, const char* op, QUACK_NORM_BWD_PARAMS) {
  (void)mode;
  (void)stream;
  a.rows = rows;
  a.cols = cols;
  a.h = {cptr<void>(h_ptr), quack::DType(h_dtype), h_stride};
  a.dy = {cptr<void>(dy_ptr), quack::DType(dy_dtype), dy_stride};
  a.dresidual_out = {cptr<void>(dro_ptr), quack::DType(dro_dtype), dro_stride};
  a.weight = {cptr<void>(w_ptr), quack::DType(w_dtype)};
  a.rstd = cptr<float>(rstd_ptr);
  a.dx = {reinterpret_cast<void*>(dx_ptr), quack::DType(dx_dtype), dx_stride};
  a.dresidual = {reinterpret_cast<void*>(dres_ptr), quack::DType(dres_dtype), dres_stride};
  a.dweight = {reinterpret_cast<void*>(dw_ptr), quack::DType(dw_dtype)};
  a.dbias = {reinterpret_cast<void*>(db_ptr), quack::DType(db_dtype)};
  a.weight_offset = to_float(weight_offset, op, "weight_offset");
  a.workspace = reinterpret_cast<void*>(ws_ptr);
  a.workspace_bytes = ws_bytes;
}

size_t rmsnorm_bwd(QUACK_NORM_BWD_PARAMS) {
  quack::RMSNormBwdArgs a;
  fill_norm_bwd_args(a, kRMSNorm, QUACK_NORM_BWD_ARGS);
  size_t bytes = 0;
  const quack::Status st = mode == 0   ? quack::rmsnorm_bwd(a, reinterpret_cast<cudaStream_t>(stream))
                           : mode == 1 ? quack::can_implement(a)
                                       : quack::rmsnorm_bwd_workspace_bytes(a, &bytes);
  if (!st.ok()) raise_status(st, kRMSNorm);
  return bytes;
}

size_t layernorm_bwd(QUACK_NORM_BWD_PARAMS, uintptr_t mean_ptr) {
  quack::LayerNormBwdArgs a;
  fill_norm_bwd_args(a, kLayerNorm, QUACK_NORM_BWD_ARGS);
  a.mean = cptr<float>(mean_ptr);
  size_t bytes = 0;
  const quack::Status st = mode == 0   ? quack::layernorm_bwd(a, reinterpret_cast<cudaStream_t>(stream))
                           : mode == 1 ? quack::can_implement(a)
                                       : quack::layernorm_bwd_workspace_bytes(a, &bytes);
  if (!st.ok()) raise_status(st, kLayerNorm);
  return bytes;
}

constexpr const char* kSoftmax = "quack_cpp.softmax";

quack::SoftmaxFwdArgs softmax_fwd_args(int64_t rows, int64_t cols, uintptr_t x_ptr, int32_t dtype, int64_t x_stride,
                                       uintptr_t out_ptr, int64_t out_stride, bool log) {
  quack::SoftmaxFwdArgs a;
  a.rows = rows;
  a.cols = cols;
  a.x = {cptr<void>(x_ptr), quack::DType(dtype), x_stride};
  a.out = {reinterpret_cast<void*>(out_ptr), quack::DType(dtype), out_stride};
  a.log = log;
  return a;
}

quack::SoftmaxBwdArgs softmax_bwd_args(int64_t rows, int64_t cols, uintptr_t y_ptr, int32_t dtype, int64_t y_stride,
                                       uintptr_t dy_ptr, int64_t dy_stride, uintptr_t dx_ptr, int64_t dx_stride,
                                       bool log) {
  quack::SoftmaxBwdArgs a;
  a.rows = rows;
  a.cols = cols;
  a.y = {cptr<void>(y_ptr), quack::DType(dtype), y_stride};
  a.dy = {cptr<void>(dy_ptr), quack::DType(dtype), dy_stride};
  a.dx = {reinterpret_cast<void*>(dx_ptr), quack::DType(dtype), dx_stride};
  a.log = log;
  return a;
}

void softmax_fwd(int64_t rows, int64_t cols, uintptr_t x_ptr, int32_t dtype, int64_t x_stride, uintptr_t out_ptr,
                 int64_t out_stride, bool log, uintptr_t stream) {
  const quack::Status st = quack::softmax_fwd(softmax_fwd_args(rows, cols, x_ptr, dtype, x_stride, out_ptr, out_stride, log),
                                              reinterpret_cast<cudaStream_t>(stream));
  if (!st.ok()) raise_status(st, kSoftmax);
}

// The forward with a workspace (the Python front calls it for rows of at
// least kSoftmaxFwdWorkspaceMinCols columns): softmax_fwd's arguments, the
// workspace and the mode: 0 launches on `stream`, 2 returns the workspace
// bytes the launch may use (0: none; ws_ptr ignored).
size_t softmax_fwd_ws(int64_t rows, int64_t cols, uintptr_t x_ptr, int32_t dtype, int64_t x_stride, uintptr_t out_ptr,
                      int64_t out_stride, bool log, uintptr_t stream, uintptr_t ws_ptr, size_t ws_bytes, int mode) {
  quack::SoftmaxFwdArgs a = softmax_fwd_args(rows, cols, x_ptr, dtype, x_stride, out_ptr, out_stride, log);
  a.workspace = reinterpret_cast<void*>(ws_ptr);
  a.workspace_bytes = ws_bytes;
  size_t bytes = 0;
  const quack::Status st = mode == 2 ? quack::softmax_fwd_workspace_bytes(a, &bytes)
                                     : quack::softmax_fwd(a, reinterpret_cast<cudaStream_t>(stream));
  if (!st.ok()) raise_status(st, kSoftmax);
  return bytes;
}

void softmax_bwd(int64_t rows, int64_t cols, uintptr_t y_ptr, int32_t dtype, int64_t y_stride, uintptr_t dy_ptr,
                 int64_t dy_stride, uintptr_t dx_ptr, int64_t dx_stride, bool log, uintptr_t stream) {
  const quack::Status st = quack::softmax_bwd(
      softmax_bwd_args(rows, cols, y_ptr, dtype, y_stride, dy_ptr, dy_stride, dx_ptr, dx_stride, log),
      reinterpret_cast<cudaStream_t>(stream));
  if (!st.ok()) raise_status(st, kSoftmax);
}

// The backward with a workspace (the Python front calls it for rows of at
// least kSoftmaxBwdWorkspaceMinCols columns), as softmax_fwd_ws.
size_t softmax_bwd_ws(int64_t rows, int64_t cols, uintptr_t y_ptr, int32_t dtype, int64_t y_stride, uintptr_t dy_ptr,
                      int64_t dy_stride, uintptr_t dx_ptr, int64_t dx_stride, bool log, uintptr_t stream,
                      uintptr_t ws_ptr, size_t ws_bytes, int mode) {
  quack::SoftmaxBwdArgs a =
      softmax_bwd_args(rows, cols, y_ptr, dtype, y_stride, dy_ptr, dy_stride, dx_ptr, dx_stride, log);
  a.workspace = reinterpret_cast<void*>(ws_ptr);
  a.workspace_bytes = ws_bytes;
  size_t bytes = 0;
  const quack::Status st = mode == 2 ? quack::softmax_bwd_workspace_bytes(a, &bytes)
                                     : quack::softmax_bwd(a, reinterpret_cast<cudaStream_t>(stream));
  if (!st.ok()) raise_status(st, kSoftmax);
  return bytes;
}

constexpr const char* kCrossEntropy = "quack_cpp.cross_entropy";

// mode 0 launches, 1 only validates, 2 returns the workspace bytes; 3
// launches when the call needs no workspace (returning 0), else returns the
// bytes it needs and launches nothing (the caller then allocates them and
// calls again in mode 0): one call where two were, for the Python front's
// eager fast path.
size_t cross_entropy(int64_t rows, int64_t cols, uintptr_t logits_ptr, int32_t dtype, int64_t logits_stride,
                     uintptr_t target_ptr, bool target64, int64_t target_stride, uintptr_t weight_ptr,
                     int64_t ignore_index, int32_t reduction, double label_smoothing, double z_loss, double softcap,
                     uintptr_t loss_ptr, uintptr_t lse_ptr, uintptr_t dx_ptr, int64_t dx_stride, uintptr_t dloss_ptr,
                     uintptr_t ws_ptr, size_t ws_bytes, int mode, uintptr_t stream, int64_t class_offset,
                     int64_t num_classes, uintptr_t stats_ptr, uintptr_t lse_in_ptr, uintptr_t combine_ptr,
                     int64_t combine_shards) {
  quack::CrossEntropyArgs a;
  a.rows = rows;
  a.cols = cols;
  a.logits = {cptr<void>(logits_ptr), quack::DType(dtype), logits_stride};
  a.target = cptr<void>(target_ptr);
  a.target_dtype = target64 ? quack::IndexDType::kInt64 : quack::IndexDType::kInt32;
  a.target_stride = target_stride;
  a.weight = cptr<float>(weight_ptr);
  a.ignore_index = ignore_index;
  a.reduction = quack::Reduction(reduction);
  a.label_smoothing = to_float(label_smoothing, kCrossEntropy, "label_smoothing");
  a.z_loss = to_float(z_loss, kCrossEntropy, "z_loss");
  a.softcap = to_float(softcap, kCrossEntropy, "softcap");
  a.loss = reinterpret_cast<float*>(loss_ptr);
  a.lse = reinterpret_cast<float*>(lse_ptr);
  a.dlogits = {reinterpret_cast<void*>(dx_ptr), quack::DType(dtype), dx_stride};
  a.dloss = cptr<float>(dloss_ptr);
  a.workspace = reinterpret_cast<void*>(ws_ptr);
  a.workspace_bytes = ws_bytes;
  a.class_offset = class_offset;
  a.num_classes = num_classes;
  a.shard_stats = reinterpret_cast<float*>(stats_ptr);
  a.lse_in = cptr<float>(lse_in_ptr);
  a.combine_stats = cptr<float>(combine_ptr);
  a.combine_shards = combine_shards;
  size_t bytes = 0;
  quack::Status st = mode == 0   ? quack::cross_entropy(a, reinterpret_cast<cudaStream_t>(stream))
                     : mode == 1 ? quack::can_implement(a)
                                 : quack::cross_entropy_workspace_bytes(a, &bytes);
  if (st.ok() && mode == 3 && bytes == 0) st = quack::cross_entropy(a, reinterpret_cast<cudaStream_t>(stream));
  if (!st.ok()) raise_status(st, kCrossEntropy);
  return bytes;
}

void cross_entropy_scale_grad(int64_t rows, int64_t cols, uintptr_t dx_ptr, int32_t dtype, int64_t dx_stride,
                              uintptr_t dloss_ptr, bool per_row, uintptr_t stream) {
  quack::CrossEntropyGradScaleArgs a;
  a.rows = rows;
  a.cols = cols;
  a.dlogits = {reinterpret_cast<void*>(dx_ptr), quack::DType(dtype), dx_stride};
  a.dloss = cptr<float>(dloss_ptr);
  a.per_row = per_row;
  const quack::Status st = quack::cross_entropy_scale_grad(a, reinterpret_cast<cudaStream_t>(stream));
  if (!st.ok()) raise_status(st, kCrossEntropy);
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "quack-cpp kernels over raw device pointers (use the quack_cpp package, not this module)";

  m.def("version", &quack::version, "The C++ library's version, \"major.minor.patch\".");

  def_rmsnorm_fwd(m, "rmsnorm_fwd", &rmsnorm_fwd,
                  "RMSNorm forward over (rows, cols) row-major matrices given as raw device pointers.\n\n"
                  "Fills quack::RMSNormFwdArgs and launches asynchronously on `stream` (a cudaStream_t\n"
                  "as an int; 0 is the legacy default stream) on the current CUDA device. A pointer of 0\n"
                  "means the operand is absent (residual, weight, bias, residual_out, rstd); dtype codes\n"
                  "are 0 float32, 1 float16, 2 bfloat16; strides are row strides in elements.\n"
                  "Raises ValueError (invalid argument), NotImplementedError (unsupported here) or\n"
                  "RuntimeError (CUDA error).");
  m.def("softmax_fwd", &softmax_fwd, nb::arg("rows"), nb::arg("cols"), nb::arg("x_ptr"), nb::arg("dtype"),
        nb::arg("x_stride"), nb::arg("out_ptr"), nb::arg("out_stride"), nb::arg("log"), nb::arg("stream"),
        "Softmax (log=False) or log-softmax forward over rows of a (rows, cols) matrix; out has x's dtype.\n"
        "Raw device pointers, row strides in elements, dtype code as rmsnorm_fwd; launches on `stream`.");
  m.def("softmax_fwd_ws", &softmax_fwd_ws, nb::arg("rows"), nb::arg("cols"), nb::arg("x_ptr"), nb::arg("dtype"),
        nb::arg("x_stride"), nb::arg("out_ptr"), nb::arg("out_stride"), nb::arg("log"), nb::arg("stream"),
        nb::arg("ws_ptr"), nb::arg("ws_bytes"), nb::arg("mode"),
        "softmax_fwd with a workspace (quack::SoftmaxFwdArgs::workspace): mode 0 launches on `stream`,\n"
        "2 returns the workspace bytes the launch may use (0: none).");
  m.attr("SOFTMAX_FWD_WORKSPACE_MIN_COLS") = quack::kSoftmaxFwdWorkspaceMinCols;
  m.def("softmax_bwd", &softmax_bwd, nb::arg("rows"), nb::arg("cols"), nb::arg("y_ptr"), nb::arg("dtype"),
        nb::arg("y_stride"), nb::arg("dy_ptr"), nb::arg("dy_stride"), nb::arg("dx_ptr"), nb::arg("dx_stride"),
        nb::arg("log"), nb::arg("stream"),
        "Softmax / log-softmax backward from the forward's output y and dy; y, dy and dx share one dtype.");
  m.def("softmax_bwd_ws", &softmax_bwd_ws, nb::arg("rows"), nb::arg("cols"), nb::arg("y_ptr"), nb::arg("dtype"),
        nb::arg("y_stride"), nb::arg("dy_ptr"), nb::arg("dy_stride"), nb::arg("dx_ptr"), nb::arg("dx_stride"),
        nb::arg("log"), nb::arg("stream"), nb::arg("ws_ptr"), nb::arg("ws_bytes"), nb::arg("mode"),
        "softmax_bwd with a workspace (quack::SoftmaxBwdArgs::workspace): mode 0 launches on `stream`,\n"
        "2 returns the workspace bytes the launch may use (0: none).");
  m.attr("SOFTMAX_BWD_WORKSPACE_MIN_COLS") = quack::kSoftmaxBwdWorkspaceMinCols;
  m.def("rmsnorm_bwd", &rmsnorm_bwd, nb::arg("rows"), nb::arg("cols"), nb::arg("h_ptr"), nb::arg("h_dtype"),
        nb::arg("h_stride"), nb::arg("dy_ptr"), nb::arg("dy_dtype"), nb::arg("dy_stride"), nb::arg("dro_ptr"),
        nb::arg("dro_dtype"), nb::arg("dro_stride"), nb::arg("w_ptr"), nb::arg("w_dtype"), nb::arg("rstd_ptr"),
        nb::arg("dx_ptr"), nb::arg("dx_dtype"), nb::arg("dx_stride"), nb::arg("dres_ptr"), nb::arg("dres_dtype"),
        nb::arg("dres_stride"), nb::arg("dw_ptr"), nb::arg("dw_dtype"), nb::arg("db_ptr"), nb::arg("db_dtype"),
        nb::arg("weight_offset"), nb::arg("ws_ptr"), nb::arg("ws_bytes"), nb::arg("mode"), nb::arg("stream"),
        "RMSNorm backward (quack::RMSNormBwdArgs) over raw device pointers; a pointer of 0 is an absent\n"
        "operand. mode 0 launches on `stream`, 1 only validates (no device touched), 2 returns the\n"
        "workspace bytes the launch needs (ws_ptr may be 0).");
  m.def("layernorm_bwd", &layernorm_bwd, nb::arg("rows"), nb::arg("cols"), nb::arg("h_ptr"), nb::arg("h_dtype"),
        nb::arg("h_stride"), nb::arg("dy_ptr"), nb::arg("dy_dtype"), nb::arg("dy_stride"), nb::arg("dro_ptr"),
        nb::arg("dro_dtype"), nb::arg("dro_stride"), nb::arg("w_ptr"), nb::arg("w_dtype"), nb::arg("rstd_ptr"),
        nb::arg("dx_ptr"), nb::arg("dx_dtype"), nb::arg("dx_stride"), nb::arg("dres_ptr"), nb::arg("dres_dtype"),
        nb::arg("dres_stride"), nb::arg("dw_ptr"), nb::arg("dw_dtype"), nb::arg("db_ptr"), nb::arg("db_dtype"),
        nb::arg("weight_offset"), nb::arg("ws_ptr"), nb::arg("ws_bytes"), nb::arg("mode"), nb::arg("stream"),
        nb::arg("mean_ptr"),
        "LayerNorm backward (quack::LayerNormBwdArgs): rmsnorm_bwd's arguments and modes, plus the\n"
        "forward's mean (fp32, one per row).");
  m.def("layernorm_fwd", &layernorm_fwd, nb::arg("rows"), nb::arg("cols"), nb::arg("x_ptr"), nb::arg("x_dtype"),
        nb::arg("x_stride"), nb::arg("res_ptr"), nb::arg("res_dtype"), nb::arg("res_stride"), nb::arg("w_ptr"),
        nb::arg("w_dtype"), nb::arg("b_ptr"), nb::arg("b_dtype"), nb::arg("out_ptr"), nb::arg("out_dtype"),
        nb::arg("out_stride"), nb::arg("res_out_ptr"), nb::arg("res_out_dtype"), nb::arg("res_out_stride"),
        nb::arg("rstd_ptr"), nb::arg("eps"), nb::arg("weight_offset"), nb::arg("stream"), nb::arg("mean_ptr"),
        nb::arg("check_only"),
        "LayerNorm forward (quack::LayerNormFwdArgs): rmsnorm_fwd's arguments plus the mean output\n"
        "(fp32, one per row; 0: not written). check_only: validation alone, nothing launched.");
  m.def("cross_entropy", &cross_entropy, nb::arg("rows"), nb::arg("cols"), nb::arg("logits_ptr"), nb::arg("dtype"),
        nb::arg("logits_stride"), nb::arg("target_ptr"), nb::arg("target64"), nb::arg("target_stride"),
        nb::arg("weight_ptr"), nb::arg("ignore_index"), nb::arg("reduction"), nb::arg("label_smoothing"),
        nb::arg("z_loss"), nb::arg("softcap"), nb::arg("loss_ptr"), nb::arg("lse_ptr"), nb::arg("dx_ptr"),
        nb::arg("dx_stride"), nb::arg("dloss_ptr"), nb::arg("ws_ptr"), nb::arg("ws_bytes"), nb::arg("mode"),
        nb::arg("stream"), nb::arg("class_offset") = 0, nb::arg("num_classes") = 0, nb::arg("stats_ptr") = 0,
        nb::arg("lse_in_ptr") = 0, nb::arg("combine_ptr") = 0, nb::arg("combine_shards") = 0,
        "Cross-entropy (quack::CrossEntropyArgs) over raw device pointers; a pointer of 0 is an absent\n"
        "operand; reduction 0 none, 1 mean, 2 sum; dx (dlogits) has the logits' dtype. mode 0 launches\n"
        "on `stream`, 1 only validates, 2 returns the workspace bytes the launch needs, 3 launches\n"
        "when it needs none (returning 0) and else returns those bytes without launching. Vocabulary\n"
        "shards: class_offset / num_classes, and stats_ptr ([rows][4] fp32 statistics), lse_in_ptr\n"
        "(the gradient from the whole row's lse) or combine_ptr / combine_shards (the shards'\n"
        "statistics, [shards][rows][4]: loss and lse of the whole vocabulary, cols = V, no logits).");
  m.def("cross_entropy_scale_grad", &cross_entropy_scale_grad, nb::arg("rows"), nb::arg("cols"), nb::arg("dx_ptr"),
        nb::arg("dtype"), nb::arg("dx_stride"), nb::arg("dloss_ptr"), nb::arg("per_row"), nb::arg("stream"),
        "dx *= dloss (per row, or one scalar), skipping rows whose factor is exactly 1 (read on the device).");
  m.def("norm_fwd_ws", &norm_fwd_ws, nb::arg("centre"), nb::arg("rows"), nb::arg("cols"), nb::arg("x_ptr"),
        nb::arg("x_dtype"), nb::arg("x_stride"), nb::arg("res_ptr"), nb::arg("res_dtype"), nb::arg("res_stride"),
        nb::arg("w_ptr"), nb::arg("w_dtype"), nb::arg("b_ptr"), nb::arg("b_dtype"), nb::arg("out_ptr"),
        nb::arg("out_dtype"), nb::arg("out_stride"), nb::arg("res_out_ptr"), nb::arg("res_out_dtype"),
        nb::arg("res_out_stride"), nb::arg("rstd_ptr"), nb::arg("eps"), nb::arg("weight_offset"), nb::arg("stream"),
        nb::arg("mean_ptr"), nb::arg("ws_ptr"), nb::arg("ws_bytes"), nb::arg("mode"),
        "RMSNorm (centre False) or LayerNorm forward with a workspace (quack::RMSNormFwdArgs::workspace):\n"
        "rmsnorm_fwd's arguments, LayerNorm's mean output (0 for RMSNorm), the workspace and a mode:\n"
        "0 launches on `stream`, 2 returns the workspace bytes the launch may use (0: none).");
  m.attr("NORM_FWD_WORKSPACE_MIN_COLS") = quack::kNormFwdWorkspaceMinCols;
  def_rmsnorm_fwd(m, "rmsnorm_fwd_check", &rmsnorm_fwd_check,
                  "rmsnorm_fwd's argument validation (quack::can_implement) alone: raises ValueError\n"
                  "as rmsnorm_fwd would; launches nothing and touches no device.");
}
