// C++-only cross-entropy sweep: the forward (loss, mean) and the fused
// forward + gradient (loss and dlogits), each spot-checked on three rows
// against a double CPU reference, then timed against a same-run
// device-to-device copy (model bytes: forward reads the logits; fused reads
// them and writes dlogits). QUACK_TUNE variants (sweep_common.hpp) tune the
// register kernels' configuration in one device call.
//
//   cross_entropy_sweep [dtype=bf16|f16|f32] [total_elems=268435456] [V ...]
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

// Worst error of rows {0, M/2, M-1}: the per-row loss (reduction none)
// relative to max(1, |ref|), and dlogits (unit upstream gradient) relative to
// the row's largest reference gradient (skipped when dx is null: the
// forward-only run).
struct Check {
  double loss = 0.0, grad = 0.0;
};

Check check(const void* x, const int64_t* target, const float* loss, const void* dx, int64_t M, int64_t V,
            quack::DType dt) {
  const int es = quack::dtype_size(dt);
  Check w;
  for (int64_t r : {int64_t(0), M / 2, M - 1}) {
    std::vector<uint8_t> hx(size_t(V) * es), hd(size_t(V) * es);
    int64_t t = 0;
    float got_loss = 0.0f;
    CK(cudaMemcpy(hx.data(), static_cast<const char*>(x) + size_t(r) * V * es, hx.size(), cudaMemcpyDeviceToHost));
    if (dx != nullptr)
      CK(cudaMemcpy(hd.data(), static_cast<const char*>(dx) + size_t(r) * V * es, hd.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&t, target + r, sizeof t, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&got_loss, loss + r, sizeof got_loss, cudaMemcpyDeviceToHost));
    double m = -INFINITY, s = 0.0;
    for (int64_t c = 0; c < V; ++c) m = std::max(m, double(sweep::bits_to_float(hx.data() + c * es, dt)));
    for (int64_t c = 0; c < V; ++c) s += std::exp(double(sweep::bits_to_float(hx.data() + c * es, dt)) - m);
    const double lse = m + std::log(s);
    const double ref_loss = lse - double(sweep::bits_to_float(hx.data() + t * es, dt));
    const double lerr = std::fabs(got_loss - ref_loss) / std::max(1.0, std::fabs(ref_loss));
    w.loss = std::isnan(lerr) ? INFINITY : std::max(w.loss, lerr);
    if (dx == nullptr) continue;
    for (int64_t c = 0; c < V; ++c) {
      const double p = std::exp(double(sweep::bits_to_float(hx.data() + c * es, dt)) - lse);
      const double ref = p - (c == t ? 1.0 : 0.0);
      const double err = std::fabs(double(sweep::bits_to_float(hd.data() + c * es, dt)) - ref);
      w.grad = std::isnan(err) ? INFINITY : std::max(w.grad, err);
    }
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  const quack::DType dt = argc > 1 ? sweep::parse_dtype(argv[1]) : quack::DType::kBFloat16;
  const int64_t total = argc > 2 ? std::atoll(argv[2]) : (int64_t(1) << 28);
  std::vector<int64_t> Vs;
  for (int i = 3; i < argc; ++i) Vs.push_back(std::atoll(argv[i]));
  // 2048 and 8192 place the bulk forward's window (src/config.cpp).
  if (Vs.empty()) Vs = {1024, 2048, 4096, 8192, 16384, 32000, 50304, 65536, 128256, 151936, 262144};
  const int es = quack::dtype_size(dt);
  if (!sweep::install_tuning_from_env()) return 2;
  const quack::DeviceLimits lim = sweep::device_limits();

  const size_t bytes = size_t(total) * es;
  const int64_t rows_cap = total / std::max<int64_t>(1, *std::min_element(Vs.begin(), Vs.end())) + 1;
  void *x, *dx, *ws;
  int64_t* target;
  float *loss, *rows_loss;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&dx, bytes));
  CK(cudaMalloc(&target, sizeof(int64_t) * size_t(rows_cap)));
  CK(cudaMalloc(&loss, sizeof(float)));
  CK(cudaMalloc(&rows_loss, sizeof(float) * size_t(rows_cap)));
  // Room for the largest workspace the library asks for over the sizes, the
  // forward and the fused calls. (A fixed guess from the smallest V's rows
  // fell short for a lone V = 32000: the bulk forward's 100704 bytes against
  // 83576, and the call was refused.)
  size_t ws_cap = 64;
  for (const int64_t V : Vs) {
    quack::CrossEntropyArgs t = sweep::mean_loss_args(std::max<int64_t>(1, total / V), V, x, dt, target, loss);
    for (const bool grad : {false, true}) {
      if (grad) t.dlogits = {dx, dt, V};
      size_t need = 0;
      if (quack::cross_entropy_workspace_bytes(t, &need).ok()) ws_cap = std::max(ws_cap, need);
    }
  }
  CK(cudaMalloc(&ws, ws_cap));
  sweep::Timer timer;
  const double copy_gbs = timer.copy_gbs(dx, x, bytes);
  {
    std::mt19937 rng(1234);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<uint8_t> h;
    sweep::fill_normal(h, total, dt, 2.0f, 0.0f, nd, rng);
    CK(cudaMemcpy(x, h.data(), bytes, cudaMemcpyHostToDevice));
  }
  std::printf("cross_entropy, dtype %s, M*V = %lld, copy %.1f GB/s\n", quack::dtype_name(dt), (long long)total,
              copy_gbs);
  std::printf("%9s %8s | %-40s | %9s %6s | %-48s | %9s %6s | %s\n", "V", "M", "forward kernel", "fwd us", "%copy",
              "fused kernel", "fused us", "%copy", "err: fwd loss | fused loss / dlogits");

  for (const int64_t V : Vs) {
    const int64_t M = std::max<int64_t>(1, total / V);
    {
      std::mt19937_64 rng(V);
      std::vector<int64_t> ht(static_cast<size_t>(M));
      for (auto& t : ht) t = int64_t(rng() % uint64_t(V));
      CK(cudaMemcpy(target, ht.data(), sizeof(int64_t) * ht.size(), cudaMemcpyHostToDevice));
    }
    quack::CrossEntropyArgs a = sweep::mean_loss_args(M, V, x, dt, target, loss);
    a.workspace = ws;
    a.workspace_bytes = ws_cap;
    quack::CrossEntropyArgs g = a;
    g.dlogits = {dx, dt, V};
    // The checked runs: per-row losses (forward only, then with dlogits) on
    // poisoned memory -- each path the timing below takes.
    Check fwd_err, err;
    bool failed = false;
    for (const bool grad : {false, true}) {
      quack::CrossEntropyArgs c = grad ? g : a;
      c.reduction = quack::Reduction::kNone;
      c.loss = rows_loss;
      CK(cudaMemset(rows_loss, 0xff, sizeof(float) * size_t(M)));
      CK(cudaMemset(dx, 0xff, size_t(M) * V * es));
      const quack::Status cst = quack::cross_entropy(c, nullptr);
      if (!cst.ok()) {
        std::printf("%9lld: %s error %s\n", (long long)V, grad ? "fused" : "forward", cst.message.c_str());
        failed = true;
        break;
      }
      CK(cudaDeviceSynchronize());
      (grad ? err : fwd_err) = check(x, target, rows_loss, grad ? dx : nullptr, M, V, dt);
    }
    if (failed) continue;
    // The timed calls' own status, once (a refused call would time as ~1 us).
    for (const quack::CrossEntropyArgs* t : {&a, &g}) {
      size_t need = 0;
      CK(cudaGetLastError());
      const quack::Status qs = quack::cross_entropy_workspace_bytes(*t, &need);
      const quack::Status rs = need <= ws_cap ? quack::cross_entropy(*t, nullptr) : qs;
      if (!qs.ok() || !rs.ok() || need > ws_cap) {
        std::printf("%9lld: timed call refused (%s; workspace %zu of %zu bytes)\n", (long long)V,
                    (qs.ok() ? rs : qs).message.c_str(), need, ws_cap);
        failed = true;
      }
    }
    if (failed) continue;
    const float fwd_ms = timer.median_ms([&] { (void)quack::cross_entropy(a, nullptr); }, 20);
    const float fused_ms = timer.median_ms([&] { (void)quack::cross_entropy(g, nullptr); }, 20);
    const double fwd_pct = 100.0 * (1.0 * M * V * es / fwd_ms / 1e6) / copy_gbs;
    const double fused_pct = 100.0 * (2.0 * M * V * es / fused_ms / 1e6) / copy_gbs;
    // (Contiguous rows that are not whole 16-byte vectors are shifted rows:
    // the register kernels where RowTuning::shifted_rows allows, else the
    // element-wise stream.)
    const bool shifted = (V * es) % 16 != 0;
    std::printf("%9lld %8lld | %-40s | %9.1f %5.1f%% | %-48s | %9.1f %5.1f%% | %.1e | %.1e / %.1e\n", (long long)V,
                (long long)M, quack::cross_entropy_plan_description(M, V, dt, lim, true, false, shifted).c_str(),
                fwd_ms * 1e3, fwd_pct, quack::cross_entropy_plan_description(M, V, dt, lim, false, false, shifted).c_str(),
                fused_ms * 1e3, fused_pct, fwd_err.loss, err.loss, err.grad);
  }
  CK(cudaGetLastError());
  return 0;
}
