// Library-wide host helpers: device limits (cached per device), names.
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>

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
      l.max_cluster = major >= 9 ? 16 : 1;
      cache[dev] = l;
      ready[dev].store(true, std::memory_order_release);
    }
  }
  *out = cache[dev];
  return Status::success();
}

}  // namespace core
}  // namespace quack
