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

// `#pragma unroll` for the device compilation of __host__ __device__ code
// (the host compiler warns on the pragma).
#if defined(__CUDA_ARCH__)
#define QUACK_DEVICE_UNROLL _Pragma("unroll")
#else
#define QUACK_DEVICE_UNROLL
#endif

namespace quack {
namespace core {

template <DType> struct TypeOf;
template <> struct TypeOf<DType::kFloat32> { using type = float; };
template <> struct TypeOf<DType::kFloat16> { using type = __half; };
template <> struct TypeOf<DType::kBFloat16> { using type = __nv_bfloat16; };

__host__ __device__ __forceinline__ constexpr int elem_bytes(DType t) { return t == DType::kFloat32 ? 4 : 2; }

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Global loads through the read-only path (ld.global.nc) and streaming
// stores (st.global.cs: outputs are written once and not re-read).
template <int kBytes>
__device__ __forceinline__ void ldg_nc(void* dst, const void* src) {
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i)
      reinterpret_cast<uint4*>(dst)[i] = __ldg(reinterpret_cast<const uint4*>(src) + i);
  } else {
    static_assert(kBytes == 8, "vector of 8, 16 or 32 bytes");
    *reinterpret_cast<uint2*>(dst) = __ldg(reinterpret_cast<const uint2*>(src));
  }
}
// A coherent, L1-cached global load (ld.global, not .nc). Unlike ldg_nc the
// compiler may not hoist it above an earlier store (the two may alias), so a
// loop of load, compute and store keeps few vectors' operands live. With .nc
// loads, a straight-line bf16 output loop with fp32 weights at 8 vectors
// spilled 8 bytes (ptxas -v); that tile now keeps the checked loop, and the
// rest build without spills either way. A B A B timing at 1d91542 (RMSNorm
// bf16, 1K-64K) showed no difference between the two loads, within 1%
// noise (bench/results/logs/2026-12-01-rmsnorm-fwd-ordered-ab-1d91542.log).
template <int kBytes>
__device__ __forceinline__ void ldg_ordered(void* dst, const void* src) {
  static_assert(kBytes % 16 == 0 || kBytes == 8, "vector of 8, 16 or 32 bytes");
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      uint4 v;
      asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "l"(static_cast<const char*>(src) + 16 * i)
                   : "memory");
      reinterpret_cast<uint4*>(dst)[i] = v;
    }
  } else {
    uint2 v;
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(src) : "memory");
    *reinterpret_cast<uint2*>(dst) = v;
  }
}
template <int kBytes>
__device__ __forceinline__ void stg_cs(void* dst, const void* src) {
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i)
      __stcs(reinterpret_cast<uint4*>(dst) + i, reinterpret_cast<const uint4*>(src)[i]);
  } else {
    static_assert(kBytes == 8, "vector of 8, 16 or 32 bytes");
    __stcs(reinterpret_cast<uint2*>(dst), *reinterpret_cast<const uint2*>(src));
  }
}
// A hint: the line holding p into L1, no register written (a later load
// of it then costs an L1 hit instead of an L2 or HBM round trip).
__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p)); }
// One float to / from shared memory at a shared-window address, where it
// is written: the load is not hoisted ahead of where it is used.
__device__ __forceinline__ void sts_f32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}
__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
// v, opaque to the optimiser: what is computed from it stays where it is
// written -- in the branch that uses it -- instead of being hoisted ahead of
// the branch and held (the grid backward computed every row's 64-bit
// addresses of its rarely taken paths at the top of each step: ~100
// instructions a step, ptxas at its register cap).
__device__ __forceinline__ int fresh_i32(int v) {
  int r;
  asm volatile("mov.b32 %0, %1;" : "=r"(r) : "r"(v));
  return r;
}
__device__ __forceinline__ int64_t fresh_i64(int64_t v) {
  int64_t r;
  asm volatile("mov.b64 %0, %1;" : "=l"(r) : "l"(v));
  return r;
}
template <typename T>
__device__ __forceinline__ T ldg_elem(const T* p) {
  if constexpr (sizeof(T) == 4) {
    const uint32_t u = __ldg(reinterpret_cast<const unsigned int*>(p));
    return *reinterpret_cast<const T*>(&u);
  } else {
    const unsigned short u = __ldg(reinterpret_cast<const unsigned short*>(p));
    return *reinterpret_cast<const T*>(&u);
  }
}
template <typename T>
__device__ __forceinline__ void stg_elem(T* p, T v) {
  if constexpr (sizeof(T) == 4) __stcs(reinterpret_cast<unsigned int*>(p), *reinterpret_cast<unsigned int*>(&v));
  else __stcs(reinterpret_cast<unsigned short*>(p), *reinterpret_cast<unsigned short*>(&v));
}

