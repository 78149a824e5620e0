// GPU tests of the reduction stack (quack/core/reduce.cuh): warp_reduce over
// every team width, block_reduce over CTA sizes that are and are not powers of
// two, team_reduce over teams of 1..1024 threads sharing a CTA (and teams
// of whole warps in CTAs of any warp count),
// cluster_reduce and RowReducer over every cluster size 1..16, for SumOp,
// MaxOp, MaxSumOp and MaxSumMaxFirstOp (MaxSumOp's pair reduced max first
// in a warp: the softmax forwards'), against a float64 reference on the
// host.
//
// Every kernel runs three reductions back to back, so the ping-pong scratch
// buffers are reused once (round 2 writes what round 0 read). Every thread
// writes what it got; all threads of one group (team, CTA or cluster) must
// hold the bit-identical value.
//
// Inputs per round:
//   Sum     round 0: multiples of 1/64 in [-1, 1], whose sums are exact in fp32
//           in any order, so the result must equal the reference exactly;
//           rounds 1, 2: uniform floats (tolerance; bit-equality still exact).
//   Max     round 0 mixed signs, round 1 with some -inf, round 2 all negative.
//   MaxSum  (m, s) partials (s = sum exp(x - m)); rounds 1 and 2 hold identity
//           partials (-inf, 0), round 2 so many that whole small groups are
//           empty and must come out as the identity; round 1 also maxima of
//           any finite magnitude (3e7, -1e12, +-3e38, 2.5e38), where
//           m - m' overflows to -inf or dwarfs the rest.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "quack/core/reduce.cuh"
#include "support/cuda_test.hpp"

namespace quack {
namespace {

using core::MaxOp;
using core::MaxSum;
using core::MaxSumMaxFirstOp;
using core::MaxSumOp;
using core::SumOp;

constexpr int kRounds = 3;

// ---------------------------------------------------------------------------
// Kernels. Inputs and outputs are [kRounds][threads in the grid], except for
// cluster_reduce_kernel's inputs: [kRounds][CTAs], one value per CTA.

template <class Op>
__global__ void warp_reduce_kernel(const typename Op::T* in, typename Op::T* out, int width) {
  const int64_t n = int64_t(gridDim.x) * blockDim.x;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int r = 0; r < kRounds; ++r) out[r * n + i] = core::warp_reduce<Op>(in[r * n + i], width);
}

template <class Op>
__global__ void block_reduce_kernel(const typename Op::T* in, typename Op::T* out) {
  using T = typename Op::T;
  __shared__ T scratch[2][32];
  const int64_t n = int64_t(gridDim.x) * blockDim.x;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int r = 0; r < kRounds; ++r) out[r * n + i] = core::block_reduce<Op>(in[r * n + i], scratch[r & 1]);
}

template <class Op>
__global__ void row_reducer_kernel(const typename Op::T* in, typename Op::T* out, int team, int cluster) {
  __shared__ __align__(16) unsigned char scratch[core::RowReducer<Op>::scratch_bytes()];
  core::RowReducer<Op> red(scratch, team, cluster);
  const int64_t n = int64_t(gridDim.x) * blockDim.x;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int r = 0; r < kRounds; ++r) out[r * n + i] = red.reduce(in[r * n + i]);
  if (cluster > 1) {  // no CTA may leave while a peer still reads its slot
    core::cluster_arrive();
    core::cluster_wait();
  }
}

template <class Op>
__global__ void cluster_reduce_kernel(const typename Op::T* in, typename Op::T* out, int cluster) {
  using T = typename Op::T;
  __shared__ T slots[2];
  const int64_t n = int64_t(gridDim.x) * blockDim.x;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int r = 0; r < kRounds; ++r)
    out[r * n + i] = core::cluster_reduce<Op>(in[r * gridDim.x + blockIdx.x], &slots[r & 1], cluster);
  core::cluster_arrive();
  core::cluster_wait();
}

template <class Op>
__global__ void team_reduce_kernel(const typename Op::T* in, typename Op::T* out, int team) {
  using T = typename Op::T;
  __shared__ T scratch[2][32];
  const int64_t n = int64_t(gridDim.x) * blockDim.x;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int r = 0; r < kRounds; ++r) out[r * n + i] = core::team_reduce<Op>(in[r * n + i], team, scratch[r & 1]);
}

