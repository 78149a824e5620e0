// C++-only softmax / log-softmax sweep, forward and backward: a spot check of
// three rows of each against a double CPU reference, then bandwidth against a
// same-run device-to-device copy (model bytes: forward reads x and writes
// out; backward reads y and dy and writes dx). Used to tune the register
// kernels' configuration in one device call.
//
//   softmax_sweep [dtype=bf16|f16|f32] [log=0|1] [total_elems=268435456] [N ...]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"
#include "sweep_common.hpp"

namespace {

// Largest relative error of rows {0, M/2, M-1} of out against the forward
// reference of x (softmax or log-softmax, double).
double check_fwd(const void* x, const void* out, int64_t M, int64_t N, quack::DType dt, bool log) {
  const int es = quack::dtype_size(dt);
  double worst = 0.0;
  for (int64_t r : {int64_t(0), M / 2, M - 1}) {
    std::vector<uint8_t> hx(size_t(N) * es), hy(size_t(N) * es);
    CK(cudaMemcpy(hx.data(), static_cast<const char*>(x) + size_t(r) * N * es, hx.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hy.data(), static_cast<const char*>(out) + size_t(r) * N * es, hy.size(), cudaMemcpyDeviceToHost));
    double m = -INFINITY, s = 0.0;
    for (int64_t c = 0; c < N; ++c) m = std::max(m, double(sweep::bits_to_float(hx.data() + c * es, dt)));
    for (int64_t c = 0; c < N; ++c) s += std::exp(double(sweep::bits_to_float(hx.data() + c * es, dt)) - m);
    for (int64_t c = 0; c < N; ++c) {
      const double d = double(sweep::bits_to_float(hx.data() + c * es, dt)) - m;
      const double ref = log ? d - std::log(s) : std::exp(d) / s;
      const double got = sweep::bits_to_float(hy.data() + c * es, dt);
      const double err = std::fabs(got - ref) / (std::fabs(ref) + (log ? 1.0 : 1.0 / double(N)));
      worst = std::isnan(err) ? INFINITY : std::max(worst, err);
    }
  }
  return worst;
}

// Largest error of rows {0, M/2, M-1} of dx against the backward
// reference from y and dy (double), relative to |dx| + the row's mean
// |dx|.
double check_bwd(const void* y, const void* dy, const void* dx, int64_t M, int64_t N, quack::DType dt, bool log) {
  const int es = quack::dtype_size(dt);
  double worst = 0.0;
  for (int64_t r : {int64_t(0), M / 2, M - 1}) {
    std::vector<uint8_t> hy(size_t(N) * es), hd(size_t(N) * es), hx(size_t(N) * es);
    const size_t at = size_t(r) * N * es;
    CK(cudaMemcpy(hy.data(), static_cast<const char*>(y) + at, hy.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hd.data(), static_cast<const char*>(dy) + at, hd.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hx.data(), static_cast<const char*>(dx) + at, hx.size(), cudaMemcpyDeviceToHost));
    auto yv = [&](int64_t c) { return double(sweep::bits_to_float(hy.data() + c * es, dt)); };
    auto dv = [&](int64_t c) { return double(sweep::bits_to_float(hd.data() + c * es, dt)); };
    double dot = 0.0;
    for (int64_t c = 0; c < N; ++c) dot += log ? dv(c) : dv(c) * yv(c);
    auto ref = [&](int64_t c) { return log ? dv(c) - std::exp(yv(c)) * dot : yv(c) * (dv(c) - dot); };
    double mean_abs = 0.0;
    for (int64_t c = 0; c < N; ++c) mean_abs += std::fabs(ref(c)) / double(N);
    for (int64_t c = 0; c < N; ++c) {
      const double got = sweep::bits_to_float(hx.data() + c * es, dt);
      const double err = std::fabs(got - ref(c)) / (std::fabs(ref(c)) + mean_abs);
      worst = std::isnan(err) ? INFINITY : std::max(worst, err);
    }
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const quack::DType dt = argc > 1 ? sweep::parse_dtype(argv[1]) : quack::DType::kBFloat16;
  const bool log = argc > 2 && std::atoi(argv[2]) != 0;
  const int64_t total = argc > 3 ? std::atoll(argv[3]) : (int64_t(1) << 28);
  std::vector<int64_t> Ns;
  for (int i = 4; i < argc; ++i) Ns.push_back(std::atoll(argv[i]));
  if (Ns.empty()) Ns = {256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 1048576};
  const int es = quack::dtype_size(dt);
  if (!sweep::install_tuning_from_env()) return 2;
  const quack::DeviceLimits lim = sweep::device_limits();

  const size_t bytes = size_t(total) * es;
  void *x, *y, *dy, *dx;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&y, bytes));
  CK(cudaMalloc(&dy, bytes));
  CK(cudaMalloc(&dx, bytes));
  sweep::Timer timer;
  const double copy_gbs = timer.copy_gbs(y, x, bytes);
  {
    std::mt19937 rng(1234);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<uint8_t> h;
    sweep::fill_normal(h, total, dt, 2.0f, 0.0f, nd, rng);
    CK(cudaMemcpy(x, h.data(), bytes, cudaMemcpyHostToDevice));
    sweep::fill_normal(h, total, dt, 1.0f, 0.0f, nd, rng);
    CK(cudaMemcpy(dy, h.data(), bytes, cudaMemcpyHostToDevice));
  }
  std::printf("%s, dtype %s, M*N = %lld, copy %.1f GB/s\n", log ? "log_softmax" : "softmax", quack::dtype_name(dt),
              (long long)total, copy_gbs);
  std::printf("%9s %8s | %-40s | %9s %6s | %-40s | %9s %6s | %s\n", "N", "M", "forward kernel", "fwd us", "%copy",
              "backward kernel", "bwd us", "%copy", "fwd / bwd max rel err");

