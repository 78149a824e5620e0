// Host tests of the argument helpers the ops share (src/validate.hpp) that
// choose a kernel path: vec_ok (every row a whole number of 16-byte
// vectors) and same_vector_offsets (the operands start each row at the same
// offset inside a 16-byte vector: softmax's shifted streaming rows).
// Checked against their definitions row by row, not against the formulas.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "validate.hpp"

namespace quack {
namespace {

// Offsets inside a 16-byte vector of rows 0..rows-1 of a matrix at `base`
// with `stride` elements of `es` bytes between row starts.
bool rows_match(uintptr_t a, int64_t sa, uintptr_t b, int64_t sb, int es, int rows) {
  for (int r = 0; r < rows; ++r)
    if ((a + uintptr_t(r * sa * es)) % 16 != (b + uintptr_t(r * sb * es)) % 16) return false;
  return true;
}

TEST(ValidateHelpers, SameVectorOffsetsIsRowByRowAgreement) {
  std::mt19937 gen(7);
  for (int es : {2, 4}) {
    std::uniform_int_distribution<int> off(0, 15), pitch(1, 70);
    for (int i = 0; i < 20000; ++i) {
      const uintptr_t a = 0x10000 + uintptr_t(off(gen) / es * es), b = 0x90000 + uintptr_t(off(gen) / es * es);
      const int64_t sa = pitch(gen), sb = gen() % 2 ? sa : pitch(gen);
      // 16 rows cover every residue of r * pitch * es mod 16.
      EXPECT_EQ(detail::same_vector_offsets(reinterpret_cast<const void*>(a), sa, reinterpret_cast<const void*>(b), sb,
                                            es),
                rows_match(a, sa, b, sb, es, 16))
          << "es " << es << " a+" << a % 16 << " b+" << b % 16 << " pitches " << sa << ", " << sb;
    }
  }
  // An absent operand agrees with anything.
  EXPECT_TRUE(detail::same_vector_offsets(reinterpret_cast<const void*>(0x1002), 50257, nullptr, 3, 2));
  // GPT-2's 50257 bf16 classes, x and out alike: rows at every offset, shared.
  EXPECT_TRUE(detail::same_vector_offsets(reinterpret_cast<const void*>(0x1000), 50257,
                                          reinterpret_cast<const void*>(0x7000), 50257, 2));
  EXPECT_FALSE(detail::same_vector_offsets(reinterpret_cast<const void*>(0x1000), 50257,
                                           reinterpret_cast<const void*>(0x7002), 50257, 2));
}

TEST(ValidateHelpers, VecOkIsEveryRowOnAVector) {
  for (int es : {2, 4})
    for (uintptr_t off = 0; off < 16; off += uintptr_t(es))
      for (int64_t stride = 1; stride <= 40; ++stride) {
        const uintptr_t base = 0x20000 + off;
        bool every = true;
        for (int r = 0; r < 16; ++r) every = every && (base + uintptr_t(r * stride * es)) % 16 == 0;
        EXPECT_EQ(detail::vec_ok(reinterpret_cast<const void*>(base), es == 2 ? DType::kBFloat16 : DType::kFloat32,
                                 stride, 16 / es),
                  every)
            << "es " << es << " offset " << off << " stride " << stride;
      }
}

}  // namespace
}  // namespace quack
