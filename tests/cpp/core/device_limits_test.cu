// GPU tests of core::device_limits' cluster bound (src/common.cu): max_cluster
// is the largest cluster the device schedules with one CTA an SM holding the
// most shared memory a CTA may (the plans' worst case), capped by the
// QUACK_MAX_CLUSTER environment variable.
//
// ctest runs this suite, and the default suites' long rows -- the rows that
// take clusters -- again in processes with QUACK_MAX_CLUSTER = 4 and 1 (the
// plans a MIG or MPS partition with smaller GPCs gets, checked against the
// same float64 references), and once with an invalid value, which every call
// must refuse naming the variable (tests/cpp/CMakeLists.txt:
// gpu_cluster_cap_*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "quack/core/config.hpp"
#include "quack/core/launch.cuh"
#include "quack/quack.hpp"
#include "support/cuda_test.hpp"

namespace quack {
namespace {

// Each CTA writes the cluster's size as the hardware reports it.
__global__ void cluster_size_kernel(int* out) {
  unsigned n = 0;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  if (threadIdx.x == 0) out[blockIdx.x] = int(n);
}

// Whether a cluster of `cluster` CTAs, each holding `smem` bytes of dynamic
// shared memory (so one an SM), launches and runs here: the launch itself,
// not the occupancy calculator the library asks.
bool cluster_runs(int cluster, size_t smem) {
  EXPECT_EQ(cudaFuncSetAttribute(cluster_size_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), cudaSuccess);
  EXPECT_EQ(cudaFuncSetAttribute(cluster_size_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
            cudaSuccess);
  int* d = nullptr;
  if (cudaMalloc(&d, sizeof(int) * 16) != cudaSuccess) return false;
  cudaMemset(d, 0, sizeof(int) * 16);
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t lc = core::one_cluster_config(cluster, 128, smem, &attr);
  bool ran = cudaLaunchKernelEx(&lc, cluster_size_kernel, d) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
  (void)cudaGetLastError();
  std::vector<int> got(16, 0);
  if (ran) {
    cudaMemcpy(got.data(), d, sizeof(int) * 16, cudaMemcpyDeviceToHost);
    for (int i = 0; i < cluster; ++i) ran = ran && got[size_t(i)] == cluster;
  }
  cudaFree(d);
  return ran;
}

// QUACK_MAX_CLUSTER as this test reads it: 16 when unset, -1 when invalid.
int env_cap() {
  const char* env = std::getenv("QUACK_MAX_CLUSTER");
  if (env == nullptr || *env == '\0') return 16;
  for (int c = 1; c <= 16; c *= 2)
    if (std::string(env) == std::to_string(c)) return c;
  return -1;
}

// The largest "cl %d" in a plan description, 1 when it names none.
int plan_cluster(const std::string& plan) {
  const size_t at = plan.find(" cl ");
  return at == std::string::npos ? 1 : std::atoi(plan.c_str() + at + 4);
}

TEST(DeviceLimitsGpu, MaxClusterIsTheLargestThatRunsCappedByTheEnvironment) {
  QUACK_REQUIRE_SM90();
  const int cap = env_cap();
  DeviceLimits lim;
  int device = -1;
  const Status st = core::device_limits(&lim, &device);
  if (cap < 0) {
    // Every call refuses an invalid cap, naming the variable, and writes nothing.
    EXPECT_EQ(st.code, Code::kInvalidArgument);
    EXPECT_NE(st.message.find("QUACK_MAX_CLUSTER"), std::string::npos) << st.message;
    float* d = nullptr;
    QUACK_ASSERT_CUDA(cudaMalloc(&d, sizeof(float) * 16));
    QUACK_ASSERT_CUDA(cudaMemset(d, 0xFF, sizeof(float) * 16));
    SoftmaxFwdArgs a;
    a.rows = 1;
    a.cols = 8;
    a.x = {d, DType::kFloat32, 8};
    a.out = {d + 8, DType::kFloat32, 8};
    const Status op = softmax_fwd(a, nullptr);
    EXPECT_EQ(op.code, Code::kInvalidArgument);
    EXPECT_NE(op.message.find("QUACK_MAX_CLUSTER"), std::string::npos) << op.message;
    std::vector<uint32_t> back(16, 0);
    QUACK_ASSERT_CUDA(cudaMemcpy(back.data(), d, sizeof(float) * 16, cudaMemcpyDeviceToHost));
    for (uint32_t v : back) EXPECT_EQ(v, 0xFFFFFFFFu) << "a refused call wrote memory";
    QUACK_ASSERT_CUDA(cudaFree(d));
    return;
  }
  ASSERT_TRUE(st.ok()) << st.message;
  int runs = 1;
  for (int c = 16; c >= 2; c /= 2)
    if (cluster_runs(c, lim.max_smem_per_block)) {
      runs = c;
      break;
    }
  EXPECT_EQ(lim.max_cluster, std::min(cap, runs)) << "QUACK_MAX_CLUSTER cap " << cap << ", largest cluster that ran "
                                                   << runs;
  // A whole H100 / H200 schedules clusters of 16 (the plans' default).
  if (lim.num_sms >= 132 && cap == 16) EXPECT_EQ(lim.max_cluster, 16);
  // The plans the calls take on this device keep within it.
  for (int64_t n : {int64_t(32768), int64_t(65544), int64_t(262144), int64_t(1) << 20})
    for (DType dt : {DType::kBFloat16, DType::kFloat32})
      for (bool bwd : {false, true}) {
        const std::string plan = softmax_plan_description(8, n, dt, bwd, lim);
        EXPECT_LE(plan_cluster(plan), lim.max_cluster) << plan;
      }
}

}  // namespace
}  // namespace quack