  for (int64_t N : Ns) {
    const int64_t M = std::max<int64_t>(1, total / N);
    quack::SoftmaxFwdArgs fa;
    fa.rows = M;
    fa.cols = N;
    fa.x = {x, dt, N};
    fa.out = {y, dt, N};
    fa.log = log;
    // The workspace the forward asks for (the grid kernel's, where the
    // tuning sends the row to it), as the Python front passes.
    size_t ws_bytes = 0;
    void* ws = nullptr;
    const quack::Status wst = quack::softmax_fwd_workspace_bytes(fa, &ws_bytes);
    if (!wst.ok()) {
      std::printf("%9lld: workspace query error %s\n", (long long)N, wst.message.c_str());
      continue;
    }
    if (ws_bytes > 0) CK(cudaMalloc(&ws, ws_bytes));
    fa.workspace = ws;
    fa.workspace_bytes = ws_bytes;
    quack::SoftmaxBwdArgs ba;
    ba.rows = M;
    ba.cols = N;
    ba.y = {y, dt, N};
    ba.dy = {dy, dt, N};
    ba.dx = {dx, dt, N};
    ba.log = log;
    // The backward's likewise.
    size_t bws_bytes = 0;
    void* bws = nullptr;
    const quack::Status bwst = quack::softmax_bwd_workspace_bytes(ba, &bws_bytes);
    if (!bwst.ok()) {
      std::printf("%9lld: backward workspace query error %s\n", (long long)N, bwst.message.c_str());
      if (ws != nullptr) CK(cudaFree(ws));
      continue;
    }
    if (bws_bytes > 0) CK(cudaMalloc(&bws, bws_bytes));
    ba.workspace = bws;
    ba.workspace_bytes = bws_bytes;
    auto free_ws = [&] {
      if (ws != nullptr) CK(cudaFree(ws));
      if (bws != nullptr) CK(cudaFree(bws));
    };
    CK(cudaMemset(y, 0xff, size_t(M) * N * es));  // poison (NaN) before the checked run
    const quack::Status fst = quack::softmax_fwd(fa, nullptr);
    if (!fst.ok()) {
      std::printf("%9lld: forward error %s\n", (long long)N, fst.message.c_str());
      free_ws();
      continue;
    }
    CK(cudaDeviceSynchronize());
    const double err = check_fwd(x, y, M, N, dt, log);
    const float fwd_ms = timer.median_ms([&] { (void)quack::softmax_fwd(fa, nullptr); }, 20);
    CK(cudaMemset(dx, 0xff, size_t(M) * N * es));  // poison (NaN) before the checked run
    const quack::Status bst = quack::softmax_bwd(ba, nullptr);
    if (!bst.ok()) {
      std::printf("%9lld: backward error %s\n", (long long)N, bst.message.c_str());
      free_ws();
      continue;
    }
    CK(cudaDeviceSynchronize());
    const double berr = check_bwd(y, dy, dx, M, N, dt, log);
    const float bwd_ms = timer.median_ms([&] { (void)quack::softmax_bwd(ba, nullptr); }, 20);
    const double fwd_pct = 100.0 * (2.0 * M * N * es / fwd_ms / 1e6) / copy_gbs;
    const double bwd_pct = 100.0 * (3.0 * M * N * es / bwd_ms / 1e6) / copy_gbs;
    // (Contiguous rows that are not whole 16-byte vectors are shifted rows:
    // read from the vector that holds each row's first element.)
    const bool shifted = (N * es) % 16 != 0;
    const std::string fplan = quack::softmax_plan_description(M, N, dt, false, lim, true, shifted);
    const std::string bplan = quack::softmax_plan_description(M, N, dt, true, lim, true, shifted);
    std::printf("%9lld %8lld | %-40s | %9.1f %5.1f%% | %-40s | %9.1f %5.1f%% | %.2e / %.2e\n", (long long)N,
                (long long)M, fplan.c_str(), fwd_ms * 1e3, fwd_pct, bplan.c_str(), bwd_ms * 1e3, bwd_pct, err, berr);
    free_ws();
  }
  CK(cudaGetLastError());
  return 0;
}
