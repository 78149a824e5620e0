// Host tests of the argument helpers the ops share (src/validate.hpp) that
// choose a kernel path: vec_ok (every row a whole number of 16-byte
// vectors) and same_vector_offsets (the operands start each row at the same
// offset inside a 16-byte vector: softmax's shifted streaming rows).
// Checked against their definitions row by row, not against the formulas.
#include <gtest/gtest.h>

#include <algorithm>
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

// The overlap checks' arithmetic (check_disjoint): an operand's extent is
// its first element to one past its last, saturating where no address space
// could hold the rows; ranges compare with their ends clamped to the top
// of the address space. Checked against element-by-element sums.
TEST(ValidateHelpers, ExtentsSaturateAndRangesClampAtTheTop) {
  for (int64_t rows : {1, 2, 7})
    for (int64_t stride : {8, 9, 1000})
      for (int64_t es : {2, 4}) {
        int64_t last = 0;  // one past the last element's last byte
        for (int64_t r = 0; r < rows; ++r) last = std::max(last, (r * stride + 8) * es);
        EXPECT_EQ(detail::extent_bytes(rows, stride, 8, es), last) << rows << " x " << stride << " x " << es;
      }
  EXPECT_EQ(detail::extent_bytes(0, 8, 8, 2), 0);
  EXPECT_EQ(detail::extent_bytes(3, int64_t(1) << 62, 8, 2), INT64_MAX);
  EXPECT_EQ(detail::extent_bytes(1, 0, int64_t(1) << 62, 4), INT64_MAX);
  const uintptr_t top = ~uintptr_t(0);
  auto at = [](uintptr_t p) { return reinterpret_cast<const void*>(p); };
  EXPECT_TRUE(detail::ranges_overlap(at(top - 64), INT64_MAX, at(top - 8), 4));
  EXPECT_FALSE(detail::ranges_overlap(at(top - 64), 32, at(top - 8), 4));
  EXPECT_TRUE(detail::ranges_overlap(at(4096), 16, at(4096 + 15), 1));
  EXPECT_FALSE(detail::ranges_overlap(at(4096), 16, at(4096 + 16), 1));
  EXPECT_FALSE(detail::ranges_overlap(at(4096 + 16), 1, at(4096), 16));
  // A matrix whose rows run past any address space is refused by name.
  const Status st = detail::check_matrix("x", at(4096), DType::kBFloat16, int64_t(1) << 62, 3, 8, true);
  EXPECT_EQ(st.code, Code::kInvalidArgument);
  EXPECT_EQ(st.message.rfind("x: row stride", 0), 0u) << st.message;
}

}  // namespace
}  // namespace quack