// Launches with a cluster dimension when cluster >= 1 (none when 0).
template <typename... KArgs, typename... Args>
cudaError_t launch(void (*kernel)(KArgs...), int grid, int block, int cluster, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(grid));
  cfg.blockDim = dim3(unsigned(block));
  cudaLaunchAttribute attr[1];
  if (cluster >= 1) {
    if (cluster > 8) {  // 16 is beyond the portable cluster size
      const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
      if (e != cudaSuccess) return e;
    }
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(cluster);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    // Fail with a clear message if the device cannot co-schedule the cluster.
    int clusters = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
    if (e != cudaSuccess) return e;
    if (clusters < 1) return cudaErrorInvalidClusterSize;
  }
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

// ---------------------------------------------------------------------------
// Host side: inputs, float64 reference, comparison.

enum class OpKind { kSum, kMax, kMaxSum, kMaxSumMaxFirst };
const char* op_name(OpKind k) {
  return k == OpKind::kSum ? "Sum" : k == OpKind::kMax ? "Max" : k == OpKind::kMaxSum ? "MaxSum" : "MaxSumMaxFirst";
}

// Test names of the (op, size) suites: the op, then `what` and the size
// ("Sum_team32").
struct OpParamName {
  const char* what;
  std::string operator()(const testing::TestParamInfo<std::tuple<OpKind, int>>& i) const {
    return std::string(op_name(std::get<0>(i.param))) + what + std::to_string(std::get<1>(i.param));
  }
};

template <class F>
void with_op(OpKind k, F&& f) {
  switch (k) {
    case OpKind::kSum: f(SumOp{}); break;
    case OpKind::kMax: f(MaxOp{}); break;
    case OpKind::kMaxSum: f(MaxSumOp{}); break;
    case OpKind::kMaxSumMaxFirst: f(MaxSumMaxFirstOp{}); break;
  }
}

void fill_round(std::vector<float>& v, OpKind k, int round, std::mt19937& g) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> k64(-64, 64);
  for (size_t i = 0; i < v.size(); ++i) {
    if (k == OpKind::kSum) {
      v[i] = round == 0 ? float(k64(g)) / 64.0f : u(g);
    } else {  // Max
      const float x = 100.0f * u(g);
      if (round == 0) v[i] = x;
      else if (round == 1) v[i] = (g() % 5 == 0) ? -INFINITY : x;
      else v[i] = -1.0f - std::fabs(x);
    }
  }
}

void fill_round(std::vector<MaxSum>& v, OpKind, int round, std::mt19937& g) {
  std::uniform_real_distribution<float> m(-10.0f, 10.0f), s(0.25f, 4.0f);
  static const float kHuge[] = {3e7f, -1e12f, 3e38f, -3e38f, 2.5e38f};
  for (auto& p : v) {
    const bool empty = round == 1 ? g() % 8 == 0 : round == 2 ? g() % 2 == 0 : false;
    p = empty ? MaxSum{-INFINITY, 0.0f} : MaxSum{m(g), round == 0 ? 1.0f : s(g)};
    if (round == 1 && !empty && g() % 16 == 0) p.m = kHuge[g() % 5];
  }
}

bool same_bits(const float& a, const float& b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_bits(const MaxSum& a, const MaxSum& b) { return std::memcmp(&a, &b, sizeof a) == 0; }
std::string show(float v) { return std::to_string(v); }
std::string show(const MaxSum& v) { return "(" + std::to_string(v.m) + ", " + std::to_string(v.s) + ")"; }

// Why `got` is not the reduction of in[0..n), or an empty string.
std::string mismatch(const float* in, int64_t n, float got, OpKind k, int round) {
  if (k == OpKind::kSum) {
    double ref = 0.0, abs_sum = 0.0;
    for (int64_t i = 0; i < n; ++i) ref += in[i], abs_sum += std::fabs(in[i]);
    // Round 0 is exact; otherwise the fp32 error of a tree of depth <= 14.
    const double tol = round == 0 ? 0.0 : 1e-6 * abs_sum;
    if (!(std::fabs(got - ref) <= tol)) return "sum " + show(got) + " != reference " + std::to_string(ref);
    return "";
  }
  double ref = -INFINITY;
  for (int64_t i = 0; i < n; ++i) ref = std::fmax(ref, double(in[i]));
  if (double(got) != ref) return "max " + show(got) + " != reference " + std::to_string(ref);
  return "";
}

std::string mismatch(const MaxSum* in, int64_t n, MaxSum got, OpKind, int) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, double(in[i].m));
  double s = 0.0;
  if (m != -INFINITY)
    for (int64_t i = 0; i < n; ++i)
      if (in[i].m != -INFINITY) s += double(in[i].s) * std::exp(double(in[i].m) - m);
  const bool ok = double(got.m) == m && std::fabs(double(got.s) - s) <= 3e-5 * s;
  if (!ok) return "pair " + show(got) + " != reference (" + std::to_string(m) + ", " + std::to_string(s) + ")";
  return "";
}