// ---------------------------------------------------------------------------
// Elements of a compile-time type, global memory.

// Loads elements [0, valid) of a read-only vector at `p` into f (the rest 0).
template <typename T, int VEC, bool kVecIO>
__device__ __forceinline__ void load_vec(const T* p, int valid, float (&f)[VEC]) {
  if (kVecIO && valid >= VEC) {
    alignas(16) T t[VEC];
    ldg_nc<VEC * sizeof(T)>(t, p);
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = to_float(t[i]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = i < valid ? to_float(ldg_elem(p + i)) : 0.0f;
  }
}

// Stores elements [0, valid) of f to the vector at `p`.
template <typename T, int VEC, bool kVecIO>
__device__ __forceinline__ void store_vec(T* p, int valid, const float (&f)[VEC]) {
  alignas(16) T t[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) t[i] = from_float<T>(f[i]);
  if (kVecIO && valid >= VEC) {
    stg_cs<VEC * sizeof(T)>(p, t);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      if (i < valid) stg_elem(p + i, t[i]);
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

// Secondary-tensor access for a row kernel over x of type Tx: compile-time
// typed when kUniform (every tensor has x's dtype), run-time dispatched
// otherwise. One place decides, so kernels read the same either way.
template <typename Tx, int VEC, bool kVecIO, bool kUniform>
struct SecondaryIO {
  __device__ __forceinline__ static void* ptr(void* base, DType dt, int64_t i) {
    if constexpr (kUniform) return static_cast<Tx*>(base) + i;
    else return static_cast<char*>(base) + i * elem_bytes(dt);
  }
  __device__ __forceinline__ static const void* ptr(const void* base, DType dt, int64_t i) {
    if constexpr (kUniform) return static_cast<const Tx*>(base) + i;
    else return static_cast<const char*>(base) + i * elem_bytes(dt);
  }
  __device__ __forceinline__ static void load(const void* p, DType dt, int valid, float (&f)[VEC]) {
    if constexpr (kUniform) load_vec<Tx, VEC, kVecIO>(static_cast<const Tx*>(p), valid, f);
    else load_vec<VEC, kVecIO>(p, dt, valid, f);
  }
  __device__ __forceinline__ static void store(void* p, DType dt, int valid, const float (&f)[VEC]) {
    if constexpr (kUniform) store_vec<Tx, VEC, kVecIO>(static_cast<Tx*>(p), valid, f);
    else store_vec<VEC, kVecIO>(p, dt, valid, f);
  }
};

// ---------------------------------------------------------------------------
// Staging global -> shared memory.
//
// Each thread stages its own vectors and later reads back only those, so the
// only synchronisation needed is the thread's own cp.async.wait_all.

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Shared-memory loads by shared-window address (LDS, not generic LD).
template <int kBytes>
__device__ __forceinline__ void lds(uint32_t addr, void* dst) {
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      uint4 v;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(addr + 16 * i));
      reinterpret_cast<uint4*>(dst)[i] = v;
    }
  } else {
    static_assert(kBytes == 8, "shared vector of 8, 16 or 32 bytes");
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
    *reinterpret_cast<uint2*>(dst) = v;
  }
}

