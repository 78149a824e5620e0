// Argument checks shared by every op's can_implement. Each check names the
// argument (the C++ field name, which the Python front shares) and what was
// expected, so a caller can tell exactly what to fix.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"

namespace quack {
namespace detail {

inline Status invalid(const std::string& msg) { return {Code::kInvalidArgument, msg}; }

inline bool valid_dtype(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

// rows >= 0 and 1 <= cols <= kRowMaxCols; `dim` names what N is.
inline Status check_shape(int64_t rows, int64_t cols, const char* dim) {
  if (rows < 0) return invalid("rows: must be >= 0, got " + std::to_string(rows));
  if (cols < 1) return invalid(std::string("cols: ") + dim + " N must be >= 1, got " + std::to_string(cols));
  if (cols > kRowMaxCols)
    return {Code::kUnsupported, "cols: N = " + std::to_string(cols) + " exceeds the longest supported row (" +
                                    std::to_string(kRowMaxCols) + ")"};
  return Status::success();
}

inline Status check_dtype(const char* name, DType t) {
  if (!valid_dtype(t))
    return invalid(std::string(name) + ": unsupported dtype code " + std::to_string(int(t)) +
                   " (expected float32, float16 or bfloat16)");
  return Status::success();
}

// A (rows, cols) matrix operand. `required` operands must have a pointer when
// rows > 0; optional ones (ptr == nullptr) are skipped.
inline Status check_matrix(const char* name, const void* ptr, DType dtype, int64_t stride,
                           int64_t rows, int64_t cols, bool required) {
  if (ptr == nullptr) {
    if (required && rows > 0) return invalid(std::string(name) + ": null pointer");
    return Status::success();
  }
  Status st = check_dtype(name, dtype);
  if (!st.ok()) return st;
  if (stride < cols)
    return invalid(std::string(name) + ": row stride " + std::to_string(stride) +
                   " is smaller than the row length N = " + std::to_string(cols) +
                   " (rows would overlap)");
  if (uintptr_t(ptr) % dtype_size(dtype) != 0)
    return invalid(std::string(name) + ": pointer is not aligned to its element size (" +
                   std::to_string(dtype_size(dtype)) + " bytes)");
  return Status::success();
}

inline Status check_vector(const char* name, const void* ptr, DType dtype) {
  if (ptr == nullptr) return Status::success();
  Status st = check_dtype(name, dtype);
  if (!st.ok()) return st;
  if (uintptr_t(ptr) % dtype_size(dtype) != 0)
    return invalid(std::string(name) + ": pointer is not aligned to its element size (" +
                   std::to_string(dtype_size(dtype)) + " bytes)");
  return Status::success();
}

inline Status check_finite(const char* name, float v, bool non_negative) {
  if (!std::isfinite(v)) return invalid(std::string(name) + ": must be finite, got " + std::to_string(v));
  if (non_negative && v < 0) return invalid(std::string(name) + ": must be >= 0, got " + std::to_string(v));
  return Status::success();
}

// Alignment a vector access of `vec` elements of `dtype` needs: the vector's
// size up to 16 bytes (32-byte vectors are two 16-byte accesses).
inline int vec_align(DType dtype, int vec) {
  const int b = dtype_size(dtype) * vec;
  return b < 16 ? b : 16;
}
// True when a matrix operand (absent ones pass) allows vector accesses on
// every row: base pointer and row pitch both aligned.
inline bool vec_ok(const void* ptr, DType dtype, int64_t stride, int vec) {
  if (ptr == nullptr) return true;
  const int a = vec_align(dtype, vec);
  return uintptr_t(ptr) % a == 0 && (stride * dtype_size(dtype)) % a == 0;
}

// True when operand b's rows (absent: true) start at the same offset inside
// a 16-byte vector as operand a's, row for row: bases 16-byte congruent and
// pitches differing by whole vectors. Element-aligned operands of one dtype
// (size `es`) then share each row's vectors -- the streaming kernels' shifted
// vector path for rows that are not whole vectors (bf16 N = 50257).
inline bool same_vector_offsets(const void* a, int64_t a_stride, const void* b, int64_t b_stride, int es) {
  if (b == nullptr) return true;
  return ((uintptr_t(b) - uintptr_t(a)) & 15u) == 0 && ((b_stride - a_stride) * es) % 16 == 0;
}

// The one-CTA-per-row streaming kernels' CTA size: about 4 vectors of the
// row a thread per pass, 32..kRegRowMaxThreads threads (softmax and
// cross-entropy).
inline int stream_row_threads(int64_t cols, int es) {
  const int64_t nvec = (cols + 16 / es - 1) / (16 / es);
  int64_t threads = 32;
  while (threads < kRegRowMaxThreads && threads * 4 < nvec) threads *= 2;
  return int(threads);
}

// The run-time dtype -> compile-time dispatch every host entry point uses:
// f(std::integral_constant<DType, dt>{}) for the three element types; any
// other code is an invalid argument named `name`.
template <class F>
Status by_dtype(DType dtype, const char* name, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(std::integral_constant<DType, DType::kFloat32>{});
    case DType::kFloat16: return f(std::integral_constant<DType, DType::kFloat16>{});
    case DType::kBFloat16: return f(std::integral_constant<DType, DType::kBFloat16>{});
  }
  return invalid(std::string(name) + ": unsupported dtype code " + std::to_string(int(dtype)));
}

}  // namespace detail
}  // namespace quack
