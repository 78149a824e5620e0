// One launch helper for every row kernel: grid, CTA, dynamic shared memory
// and cluster size come from a RowConfig. Raises the kernel's shared-memory
// limit and the non-portable-cluster attribute when needed (once per kernel
// and device), checks that the cluster can be scheduled, and reports errors
// as a Status instead of printing.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"

namespace quack {
namespace core {

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::success();
  return {Code::kCudaError, std::string(what) + ": " + cudaGetErrorString(e)};
}

// Per-device limits read once.
Status device_limits(DeviceLimits* out, int* device);
// device_limits, and kUnsupported naming the device unless it is sm_90 (the
// kernels are built for sm_90a): what every launch checks first.
inline Status launch_device(DeviceLimits* out, int* device) {
  Status st = device_limits(out, device);
  if (!st.ok()) return st;
  if (out->compute_capability != 90)
    return {Code::kUnsupported, "quack-cpp kernels are built for sm_90a (H100/H200); the current device is sm_" +
                                    std::to_string(out->compute_capability)};
  return Status::success();
}

// The launch attribute of a 1-D cluster of `cluster` CTAs (launch_row_kernel,
// device_limits' probe, the tests' cluster launches).
inline cudaLaunchAttribute cluster_dim_attr(int cluster) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = unsigned(cluster);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  return attr;
}
// Programmatic dependent launch (PDL). A kernel that ends a call's chain
// (cross-entropy's finish kernel) is launched with programmatic stream
// serialisation (pdl_config); its CTAs may then start once every CTA of the
// kernel before it has run pdl_launch_dependents (or exited) -- so never
// ahead of a CTA of that grid still waiting for an SM -- and pdl_wait holds
// them until that grid has completed and its writes are visible. Launched
// without the attribute, both are no-ops.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// A launch of `grid` CTAs of `threads` on `stream`, programmatically
// dependent on the stream's previous kernel where `pdl`; *attr (which must
// outlive the launch) holds the attribute.
inline cudaLaunchConfig_t pdl_config(int grid, int threads, cudaStream_t stream, bool pdl, cudaLaunchAttribute* attr) {
  *attr = cudaLaunchAttribute{};
  attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr->val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(unsigned(grid), 1, 1);
  lc.blockDim = dim3(unsigned(threads), 1, 1);
  lc.stream = stream;
  lc.attrs = attr;
  lc.numAttrs = pdl ? 1 : 0;
  return lc;
}

// A launch of one cluster of `cluster` CTAs of `threads`, `smem` bytes of
// dynamic shared memory each; *attr (which must outlive the launch) holds
// its cluster attribute (device_limits' probe and its test's launch).
inline cudaLaunchConfig_t one_cluster_config(int cluster, int threads, size_t smem, cudaLaunchAttribute* attr) {
  *attr = cluster_dim_attr(cluster);
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(unsigned(cluster), 1, 1);
  lc.blockDim = dim3(unsigned(threads), 1, 1);
  lc.dynamicSmemBytes = smem;
  lc.attrs = attr;
  lc.numAttrs = 1;
  return lc;
}

// Per-kernel, per-device attribute cache: bit d set once device d's
// attributes for this kernel were raised.
// A type as a value: the launchers pick a kernel's weight type at run time
// with a generic lambda over TypeTag<void> / <float> / <T>.
template <class T>
struct TypeTag {
  using type = T;
};

struct KernelAttrCache {
  std::atomic<uint64_t> done{0};
};

// What a launch needs from a configuration. `persistent` grids (CTAs that
// walk row blocks) are clamped to the clusters that can be resident at once;
// other grids are launched whole and scheduled as CTAs retire.
struct LaunchShape {
  int64_t grid = 0;
  int threads = 1;
  size_t smem_bytes = 0;
  int cluster = 1;
  bool persistent = false;
  // When set: receives the grid actually launched (after the clamp), e.g.
  // the number of partial rows a persistent kernel writes.
  int64_t* launched = nullptr;
  // A cooperative launch: every CTA resident at once (kernels whose CTAs
  // wait for one another, core/grid_exchange.cuh). When the grid cannot be
  // resident, nothing is launched, *not_resident (required) is set and the
  // status is kUnsupported: the caller takes another kernel.
  bool cooperative = false;
  bool* not_resident = nullptr;
  // A 2-D grid: grid / grid_y CTAs in x (grid_y divides grid), grid_y in y.
  // (The grid kernels: rank in x, group in y, both read from the CTA index
  // without a division, so ptxas keeps them and what derives from them --
  // the rows, their offsets -- in uniform registers.)
  int64_t grid_y = 1;
  // Persistent clusters clamped to the resident ones keep a multiple of
  // this many clusters, at least one multiple even where fewer are
  // resident (the walk needs whole classes of clusters, the shifted norm
  // backward's; the clusters past the resident ones run after them).
  int64_t cluster_multiple = 1;
};
inline LaunchShape launch_shape(const RowConfig& c) { return {c.grid, c.threads, c.smem_bytes, c.cluster, true}; }
// The grid kernels (ops/norm_fwd_grid.cuh, ops/softmax_grid.cuh, the norm
// backward's 2''): cfg.grid CTAs of `threads`, one an SM, launched
// cooperatively (when they cannot all be resident, nothing is launched and
// *not_resident is set: the caller takes another kernel). Their exchange
// logs (cfg.exchange_bytes at `exchange`) start zeroed: the reset is
// queued on `stream` here, ahead of the launch (`what` names it in an error).
inline Status grid_launch_prologue(const NormGridConfig& cfg, int threads, void* exchange, cudaStream_t stream,
                                   bool* not_resident, const char* what, LaunchShape* shape) {
  *shape = LaunchShape{cfg.grid, threads, cfg.smem_bytes, 1, false, nullptr};
  shape->cooperative = true;
  shape->not_resident = not_resident;
  return cuda_status(cudaMemsetAsync(exchange, 0, cfg.exchange_bytes, stream), what);
}
// Register-resident kernels: one CTA per row block, persistent when clustered
// (unless staged).
inline LaunchShape launch_shape(const RegRowConfig& c) {
  return {c.grid, c.threads, c.smem_bytes, c.cluster, c.cluster > 1 && !c.staged};
}