// Four floats at a 16-byte-aligned shared address: a thread's private
// accumulators (no barrier needed between its own loads and stores).
__device__ __forceinline__ float4 lds_f4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ void sts_f4(uint32_t addr, float4 v) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
// A 16-byte vector's words at a 16-byte-aligned shared address (lds<16>'s
// counterpart: a RawVec's w).
__device__ __forceinline__ void sts16(uint32_t addr, const uint32_t (&w)[4]) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
               : "memory");
}


// Asynchronously copies the first `bytes` (clamped to [0, kBytes]) of a
// vector of kBytes (8, 16 or 32) at global `src` to shared `dst`, zero-filling
// the rest; with bytes <= 0 nothing is read (src must still be a valid
// address: pass the row start). Both addresses are aligned to min(kBytes, 16).
template <int kBytes>
__device__ __forceinline__ void cp_async_zfill(uint32_t dst, const void* src, int bytes) {
  static_assert(kBytes == 8 || kBytes == 16 || kBytes == 32, "vector of 8, 16 or 32 bytes");
  constexpr int kPiece = kBytes < 16 ? kBytes : 16;
#pragma unroll
  for (int i = 0; i < kBytes / kPiece; ++i) {
    int b = bytes - i * kPiece;
    b = b < 0 ? 0 : (b > kPiece ? kPiece : b);
    const char* s = static_cast<const char*>(src) + (b > 0 ? i * kPiece : 0);
    if constexpr (kPiece == 16) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + i * kPiece), "l"(s), "r"(b)
                   : "memory");
    } else {
      asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(s), "r"(b) : "memory");
    }
  }
}
// A whole 16-byte vector (no zero fill).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
// Run-time vector size (secondary tensors): 8, 16 or 32 bytes.
__device__ __forceinline__ void cp_async_zfill(uint32_t dst, const void* src, int bytes, int vec_bytes) {
  if (vec_bytes == 16) cp_async_zfill<16>(dst, src, bytes);
  else if (vec_bytes == 32) cp_async_zfill<32>(dst, src, bytes);
  else cp_async_zfill<8>(dst, src, bytes);
}

// Synchronous element-wise staging for misaligned rows: elements [0, valid)
// of a VEC-element vector of kElem-byte elements, zeros after.
template <int kElem, int VEC>
__device__ __forceinline__ void stage_elems(uint32_t dst, const void* src, int valid) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    if constexpr (kElem == 4) {
      const uint32_t v = i < valid ? static_cast<const uint32_t*>(src)[i] : 0u;
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(dst + 4 * i), "r"(v) : "memory");
    } else {
      const uint16_t v = i < valid ? static_cast<const uint16_t*>(src)[i] : uint16_t(0);
      asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(dst + 2 * i), "h"(v) : "memory");
    }
  }
}
template <int VEC>
__device__ __forceinline__ void stage_elems(uint32_t dst, const void* src, DType dt, int valid) {
  if (dt == DType::kFloat32) stage_elems<4, VEC>(dst, src, valid);
  else stage_elems<2, VEC>(dst, src, valid);
}

template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---------------------------------------------------------------------------
// Vectors held raw in registers (register-resident row kernels): VEC elements
// of T as 32-bit words, loaded and stored whole (16 or 32 bytes: one or two
// 16-byte accesses; 8 bytes: one) or element-wise for a row's partial last
// vector, converted to fp32 only where they are used.

template <typename T, int VEC>
struct RawVec {
  static constexpr int kBytes = VEC * int(sizeof(T));
  static_assert(kBytes == 8 || kBytes == 16 || kBytes == 32, "vector of 8, 16 or 32 bytes");
  static constexpr int kWords = kBytes / 4;
  uint32_t w[kWords];