// Shape of one test launch: `groups` groups, group g reduces inputs
// [g * in_per_group, (g + 1) * in_per_group) of each round and its result
// lands in outputs [g * out_per_group, (g + 1) * out_per_group).
struct Shape {
  int grid, block, cluster;  // cluster 0: launched without a cluster dimension
  int64_t in_per_group, out_per_group;
  bool one_input_per_cta = false;  // cluster_reduce_kernel
};

template <class Op, typename... Extra>
void run_and_check(void (*kernel)(const typename Op::T*, typename Op::T*, Extra...), OpKind k,
                   const Shape& sh, Extra... extra) {
  using T = typename Op::T;
  const int64_t threads = int64_t(sh.grid) * sh.block;
  const int64_t ins = sh.one_input_per_cta ? sh.grid : threads;
  const int64_t groups = threads / sh.out_per_group;
  ASSERT_EQ(groups * sh.in_per_group, ins);

  std::mt19937 gen(12345 + sh.block * 17 + sh.cluster);
  std::vector<T> h_in(size_t(kRounds * ins)), h_out(size_t(kRounds * threads));
  for (int r = 0; r < kRounds; ++r) {
    std::vector<T> part(static_cast<size_t>(ins));
    fill_round(part, k, r, gen);
    std::copy(part.begin(), part.end(), h_in.begin() + r * ins);
  }
  test::DeviceBuffer d_in(h_in.size() * sizeof(T)), d_out(h_out.size() * sizeof(T));
  ASSERT_TRUE(d_in.ok() && d_out.ok());
  QUACK_ASSERT_CUDA(cudaMemcpy(d_in.data(), h_in.data(), d_in.bytes(), cudaMemcpyHostToDevice));
  QUACK_ASSERT_CUDA(cudaMemset(d_out.data(), 0xFF, d_out.bytes()));
  QUACK_ASSERT_CUDA(launch(kernel, sh.grid, sh.block, sh.cluster, reinterpret_cast<const T*>(d_in.data()),
                           reinterpret_cast<T*>(d_out.data()), extra...));
  QUACK_ASSERT_CUDA(cudaGetLastError());
  QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
  QUACK_ASSERT_CUDA(cudaMemcpy(h_out.data(), d_out.data(), d_out.bytes(), cudaMemcpyDeviceToHost));

  int failures = 0;
  for (int r = 0; r < kRounds && failures < 5; ++r) {
    for (int64_t g = 0; g < groups && failures < 5; ++g) {
      const T* in = h_in.data() + r * ins + g * sh.in_per_group;
      const T* out = h_out.data() + r * threads + g * sh.out_per_group;
      std::string why = mismatch(in, sh.in_per_group, out[0], k, r);
      for (int64_t j = 1; j < sh.out_per_group && why.empty(); ++j)
        if (!same_bits(out[j], out[0]))
          why = "thread " + std::to_string(j) + " of the group got " + show(out[j]) + ", thread 0 got " + show(out[0]);
      if (!why.empty()) {
        ADD_FAILURE() << op_name(k) << " round " << r << " group " << g << ": " << why;
        ++failures;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// warp_reduce: every team width.

class WarpReduce : public testing::TestWithParam<std::tuple<OpKind, int>> {};

TEST_P(WarpReduce, EveryLaneOfATeamGetsTheTeamResult) {
  QUACK_REQUIRE_SM90();
  const OpKind k = std::get<0>(GetParam());
  const int width = std::get<1>(GetParam());
  with_op(k, [&](auto op) {
    using Op = decltype(op);
    run_and_check<Op, int>(warp_reduce_kernel<Op>, k, Shape{3, 64, 0, width, width}, width);
  });
}

INSTANTIATE_TEST_SUITE_P(Ops, WarpReduce,
                         testing::Combine(testing::Values(OpKind::kSum, OpKind::kMax, OpKind::kMaxSum, OpKind::kMaxSumMaxFirst),
                                          testing::Values(1, 2, 4, 8, 16, 32)),
                         OpParamName{"_width"});

// ---------------------------------------------------------------------------
// block_reduce: CTA sizes in whole warps, powers of two or not.

class BlockReduce : public testing::TestWithParam<std::tuple<OpKind, int>> {};

TEST_P(BlockReduce, EveryThreadOfTheCtaGetsTheCtaResult) {
  QUACK_REQUIRE_SM90();
  const OpKind k = std::get<0>(GetParam());
  const int block = std::get<1>(GetParam());
  with_op(k, [&](auto op) {
    using Op = decltype(op);
    run_and_check<Op>(block_reduce_kernel<Op>, k, Shape{3, block, 0, block, block});
  });
}

INSTANTIATE_TEST_SUITE_P(Ops, BlockReduce,
                         testing::Combine(testing::Values(OpKind::kSum, OpKind::kMax, OpKind::kMaxSum, OpKind::kMaxSumMaxFirst),
                                          testing::Values(32, 64, 96, 128, 224, 1024)),
                         OpParamName{"_cta"});

// ---------------------------------------------------------------------------
// Cluster level: cluster_reduce alone (one value per CTA), and RowReducer
// (teams of whole CTAs split over a cluster), at every cluster size 1..16.
// Three clusters per launch, so that a leak between clusters shows.

class ClusterReduce : public testing::TestWithParam<std::tuple<OpKind, int>> {};

TEST_P(ClusterReduce, EveryThreadOfTheClusterGetsTheClusterResult) {
  QUACK_REQUIRE_SM90();
  const OpKind k = std::get<0>(GetParam());
  const int cluster = std::get<1>(GetParam());
  with_op(k, [&](auto op) {
    using Op = decltype(op);
    const int block = 64;
    Shape sh{3 * cluster, block, cluster, cluster, int64_t(cluster) * block, true};
    run_and_check<Op, int>(cluster_reduce_kernel<Op>, k, sh, cluster);
  });
}

TEST_P(ClusterReduce, RowReducerOverWholeCtasOfTheCluster) {
  QUACK_REQUIRE_SM90();
  const OpKind k = std::get<0>(GetParam());
  const int cluster = std::get<1>(GetParam());
  with_op(k, [&](auto op) {
    using Op = decltype(op);
    for (const int block : {32, 96, 256, 1024}) {
      SCOPED_TRACE("CTA of " + std::to_string(block) + " threads");
      const int64_t group = int64_t(cluster) * block;
      // A cluster of one is launched like the library does: no cluster dimension.
      Shape sh{3 * cluster, block, cluster > 1 ? cluster : 0, group, group};
      run_and_check<Op, int, int>(row_reducer_kernel<Op>, k, sh, block, cluster);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ops, ClusterReduce,
                         testing::Combine(testing::Values(OpKind::kSum, OpKind::kMax, OpKind::kMaxSum, OpKind::kMaxSumMaxFirst),
                                          testing::Range(1, 17)),
                         OpParamName{"_cluster"});

// RowReducer with teams of up to a warp: several teams per CTA, no cluster.
class RowReducerTeams : public testing::TestWithParam<std::tuple<OpKind, int>> {};

TEST_P(RowReducerTeams, EveryThreadOfATeamGetsTheTeamResult) {
  QUACK_REQUIRE_SM90();
  const OpKind k = std::get<0>(GetParam());
  const int team = std::get<1>(GetParam());
  with_op(k, [&](auto op) {
    using Op = decltype(op);
    run_and_check<Op, int, int>(row_reducer_kernel<Op>, k, Shape{3, 256, 0, team, team}, team, 1);
  });
}

INSTANTIATE_TEST_SUITE_P(Ops, RowReducerTeams,
                         testing::Combine(testing::Values(OpKind::kSum, OpKind::kMax, OpKind::kMaxSum, OpKind::kMaxSumMaxFirst),
                                          testing::Values(1, 2, 4, 8, 16, 32)),
                         OpParamName{"_team"});

// team_reduce: teams of 1..1024 threads sharing CTAs of 256, 512 and 1024
// threads (sub-warp teams, teams of whole warps, the whole CTA).
class TeamReduce : public testing::TestWithParam<std::tuple<OpKind, int>> {};

TEST_P(TeamReduce, EveryThreadOfATeamGetsTheTeamResult) {
  QUACK_REQUIRE_SM90();
  const OpKind k = std::get<0>(GetParam());
  const int team = std::get<1>(GetParam());
  with_op(k, [&](auto op) {
    using Op = decltype(op);
    for (const int block : {256, 512, 1024}) {
      if (team > block) continue;
      SCOPED_TRACE("CTA of " + std::to_string(block) + " threads");
      run_and_check<Op, int>(team_reduce_kernel<Op>, k, Shape{3, block, 0, team, team}, team);
    }
  });
}

// Teams of whole warps in CTAs of other warp counts: a fitted team that
// owns its CTA (the pipelined norm backward's RowTuning::bwd_pipe_fit_team:
// 96, 160, 640, 992 threads), and three teams of 64 sharing a CTA of 192
// -- every warp reads its team's partials from its first warp.
TEST(TeamReduceWholeWarps, EveryThreadOfATeamGetsTheTeamResultInCtasOfAnyWarpCount) {
  QUACK_REQUIRE_SM90();
  for (const OpKind k : {OpKind::kSum, OpKind::kMax, OpKind::kMaxSum, OpKind::kMaxSumMaxFirst}) {
    with_op(k, [&](auto op) {
      using Op = decltype(op);
      for (const auto& [block, team] : {std::pair{96, 96}, std::pair{160, 160}, std::pair{640, 640},
                                        std::pair{992, 992}, std::pair{192, 64}}) {
        SCOPED_TRACE("op " + std::to_string(int(k)) + ", team of " + std::to_string(team) + " in a CTA of " +
                     std::to_string(block));
        run_and_check<Op, int>(team_reduce_kernel<Op>, k, Shape{3, block, 0, team, team}, team);
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, TeamReduce,
                         testing::Combine(testing::Values(OpKind::kSum, OpKind::kMax, OpKind::kMaxSum, OpKind::kMaxSumMaxFirst),
                                          testing::Values(1, 4, 32, 64, 128, 256, 512, 1024)),
                         OpParamName{"_team"});

}  // namespace
}  // namespace quack

// ---------------------------------------------------------------------------
// ShiftedMoments (host code; no GPU): a thread's moments in one pass about
// its first value, then the threads' moments combined as the staged
// LayerNorm combines them (sum_t m2_t + n_t (mean_t - mean)^2), against
// float64 on rows built to defeat a one-pass variance: far off zero, and an
// outlier as the first value of a thread.

namespace {

struct Moments {
  double mean, m2;
};

Moments exact_moments(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v) s += x;
  const double mean = s / double(v.size());
  double m2 = 0.0;
  for (float x : v) m2 += (double(x) - mean) * (double(x) - mean);
  return {mean, m2};
}

// The rows of `threads` x n values the kernel's threads would hold, in
// thread order, through ShiftedMoments and the combine in float.
Moments shifted_moments(const std::vector<float>& v, int threads) {
  const int n = int(v.size()) / threads;
  const float inv_n = 1.0f / float(n);
  std::vector<float> mean(threads), m2(threads);
  float sum = 0.0f;
  for (int t = 0; t < threads; ++t) {
    quack::core::ShiftedMoments m;
    m.k = v[size_t(t) * n];
    for (int j = 0; j < n; ++j) m.add(v[size_t(t) * n + j]);
    mean[t] = m.mean(inv_n);
    m2[t] = m.m2(inv_n);
    sum += m.sum(n);
  }
  const float all_mean = sum / float(v.size());
  float dev = 0.0f;
  for (int t = 0; t < threads; ++t) {
    const float d = mean[t] - all_mean;
    dev += std::fmaf(float(n) * d, d, m2[t]);
  }
  return {all_mean, dev};
}

}  // namespace

// The log2-unit exponentials' premise (core::log2_base): below 2^24 the
// base's rounding residual r = m log2 e - b is at most 1 in magnitude (so a
// sum's 2^-r rescale stays in range), and the bound is why 2^24 is the
// limit: r passes 16 by 1e9. Checked on the host for m of every binade up
// to 2^24, the largest floats below it, and both signs (the product of two
// floats is exact in double).
TEST(Log2Units, TheBaseResidualStaysWithinOneBelow2To24) {
  constexpr float kLog2e = 1.4426950408889634f;
  auto residual = [&](float m) { return double(m) * double(kLog2e) - double(quack::core::log2_base(m)); };
  std::mt19937 g(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  double worst = 0.0;
  for (int e = -20; e < 24; ++e) {
    for (int k = 0; k < 2000; ++k) {
      const float m = std::ldexp(mant(g), e);
      for (float x : {m, -m}) {
        ASSERT_TRUE(quack::core::log2_units_ok(x)) << x;
        worst = std::max(worst, std::fabs(residual(x)));
      }
    }
  }
  for (float m = std::nextafter(0x1p24f, 0.0f), k = 0; k < 4096; m = std::nextafter(m, 0.0f), ++k) {
    worst = std::max(worst, std::fabs(residual(m)));
    worst = std::max(worst, std::fabs(residual(-m)));
  }
  EXPECT_LE(worst, 1.0);
  EXPECT_GT(worst, 0.25);  // (the bound is nearly reached)
  EXPECT_FALSE(quack::core::log2_units_ok(0x1p24f));
  EXPECT_FALSE(quack::core::log2_units_ok(-3e38f));
  EXPECT_FALSE(quack::core::log2_units_ok(INFINITY));
  EXPECT_FALSE(quack::core::log2_units_ok(NAN));
  EXPECT_TRUE(quack::core::log2_units_ok(-INFINITY));  // (a thread of padding: its sum is 0 in any units)
  EXPECT_EQ(quack::core::log2_base(-INFINITY), quack::core::kLog2BaseFloor);
  double at_1e9 = 0.0;
  for (float m = 1e9f, k = 0; k < 4096; m = std::nextafter(m, INFINITY), ++k)
    at_1e9 = std::max(at_1e9, std::fabs(residual(m)));
  EXPECT_GT(at_1e9, 16.0);
}

TEST(ShiftedMoments, OnePassMomentsHoldOnHostileRows) {
  std::mt19937 gen(20261201);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const int n : {32, 64, 256}) {
    for (const float offset : {0.0f, 100.0f, 1000.0f}) {
      for (const float outlier : {0.0f, 50.0f, 1e4f}) {
        // 64 threads of n values each; every third thread's first value is
        // the outlier (its shift k, the worst case), one more in the middle.
        const int threads = 64;
        std::vector<float> v(size_t(threads) * n);
        for (auto& x : v) x = offset + u(gen);
        for (int t = 0; t < threads; t += 3) v[size_t(t) * n] += outlier;
        v[v.size() / 2 + 1] -= outlier;
        const Moments want = exact_moments(v);
        const Moments got = shifted_moments(v, threads);
        SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset) + " outlier " +
                     std::to_string(outlier));
        // A few ulps of the values' size for the mean; for m2, n ulps of
        // each thread's q, far inside what mean(h^2) - mean^2 would lose.
        const double ulp = std::ldexp(1.0, -23);
        EXPECT_NEAR(got.mean, want.mean, 8 * ulp * (std::fabs(want.mean) + outlier + 1.0));
        EXPECT_NEAR(got.m2 / want.m2, 1.0, 4 * n * ulp) << got.m2 << " against " << want.m2;
      }
    }
  }
}

TEST(ShiftedMoments, ConstantRowsHaveNoVariance) {
  for (const float c : {0.0f, 7.0f, -1234.5f}) {
    std::vector<float> v(size_t(8) * 64, c);
    const Moments got = shifted_moments(v, 8);
    EXPECT_EQ(got.mean, c);
    EXPECT_EQ(got.m2, 0.0f);
  }
}
