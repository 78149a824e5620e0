// Library-wide host helpers: device limits (cached per device), names.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "quack/core/launch.cuh"
#include "quack/quack.hpp"

namespace quack {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

const char* version() { return QUACK_VERSION; }

namespace core {

namespace {

// The largest cluster the device schedules. A cluster's CTAs share a GPC, so
// a partition with fewer free SMs in a GPC than the cluster has CTAs (a MIG
// instance, an MPS client's SM share) cannot launch it: the launch fails
// instead of running slower. Measured once per device with the worst case of
// the plans -- one CTA an SM, holding the most shared memory a CTA may -- so
// that every cluster a plan picks under this bound can be scheduled (a
// smaller CTA needs no more of a GPC). Every plan respects max_cluster
// (choose_*_config; the host sweeps run them at 16, 8 and 1), falling back to
// smaller clusters, or to the chunked kernels, which need none.
__global__ void cluster_probe_kernel() {}

int schedulable_cluster(int dev, size_t smem) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) return 1;
  if (current != dev && cudaSetDevice(dev) != cudaSuccess) return 1;
  int best = 1;
  if (cudaFuncSetAttribute(cluster_probe_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess &&
      cudaFuncSetAttribute(cluster_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) == cudaSuccess) {
    for (int cluster = 16; cluster >= 2; cluster /= 2) {
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t lc = core::one_cluster_config(cluster, 128, smem, &attr);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, cluster_probe_kernel, &lc) == cudaSuccess && clusters >= 1) {
        best = cluster;
        break;
      }
    }
  }
  (void)cudaGetLastError();  // a refused size is an answer, not a sticky error
  if (current != dev) (void)cudaSetDevice(current);
  return best;
}

// QUACK_MAX_CLUSTER (1, 2, 4, 8 or 16) caps the clusters further: for a
// partition the probe misjudges, or to run the fallback plans on a device
// that does not need them (the GPU suite's cluster-cap tests do).
Status cluster_cap_from_env(int* cap) {
  const char* env = std::getenv("QUACK_MAX_CLUSTER");
  *cap = 16;
  if (env == nullptr || *env == '\0') return Status::success();
  const std::string v(env);
  for (int c = 1; c <= 16; c *= 2)
    if (v == std::to_string(c)) {
      *cap = c;
      return Status::success();
    }
  return {Code::kInvalidArgument, "QUACK_MAX_CLUSTER = '" + v + "': expected 1, 2, 4, 8 or 16 (CTAs a cluster at most)"};
}

}  // namespace

Status device_limits(DeviceLimits* out, int* device) {
  constexpr int kMaxDevices = 64;
  static DeviceLimits cache[kMaxDevices];
  static std::atomic<bool> ready[kMaxDevices];
  static std::mutex mu;
  int dev = *device;
  if (dev < 0) {
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return cuda_status(e, "cudaGetDevice");
    *device = dev;
  }
  if (dev >= kMaxDevices) return {Code::kUnsupported, "device index >= 64"};
  if (!ready[dev].load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mu);
    if (!ready[dev].load(std::memory_order_relaxed)) {
      DeviceLimits l;
      int v = 0, major = 0, minor = 0;
      cudaError_t e;
      if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
        return cuda_status(e, "reading device attributes");
      l.num_sms = v;
      if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess)
        return cuda_status(e, "reading device attributes");
      l.max_smem_per_block = size_t(v);
      if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev)) != cudaSuccess)
        return cuda_status(e, "reading device attributes");
      l.smem_per_sm = size_t(v);
      if ((e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess ||
          (e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess)
        return cuda_status(e, "reading device attributes");
      l.compute_capability = major * 10 + minor;
      int cap = 16;
      Status st = cluster_cap_from_env(&cap);
      if (!st.ok()) return st;
      l.max_cluster = major >= 9 ? std::min(cap, schedulable_cluster(dev, l.max_smem_per_block)) : 1;
      cache[dev] = l;
      ready[dev].store(true, std::memory_order_release);
    }
  }
  *out = cache[dev];
  return Status::success();
}

}  // namespace core
}  // namespace quack
