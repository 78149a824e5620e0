// Helpers shared by the GPU tests: device detection (tests skip visibly when
// there is none), CUDA error checks, RAII device memory, host conversions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "quack/quack.hpp"

namespace quack {
namespace test {

// Number of visible CUDA devices; 0 when the runtime reports none or fails
// (no driver, no device).
inline int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // reset the last-error state for later calls
    return 0;
  }
  return n;
}

// Compute capability of the current device as major * 10 + minor.
inline int compute_capability() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major * 10 + minor;
}

// Whether the GPU tests can run here: an sm_90 device (QUACK_REQUIRE_SM90).
// Suites whose cases assert their plans (which need no device) check them
// first, so that CI's CPU runs check them too, and run the kernels only
// here.
inline bool sm90_device() {
  static const bool yes = cuda_device_count() > 0 && compute_capability() == 90;
  return yes;
}

}  // namespace test
}  // namespace quack

// First statement of every GPU test.
#define QUACK_REQUIRE_GPU()                                                         \
  do {                                                                              \
    if (::quack::test::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// The kernels are built for sm_90a only (H100/H200).
#define QUACK_REQUIRE_SM90()                                                           \
  do {                                                                                 \
    QUACK_REQUIRE_GPU();                                                               \
    const int cc_ = ::quack::test::compute_capability();                               \
    if (cc_ != 90) GTEST_SKIP() << "needs an sm_90 device (H100/H200), found sm_" << cc_; \
  } while (0)

#define QUACK_ASSERT_CUDA(expr)                                                            \
  do {                                                                                     \
    const cudaError_t e_ = (expr);                                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorName(e_) << " - "         \
                               << cudaGetErrorString(e_);                                 \
  } while (0)

namespace quack {
namespace test {

// Owns one cudaMalloc'ed buffer.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) {
      ptr_ = nullptr;
      bytes_ = 0;
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  bool ok() const { return ptr_ != nullptr; }
  char* data() const { return static_cast<char*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Host-side element conversions (round to nearest even, as the kernels do).
inline double load_elem(const void* p, DType t) {
  switch (t) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kFloat16: {
      __half h;
      std::memcpy(&h, p, 2);
      return __half2float(h);
    }
    default: {
      __nv_bfloat16 b;
      std::memcpy(&b, p, 2);
      return __bfloat162float(b);
    }
  }
}

inline void store_elem(void* p, DType t, float v) {
  switch (t) {
    case DType::kFloat32: std::memcpy(p, &v, 4); break;
    case DType::kFloat16: {
      const __half h = __float2half_rn(v);
      std::memcpy(p, &h, 2);
      break;
    }
    default: {
      const __nv_bfloat16 b = __float2bfloat16_rn(v);
      std::memcpy(p, &b, 2);
      break;
    }
  }
}

// The rows a GPU case runs: its own, unless QUACK_TEST_MAX_ELEMS=E is set,
// when it runs at most max(E / cols, 1) of them (never more than its own).
// For racecheck (scripts/gpu_session.sh's racecheck part,
// RACECHECK_MAX_ELEMS), which takes minutes on a case of millions of elements
// (twenty-first session: 20-70 s a case of 4M elements, over 250 s in 8- and
// 16-CTA clusters). Every case keeps its columns, dtypes, layout and tuning --
// its kernel and that kernel's shared-memory use per row -- and rows of up to
// E / 2 columns keep two rows or more, so that a persistent CTA or cluster
// still reuses its buffers across rows where the grid is smaller than the
// rows. The plan checks in the tests run on the capped count. Prints a line
// when it caps, so that a log says what ran.
inline int64_t case_rows(int64_t rows, int64_t cols) {
  const char* env = std::getenv("QUACK_TEST_MAX_ELEMS");
  if (env == nullptr || *env == '\0' || cols <= 0) return rows;
  const long long max_elems = std::atoll(env);
  if (max_elems <= 0) return rows;
  int64_t cap = int64_t(max_elems) / cols;
  if (cap < 1) cap = 1;
  if (rows <= cap) return rows;
  std::printf("[ rows     ] %lld rows run as %lld (QUACK_TEST_MAX_ELEMS=%lld, %lld columns)\n", (long long)rows,
              (long long)cap, max_elems, (long long)cols);
  return cap;
}

// `v` rounded to dtype `t`.
inline double round_to(DType t, float v) {
  unsigned char b[4];
  store_elem(b, t, v);
  return load_elem(b, t);
}

}  // namespace test
}  // namespace quack
