// Shared by the C++ tuning sweeps (bench/cpp/*_sweep.cu): CUDA error checks,
// host element conversions, CUDA-event timing (median), the QUACK_TUNE
// override of the row-kernel tuning, and the device's limits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

namespace sweep {

inline quack::DType parse_dtype(const char* s) {
  const std::string v = s;
  return v == "f32" ? quack::DType::kFloat32 : v == "f16" ? quack::DType::kFloat16 : quack::DType::kBFloat16;
}

inline float bits_to_float(const void* p, quack::DType t) {
  if (t == quack::DType::kFloat32) return *static_cast<const float*>(p);
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (t == quack::DType::kBFloat16) {
    uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  return __half2float(*reinterpret_cast<const __half*>(&h));
}
inline void float_to_bits(float f, void* p, quack::DType t) {
  if (t == quack::DType::kFloat32) {
    *static_cast<float*>(p) = f;
    return;
  }
  if (t == quack::DType::kBFloat16) {
    __nv_bfloat16 b = __float2bfloat16(f);
    std::memcpy(p, &b, 2);
    return;
  }
  __half h = __float2half(f);
  std::memcpy(p, &h, 2);
}

// Writes n values scale * N(0, 1) + offset as dt into host, drawn in order.
inline void fill_normal(std::vector<uint8_t>& host, int64_t n, quack::DType dt, float scale, float offset,
                        std::normal_distribution<float>& nd, std::mt19937& rng) {
  const int es = quack::dtype_size(dt);
  host.resize(size_t(n) * es);
  for (int64_t i = 0; i < n; ++i) float_to_bits(offset + scale * nd(rng), host.data() + i * es, dt);
}

// Reads n 16-byte words of p (loads only; the store never happens): the
// timer's L2 scrub.
__global__ void scrub_kernel(const uint4* p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // (the buffer is zeros)
}

// Median of `iters` CUDA-event timed calls (after one warm-up), in ms.
// QUACK_SWEEP_SCRUB_MB=n (n > 0): before every call a kernel reads n MB of
// a zeroed buffer, outside the timed interval, so that each call finds L2
// holding clean lines of other data -- as after another kernel in a model
// -- rather than the previous identical call's last rows, its dirty
// output among them (written back during the scrub). The forty-ninth
// session's question: the norm backward's per-vector paths ran 10% slower
// than the old kernel in the sweep at bf16 12288 but within 1.3% under
// ncu, which flushes the caches before the launch it profiles.
class Timer {
 public:
  Timer() {
    CK(cudaEventCreate(&e0_));
    CK(cudaEventCreate(&e1_));
    const char* s = std::getenv("QUACK_SWEEP_SCRUB_MB");
    const long mb = s != nullptr ? std::atol(s) : 0;
    if (mb > 0) {
      scrub_words_ = size_t(mb) << 16;  // 16-byte words
      CK(cudaMalloc(&scrub_, scrub_words_ * 16 + 16));
      CK(cudaMemset(scrub_, 0, scrub_words_ * 16 + 16));
      std::printf("(L2 scrub: %ld MB read before every timed call)\n", mb);
    }
  }
  void scrub() {
    if (scrub_ == nullptr) return;
    scrub_kernel<<<528, 512>>>(static_cast<const uint4*>(scrub_), scrub_words_,
                               reinterpret_cast<unsigned*>(static_cast<char*>(scrub_) + scrub_words_ * 16));
    CK(cudaGetLastError());
  }
  template <class F>
  float median_ms(F&& fn, int iters) {
    fn();
    CK(cudaDeviceSynchronize());
    std::vector<float> ts;
    for (int i = 0; i < iters; ++i) {
      scrub();
      CK(cudaEventRecord(e0_));
      fn();
      CK(cudaEventRecord(e1_));
      CK(cudaEventSynchronize(e1_));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0_, e1_));
      ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
  }
  // The sweeps' 100%: a device-to-device copy of `bytes` (read + write, GB/s).
  double copy_gbs(void* dst, const void* src, size_t bytes) {
    const float ms = median_ms([&] { CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); }, 20);
    return 2.0 * double(bytes) / ms / 1e6;
  }

 private:
  cudaEvent_t e0_, e1_;
  void* scrub_ = nullptr;
  size_t scrub_words_ = 0;
};

// An on/off environment switch: set to a nonzero number (unset, empty, 0:
// off).
inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) != 0;
}

