// Argument checks shared by every op's can_implement. Each check names the
// argument (the C++ field name, which the Python front shares) and what was
// expected, so a caller can tell exactly what to fix.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
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

// Bytes from a strided operand's first element to one past its last: rows
// of cols elements of es bytes, stride elements apart (0 with no rows);
// past INT64_MAX (strides no memory could hold), INT64_MAX.
inline int64_t extent_bytes(int64_t rows, int64_t stride, int64_t cols, int64_t es) {
  if (rows <= 0) return 0;
  const int64_t lim = INT64_MAX / es;
  if (stride < 0 || cols > lim || (stride > 0 && rows - 1 > (lim - cols) / stride)) return INT64_MAX;
  return ((rows - 1) * stride + cols) * es;
}
// a * b for a, b >= 0, INT64_MAX where it would overflow.
inline int64_t sat_mul(int64_t a, int64_t b) { return b != 0 && a > INT64_MAX / b ? INT64_MAX : a * b; }

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
  if (extent_bytes(rows, stride, cols, dtype_size(dtype)) == INT64_MAX)
    return invalid(std::string(name) + ": row stride " + std::to_string(stride) + " puts " + std::to_string(rows) +
                   " rows past any address space");
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

// Whether the byte ranges [a, a + a_bytes) and [b, b + b_bytes) meet (their
// ends clamped to the address space).
inline bool ranges_overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const uintptr_t x = uintptr_t(a), y = uintptr_t(b), top = ~uintptr_t(0);
  const uintptr_t xe = uintptr_t(a_bytes) > top - x ? top : x + uintptr_t(a_bytes);
  const uintptr_t ye = uintptr_t(b_bytes) > top - y ? top : y + uintptr_t(b_bytes);
  return x < ye && y < xe;
}

// An operand's memory for check_disjoint: [ptr, ptr + bytes), its first
// element to one past its last (nothing with no rows); a matrix's row stride
// and dtype tell the very same matrix (in place) from a partial overlap.
struct Span {
  const char* name;
  const void* ptr;  // nullptr: absent
  int64_t bytes;
  int64_t stride;   // a matrix's row stride (one row: its length); 0: a vector (never in place)
  DType dtype;
};
inline Span matrix_span(const char* name, const void* ptr, DType t, int64_t stride, int64_t rows, int64_t cols) {
  if (ptr == nullptr) return {name, nullptr, 0, 0, t};
  return {name, ptr, extent_bytes(rows, stride, cols, dtype_size(t)), rows > 1 ? stride : cols, t};
}
inline Span vector_span(const char* name, const void* ptr, DType t, int64_t n) {
  return {name, ptr, extent_bytes(1, n, n, dtype_size(t)), 0, t};
}
inline Span bytes_span(const char* name, const void* ptr, size_t bytes) {
  return {name, ptr, bytes > size_t(INT64_MAX) ? INT64_MAX : int64_t(bytes), 0, DType::kFloat32};
}

// Outputs against inputs and against one another, after each operand's own
// checks: an output may be an input's very same matrix -- pointer, dtype and
// row stride: in place, which the row kernels allow (a thread reads each
// element it writes before writing it, and no row reads another's) -- and
// may meet no other operand's memory; ranges are compared whole, so rows
// interleaved in one another's gaps are refused too. The error names the
// output.
inline Status check_disjoint(std::initializer_list<Span> outputs, std::initializer_list<Span> inputs) {
  auto present = [](const Span& s) { return s.ptr != nullptr && s.bytes > 0; };
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    if (!present(*o)) continue;
    for (const Span& in : inputs) {
      if (!present(in)) continue;
      const bool matrices = o->stride > 0 && in.stride > 0;
      const bool same = matrices && o->ptr == in.ptr && o->stride == in.stride && o->dtype == in.dtype;
      if (!same && ranges_overlap(o->ptr, o->bytes, in.ptr, in.bytes))
        return invalid(std::string(o->name) + ": overlaps " + in.name +
                       (matrices ? " without being the same matrix (in place needs the same pointer, dtype and row "
                                   "stride)"
                                 : ""));
    }
    for (auto p = outputs.begin(); p != o; ++p)
      if (present(*p) && ranges_overlap(o->ptr, o->bytes, p->ptr, p->bytes))
        return invalid(std::string(o->name) + ": overlaps " + p->name + " (outputs may not share memory)");
  }
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
