// core::RowGeom's layout and its shifted rows, and RawVec's padding fills:
// host code only (RowGeom::at builds a thread's geometry as make does), so
// these run wherever the GPU suite is built, CI included.
//
// Shifted rows (RowGeom::shift): a row whose first element sits s elements
// into its 16-byte vector is walked from that vector. Whatever s, the
// threads' valid lanes [lo(i), valid(i)) must cover the row's N elements
// exactly once, no lane outside them, the head only at column 0; and the
// tiles the plans size for N + VEC - 1 columns must hold every shift.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "quack/core/config.hpp"
#include "quack/core/row_tile.cuh"
#include "support/cuda_test.hpp"

namespace quack {
namespace {

// Walks every thread of a row of n elements shifted by s, in `cluster`
// CTAs of `team` threads at VPT vectors of VEC: counts each element's
// covering lanes, and checks the per-thread rules.
template <int VEC, int VPT>
void check_cover(int team, int cluster, int n, int s) {
  SCOPED_TRACE("VEC " + std::to_string(VEC) + " VPT " + std::to_string(VPT) + " team " + std::to_string(team) +
               " cluster " + std::to_string(cluster) + " N " + std::to_string(n) + " shift " + std::to_string(s));
  std::vector<int> seen(size_t(n), 0);
  int outside = 0, bad_head = 0, bad_whole = 0;
  for (int crank = 0; crank < cluster; ++crank) {
    for (int t = 0; t < team; ++t) {
      auto g = core::RowGeom<VEC, VPT>::at(team, t, crank, n);
      g.shift(s);
      if (g.head != 0 && !(crank == 0 && t == 0)) ++bad_head;
      if (g.head != ((crank == 0 && t == 0) ? s : 0)) ++bad_head;
      for (int i = 0; i < VPT; ++i) {
        const int lo = g.lo(i), hi = g.valid(i);
        if (g.whole && (lo != 0 || hi != VEC)) ++bad_whole;
        if (lo < 0 || hi > VEC) ++outside;
        for (int j = lo; j < hi; ++j) {
          const int c = g.col(i) + j - s;  // the element's column in the row
          if (c < 0 || c >= n) ++outside;
          else ++seen[size_t(c)];
        }
      }
    }
  }
  int missed = 0, twice = 0;
  for (int v : seen) {
    missed += v == 0;
    twice += v > 1;
  }
  EXPECT_EQ(missed, 0) << "elements no lane holds";
  EXPECT_EQ(twice, 0) << "elements two lanes hold";
  EXPECT_EQ(outside, 0) << "valid lanes outside the row";
  EXPECT_EQ(bad_head, 0) << "a head away from column 0";
  EXPECT_EQ(bad_whole, 0) << "a whole thread with a masked lane";
}

// Tiles sized as the plans size them for shifted rows: the fewest CTAs
// (up to 16) whose tiles hold N + VEC - 1 columns.
template <int VEC, int VPT>
void check_planned(int team, int n) {
  const int64_t tile = int64_t(team) * VPT * VEC;
  const int cluster = int((n + VEC - 1 + tile - 1) / tile);
  if (cluster > 16) return;
  for (int s = 0; s < VEC; ++s) check_cover<VEC, VPT>(team, cluster, n, s);
}

TEST(RowGeomShift, EveryShiftCoversTheRowOnce) {
  std::mt19937 gen(43);
  for (int trial = 0; trial < 300; ++trial) {
    const int team = 1 << std::uniform_int_distribution<int>(0, 10)(gen);
    const int n = std::uniform_int_distribution<int>(1, 20000)(gen);
    check_planned<8, 1>(team, n);
    check_planned<8, 4>(team, n);
    check_planned<8, 16>(team, n);
    check_planned<4, 2>(team, n);
    check_planned<4, 8>(team, n);
    check_planned<4, 16>(team, n);
    if (testing::Test::HasFailure()) return;
  }
  // Rows shorter than a vector (the head vector is the row's last), a
  // balanced CTA of whole warps, a cluster whose last CTA holds a lane.
  for (int s = 0; s < 8; ++s) {
    for (int n = 1; n + s <= 8; ++n) check_cover<8, 1>(1, 1, n, s);
    check_cover<8, 16>(224, 2, 50257, s);
    check_cover<8, 4>(1024, 2, 50257, s);
  }
  for (int s = 0; s < 4; ++s) check_cover<4, 16>(256, 8, 128257, s);
}

// Unclustered register rows in CTAs fitted to the row (RowTuning::
// reg_fit_team): for every N of the register tiles' range the planner
// fits, the fitted team's layout (RowGeom, as make lays it out) covers the
// row once at every shift the plan sizes for, and the RMSNorm register
// kernel's team slots (core::TeamSlot at ceil(log2 team)) give every
// thread of the CTA one place, as they do the powers of two.
template <int VEC, int VPT>
void check_fitted_cover(int team, int n, bool shifted) {
  for (int s = 0; s < (shifted ? VEC : 1); ++s) check_cover<VEC, VPT>(team, 1, n, s);
}

void check_slots(const RegRowConfig& c) {
  SCOPED_TRACE("team " + std::to_string(c.team) + " threads " + std::to_string(c.threads));
  int shift = 0;
  while ((1 << shift) < c.team) ++shift;  // as src/rmsnorm.cu sets team_shift
  std::vector<int> seen(size_t(c.threads), 0);
  int bad = 0;
  for (int tid = 0; tid < c.threads; ++tid) {
    const core::TeamSlot s = core::TeamSlot::of(tid, shift, unsigned(c.threads));
    if (s.teams != c.teams_per_cta() || s.team_id < 0 || s.team_id >= s.teams || s.t < 0 || s.t >= c.team) {
      ++bad;
      continue;
    }
    ++seen[size_t(s.team_id * c.team + s.t)];
  }
  EXPECT_EQ(bad, 0) << "threads outside their CTA's teams";
  for (int v : seen) bad += v != 1;
  EXPECT_EQ(bad, 0) << "team places held by no thread, or by two";
}

TEST(RowGeomFitted, FittedTeamsCoverTheRowAndTheirCta) {
  RowTuning fit = default_row_tuning();
  fit.reg_fit_team = 1;
  int fitted = 0;
  for (const int x_bytes : {2, 4}) {
    for (const int max_vpt : {2, 4, 8}) {
      for (int64_t n = 1; n <= 33000; n += (n < 1100 ? 1 : 37)) {
        for (const bool shifted : {false, true}) {
          for (const RowTuning& t : {default_row_tuning(), fit}) {
            RegRowProblem p;
            p.rows = 4096;
            p.cols = n + (shifted ? 16 / x_bytes - 1 : 0);
            p.x_elem_bytes = x_bytes;
            p.max_vpt = max_vpt;
            p.cluster_vpt = max_vpt;
            p.scratch_bytes = 512;
            RegRowConfig c;
            if (!choose_reg_row_config(p, DeviceLimits{}, t, &c) || c.staged || c.cluster > 1) continue;
            check_slots(c);
            if (c.team > 32 && (c.team & (c.team - 1)) != 0) {
              ++fitted;
              const int vec = 16 / x_bytes;
              if (vec == 8 && c.vpt == 1) check_fitted_cover<8, 1>(c.team, int(n), shifted);
              else if (vec == 8 && c.vpt == 2) check_fitted_cover<8, 2>(c.team, int(n), shifted);
              else if (vec == 8 && c.vpt == 4) check_fitted_cover<8, 4>(c.team, int(n), shifted);
              else if (vec == 8 && c.vpt == 8) check_fitted_cover<8, 8>(c.team, int(n), shifted);
              else if (vec == 4 && c.vpt == 1) check_fitted_cover<4, 1>(c.team, int(n), shifted);
              else if (vec == 4 && c.vpt == 2) check_fitted_cover<4, 2>(c.team, int(n), shifted);
              else if (vec == 4 && c.vpt == 4) check_fitted_cover<4, 4>(c.team, int(n), shifted);
              else if (vec == 4 && c.vpt == 8) check_fitted_cover<4, 8>(c.team, int(n), shifted);
              else ADD_FAILURE() << "a tile this test does not walk: vpt " << c.vpt;
            }
            if (testing::Test::HasFailure()) return;
          }
        }
      }
    }
  }
  EXPECT_GT(fitted, 1000) << "the sweep met few fitted teams";
}

// The tiles a plan sizes for aligned rows alone can miss a shifted row's
// last elements: the N + VEC - 1 rule is needed (N = 16 bf16 in one
// thread of two vectors holds every aligned row, not one shifted by 1).
TEST(RowGeomShift, AlignedSizingMissesShiftedRows) {
  auto g = core::RowGeom<8, 2>::at(1, 0, 0, 16);
  g.shift(1);
  EXPECT_EQ(g.lo(0), 1);
  EXPECT_EQ(g.valid(0), 8);
  EXPECT_EQ(g.valid(1), 8);  // columns 8..15 of 17: the row's 16th element is past the tile
  EXPECT_FALSE(g.whole);
}

// RawVec's fills: fill_head(lo) sets elements [0, lo), fill_tail(valid)
// elements [valid, VEC), each to the pattern and nothing else.
template <typename T, int VEC>
void check_fills(uint32_t bits) {
  using V = core::RawVec<T, VEC>;
  constexpr int kBits = 8 * int(sizeof(T));
  const uint32_t mask = kBits == 32 ? 0xffffffffu : (1u << kBits) - 1u;
  auto elem = [&](const V& v, int k) {
    const int per = 32 / kBits;
    return (v.w[k / per] >> (kBits * (k % per))) & mask;
  };
  for (int n = 0; n <= VEC; ++n) {
    V h, t;
    for (int k = 0; k < V::kWords; ++k) h.w[k] = t.w[k] = 0x12345678u + 0x01010101u * uint32_t(k);
    const V orig = h;
    h.fill_head(n, bits);
    t.fill_tail(n, bits);
    for (int k = 0; k < VEC; ++k) {
      EXPECT_EQ(elem(h, k), k < n ? (bits & mask) : elem(orig, k)) << "fill_head(" << n << ") element " << k;
      EXPECT_EQ(elem(t, k), k >= n ? (bits & mask) : elem(orig, k)) << "fill_tail(" << n << ") element " << k;
    }
  }
}

TEST(RawVecFill, HeadAndTailSetExactlyTheirElements) {
  check_fills<float, 4>(0xff800000u);
  check_fills<__nv_bfloat16, 8>(0xff80u);
  check_fills<__half, 8>(0xfc00u);
  check_fills<__nv_bfloat16, 8>(0u);
}

// RawVec::load_shifted (the norm forward's weight beside a shifted row):
// elements c - s .. c - s + VEC - 1 of an operand of n elements, zeros
// outside [0, n), for every vector position c of a shifted row (0 ..
// n + VEC - 1) and every shift s, on the GPU (it is device code). Each
// operand sits in its own allocation of exactly n elements, so memcheck
// (the sanitize part, *LoadShifted*) reports any read outside it.
template <typename T, int VEC>
__global__ void load_shifted_kernel(const T* base, int n, int positions, uint32_t* out) {
  using V = core::RawVec<T, VEC>;
  const int k = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (k >= positions * (VEC - 1)) return;
  const int c = (k / (VEC - 1)) * VEC, s = 1 + k % (VEC - 1);
  V v;
  v.load_shifted(base, c, s, n);
  for (int i = 0; i < V::kWords; ++i) out[size_t(k) * V::kWords + i] = v.w[i];
}

template <typename T, int VEC>
void check_load_shifted(int n) {
  SCOPED_TRACE("element bytes " + std::to_string(sizeof(T)) + " VEC " + std::to_string(VEC) + " n " +
               std::to_string(n));
  using V = core::RawVec<T, VEC>;
  constexpr int kBits = 8 * int(sizeof(T));
  const uint32_t elem_mask = kBits == 32 ? 0xffffffffu : 0xffffu;
  std::vector<uint32_t> vals(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) vals[size_t(i)] = (0x9e37u * uint32_t(i + 1)) & elem_mask;
  std::vector<unsigned char> bytes(size_t(n) * sizeof(T));
  for (int i = 0; i < n; ++i)
    for (int b = 0; b < int(sizeof(T)); ++b) bytes[size_t(i) * sizeof(T) + b] = uint8_t(vals[size_t(i)] >> (8 * b));
  const int positions = (n + VEC - 1 + VEC - 1) / VEC;  // a shifted row's vectors: n + VEC - 1 columns
  const int threads = positions * (VEC - 1);
  void* base = nullptr;
  uint32_t* out = nullptr;
  QUACK_ASSERT_CUDA(cudaMalloc(&base, bytes.size()));
  QUACK_ASSERT_CUDA(cudaMalloc(&out, size_t(threads) * V::kWords * 4));
  QUACK_ASSERT_CUDA(cudaMemcpy(base, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  QUACK_ASSERT_CUDA(cudaMemset(out, 0xab, size_t(threads) * V::kWords * 4));
  load_shifted_kernel<T, VEC><<<(threads + 127) / 128, 128>>>(static_cast<const T*>(base), n, positions, out);
  QUACK_ASSERT_CUDA(cudaGetLastError());
  std::vector<uint32_t> got(size_t(threads) * V::kWords);
  QUACK_ASSERT_CUDA(cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost));
  QUACK_ASSERT_CUDA(cudaFree(base));
  QUACK_ASSERT_CUDA(cudaFree(out));
  int bad = 0;
  for (int k = 0; k < threads; ++k) {
    const int c = (k / (VEC - 1)) * VEC, s = 1 + k % (VEC - 1);
    for (int j = 0; j < VEC; ++j) {
      const int per = 32 / kBits, e = c - s + j;
      const uint32_t word = got[size_t(k) * V::kWords + size_t(j / per)];
      const uint32_t g = kBits == 32 ? word : (word >> (kBits * (j % per))) & 0xffffu;
      const uint32_t want = e >= 0 && e < n ? vals[size_t(e)] : 0u;
      if (g != want && ++bad <= 5) ADD_FAILURE() << "c " << c << " s " << s << " lane " << j << ": " << g << ", expected " << want;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(RawVecLoadShifted, EveryPositionAndShiftReadsItsElementsAndZerosOutside) {
  QUACK_REQUIRE_SM90();
  for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1001}) {
    check_load_shifted<__nv_bfloat16, 8>(n);
    check_load_shifted<__half, 8>(n);
    check_load_shifted<float, 4>(n);
    check_load_shifted<float, 8>(n);  // an fp32 weight of 16-bit x
  }
}

}  // namespace
}  // namespace quack