// Installs QUACK_TUNE's overrides of the row-kernel tuning, if set:
//   QUACK_TUNE="cta_target_kb=32,cta_max_kb=200,vpt=8,max_team=256,small_threads=256,rows=4,regs=128,
//               reg=1,reg_vpt=4,reg_max_team=256,norm_fwd_vpt16_min_cols=0,norm_fwd_shift_vpt16_min_cols=3000,reg_wide_team=1024,reg_fill_threads_per_sm=512,reg_fill_max_team=512,reg_lean=3,reg_threads=256,reg_fit_team=0,norm_fit_team=1,
//               reg_staged=3,reg_staged_early_w=2,reg_small_cta=1,ln_staged=1,reg_staged_team=256,reg_staged_above_team=512,reg_staged_above_team_f32=256,reg_w_batch=1,reg_staged_pair=8,reg_staged_pair_full_wave=1,reg_staged_pair_min_cluster=8,cluster_end_sync=1,reg_staged_vpt_max=16,reg_staged_vpt_max_beyond=32,reg_staged_balance=1,norm_staged_balance=2,shifted_rows=1,chunk_min_kb=..,chunk_min_bwd_kb=..,chunk_min_cols=65536,
//               chunk_clustered_fwd=1,softmax_staged_fwd=2,softmax_staged_vpt=16,softmax_staged_bwd=3,softmax_staged_bwd_vpt=8,softmax_staged_fwd_wide=0,softmax_staged_bwd_wide=0,softmax_staged_wide_first=0,
//               softmax_fwd_grid=2,softmax_fwd_grid_min_cols16=524288,softmax_fwd_grid_min_cols32=524289,softmax_fwd_grid_rows32=2,softmax_bwd_grid=2,softmax_bwd_grid_min_cols16=524289,softmax_bwd_grid_min_cols32=524289,softmax_fwd_vpt16=8,chunk_cta_kb=128,chunk_stage_kb=96,chunk_threads=512,softmax_chunk_log_dy=1,ce_fwd_stream_min_bytes=49152,ce_grad_split_min_cols=32000,ce_one_row_loss=1,ce_finish_pdl=1,ce_cluster_rows=16,ce_cluster_oneway=1,
//               ce_fwd_whole=3,ce_fwd_bulk_ctas=2,ce_staged_grad=3,ce_staged_vpt=16,ce_staged_min_cols=16384,ce_staged_clusters=-1,
//               bwd_pipe=3,bwd_pipe_fit_team=0,bwd_pipe_vpt16=4,bwd_pipe_wide_min_cols=16384,bwd_pipe_wide_min_cols_ln=1024,bwd_pipe_wide_idle_db=1,bwd_pipe_wide_idle32=15,bwd_pipe_ctas_per_sm=1,bwd_pipe_min_threads=512,bwd_pipe_share_db=0,bwd_pipe_big_cta=1,bwd_pipe_big_stages=3,bwd_pipe_lead_threads=0,bwd_pipe_vpt32=2,bwd_pipe_stages=4,bwd_pipe_threads=256,bwd_pipe_cluster=16,bwd_pipe_cluster_threads=1024,bwd_pipe_db_regs=1,bwd_pipe_small_cta=1,
//               bwd_grid=3,bwd_grid_min_cols16=131073,bwd_grid_min_cols32=131073,bwd_grid_stages16=6,bwd_grid_stages32=3,bwd_grid_lag=2,bwd_grid_rows16=2,
//               bwd_grid_keep_cluster16=0,
//               fwd_grid=3,fwd_grid_min_cols16=524288,fwd_grid_min_cols32=524289,fwd_grid_keep_reg=1,fwd_grid_stages16=8,
//               fwd_grid_stages32=8,fwd_grid_lag=2,fwd_grid_rows16=2,fwd_grid_prefetch=1,fwd_grid_rows32=2"
// Returns false (after printing the key) on an unknown key.
inline bool install_tuning_from_env() {
  const char* env = std::getenv("QUACK_TUNE");
  if (env == nullptr) return true;
  static quack::RowTuning tune = quack::default_row_tuning();
  const std::string spec = env;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string kv = spec.substr(pos, end - pos);
    const size_t eq = kv.find('=');
    const std::string k = kv.substr(0, eq);
    const long v = std::atol(kv.c_str() + eq + 1);
    if (k == "cta_target_kb") tune.cta_target_bytes = v * 1024;
    else if (k == "cta_max_kb") tune.cta_max_bytes = v * 1024;
    else if (k == "vpt") tune.vpt_target = int(v);
    else if (k == "max_team") tune.max_team = int(v);
    else if (k == "small_threads") tune.small_team_threads = int(v);
    else if (k == "rows") tune.max_rows_per_team = int(v);
    else if (k == "regs") tune.regs_per_thread = int(v);
    else if (k == "reg") tune.reg_enable = int(v);
    else if (k == "reg_vpt") tune.reg_vpt_target = int(v);
    else if (k == "reg_max_team") tune.reg_max_team = int(v);
    else if (k == "norm_fwd_vpt16_min_cols") tune.norm_fwd_vpt16_min_cols = int(v);
    else if (k == "norm_fwd_shift_vpt16_min_cols") tune.norm_fwd_shift_vpt16_min_cols = int(v);
    else if (k == "reg_wide_team") tune.reg_wide_team = int(v);
    else if (k == "reg_threads") tune.reg_small_threads = int(v);
    else if (k == "reg_fit_team") tune.reg_fit_team = int(v);
    else if (k == "norm_fit_team") tune.norm_fit_team = int(v);
    else if (k == "reg_staged") tune.reg_staged = int(v);
    else if (k == "reg_staged_early_w") tune.reg_staged_early_w = int(v);
    else if (k == "reg_small_cta") tune.reg_small_cta = int(v);
    else if (k == "ln_staged") tune.ln_staged = int(v);
    else if (k == "reg_staged_team") tune.reg_staged_team = int(v);
    else if (k == "reg_staged_above_team") tune.reg_staged_above_team = int(v);
    else if (k == "reg_staged_above_team_f32") tune.reg_staged_above_team_f32 = int(v);
    else if (k == "reg_w_batch") tune.reg_w_batch = int(v);
    else if (k == "reg_staged_pair") tune.reg_staged_pair = int(v);
    else if (k == "reg_staged_pair_full_wave") tune.reg_staged_pair_full_wave = int(v);
    else if (k == "reg_staged_pair_min_cluster") tune.reg_staged_pair_min_cluster = int(v);
    else if (k == "cluster_end_sync") tune.cluster_end_sync = int(v);
    else if (k == "reg_staged_vpt_max") tune.reg_staged_vpt_max = int(v);
    else if (k == "reg_staged_vpt_max_beyond") tune.reg_staged_vpt_max_beyond = int(v);
    else if (k == "reg_staged_balance") tune.reg_staged_balance = int(v);
    else if (k == "norm_staged_balance") tune.norm_staged_balance = int(v);
    else if (k == "shifted_rows") tune.shifted_rows = int(v);
    else if (k == "chunk_min_kb") tune.chunk_min_bytes = int64_t(v) * 1024;
    else if (k == "chunk_min_bwd_kb") tune.chunk_min_bytes_bwd = int64_t(v) * 1024;
    else if (k == "chunk_min_cols") tune.chunk_min_cols = v;
    else if (k == "chunk_clustered_fwd") tune.chunk_clustered_fwd = int(v);
    else if (k == "softmax_staged_fwd") tune.softmax_staged_fwd = int(v);
    else if (k == "softmax_staged_vpt") tune.softmax_staged_vpt = int(v);
    else if (k == "softmax_staged_bwd") tune.softmax_staged_bwd = int(v);
    else if (k == "softmax_fwd_vpt16") tune.softmax_fwd_vpt16 = int(v);
    else if (k == "softmax_staged_bwd_vpt") tune.softmax_staged_bwd_vpt = int(v);
    else if (k == "softmax_staged_fwd_wide") tune.softmax_staged_fwd_wide = int(v);
    else if (k == "softmax_staged_bwd_wide") tune.softmax_staged_bwd_wide = int(v);
    else if (k == "softmax_staged_wide_first") tune.softmax_staged_wide_first = int(v);
    else if (k == "softmax_fwd_grid") tune.softmax_fwd_grid = int(v);
    else if (k == "softmax_fwd_grid_min_cols") tune.softmax_fwd_grid_min_cols16 = tune.softmax_fwd_grid_min_cols32 = v;
    else if (k == "softmax_fwd_grid_min_cols16") tune.softmax_fwd_grid_min_cols16 = v;
    else if (k == "softmax_fwd_grid_min_cols32") tune.softmax_fwd_grid_min_cols32 = v;
    else if (k == "softmax_fwd_grid_rows32") tune.softmax_fwd_grid_rows32 = int(v);
    else if (k == "softmax_bwd_grid") tune.softmax_bwd_grid = int(v);
    else if (k == "softmax_bwd_grid_min_cols") tune.softmax_bwd_grid_min_cols16 = tune.softmax_bwd_grid_min_cols32 = v;
    else if (k == "softmax_bwd_grid_min_cols16") tune.softmax_bwd_grid_min_cols16 = v;
    else if (k == "softmax_bwd_grid_min_cols32") tune.softmax_bwd_grid_min_cols32 = v;
    else if (k == "chunk_cta_kb") tune.chunk_cta_bytes = int64_t(v) * 1024;
    else if (k == "chunk_stage_kb") tune.chunk_stage_bytes = int64_t(v) * 1024;
    else if (k == "chunk_threads") tune.chunk_threads = int(v);
    else if (k == "softmax_chunk_log_dy") tune.softmax_chunk_log_dy = int(v);
    else if (k == "ce_fwd_stream_min_bytes") tune.ce_fwd_stream_min_bytes = v;
    else if (k == "ce_grad_split_min_cols") tune.ce_grad_split_min_cols = v;
    else if (k == "ce_staged_grad") tune.ce_staged_grad = int(v);
    else if (k == "ce_staged_vpt") tune.ce_staged_vpt = int(v);
    else if (k == "ce_staged_min_cols") tune.ce_staged_min_cols = v;
    else if (k == "ce_staged_clusters") tune.ce_staged_clusters = int(v);
    else if (k == "ce_fwd_bulk_min_rows") tune.ce_fwd_bulk_min_rows = v;
    else if (k == "ce_fwd_bulk_min_bytes2") tune.ce_fwd_bulk_min_bytes2 = v;
    else if (k == "ce_fwd_bulk_min_bytes4") tune.ce_fwd_bulk_min_bytes4 = v;
    else if (k == "ce_fwd_bulk_max_bytes") tune.ce_fwd_bulk_max_bytes = v;
    else if (k == "ce_fwd_whole") tune.ce_fwd_whole = int(v);
    else if (k == "ce_fwd_bulk_ctas") tune.ce_fwd_bulk_ctas = int(v);
    else if (k == "bwd_pipe") tune.bwd_pipe = int(v);
    else if (k == "bwd_pipe_vpt16") tune.bwd_pipe_vpt16 = int(v);
    else if (k == "reg_fill_threads_per_sm") tune.reg_fill_threads_per_sm = int(v);
    else if (k == "reg_fill_max_team") tune.reg_fill_max_team = int(v);
    else if (k == "reg_lean") tune.reg_lean = int(v);
    else if (k == "ce_one_row_loss") tune.ce_one_row_loss = int(v);
    else if (k == "ce_finish_pdl") tune.ce_finish_pdl = int(v);
    else if (k == "ce_cluster_rows") tune.ce_cluster_rows = int(v);
    else if (k == "ce_cluster_oneway") tune.ce_cluster_oneway = int(v);
    else if (k == "bwd_pipe_vpt32") tune.bwd_pipe_vpt32 = int(v);
    else if (k == "bwd_pipe_stages") tune.bwd_pipe_stages = int(v);
    else if (k == "bwd_pipe_threads") tune.bwd_pipe_threads = int(v);
    else if (k == "bwd_pipe_fit_team") tune.bwd_pipe_fit_team = int(v);
    else if (k == "bwd_pipe_cluster") tune.bwd_pipe_cluster = int(v);
    else if (k == "bwd_pipe_cluster_threads") tune.bwd_pipe_cluster_threads = int(v);
    else if (k == "bwd_pipe_db_regs") tune.bwd_pipe_db_regs = int(v);
    else if (k == "bwd_pipe_small_cta") tune.bwd_pipe_small_cta = int(v);
    else if (k == "bwd_pipe_wide_min_cols") tune.bwd_pipe_wide_min_cols = v;
    else if (k == "bwd_pipe_wide_min_cols_ln") tune.bwd_pipe_wide_min_cols_ln = v;
    else if (k == "bwd_pipe_wide_idle_db") tune.bwd_pipe_wide_idle_db = int(v);
    else if (k == "bwd_pipe_wide_idle32") tune.bwd_pipe_wide_idle32 = int(v);
    else if (k == "bwd_pipe_ctas_per_sm") tune.bwd_pipe_ctas_per_sm = int(v);
    else if (k == "bwd_pipe_min_threads") tune.bwd_pipe_min_threads = int(v);
    else if (k == "bwd_pipe_share_db") tune.bwd_pipe_share_db = int(v);
    else if (k == "bwd_pipe_big_cta") tune.bwd_pipe_big_cta = int(v);
    else if (k == "bwd_pipe_big_stages") tune.bwd_pipe_big_stages = int(v);
    else if (k == "bwd_pipe_lead_threads") tune.bwd_pipe_lead_threads = int(v);
    else if (k == "bwd_grid") tune.bwd_grid = int(v);
    else if (k == "bwd_grid_min_cols") tune.bwd_grid_min_cols16 = tune.bwd_grid_min_cols32 = v;
    else if (k == "bwd_grid_min_cols16") tune.bwd_grid_min_cols16 = v;
    else if (k == "bwd_grid_min_cols32") tune.bwd_grid_min_cols32 = v;
    else if (k == "bwd_grid_stages16") tune.bwd_grid_stages16 = int(v);
    else if (k == "bwd_grid_stages32") tune.bwd_grid_stages32 = int(v);
    else if (k == "bwd_grid_lag") tune.bwd_grid_lag = int(v);
    else if (k == "bwd_grid_rows16") tune.bwd_grid_rows16 = int(v);
    else if (k == "bwd_grid_keep_cluster16") tune.bwd_grid_keep_cluster16 = int(v);
    else if (k == "fwd_grid") tune.fwd_grid = int(v);
    else if (k == "fwd_grid_min_cols") tune.fwd_grid_min_cols16 = tune.fwd_grid_min_cols32 = v;
    else if (k == "fwd_grid_min_cols16") tune.fwd_grid_min_cols16 = v;
    else if (k == "fwd_grid_min_cols32") tune.fwd_grid_min_cols32 = v;
    else if (k == "fwd_grid_keep_reg") tune.fwd_grid_keep_reg = int(v);
    else if (k == "fwd_grid_stages16") tune.fwd_grid_stages16 = int(v);
    else if (k == "fwd_grid_stages32") tune.fwd_grid_stages32 = int(v);
    else if (k == "fwd_grid_lag") tune.fwd_grid_lag = int(v);
    else if (k == "fwd_grid_rows16") tune.fwd_grid_rows16 = int(v);
    else if (k == "fwd_grid_rows32") tune.fwd_grid_rows32 = int(v);
    else if (k == "fwd_grid_prefetch") tune.fwd_grid_prefetch = int(v);
    else {
      std::fprintf(stderr, "unknown tuning key %s\n", k.c_str());
      return false;
    }
    pos = end + 1;
  }
  quack::set_row_tuning(&tune);
  std::printf("tuning override: %s\n", env);
  return true;
}

