// Minimal use of the quack-cpp C++ API: RMSNorm forward over a small fp32
// matrix with a weight.
//
//   1. describe the problem in an RMSNormFwdArgs (raw device pointers, int64
//      sizes and row strides in elements, dtypes, eps);
//   2. ask can_implement whether the call is valid (it names the argument
//      when it is not);
//   3. call rmsnorm_fwd on a stream and check the result on the host.
//
// Without a CUDA device the launch is skipped (exit 0): can_implement reads
// only shapes, strides, dtypes and pointer alignment, never memory, so it
// still runs, here on host pointers.
#include <cuda_runtime.h>  // the C++ API (typed cudaMalloc); fine in a host compiler

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "quack/quack.hpp"

namespace {

constexpr int64_t kRows = 64;
constexpr int64_t kCols = 4096;
constexpr float kEps = 1e-6f;

quack::RMSNormFwdArgs make_args(const float* x, const float* weight, float* out) {
  quack::RMSNormFwdArgs args;
  args.rows = kRows;
  args.cols = kCols;
  args.x = {x, quack::DType::kFloat32, kCols};       // row stride in elements
  args.weight = {weight, quack::DType::kFloat32};
  args.out = {out, quack::DType::kFloat32, kCols};
  args.eps = kEps;
  return args;
}

int fail(const char* what, const quack::Status& st) {
  std::fprintf(stderr, "%s failed: %s\n", what, st.message.c_str());
  return 1;
}

int fail(const char* what, cudaError_t e) {
  std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(e));
  return 1;
}

}  // namespace

int main() {
  std::printf("quack-cpp %s\n", quack::version());

  std::vector<float> x(static_cast<size_t>(kRows * kCols)), w(static_cast<size_t>(kCols)), out(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.001f * float(i)) + 0.25f * float(i % 7);
  for (size_t j = 0; j < w.size(); ++j) w[j] = 1.0f + 0.01f * float(j % 13);

  // A rejected argument comes back as a Status naming it.
  quack::RMSNormFwdArgs bad = make_args(x.data(), w.data(), out.data());
  bad.x.row_stride = kCols - 1;
  const quack::Status why = quack::can_implement(bad);
  std::printf("can_implement(row stride < N): %s\n", why.ok() ? "accepted?!" : why.message.c_str());
  if (why.ok()) return 1;

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    const quack::Status st = quack::can_implement(make_args(x.data(), w.data(), out.data()));
    if (!st.ok()) return fail("can_implement", st);
    std::printf("can_implement: ok\nno CUDA device: skipped the launch\n");
    return 0;
  }

  float *dx = nullptr, *dw = nullptr, *dout = nullptr;
  cudaError_t e;
  if ((e = cudaMalloc(&dx, x.size() * sizeof(float))) != cudaSuccess ||
      (e = cudaMalloc(&dw, w.size() * sizeof(float))) != cudaSuccess ||
      (e = cudaMalloc(&dout, out.size() * sizeof(float))) != cudaSuccess)
    return fail("cudaMalloc", e);
  if ((e = cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice)) != cudaSuccess ||
      (e = cudaMemcpy(dw, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice)) != cudaSuccess)
    return fail("cudaMemcpy", e);

  const quack::RMSNormFwdArgs args = make_args(dx, dw, dout);
  quack::Status st = quack::can_implement(args);
  if (!st.ok()) return fail("can_implement", st);
  std::printf("can_implement: ok\n");

  cudaStream_t stream;
  if ((e = cudaStreamCreate(&stream)) != cudaSuccess) return fail("cudaStreamCreate", e);
  st = quack::rmsnorm_fwd(args, stream);
  if (!st.ok()) return fail("rmsnorm_fwd", st);
  if ((e = cudaStreamSynchronize(stream)) != cudaSuccess) return fail("the kernel", e);
  if ((e = cudaMemcpy(out.data(), dout, out.size() * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)
    return fail("cudaMemcpy", e);
  cudaStreamDestroy(stream);
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(dout);

  // Reference in double.
  double max_err = 0.0;
  for (int64_t r = 0; r < kRows; ++r) {
    double ss = 0.0;
    for (int64_t c = 0; c < kCols; ++c) ss += double(x[r * kCols + c]) * x[r * kCols + c];
    const double rstd = 1.0 / std::sqrt(ss / kCols + kEps);
    for (int64_t c = 0; c < kCols; ++c) {
      const double want = x[r * kCols + c] * rstd * w[c];
      max_err = std::fmax(max_err, std::fabs(out[r * kCols + c] - want) / (1.0 + std::fabs(want)));
    }
  }
  std::printf("rmsnorm_fwd on %lld x %lld fp32: max relative error %.3g\n", (long long)kRows, (long long)kCols,
              max_err);
  if (!(max_err < 1e-5)) {
    std::fprintf(stderr, "result check failed\n");
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
