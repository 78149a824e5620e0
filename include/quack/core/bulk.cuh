// Bulk copies from global into a CTA's shared memory (sm_90 cp.async.bulk,
// the TMA unit's 1-D form) and the mbarriers that count their bytes: a copy
// costs its issuing thread one instruction and no registers for the data, so
// a kernel's bytes in flight are bounded by its shared memory, not its
// register file.
//
// One slot's protocol (one producer thread, any number of readers):
//   producer: mbar_arrive_expect_tx(bar, bytes); bulk_g2s(slot, src, bytes, bar)
//   readers:  mbar_wait(bar, phase parity); ... read the slot ...
//   all readers done (a barrier the producer takes part in), then the
//   producer: fence_proxy_async_smem() before the next bulk_g2s into the slot
//   (orders the generic-proxy reads before the async-proxy write).
// A barrier's k-th completed phase has parity k & 1.
#pragma once

#include <cstdint>

#include "quack/core/vec.cuh"  // smem_addr

namespace quack {
namespace core {

// Initialises an mbarrier expecting `count` arrivals a phase.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes this thread's mbarrier initialisations visible to the async proxy
// (and, after a barrier, to the other threads).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives on `bar` and adds `bytes` to the bytes its current phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Waits until the phase of parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

// Orders earlier generic-proxy accesses to this CTA's shared memory (this
// thread's, and those it synchronised with) before its later async-proxy ones.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Copies `bytes` (a multiple of 16) from global `src` to this CTA's shared
// memory at `dst` (both 16-byte aligned); completes the bytes on `bar`.
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// kBytes (2 or 4) of shared memory at `addr`, zero-extended to 32 bits.
template <int kBytes>
__device__ __forceinline__ uint32_t lds_bits(uint32_t addr) {
  static_assert(kBytes == 2 || kBytes == 4, "2 or 4 bytes");
  uint32_t v;
  if constexpr (kBytes == 4) {
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  } else {
    unsigned short h;
    asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(h) : "r"(addr) : "memory");
    v = h;
  }
  return v;
}

// 16 bytes of shared memory at `addr` (16-byte aligned).
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

}  // namespace core
}  // namespace quack
