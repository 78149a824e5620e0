// C++-only decode-sized forwards by CUDA-graph replay: RMSNorm (bf16 weight),
// LayerNorm (fp32 weight and bias), softmax and cross-entropy (mean loss) at
// M rows of N, the shapes and calls of bench_latency.py's "small" section
// (20 calls captured in one graph, replayed; us a call), without Python or
// peers, so that QUACK_TUNE variants (sweep_common.hpp) of the register
// kernels' small-batch plans can be compared in one device call. Each
// shape's output is checked first (rows 0 and M - 1, or the loss) against a
// double CPU reference, the output poisoned before.
//
//   decode_sweep [dtype=bf16|f16|f32] [ops=rmsnorm,layernorm,softmax,cross_entropy]
//   env DECODE_MS (default 1,4,16,64,256,1024), DECODE_NS (2048,4096,8192),
//   DECODE_CALLS (20), DECODE_REPLAYS (50); DECODE_NO_WEIGHT=1: the norms
//   without weight and bias (what the parameters' loads cost a call)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"
#include "sweep_common.hpp"

namespace {

std::vector<int64_t> env_list(const char* name, std::vector<int64_t> dflt) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  std::vector<int64_t> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atoll(item.c_str()));
  return out;
}

std::vector<double> to_host(const void* p, int64_t n, quack::DType dt) {
  const int es = quack::dtype_size(dt);
  std::vector<uint8_t> h(size_t(n) * es);
  CK(cudaMemcpy(h.data(), p, h.size(), cudaMemcpyDeviceToHost));
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = sweep::bits_to_float(h.data() + i * es, dt);
  return v;
}

