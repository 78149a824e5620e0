// Issue 7's synccheck question in its smallest form: the row kernels' two
// cluster reductions alone, with no row data, in a persistent grid of
// clusters walking `rows` rows, checked exactly on the host.
//
//   cluster_exchange_probe <exchange 0|1> <cluster> <threads> <rows> [smem_kb]
//
// exchange 1: core::RowReduce<SumOp, true> (block reduction, then
//   ClusterExchange: st.async into every peer and an mbarrier wait, the
//   protocol of softmax_chunk_kernel and the persistent register kernels);
// exchange 0: core::RowReducer over the cluster (block reduction, then
//   cluster_reduce: a cluster barrier and ld.shared::cluster of each peer).
// smem_kb: extra dynamic shared memory per CTA (default 0), to hold one CTA
// an SM at a small CTA size. Prints the launch (the clusters launched: one a
// row, or as many as are resident at once when the rows are more) and "OK"
// or the first wrong row; exit 0 only when every row is right. (The
// twenty-first session's runs, at fe85955, printed the resident count from
// cudaOccupancyMaxActiveClusters instead.)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "quack/core/launch.cuh"
#include "quack/core/reduce.cuh"
#include "quack/core/row_tile.cuh"

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

namespace {

using quack::core::SumOp;

constexpr int kScratch = 1024;  // both reducers' scratch, as softmax's kSoftmaxScratchBytes

// Row r's value in CTA `rank`: (r % 997) * 16 + rank, from thread 0 only; the
// cluster's sum is exact in fp32 for clusters of up to 16.
__host__ __device__ inline float part(int64_t row, int rank) { return float((row % 997) * 16 + rank); }

template <bool kExchange>
__global__ void probe_kernel(float* out, int64_t rows, int cluster) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int rank = quack::core::cluster_cta_rank();
  [[maybe_unused]] quack::core::RowReduce<SumOp, true> xred;
  [[maybe_unused]] quack::core::RowReducer<SumOp> bred(smem, int(blockDim.x), cluster);
  if constexpr (kExchange) xred.start(smem);
  const int64_t clusters = gridDim.x / unsigned(cluster);
  for (int64_t row = blockIdx.x / unsigned(cluster); row < rows; row += clusters) {
    const float v = threadIdx.x == 0 ? part(row, rank) : 0.0f;
    float s;
    if constexpr (kExchange) s = xred.reduce(v, int(blockDim.x), cluster, rank);
    else s = bred.reduce(v);
    if (threadIdx.x == blockDim.x - 1) out[row * cluster + rank] = s;
  }
  if constexpr (kExchange) xred.finish();
  else {
    quack::core::cluster_arrive();
    quack::core::cluster_wait();
  }
}

template <bool kExchange>
int run(int cluster, int threads, int64_t rows, size_t smem) {
  // The library's own launch (core::launch_row_kernel): the shared-memory and
  // non-portable-cluster attributes, and a persistent grid clamped to the
  // clusters resident at once, as the row kernels are launched.
  static quack::core::KernelAttrCache cache;
  int64_t launched = 0;
  quack::core::LaunchShape shape{rows * cluster, threads, smem, cluster, true};
  shape.launched = &launched;
  float* out = nullptr;
  CK(cudaMalloc(&out, size_t(rows) * cluster * sizeof(float)));
  CK(cudaMemset(out, 0xff, size_t(rows) * cluster * sizeof(float)));
  const quack::Status st =
      quack::core::launch_row_kernel(probe_kernel<kExchange>, cache, 0, shape, nullptr, out, rows, cluster);
  if (!st.ok()) {
    std::printf("launch failed: %s\n", st.message.c_str());
    return 1;
  }
  std::printf("%s: cluster %d, %d threads, %zu B shared, %lld rows, %lld clusters launched (%s)\n",
              kExchange ? "ClusterExchange" : "cluster_reduce", cluster, threads, smem, (long long)rows,
              (long long)(launched / cluster), launched < rows * cluster ? "all resident at once" : "one a row");
  CK(cudaDeviceSynchronize());
  std::vector<float> h(size_t(rows) * cluster);
  CK(cudaMemcpy(h.data(), out, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaFree(out));
  for (int64_t r = 0; r < rows; ++r) {
    float want = 0.0f;
    for (int k = 0; k < cluster; ++k) want += part(r, k);
    for (int k = 0; k < cluster; ++k) {
      if (h[size_t(r * cluster + k)] != want) {
        std::printf("WRONG: row %lld rank %d got %g, want %g\n", (long long)r, k, double(h[size_t(r * cluster + k)]),
                    double(want));
        return 1;
      }
    }
  }
  std::printf("OK\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s <exchange 0|1> <cluster> <threads> <rows> [smem_kb]\n", argv[0]);
    return 2;
  }
  const bool exchange = std::atoi(argv[1]) != 0;
  const int cluster = std::atoi(argv[2]), threads = std::atoi(argv[3]);
  const int64_t rows = std::atoll(argv[4]);
  const size_t smem = kScratch + (argc > 5 ? size_t(std::atoi(argv[5])) * 1024 : 0);
  if (cluster < 2 || cluster > 16 || threads < 32 || threads > 1024 || threads % 32 || rows < 1) {
    std::fprintf(stderr, "cluster in [2, 16], threads a multiple of 32 in [32, 1024], rows >= 1\n");
    return 2;
  }
  return exchange ? run<true>(cluster, threads, rows, smem) : run<false>(cluster, threads, rows, smem);
}
