// A matrix operand in its own cudaMalloc'ed buffer, every byte outside its
// elements poisoned, for the GPU tests:
//   [guard][offset elements][row 0][gap][row 1][gap] ... [row M-1][guard]
// where gap = row_stride - N. Poison is 0xFF: NaN in all three dtypes, so a
// kernel that reads a gap or guard turns its row into NaN, and one that writes
// there is caught byte by byte (download counts the dirty bytes).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "quack/quack.hpp"
#include "support/cuda_test.hpp"

namespace quack {
namespace test {

constexpr size_t kGuard = 256;                 // poison bytes before and after every operand
constexpr size_t kMaxHostImage = size_t(256) << 20;  // larger buffers are checked row by row
constexpr unsigned char kPoison = 0xFF;

// ---------------------------------------------------------------------------
// One operand in its own guarded, poisoned allocation.

struct Layout {
  DType dtype = DType::kFloat32;
  int64_t rows = 0, cols = 0;
  int64_t stride = 0;  // elements between row starts (>= cols)
  int64_t offset = 0;  // elements between the guard and row 0
};

class GuardedTensor {
 public:
  explicit GuardedTensor(const Layout& l) : l_(l), es_(dtype_size(l.dtype)) {
    const int64_t span = l.rows == 0 ? 0 : (l.offset + (l.rows - 1) * l.stride + l.cols) * es_;
    total_ = kGuard + size_t(span) + kGuard;
    buf_ = DeviceBuffer(total_);
  }
  bool ok() const { return buf_.ok(); }
  void* ptr() const { return buf_.data() + kGuard + l_.offset * es_; }
  const Layout& layout() const { return l_; }

  // Sets every byte to poison.
  cudaError_t poison() const { return cudaMemset(buf_.data(), kPoison, total_); }

  // Poison everywhere, then `v[r * cols + c]` (representable in the dtype) at
  // the elements.
  cudaError_t upload(const std::vector<float>& v) const {
    if (total_ <= kMaxHostImage) {
      std::vector<unsigned char> img(total_, kPoison);
      for (int64_t r = 0; r < l_.rows; ++r)
        for (int64_t c = 0; c < l_.cols; ++c) store_elem(&img[row_begin(r) + c * es_], l_.dtype, v[r * l_.cols + c]);
      return cudaMemcpy(buf_.data(), img.data(), total_, cudaMemcpyHostToDevice);
    }
    cudaError_t e = poison();
    std::vector<unsigned char> row(size_t(l_.cols * es_));
    for (int64_t r = 0; r < l_.rows && e == cudaSuccess; ++r) {
      for (int64_t c = 0; c < l_.cols; ++c) store_elem(&row[c * es_], l_.dtype, v[r * l_.cols + c]);
      e = cudaMemcpy(buf_.data() + row_begin(r), row.data(), row.size(), cudaMemcpyHostToDevice);
    }
    return e;
  }

  // Reads every element back into `v` (as float64) and counts the bytes
  // outside the rows that are no longer poison. Small buffers are read whole;
  // large ones as one window per row reaching up to kGuard bytes past either
  // end (never into a neighbouring row).
  cudaError_t download(std::vector<double>* v, int64_t* dirty) const {
    v->assign(size_t(l_.rows * l_.cols), std::nan(""));
    *dirty = 0;
    if (total_ <= kMaxHostImage) return scan(0, total_, 0, l_.rows, v, dirty);
    for (int64_t r = 0; r < l_.rows; ++r) {
      const size_t prev_end = r == 0 ? 0 : row_end(r - 1);
      const size_t next_begin = r + 1 == l_.rows ? total_ : row_begin(r + 1);
      const size_t lo = std::max(prev_end, row_begin(r) - std::min(row_begin(r), kGuard));
      const size_t hi = std::min(next_begin, row_end(r) + kGuard);
      const cudaError_t e = scan(lo, hi, r, r + 1, v, dirty);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }

  // After a call that must write nothing: *written, the elements that are no
  // longer poison (poison reads as NaN in every dtype); *dirty, as download's.
  cudaError_t count_written(int64_t* written, int64_t* dirty) const {
    std::vector<double> v;
    const cudaError_t e = download(&v, dirty);
    *written = 0;
    for (const double x : v) *written += !std::isnan(x);
    return e;
  }

 private:
  size_t row_begin(int64_t r) const { return kGuard + size_t((l_.offset + r * l_.stride) * es_); }
  size_t row_end(int64_t r) const { return row_begin(r) + size_t(l_.cols * es_); }

  // Reads bytes [lo, hi), which hold rows [r0, r1) whole.
  cudaError_t scan(size_t lo, size_t hi, int64_t r0, int64_t r1, std::vector<double>* v, int64_t* dirty) const {
    std::vector<unsigned char> img(hi - lo);
    const cudaError_t e = cudaMemcpy(img.data(), buf_.data() + lo, hi - lo, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return e;
    size_t pos = lo;
    auto count_dirty = [&](size_t end) {
      for (; pos < end; ++pos) *dirty += img[pos - lo] != kPoison;
    };
    for (int64_t r = r0; r < r1; ++r) {
      count_dirty(row_begin(r));
      for (int64_t c = 0; c < l_.cols; ++c) (*v)[r * l_.cols + c] = load_elem(&img[row_begin(r) - lo + c * es_], l_.dtype);
      pos = row_end(r);
    }
    count_dirty(hi);
    return cudaSuccess;
  }

  Layout l_;
  int64_t es_;
  size_t total_ = 0;
  DeviceBuffer buf_;
};

// A call refused for too small a workspace: kInvalidArgument with a message
// that starts by naming workspace_bytes, and `out` (poisoned before the
// call) neither written nor dirtied around. (ASSERT_NO_FATAL_FAILURE it.)
inline void expect_workspace_refused(const Status& st, const GuardedTensor& out) {
  EXPECT_EQ(st.code, Code::kInvalidArgument);
  EXPECT_EQ(st.message.rfind("workspace_bytes:", 0), 0u) << st.message;
  QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
  int64_t written = 0, dirty = 0;
  QUACK_ASSERT_CUDA(out.count_written(&written, &dirty));
  EXPECT_EQ(dirty, 0);
  EXPECT_EQ(written, 0) << "a refused call wrote the output";
}

}  // namespace test
}  // namespace quack
