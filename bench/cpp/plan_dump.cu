// Every plan the dispatch tables give, on the host (no GPU needed): which
// kernel and layout each op takes, for every row length in a range, on an
// H200's limits (DeviceLimits{}: 132 SMs, as the H100 SXM), under the
// defaults or QUACK_TUNE (sweep_common.hpp). Diff two trees' dumps to see
// every plan a change moves before any device time is spent on it:
//
//   build/plan_dump OP LO HI > plans.txt      (OP: norm_bwd, norm_fwd,
//                                               softmax, cross_entropy)
//
// A line a call: "N dtype weight-dtype norm grads rows: plan". For each N
// in [LO, HI]: x in bf16 / fp16 / fp32; the weight in x's dtype or fp32;
// RMSNorm and LayerNorm; dx alone, +dweight, +dweight and dbias (norm_bwd)
// or without / with a residual stream (norm_fwd); backward or not
// (softmax), the loss alone or with the gradient (cross_entropy); rows 1,
// 100 and 2^28 / N (the sweeps' M). Rows are contiguous (pitch N), so an
// N that is not whole 16-byte vectors takes the shifted plans where there
// is more than one row, as a contiguous tensor does. The seventieth
// session's check of LayerNorm bf16 1024's new plan (docs/KERNELS.md): 18
// lines moved over N = 1..70000.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "quack/core/config.hpp"
#include "quack/quack.hpp"
#include "support/plan_args.hpp"
#include "sweep_common.hpp"

namespace {

using quack::DType;

// Operand `slot`'s fake device pointer (the host plan tests'): the plans
// read only its alignment.
void* at(uintptr_t slot) { return quack::test::fake_device_ptr(slot, 0, DType::kFloat32); }

const char* grads_name(int g) { return g == 0 ? "dx" : g == 1 ? "+dw" : "+dw,db"; }

std::string norm_bwd(int64_t rows, int64_t n, DType x, DType w, bool ln, int grads) {
  quack::RMSNormBwdArgs a;
  a.rows = rows;
  a.cols = n;
  a.h = {at(1), x, n};
  a.dy = {at(2), x, n};
  a.dx = {at(3), x, n};
  a.weight = {at(4), w};
  if (grads >= 1) a.dweight = {at(5), w};
  if (grads >= 2) a.dbias = {at(6), w};
  a.rstd = static_cast<const float*>(at(8));
  return quack::norm_bwd_plan_description(a, ln, quack::DeviceLimits{});
}

std::string norm_fwd(int64_t rows, int64_t n, DType x, DType w, bool ln, bool residual) {
  quack::RMSNormFwdArgs a;
  a.rows = rows;
  a.cols = n;
  a.x = {at(1), x, n};
  a.out = {at(2), x, n};
  a.weight = {at(3), w};
  if (ln) a.bias = {at(4), w};
  if (residual) {
    a.residual = {at(5), x, n};
    a.residual_out = {at(6), x, n};
  }
  a.rstd = static_cast<float*>(at(7));
  a.workspace = at(9);  // (as the Python front passes one: the grid where it serves)
  a.workspace_bytes = size_t(1) << 30;
  return quack::norm_fwd_plan_description(a, ln, quack::DeviceLimits{});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s norm_bwd|norm_fwd|softmax|cross_entropy LO HI\n", argv[0]);
    return 2;
  }
  const std::string op = argv[1];
  const int64_t lo = std::atoll(argv[2]), hi = std::atoll(argv[3]);
  if (op != "norm_bwd" && op != "norm_fwd" && op != "softmax" && op != "cross_entropy") {
    std::fprintf(stderr, "unknown op %s\n", op.c_str());
    return 2;
  }
  if (lo < 1 || hi < lo) {
    std::fprintf(stderr, "need 1 <= LO <= HI\n");
    return 2;
  }
  if (!sweep::install_tuning_from_env()) return 2;
  const quack::DeviceLimits lim{};
  for (int64_t n = lo; n <= hi; ++n)
    for (const DType x : {DType::kBFloat16, DType::kFloat16, DType::kFloat32})
      for (const int64_t rows : {int64_t(1), int64_t(100), std::max<int64_t>(1, (int64_t(1) << 28) / n)}) {
        const char* xn = quack::dtype_name(x);
        if (op == "softmax" || op == "cross_entropy") {
          for (const bool second : {false, true}) {
            const bool shifted = rows > 1 && (n * int64_t(quack::dtype_size(x))) % 16 != 0;
            const std::string plan =
                op == "softmax" ? quack::softmax_plan_description(rows, n, x, second, lim, true, shifted)
                                : quack::cross_entropy_plan_description(rows, n, x, lim, !second, false, shifted);
            std::printf("%lld %s %s rows %lld: %s\n", (long long)n, xn,
                        op == "softmax" ? (second ? "bwd" : "fwd") : (second ? "grad" : "loss"), (long long)rows,
                        plan.c_str());
          }
          continue;
        }
        for (const bool w32 : {false, true})
          for (const bool ln : {false, true})
            for (int g = 0; g < (op == "norm_bwd" ? 3 : 2); ++g) {
              const DType w = w32 ? DType::kFloat32 : x;
              if (w32 && x == DType::kFloat32) continue;  // (the same call as the weight in x's dtype)
              const std::string plan =
                  op == "norm_bwd" ? norm_bwd(rows, n, x, w, ln, g) : norm_fwd(rows, n, x, w, ln, g == 1);
              std::printf("%lld %s %s %s %s rows %lld: %s\n", (long long)n, xn, quack::dtype_name(w), ln ? "LN" : "RMS",
                          op == "norm_bwd" ? grads_name(g) : (g ? "residual" : "plain"), (long long)rows, plan.c_str());
            }
      }
  return 0;
}