// The benchmarks' calls (decode_sweep, host_launch, cross_entropy_sweep) over one
// (rows, cols) row-major matrix x of dtype dt with a row stride of cols:
// a norm forward into y (Args: RMSNormFwdArgs or LayerNormFwdArgs; no
// weight or bias), softmax into y, and cross-entropy's mean loss against
// int64 targets.
template <typename Args>
inline Args norm_args(int64_t rows, int64_t cols, const void* x, void* y, quack::DType dt) {
  Args a;
  a.rows = rows;
  a.cols = cols;
  a.x = {x, dt, cols};
  a.out = {y, dt, cols};
  return a;
}
inline quack::SoftmaxFwdArgs softmax_args(int64_t rows, int64_t cols, const void* x, void* y, quack::DType dt) {
  quack::SoftmaxFwdArgs a;
  a.rows = rows;
  a.cols = cols;
  a.x = {x, dt, cols};
  a.out = {y, dt, cols};
  return a;
}
inline quack::CrossEntropyArgs mean_loss_args(int64_t rows, int64_t cols, const void* x, quack::DType dt,
                                              const void* target, float* loss) {
  quack::CrossEntropyArgs a;
  a.rows = rows;
  a.cols = cols;
  a.logits = {x, dt, cols};
  a.target = target;
  a.loss = loss;
  return a;
}

inline quack::DeviceLimits device_limits() {
  quack::DeviceLimits lim;
  int v;
  CK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0));
  lim.num_sms = v;
  CK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  lim.max_smem_per_block = size_t(v);
  CK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
  lim.smem_per_sm = size_t(v);
  return lim;
}

}  // namespace sweep
