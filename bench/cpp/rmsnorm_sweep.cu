// C++-only RMSNorm forward sweep: correctness spot-check against a double
// CPU reference, then bandwidth against a same-run device-to-device copy.
// Needs no Python; used to tune the config heuristic in one device call.
// With QUACK_SWEEP_LAYERNORM=1, LayerNorm forward instead, with fp32 weight
// and bias (the training layout bench_layernorm.py measures).
// QUACK_SWEEP_WDT=bf16|f16|f32 sets the weight's (and bias's) dtype instead.
//
//   rmsnorm_sweep [dtype=bf16|f16|f32] [total_elems=268435456] [N ...]
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

using sweep::bits_to_float;
using sweep::float_to_bits;

int main(int argc, char** argv) {
  const quack::DType dt = argc > 1 ? sweep::parse_dtype(argv[1]) : quack::DType::kBFloat16;
  const int64_t total = argc > 2 ? std::atoll(argv[2]) : (int64_t(1) << 28);
  std::vector<int64_t> Ns;
  for (int i = 3; i < argc; ++i) Ns.push_back(std::atoll(argv[i]));
  if (Ns.empty())
    Ns = {256, 512, 1024, 2048, 4096, 8192, 16384, 24576, 32768, 40000, 65536, 98304, 131072, 262144, 524288, 1048576};
  const int es = quack::dtype_size(dt);
  const bool ln = sweep::env_flag("QUACK_SWEEP_LAYERNORM");
  // QUACK_SWEEP_NO_WEIGHT=1: no weight (nor bias): what the weight's reads cost.
  const bool no_weight = sweep::env_flag("QUACK_SWEEP_NO_WEIGHT");
  // Weight (and LayerNorm's bias): x's dtype, or fp32 for LayerNorm.
  // QUACK_SWEEP_WDT: another weight dtype (what the weight's bytes cost).
  const char* wdt_env = std::getenv("QUACK_SWEEP_WDT");
  const quack::DType wdt =
      wdt_env != nullptr ? sweep::parse_dtype(wdt_env) : ln ? quack::DType::kFloat32 : dt;
  const int wes = quack::dtype_size(wdt);

  // Copy bandwidth in the same run (bytes read + written).
  const size_t bytes = size_t(total) * es;
  void *a, *b, *w, *bias;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMalloc(&w, size_t(4) << 22));
  CK(cudaMalloc(&bias, size_t(4) << 22));
  sweep::Timer timer;
  auto time_ms = [&](auto&& fn, int iters) { return timer.median_ms(fn, iters); };
  const float copy_ms = time_ms([&] { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 20);
  const double copy_gbs = 2.0 * bytes / copy_ms / 1e6;
  std::printf("%s%sdtype %s, weight %s, M*N = %lld, copy %.1f GB/s\n", ln ? "LayerNorm, " : "",
              no_weight ? "no weight or bias, " : "", quack::dtype_name(dt), quack::dtype_name(wdt), (long long)total,
              copy_gbs);
  std::printf("%9s %8s | %-90s | %9s %7s %6s | %s\n", "N", "M", "plan (src/rmsnorm.cu)", "us", "GB/s", "%copy",
              "max rel err");

  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.f, 1.f);
  // Fill x and weight with random values (host-generated once, reused).
  {
    std::vector<uint8_t> hx(bytes);
    for (int64_t i = 0; i < total; ++i) float_to_bits(nd(rng), hx.data() + i * es, dt);
    CK(cudaMemcpy(a, hx.data(), bytes, cudaMemcpyHostToDevice));
    std::vector<uint8_t> hw(size_t(wes) << 20), hb(size_t(wes) << 20);
    for (int i = 0; i < (1 << 20); ++i) float_to_bits(1.0f + 0.1f * nd(rng), hw.data() + size_t(i) * wes, wdt);
    for (int i = 0; i < (1 << 20); ++i) float_to_bits(0.1f * nd(rng), hb.data() + size_t(i) * wes, wdt);
    CK(cudaMemcpy(w, hw.data(), hw.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(bias, hb.data(), hb.size(), cudaMemcpyHostToDevice));
  }
  if (!sweep::install_tuning_from_env()) return 2;
  const quack::DeviceLimits lim = sweep::device_limits();
  float* rstd;
  CK(cudaMalloc(&rstd, sizeof(float) << 20));

  for (int64_t N : Ns) {
    const int64_t M = std::max<int64_t>(1, total / N);
    quack::LayerNormFwdArgs args;  // (an RMSNormFwdArgs and LayerNorm's mean)
    args.rows = M;
    args.cols = N;
    args.x = {a, dt, N};
    if (!no_weight) args.weight = {w, wdt};
    if (ln && !no_weight) args.bias = {bias, wdt};
    args.out = {b, dt, N};
    args.rstd = M <= (1 << 20) ? rstd : nullptr;
    if (ln) args.eps = 1e-5f;
    // The workspace the call asks for, as the Python front passes it (the
    // grid kernel's exchange rings; none for most rows).
    size_t ws_bytes = 0;
    if (!(ln ? quack::layernorm_fwd_workspace_bytes(args, &ws_bytes)
             : quack::rmsnorm_fwd_workspace_bytes(args, &ws_bytes)).ok())
      ws_bytes = 0;
    void* ws = nullptr;
    if (ws_bytes > 0) CK(cudaMalloc(&ws, ws_bytes));
    args.workspace = ws;
    args.workspace_bytes = ws_bytes;
    auto call = [&] { return ln ? quack::layernorm_fwd(args, nullptr) : quack::rmsnorm_fwd(args, nullptr); };
    CK(cudaMemset(b, 0xff, size_t(M) * N * es));  // poison (NaN) before the checked run
    quack::Status st = call();
    if (!st.ok()) {
      std::printf("%9lld: error %s\n", (long long)N, st.message.c_str());
      continue;
    }
    CK(cudaDeviceSynchronize());
    // Check three rows against a double reference.
    double max_err = 0;
    for (int64_t r : {int64_t(0), M / 2, M - 1}) {
      std::vector<uint8_t> hx(size_t(N) * es), hy(size_t(N) * es), hw(size_t(N) * wes), hb(size_t(N) * wes);
      CK(cudaMemcpy(hx.data(), static_cast<char*>(a) + size_t(r) * N * es, hx.size(), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hy.data(), static_cast<char*>(b) + size_t(r) * N * es, hy.size(), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hw.data(), w, hw.size(), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hb.data(), bias, hb.size(), cudaMemcpyDeviceToHost));
      double mean = 0;
      if (ln) {
        for (int64_t c = 0; c < N; ++c) mean += bits_to_float(hx.data() + c * es, dt);
        mean /= double(N);
      }
      double ss = 0;
      for (int64_t c = 0; c < N; ++c) {
        double v = bits_to_float(hx.data() + c * es, dt) - mean;
        ss += v * v;
      }
      const double rs = 1.0 / std::sqrt(ss / N + double(args.eps));
      for (int64_t c = 0; c < N; ++c) {
        const double ref = (bits_to_float(hx.data() + c * es, dt) - mean) * rs *
                               (no_weight ? 1.0 : bits_to_float(hw.data() + c * wes, wdt)) +
                           (ln && !no_weight ? bits_to_float(hb.data() + c * wes, wdt) : 0.0);
        const double got = bits_to_float(hy.data() + c * es, dt);
        const double err = std::fabs(got - ref) / (std::fabs(ref) + 1e-2);
        if (!(err <= max_err)) max_err = std::isnan(err) ? INFINITY : std::max(max_err, err);
      }
    }
    // The kernel and layout the call took.
    const std::string shape = quack::norm_fwd_plan_description(args, ln, lim);
    const float ms = time_ms([&] { (void)call(); }, 20);
    const double gbs = 2.0 * double(M) * N * es / ms / 1e6;
    std::printf("%9lld %8lld | %-90s | %9.1f %7.1f %5.1f%% | %.2e\n", (long long)N, (long long)M, shape.c_str(), ms * 1e3, gbs,
                100.0 * gbs / copy_gbs, max_err);
    if (ws != nullptr) CK(cudaFree(ws));
  }
  CK(cudaGetLastError());
  return 0;
}