// Largest error of rows {0, M - 1} of `out` against the op's double
// reference, relative to max(|ref|, floor).
double check_rows(const std::string& op, const std::vector<double>& x, const std::vector<double>& out,
                  const std::vector<double>& w, const std::vector<double>& b, int64_t M, int64_t N) {
  double worst = 0.0;
  for (int64_t r : {int64_t(0), M - 1}) {
    const double* xr = x.data() + r * N;
    const double* yr = out.data() + r * N;
    double mean = 0.0, ss = 0.0, mx = -INFINITY, se = 0.0;
    for (int64_t c = 0; c < N; ++c) mean += xr[c] / double(N);
    for (int64_t c = 0; c < N; ++c) {
      const double d = op == "layernorm" ? xr[c] - mean : xr[c];
      ss += d * d / double(N);
      mx = std::max(mx, xr[c]);
    }
    for (int64_t c = 0; c < N; ++c) se += std::exp(xr[c] - mx);
    for (int64_t c = 0; c < N; ++c) {
      double ref;
      if (op == "rmsnorm") ref = xr[c] / std::sqrt(ss + 1e-6) * w[size_t(c)];
      else if (op == "layernorm") ref = (xr[c] - mean) / std::sqrt(ss + 1e-5) * w[size_t(c)] + b[size_t(c)];
      else ref = std::exp(xr[c] - mx) / se;
      const double floor = op == "softmax" ? 1.0 / double(N) : 1.0;
      const double err = std::fabs(yr[c] - ref) / std::max(std::fabs(ref), floor);
      worst = std::isnan(err) ? INFINITY : std::max(worst, err);
    }
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const quack::DType dt = argc > 1 ? sweep::parse_dtype(argv[1]) : quack::DType::kBFloat16;
  const std::string ops = argc > 2 ? argv[2] : "rmsnorm,layernorm,softmax,cross_entropy";
  const std::vector<int64_t> Ms = env_list("DECODE_MS", {1, 4, 16, 64, 256, 1024});
  const std::vector<int64_t> Ns = env_list("DECODE_NS", {2048, 4096, 8192});
  const int calls = int(env_list("DECODE_CALLS", {20})[0]);
  const int replays = int(env_list("DECODE_REPLAYS", {50})[0]);
  const bool no_weight = sweep::env_flag("DECODE_NO_WEIGHT");
  if (!sweep::install_tuning_from_env()) return 2;
  const quack::DeviceLimits lim = sweep::device_limits();
  const int es = quack::dtype_size(dt);
  const int64_t maxM = *std::max_element(Ms.begin(), Ms.end()), maxN = *std::max_element(Ns.begin(), Ns.end());

  void *x, *y, *w16, *ws;
  float *w32, *b32, *loss;
  int64_t* target;
  CK(cudaMalloc(&x, size_t(maxM * maxN) * es));
  CK(cudaMalloc(&y, size_t(maxM * maxN) * es));
  CK(cudaMalloc(&w16, size_t(maxN) * es));
  CK(cudaMalloc(&w32, size_t(maxN) * 4));
  CK(cudaMalloc(&b32, size_t(maxN) * 4));
  CK(cudaMalloc(&loss, 16));
  CK(cudaMalloc(&target, size_t(maxM) * 8));
  const size_t ws_cap = size_t(1) << 20;
  CK(cudaMalloc(&ws, ws_cap));
  std::mt19937 rng(4321);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<uint8_t> h;
  sweep::fill_normal(h, maxM * maxN, dt, 3.0f, 0.0f, nd, rng);
  CK(cudaMemcpy(x, h.data(), h.size(), cudaMemcpyHostToDevice));
  sweep::fill_normal(h, maxN, dt, 0.1f, 1.0f, nd, rng);
  CK(cudaMemcpy(w16, h.data(), h.size(), cudaMemcpyHostToDevice));
  std::vector<uint8_t> hw, hb;
  sweep::fill_normal(hw, maxN, quack::DType::kFloat32, 0.1f, 1.0f, nd, rng);
  sweep::fill_normal(hb, maxN, quack::DType::kFloat32, 0.1f, 0.0f, nd, rng);
  CK(cudaMemcpy(w32, hw.data(), hw.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b32, hb.data(), hb.size(), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  std::printf("decode_sweep, dtype %s, %d calls a graph, median of %d replays%s\n", quack::dtype_name(dt), calls,
              replays, no_weight ? ", norms without weight and bias" : "");
  std::printf("%-14s %6s %5s | %-56s | %8s | %s\n", "op", "N", "M", "kernel", "us/call", "max rel err");
  std::stringstream ss(ops);
  std::string op;
  while (std::getline(ss, op, ',')) {
    for (int64_t N : Ns) {
      for (int64_t M : Ms) {
        std::vector<int64_t> ht(static_cast<size_t>(M));
        for (int64_t r = 0; r < M; ++r) ht[size_t(r)] = (r * 7919 + 13) % N;
        CK(cudaMemcpy(target, ht.data(), ht.size() * 8, cudaMemcpyHostToDevice));
        quack::LayerNormFwdArgs na = sweep::norm_args<quack::LayerNormFwdArgs>(M, N, x, y, dt);
        if (op == "rmsnorm") {
          na.eps = 1e-6f;
          if (!no_weight) na.weight = {w16, dt};
        } else if (!no_weight) {
          na.weight = {w32, quack::DType::kFloat32};
          na.bias = {b32, quack::DType::kFloat32};
        }
        quack::SoftmaxFwdArgs sa = sweep::softmax_args(M, N, x, y, dt);
        quack::CrossEntropyArgs ca = sweep::mean_loss_args(M, N, x, dt, target, loss);
        size_t need = 0;
        quack::Status st = op == "rmsnorm"         ? quack::rmsnorm_fwd_workspace_bytes(na, &need)
                           : op == "layernorm"     ? quack::layernorm_fwd_workspace_bytes(na, &need)
                           : op == "softmax"       ? quack::softmax_fwd_workspace_bytes(sa, &need)
                           : op == "cross_entropy" ? quack::cross_entropy_workspace_bytes(ca, &need)
                                                   : quack::Status{quack::Code::kInvalidArgument, "unknown op " + op};
        if (!st.ok() || need > ws_cap) {
          std::printf("%-14s %6lld %5lld | %s\n", op.c_str(), (long long)N, (long long)M,
                      st.ok() ? "workspace too large" : st.message.c_str());
          continue;
        }
        na.workspace = sa.workspace = ca.workspace = need > 0 ? ws : nullptr;
        na.workspace_bytes = sa.workspace_bytes = ca.workspace_bytes = need;
        auto call = [&]() {
          if (op == "rmsnorm") return quack::rmsnorm_fwd(na, stream);
          if (op == "layernorm") return quack::layernorm_fwd(na, stream);
          if (op == "softmax") return quack::softmax_fwd(sa, stream);
          return quack::cross_entropy(ca, stream);
        };
        CK(cudaMemset(y, 0xff, size_t(M * N) * es));  // poison (NaN) before the checked call
        CK(cudaMemset(loss, 0xff, 16));
        if (!(st = call()).ok()) {
          std::printf("%-14s %6lld %5lld | error %s\n", op.c_str(), (long long)N, (long long)M, st.message.c_str());
          continue;
        }
        CK(cudaStreamSynchronize(stream));
        const std::vector<double> hx = to_host(x, M * N, dt);
        double err;
        if (op == "cross_entropy") {
          double want = 0.0;
          for (int64_t r = 0; r < M; ++r) {
            const double* xr = hx.data() + r * N;
            double mx = -INFINITY, se = 0.0;
            for (int64_t c = 0; c < N; ++c) mx = std::max(mx, xr[c]);
            for (int64_t c = 0; c < N; ++c) se += std::exp(xr[c] - mx);
            want += (mx + std::log(se) - xr[ht[size_t(r)]]) / double(M);
          }
          float got;
          CK(cudaMemcpy(&got, loss, 4, cudaMemcpyDeviceToHost));
          err = std::fabs(got - want) / std::max(1.0, std::fabs(want));
          if (std::isnan(err)) err = INFINITY;
        } else {
          const std::vector<double> hy = to_host(y, M * N, dt);
          std::vector<double> vw(static_cast<size_t>(N), 1.0), vb(static_cast<size_t>(N), 0.0);
          if (op == "rmsnorm" && !no_weight) {
            vw = to_host(w16, N, dt);
          } else if (op == "layernorm" && !no_weight) {
            vw = to_host(w32, N, quack::DType::kFloat32);
            vb = to_host(b32, N, quack::DType::kFloat32);
          }
          err = check_rows(op, hx, hy, vw, vb, M, N);
        }
        // The graph: `calls` calls back to back, as bench_latency captures them.
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < calls; ++i) (void)call();
        CK(cudaStreamEndCapture(stream, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(exec, stream));
        std::vector<float> ts;
        for (int i = 0; i < replays; ++i) {
          CK(cudaEventRecord(e0, stream));
          CK(cudaGraphLaunch(exec, stream));
          CK(cudaEventRecord(e1, stream));
          CK(cudaEventSynchronize(e1));
          float ms;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          ts.push_back(ms);
        }
        std::sort(ts.begin(), ts.end());
        const double us = double(ts[ts.size() / 2]) * 1e3 / calls;
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
        std::string plan;
        if (op == "rmsnorm" || op == "layernorm")
          plan = quack::norm_fwd_plan_description(na, op == "layernorm", lim);
        else if (op == "softmax")
          plan = quack::softmax_plan_description(M, N, dt, false, lim, need > 0);
        else
          plan = quack::cross_entropy_plan_description(M, N, dt, lim, true);
        std::printf("%-14s %6lld %5lld | %-56s | %8.2f | %.2e%s\n", op.c_str(), (long long)N, (long long)M,
                    plan.c_str(), us, err, err > 0.02 ? "  WRONG" : "");
      }
    }
  }
  CK(cudaGetLastError());
  return 0;
}
