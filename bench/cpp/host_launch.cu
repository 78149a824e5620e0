// Host time of one eager launch, from C++: where a decode-sized call's
// microseconds go below the Python front (bench/host_breakdown.py times the
// layers above). M = 1, N = 4096, bf16, on the default stream:
//
//   an empty kernel by <<<>>> (cudaLaunchKernel) and by cudaLaunchKernelEx
//   (the launch path of every quack kernel), with and without a 256-byte
//   parameter block (the size of our kernels' parameter structs);
//   quack::can_implement and the plan alone (softmax_plan_description);
//   quack::softmax_fwd, rmsnorm_fwd and cross_entropy (mean loss) whole.
//
//   host_launch [calls=20000]
//
// us a call: the median of 7 rounds of `calls` launches each, synchronised
// every 256 launches so that the launch queue never fills (a full queue
// would time the GPU, not the host).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"
#include "sweep_common.hpp"

namespace {

struct Big {
  unsigned char bytes[256];
};

__global__ void empty_kernel(int) {}
__global__ void empty_big_kernel(Big) {}

double time_us(int calls, const std::function<void()>& f) {
  std::vector<double> rounds;
  for (int r = 0; r < 7; ++r) {
    CK(cudaDeviceSynchronize());
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) {
      f();
      if ((i & 255) == 255) CK(cudaDeviceSynchronize());
    }
    CK(cudaDeviceSynchronize());
    rounds.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                     calls);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[3];
}

void ok(const quack::Status& st) {
  if (!st.ok()) {
    std::fprintf(stderr, "host_launch: %s\n", st.message.c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int64_t M = 1, N = 4096;
  const quack::DType bf16 = quack::DType::kBFloat16;
  void *x = nullptr, *y = nullptr, *w = nullptr, *target = nullptr, *loss = nullptr, *ws = nullptr;
  CK(cudaMalloc(&x, M * N * 2));
  CK(cudaMalloc(&y, M * N * 2));
  CK(cudaMalloc(&w, N * 2));
  CK(cudaMalloc(&target, 8));
  CK(cudaMalloc(&loss, 64));
  CK(cudaMalloc(&ws, 1 << 20));
  CK(cudaMemset(x, 0, M * N * 2));
  CK(cudaMemset(w, 0, N * 2));
  CK(cudaMemset(target, 0, 8));

  const quack::SoftmaxFwdArgs sa = sweep::softmax_args(M, N, x, y, bf16);
  quack::RMSNormFwdArgs na = sweep::norm_args<quack::RMSNormFwdArgs>(M, N, x, y, bf16);
  na.weight = {w, bf16};
  quack::CrossEntropyArgs ca = sweep::mean_loss_args(M, N, x, bf16, target, static_cast<float*>(loss));
  size_t need = 0;
  ok(quack::cross_entropy_workspace_bytes(ca, &need));
  ca.workspace = need > 0 ? ws : nullptr;
  ca.workspace_bytes = need;
  const quack::DeviceLimits lim = sweep::device_limits();
  int device = -1;
  CK(cudaGetDevice(&device));
  Big big{};
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(1);
  lc.blockDim = dim3(512);
  cudaLaunchAttribute attr{};
  lc.attrs = &attr;
  lc.numAttrs = 0;

  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, device));
  std::printf("# Host time of one launch from C++ (M = 1, N = 4096, bf16; %s, %d calls a round, median of 7)\n\n",
              prop.name, calls);
  std::printf("| what | us a call |\n|---|---:|\n");
  auto row = [&](const char* what, const std::function<void()>& f) {
    f();
    CK(cudaDeviceSynchronize());
    std::printf("| %s | %.3f |\n", what, time_us(calls, f));
    std::fflush(stdout);
  };
  row("empty kernel, <<<1, 512>>>", [&] { empty_kernel<<<1, 512>>>(0); });
  row("empty kernel, cudaLaunchKernelEx", [&] { CK(cudaLaunchKernelEx(&lc, empty_kernel, 0)); });
  row("empty kernel, 256-byte parameters, <<<1, 512>>>", [&] { empty_big_kernel<<<1, 512>>>(big); });
  row("empty kernel, 256-byte parameters, cudaLaunchKernelEx",
      [&] { CK(cudaLaunchKernelEx(&lc, empty_big_kernel, big)); });
  row("cudaGetDevice", [&] {
    int d = 0;
    CK(cudaGetDevice(&d));
  });
  row("cudaGetLastError", [&] { CK(cudaGetLastError()); });
  row("quack::can_implement(softmax)", [&] { ok(quack::can_implement(sa)); });
  row("softmax plan (softmax_plan_description)",
      [&] { (void)quack::softmax_plan_description(M, N, bf16, false, lim, false, false); });
  row("quack::softmax_fwd", [&] { ok(quack::softmax_fwd(sa, nullptr)); });
  row("quack::rmsnorm_fwd (bf16 weight)", [&] { ok(quack::rmsnorm_fwd(na, nullptr)); });
  row("quack::cross_entropy (mean loss)", [&] { ok(quack::cross_entropy(ca, nullptr)); });
  for (void* p : {x, y, w, target, loss, ws}) CK(cudaFree(p));
  return 0;
}
