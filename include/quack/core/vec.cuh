// Vector access: elements <-> fp32, 16-byte global loads/stores with
// predicated tails, and asynchronous staging of global rows into shared
// memory (cp.async, completing per thread).
//
// A "vector" is VEC consecutive elements of a row, VEC = 16 / sizeof(x's
// element). Other tensors of the same row (residual, weight, out, dy) use the
// same VEC, so their vectors are VEC * their own element size bytes (8, 16 or
// 32). `kVecIO` selects 16-byte (or 8/32-byte) accesses; callers pick it only
// when every pointer and row stride involved is aligned to its vector size.
// With kVecIO == false every access is element-wise: slower, always correct.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "quack/quack.hpp"

namespace quack {
namespace core {

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<__half> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<__nv_bfloat16> { static constexpr DType value = DType::kBFloat16; };

template <DType> struct TypeOf;
template <> struct TypeOf<DType::kFloat32> { using type = float; };
template <> struct TypeOf<DType::kFloat16> { using type = __half; };
template <> struct TypeOf<DType::kBFloat16> { using type = __nv_bfloat16; };

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Copies `bytes` (4, 8, 16 or 32) from aligned `src` to aligned `dst` as
// 16-, 8- or 4-byte moves. Used for register <-> memory of whole vectors.
template <int kBytes>
__device__ __forceinline__ void copy_aligned(void* dst, const void* src) {
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else if constexpr (kBytes == 8) {
    *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(src);
  } else {
    static_assert(kBytes == 4, "vector of 4, 8, 16 or 32 bytes");
    *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src);
  }
}

// ---------------------------------------------------------------------------
// Elements of a compile-time type.

// Loads elements [0, valid) of a vector at `p` into f (the rest become 0).
template <typename T, int VEC, bool kVecIO>
__device__ __forceinline__ void load_vec(const T* p, int valid, float (&f)[VEC]) {
  if (kVecIO && valid >= VEC) {
    alignas(16) T t[VEC];
    copy_aligned<VEC * sizeof(T)>(t, p);
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = to_float(t[i]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = i < valid ? to_float(p[i]) : 0.0f;
  }
}

// Stores elements [0, valid) of f to the vector at `p`.
template <typename T, int VEC, bool kVecIO>
__device__ __forceinline__ void store_vec(T* p, int valid, const float (&f)[VEC]) {
  alignas(16) T t[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) t[i] = from_float<T>(f[i]);
  if (kVecIO && valid >= VEC) {
    copy_aligned<VEC * sizeof(T)>(p, t);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      if (i < valid) p[i] = t[i];
  }
}

// ---------------------------------------------------------------------------
// Elements of a run-time dtype (secondary tensors: residual, weight, bias,
// outputs in another dtype). The switch is on a kernel argument, uniform
// across the grid, so it costs a predictable branch, not divergence.

template <int VEC, bool kVecIO>
__device__ __forceinline__ void load_vec(const void* p, DType dt, int valid, float (&f)[VEC]) {
  switch (dt) {
    case DType::kFloat32: load_vec<float, VEC, kVecIO>(static_cast<const float*>(p), valid, f); break;
    case DType::kFloat16: load_vec<__half, VEC, kVecIO>(static_cast<const __half*>(p), valid, f); break;
    default: load_vec<__nv_bfloat16, VEC, kVecIO>(static_cast<const __nv_bfloat16*>(p), valid, f); break;
  }
}

template <int VEC, bool kVecIO>
__device__ __forceinline__ void store_vec(void* p, DType dt, int valid, const float (&f)[VEC]) {
  switch (dt) {
    case DType::kFloat32: store_vec<float, VEC, kVecIO>(static_cast<float*>(p), valid, f); break;
    case DType::kFloat16: store_vec<__half, VEC, kVecIO>(static_cast<__half*>(p), valid, f); break;
    default: store_vec<__nv_bfloat16, VEC, kVecIO>(static_cast<__nv_bfloat16*>(p), valid, f); break;
  }
}

// Pointer to element `i` of a run-time-dtype buffer.
__device__ __forceinline__ const void* elem_ptr(const void* base, DType dt, int64_t i) {
  return static_cast<const char*>(base) + i * (dt == DType::kFloat32 ? 4 : 2);
}
__device__ __forceinline__ void* elem_ptr(void* base, DType dt, int64_t i) {
  return static_cast<char*>(base) + i * (dt == DType::kFloat32 ? 4 : 2);
}

// ---------------------------------------------------------------------------
// Staging global -> shared memory.
//
// Each thread stages its own vectors and later reads back only those, so the
// only synchronisation needed is the thread's own cp.async.wait_all.

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Asynchronously copies `valid_bytes` (<= kBytes) from global `src` to shared
// `dst`, zero-filling the rest of the kBytes. kBytes is 4, 8 or 16 and both
// addresses are kBytes-aligned.
template <int kBytes>
__device__ __forceinline__ void cp_async(void* dst, const void* src, int valid_bytes) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async moves 4, 8 or 16 bytes");
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(valid_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "n"(kBytes), "r"(valid_bytes)
                 : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Stages the vector of `valid` (<= VEC) elements of size kElem bytes at global
// `src` into shared `dst` (VEC * kElem bytes, aligned to min(16, that)).
template <int kElem, int VEC, bool kVecIO>
__device__ __forceinline__ void stage_vec(void* dst, const void* src, int valid) {
  constexpr int kBytes = kElem * VEC;
  if constexpr (kVecIO) {
    constexpr int kPiece = kBytes < 16 ? kBytes : 16;
    const int valid_bytes = valid * kElem;
#pragma unroll
    for (int i = 0; i < kBytes / kPiece; ++i) {
      int vb = valid_bytes - i * kPiece;
      vb = vb < 0 ? 0 : (vb > kPiece ? kPiece : vb);
      cp_async<kPiece>(static_cast<char*>(dst) + i * kPiece, static_cast<const char*>(src) + i * kPiece, vb);
    }
  } else {
    // Element-wise fallback for misaligned rows: synchronous loads.
    using E = typename std::conditional<kElem == 4, uint32_t, uint16_t>::type;
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      static_cast<E*>(dst)[i] = i < valid ? static_cast<const E*>(src)[i] : E(0);
  }
}

// Run-time element size (secondary tensors).
template <int VEC, bool kVecIO>
__device__ __forceinline__ void stage_vec(void* dst, const void* src, DType dt, int valid) {
  if (dt == DType::kFloat32) stage_vec<4, VEC, kVecIO>(dst, src, valid);
  else stage_vec<2, VEC, kVecIO>(dst, src, valid);
}

// Reads a staged vector of VEC elements of dtype `dt` from shared memory.
template <int VEC>
__device__ __forceinline__ void smem_vec_to_float(const void* s, DType dt, float (&f)[VEC]) {
  load_vec<VEC, true>(s, dt, VEC, f);
}
template <typename T, int VEC>
__device__ __forceinline__ void smem_vec_to_float(const T* s, float (&f)[VEC]) {
  load_vec<T, VEC, true>(s, VEC, f);
}

}  // namespace core
}  // namespace quack