  // Whole vector; `p` aligned to min(kBytes, 16).
  __device__ __forceinline__ void load(const T* p) { ldg_nc<kBytes>(w, p); }
  // The same, kept after earlier stores (ldg_ordered).
  __device__ __forceinline__ void load_ordered(const T* p) { ldg_ordered<kBytes>(w, p); }
  // Elements [0, valid) (0 <= valid <= VEC), the rest zero.
  __device__ __forceinline__ void load_partial(const T* p, int valid) { load_range(p, 0, valid); }
  // Elements [lo, hi) (0 <= lo, hi <= VEC), the rest zero: only those are
  // read (a row that starts inside the vector that holds its first element,
  // streaming kernels). Built with shifts, not through a T array, so the
  // words stay in registers.
  __device__ __forceinline__ void load_range(const T* p, int lo, int hi) {
    if constexpr (sizeof(T) == 4) {
#pragma unroll
      for (int i = 0; i < kWords; ++i)
        w[i] = i >= lo && i < hi ? __ldg(reinterpret_cast<const unsigned int*>(p) + i) : 0u;
    } else {
      const unsigned short* q = reinterpret_cast<const unsigned short*>(p);
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        const uint32_t e0 = 2 * i >= lo && 2 * i < hi ? uint32_t(__ldg(q + 2 * i)) : 0u;
        const uint32_t e1 = 2 * i + 1 >= lo && 2 * i + 1 < hi ? uint32_t(__ldg(q + 2 * i + 1)) : 0u;
        w[i] = e0 | (e1 << 16);
      }
    }
  }
  // Elements c - s .. c - s + VEC - 1 of `base` (base aligned as load's,
  // any int c, s), those outside [0, n) zero: a vector of a column-indexed
  // operand (a norm's weight) beside a row shifted by s elements
  // (core::RowGeom::shift). Read where they lie, a 4-byte word at a time:
  // fp32 elements one a word; 16-bit ones as the VEC / 2 + 1 words that
  // hold them, joined by a funnel shift where c - s is odd (s is the
  // row's, uniform: no divergence), a half-word only at the operand's ends
  // (nothing outside [0, n) is read). (Two aligned vectors joined by
  // selects on the word offset spilled in the 64-register instances,
  // ptxas -v, CUDA 13.0.)
  __device__ __forceinline__ void load_shifted(const T* base, int c, int s, int n) {
    const int e0 = c - s;
    if constexpr (sizeof(T) == 4) {
      const unsigned int* q = reinterpret_cast<const unsigned int*>(base);
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        const int e = e0 + i;
        w[i] = e >= 0 && e < n ? __ldg(q + e) : 0u;
      }
    } else {
      const unsigned int* q = reinterpret_cast<const unsigned int*>(base);
      const unsigned short* h = reinterpret_cast<const unsigned short*>(base);
      const int odd = e0 & 1;
      const int w0 = (e0 - odd) / 2;  // the word that holds element e0
      uint32_t word[kWords + 1];
#pragma unroll
      for (int j = 0; j <= kWords; ++j) {
        const int e = 2 * (w0 + j);  // word w0 + j: elements e, e + 1
        const bool lo = e >= 0 && e < n, hi = e + 1 >= 0 && e + 1 < n;
        word[j] = lo && hi ? __ldg(q + w0 + j)
                           : (lo ? uint32_t(__ldg(h + e)) : 0u) | (hi ? uint32_t(__ldg(h + e + 1)) << 16 : 0u);
      }
      const unsigned sh = unsigned(odd) * 16u;
#pragma unroll
      for (int j = 0; j < kWords; ++j) w[j] = __funnelshift_r(word[j], word[j + 1], sh);
    }
  }
  // Elements [valid, VEC) set to the bit pattern `bits` (T's width), e.g.
  // -inf so that padding drops out of a max and of a sum of exponentials.
  __host__ __device__ __forceinline__ void fill_tail(int valid, uint32_t bits) {
    if constexpr (sizeof(T) == 4) {
QUACK_DEVICE_UNROLL
      for (int i = 0; i < kWords; ++i) w[i] = i < valid ? w[i] : bits;
    } else {
QUACK_DEVICE_UNROLL
      for (int i = 0; i < kWords; ++i) {
        if (2 * i >= valid) w[i] = (w[i] & 0xffff0000u) | bits;
        if (2 * i + 1 >= valid) w[i] = (w[i] & 0x0000ffffu) | (bits << 16);
      }
    }
  }
  // Elements [0, lo) set to `bits` (fill_tail's counterpart at the front:
  // a shifted row's first vector, core::RowGeom::head).
  __host__ __device__ __forceinline__ void fill_head(int lo, uint32_t bits) {
    if constexpr (sizeof(T) == 4) {
QUACK_DEVICE_UNROLL
      for (int i = 0; i < kWords; ++i) w[i] = i < lo ? bits : w[i];
    } else {
QUACK_DEVICE_UNROLL
      for (int i = 0; i < kWords; ++i) {
        if (2 * i < lo) w[i] = (w[i] & 0xffff0000u) | bits;
        if (2 * i + 1 < lo) w[i] = (w[i] & 0x0000ffffu) | (bits << 16);
      }
    }
  }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = 0u;
  }
  __device__ __forceinline__ void store(T* p) const { stg_cs<kBytes>(p, w); }
  __device__ __forceinline__ void store_partial(T* p, int valid) const { store_range(p, 0, valid); }
  // Elements [lo, hi) only (load_range's counterpart).
  __device__ __forceinline__ void store_range(T* p, int lo, int hi) const {
    if constexpr (sizeof(T) == 4) {
#pragma unroll
      for (int i = 0; i < kWords; ++i)
        if (i >= lo && i < hi) __stcs(reinterpret_cast<unsigned int*>(p) + i, w[i]);
    } else {
      unsigned short* q = reinterpret_cast<unsigned short*>(p);
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        if (2 * i >= lo && 2 * i < hi) __stcs(q + 2 * i, static_cast<unsigned short>(w[i] & 0xffffu));
        if (2 * i + 1 >= lo && 2 * i + 1 < hi) __stcs(q + 2 * i + 1, static_cast<unsigned short>(w[i] >> 16));
      }
    }
  }
  __device__ __forceinline__ void widen(float (&f)[VEC]) const {
    if constexpr (std::is_same_v<T, float>) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) f[i] = __uint_as_float(w[i]);
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      // bf16 is the top half of an fp32: a shift and a mask per pair.
#pragma unroll
      for (int i = 0; i < VEC / 2; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      }
    } else {
#pragma unroll
      for (int i = 0; i < VEC / 2; ++i) {
        const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
      }
    }
  }
  __device__ __forceinline__ void narrow(const float (&f)[VEC]) {
    if constexpr (std::is_same_v<T, float>) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) w[i] = __float_as_uint(f[i]);
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
      for (int i = 0; i < VEC / 2; ++i) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
        w[i] = *reinterpret_cast<const uint32_t*>(&v);
      }
    } else {
#pragma unroll
      for (int i = 0; i < VEC / 2; ++i) {
        const __half2 v = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
        w[i] = *reinterpret_cast<const uint32_t*>(&v);
      }
    }
  }
};

// Reads a staged vector of VEC elements of type T at shared address `addr`,
// widened as RawVec::widen does (bf16: a shift or a mask a value, where the
// element-wise conversion takes a PRMT and a shift for the upper half).
template <typename T, int VEC>
__device__ __forceinline__ void lds_vec(uint32_t addr, float (&f)[VEC]) {
  RawVec<T, VEC> v;
  lds<RawVec<T, VEC>::kBytes>(addr, v.w);
  v.widen(f);
}
template <int VEC>
__device__ __forceinline__ void lds_vec(uint32_t addr, DType dt, float (&f)[VEC]) {
  switch (dt) {
    case DType::kFloat32: lds_vec<float, VEC>(addr, f); break;
    case DType::kFloat16: lds_vec<__half, VEC>(addr, f); break;
    default: lds_vec<__nv_bfloat16, VEC>(addr, f); break;
  }
}

}  // namespace core
}  // namespace quack
