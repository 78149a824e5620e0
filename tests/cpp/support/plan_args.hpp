// Host plan tests' shared pieces: dtype names and fake device pointers. The
// dispatch tables read no tensor, only a pointer's alignment, so arguments
// can point at addresses that are never dereferenced.
#pragma once

#include <cstdint>

#include "quack/quack.hpp"

namespace quack {
namespace test {

constexpr DType kF32 = DType::kFloat32;
constexpr DType kBF16 = DType::kBFloat16;
constexpr DType kF16 = DType::kFloat16;

// Operand `slot`'s fake base (256-byte aligned, 64 GB apart), `off`
// elements of `t` past it.
inline void* fake_device_ptr(uintptr_t slot, int64_t off, DType t) {
  return reinterpret_cast<void*>((uintptr_t(1) << 40) + (slot << 36) + uintptr_t(off * dtype_size(t)));
}

}  // namespace test
}  // namespace quack