template <typename... KArgs, typename... Args>
Status launch_row_kernel(void (*kernel)(KArgs...), KernelAttrCache& cache, int device,
                         const LaunchShape& shape, cudaStream_t stream, Args&&... args) {
  if (shape.grid == 0) return Status::success();
  const uint64_t bit = uint64_t(1) << (device & 63);
  if (!(cache.done.load(std::memory_order_acquire) & bit)) {
    // Raise to the device maximum once, so that every config reuses it.
    DeviceLimits lim;
    int dev = device;
    Status st = device_limits(&lim, &dev);
    if (!st.ok()) return st;
    // The opt-in limit covers static and dynamic shared memory together: a
    // kernel with static scratch may ask for only the rest.
    cudaFuncAttributes fa{};
    cudaError_t e = cudaFuncGetAttributes(&fa, kernel);
    if (e != cudaSuccess) return cuda_status(e, "cudaFuncGetAttributes");
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(lim.max_smem_per_block - std::min(lim.max_smem_per_block, fa.sharedSizeBytes)));
    if (e != cudaSuccess) return cuda_status(e, "cudaFuncSetAttribute(max dynamic smem)");
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess) return cuda_status(e, "cudaFuncSetAttribute(non-portable cluster)");
    cache.done.fetch_or(bit, std::memory_order_release);
  }
  cudaLaunchConfig_t lc = {};
  if (shape.grid_y < 1 || shape.grid % shape.grid_y != 0 || (shape.grid_y > 1 && shape.cluster > 1))
    return {Code::kUnsupported, "launch: a 2-D grid's height must divide the grid, without clusters"};
  lc.gridDim = dim3(unsigned(shape.grid / shape.grid_y), unsigned(shape.grid_y), 1);
  lc.blockDim = dim3(unsigned(shape.threads), 1, 1);
  lc.dynamicSmemBytes = shape.smem_bytes;
  lc.stream = stream;
  cudaLaunchAttribute attr[2];
  lc.attrs = attr;
  if (shape.cluster > 1) attr[lc.numAttrs++] = cluster_dim_attr(shape.cluster);
  if (shape.cooperative) {
    if (shape.cluster > 1 || shape.not_resident == nullptr)
      return {Code::kUnsupported, "cooperative launch: clusters are not supported and not_resident is required"};
    *shape.not_resident = false;
    int per_sm = 0, sms = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, shape.threads, shape.smem_bytes);
    if (e != cudaSuccess) return cuda_status(e, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return cuda_status(e, "cudaDeviceGetAttribute(multiprocessors)");
    if (int64_t(per_sm) * sms < shape.grid) {
      *shape.not_resident = true;
      return {Code::kUnsupported, "cooperative grid of " + std::to_string(shape.grid) + " CTAs cannot be resident"};
    }
    attr[lc.numAttrs].id = cudaLaunchAttributeCooperative;
    attr[lc.numAttrs].val.cooperative = 1;
    ++lc.numAttrs;
  }
  if (shape.cluster > 1 && shape.persistent) {
    // A persistent grid must not ask for more clusters than can be resident
    // at once: the GPCs, not the SM count, bound how many fit.
    int max_clusters = 0;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&max_clusters, kernel, &lc);
    if (e != cudaSuccess) return cuda_status(e, "cudaOccupancyMaxActiveClusters");
    if (max_clusters < 1)
      return {Code::kUnsupported, "a cluster of " + std::to_string(shape.cluster) + " CTAs with " +
                                      std::to_string(shape.smem_bytes) + " bytes of shared memory each cannot be scheduled on this device"};
    if (int64_t(max_clusters) * shape.cluster < shape.grid)
      lc.gridDim.x =
          unsigned(launched_clusters(shape.grid / shape.cluster, max_clusters, shape.cluster_multiple) * shape.cluster);
  }
  if (shape.launched != nullptr) *shape.launched = int64_t(lc.gridDim.x) * lc.gridDim.y;
  cudaError_t e = cudaLaunchKernelEx(&lc, kernel, std::forward<Args>(args)...);
  if (e == cudaErrorCooperativeLaunchTooLarge && shape.cooperative) {
    // (MPS or a green context can hold fewer SMs than the device has.)
    (void)cudaGetLastError();  // not sticky: clear it
    *shape.not_resident = true;
    return {Code::kUnsupported, "cooperative grid of " + std::to_string(shape.grid) + " CTAs cannot be resident"};
  }
  return cuda_status(e, "kernel launch");
}

// launch_row_kernel with the kernel's own attribute cache: a static of this
// function template, so one a kernel, shared by every launcher and
// translation unit that launches it.
template <auto kKernel, typename... Args>
Status launch_cached(int device, const LaunchShape& shape, cudaStream_t stream, Args&&... args) {
  static KernelAttrCache cache;
  return launch_row_kernel(kKernel, cache, device, shape, stream, std::forward<Args>(args)...);
}

}  // namespace core
}  // namespace quack
