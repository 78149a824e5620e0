// C++-only RMSNorm backward sweep: dx, then dx + dweight, then dx + dweight +
// dbias from h, dy, rstd and a weight in x's dtype, timed against a same-run
// device-to-device copy (model bytes: read h and dy, write dx). No
// correctness check here: the GPU tests and bench/bench_rmsnorm_bwd.py check
// against float64. Used to tune the backward kernels and to drive Nsight
// Compute in one device call. QUACK_SWEEP_LAYERNORM=1: LayerNorm's backward
// (the forward's mean all zero). Each row names the kernel that served the
// last call (norm_bwd_plan_description).
//
//   rmsnorm_bwd_sweep [dtype=bf16|f16|f32] [total_elems=268435456] [N ...]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"
#include "sweep_common.hpp"

int main(int argc, char** argv) {
  const quack::DType dt = argc > 1 ? sweep::parse_dtype(argv[1]) : quack::DType::kBFloat16;
  const int64_t total = argc > 2 ? std::atoll(argv[2]) : (int64_t(1) << 28);
  std::vector<int64_t> Ns;
  for (int i = 3; i < argc; ++i) Ns.push_back(std::atoll(argv[i]));
  if (Ns.empty()) Ns = {256, 1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576};
  const int es = quack::dtype_size(dt);
  if (!sweep::install_tuning_from_env()) return 2;
  const bool layernorm = sweep::env_flag("QUACK_SWEEP_LAYERNORM");  // (until 2026-12-01 any value, 0 too)

  const size_t bytes = size_t(total) * es;
  const int64_t max_n = *std::max_element(Ns.begin(), Ns.end());
  void *h, *dy, *dx, *w, *dw, *db;
  float *rstd, *mean;
  CK(cudaMalloc(&h, bytes));
  CK(cudaMalloc(&dy, bytes));
  CK(cudaMalloc(&dx, bytes));
  CK(cudaMalloc(&w, size_t(max_n) * es));
  CK(cudaMalloc(&dw, size_t(max_n) * es));
  CK(cudaMalloc(&db, size_t(max_n) * es));
  CK(cudaMalloc(&rstd, size_t(total) * sizeof(float)));
  CK(cudaMalloc(&mean, size_t(total) * sizeof(float)));
  CK(cudaMemset(mean, 0, size_t(total) * sizeof(float)));
  sweep::Timer timer;
  const double copy_gbs = timer.copy_gbs(dx, h, bytes);
  {
    std::mt19937 rng(1234);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<uint8_t> host;
    sweep::fill_normal(host, total, dt, 1.0f, 0.0f, nd, rng);
    CK(cudaMemcpy(h, host.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dy, host.data() + (total / 2) * es, bytes - (total / 2) * es, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, host.data(), size_t(max_n) * es, cudaMemcpyHostToDevice));
    std::vector<float> ones(size_t(total), 1.0f);
    CK(cudaMemcpy(rstd, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  std::printf("%s backward, dtype %s, M*N = %lld, copy %.1f GB/s\n", layernorm ? "layernorm" : "rmsnorm",
              quack::dtype_name(dt), (long long)total, copy_gbs);
  std::printf("%9s %8s | %10s %6s | %10s %6s | %10s %6s | %s\n", "N", "M", "dx us", "%copy", "+dw us", "%copy",
              "+dw,db us", "%copy", "kernel (+dw,db)");
  void* ws = nullptr;
  size_t ws_bytes = 0;
  for (int64_t N : Ns) {
    const int64_t M = std::max<int64_t>(1, total / N);
    quack::LayerNormBwdArgs a;
    a.mean = mean;
    a.rows = M;
    a.cols = N;
    a.h = {h, dt, N};
    a.dy = {dy, dt, N};
    a.weight = {w, dt};
    a.rstd = rstd;
    a.dx = {dx, dt, N};
    double pct[3] = {0, 0, 0}, us[3] = {0, 0, 0};
    auto bwd = [&]() {
      return layernorm ? quack::layernorm_bwd(a, nullptr)
                       : quack::rmsnorm_bwd(static_cast<const quack::RMSNormBwdArgs&>(a), nullptr);
    };
    for (int grads = 0; grads < 3; ++grads) {
      a.dweight = {grads >= 1 ? dw : nullptr, dt};
      a.dbias = {grads >= 2 ? db : nullptr, dt};
      size_t need = 0;
      quack::Status st = layernorm ? quack::layernorm_bwd_workspace_bytes(a, &need)
                                   : quack::rmsnorm_bwd_workspace_bytes(a, &need);
      if (st.ok() && need > ws_bytes) {
        if (ws) CK(cudaFree(ws));
        CK(cudaMalloc(&ws, need));
        ws_bytes = need;
      }
      a.workspace = ws;
      a.workspace_bytes = ws_bytes;
      const quack::Status run = st.ok() ? bwd() : st;
      if (!run.ok()) {
        std::printf("%9lld: error %s\n", (long long)N, run.message.c_str());
        break;
      }
      const float ms = timer.median_ms([&] { (void)bwd(); }, 20);
      us[grads] = ms * 1e3;
      pct[grads] = 100.0 * (3.0 * M * N * es / ms / 1e6) / copy_gbs;
    }
    const std::string plan = quack::norm_bwd_plan_description(a, layernorm, sweep::device_limits());
    std::printf("%9lld %8lld | %10.1f %5.1f%% | %10.1f %5.1f%% | %10.1f %5.1f%% | %s\n", (long long)N, (long long)M,
                us[0], pct[0], us[1], pct[1], us[2], pct[2], plan.c_str());
  }
  CK(cudaGetLastError());
  return 0;
}
