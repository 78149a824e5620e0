// The grid forwards' shared machinery (ops/norm_fwd_grid.cuh: RMSNorm and
// LayerNorm; ops/softmax_grid.cuh: softmax and log-softmax). A cooperative
// grid of `groups` groups of `ranks` CTAs of kNormGridCtaThreads threads,
// one CTA an SM (core/config.hpp, NormGridConfig): rank r of every group
// owns the same tile of the row's columns (tile_vecs 16-byte vectors, at
// most kNormGridCtaElems elements a thread); group g takes rows g, g +
// groups, ... in order, R of its rows a step.
//
// GridRowRing: the tiles of a group's rows arrive by bulk copy (core/
// bulk.cuh) in a ring of `stages` shared-memory stages, a row a stage, each
// issued `stages` rows ahead; phase A of a step waits for its rows' stages
// in order, phase B reads the same stages again, and once every thread has
// read them (the step's last barrier) thread 0 refills them with the rows
// `stages` further on. kTiles = 2 (softmax's grid backward: y and dy): a
// stage holds the row's tile of each of two tensors, the second's after
// the first's, both in on the stage's one mbarrier.
//
// grid_fwd_steps: the steps themselves. Step i's phase A reduces its rows'
// tiles and publishes the CTA's words (core::GridExchange, one thread);
// `lag` steps later phase B collects step i's words of every rank (the
// loads issued at the top of the step, under phase A, where `early`:
// RowTuning::fwd_grid_prefetch), combines them and writes the outputs from
// the stages. x crosses HBM once and the outputs once.
#pragma once

#include <cstdint>

#include "quack/core/bulk.cuh"
#include "quack/core/config.hpp"
#include "quack/core/grid_exchange.cuh"
#include "quack/core/row_tile.cuh"
#include "quack/core/vec.cuh"

namespace quack {
namespace core {

// The last thread publishes and its warp loads no collected word (as the
// grid backward's: a layout kept from when a publication waited on a fence).
constexpr int kGridFwdPublisher = kNormGridCtaThreads - 1;
constexpr int kGridFwdLoaders = kGridFwdPublisher & ~31;
static_assert(8 * kNormGridStagesMax <= int(kNormGridValsOffset - kNormGridBarOffset),
              "grid forward: the mbarriers' room");

// The whole CTA, once, for a ring of `stages` stages (mbarriers from bar0,
// 8 bytes each): thread 0 initialises the barriers, then, after a barrier,
// issues the group's first rows, issue(j, j) for j < min(stages, rows_here)
// (the grid forwards' ring and the grid backward's, ops/rmsnorm_bwd.cuh).
template <class Issue>
__device__ __forceinline__ void grid_ring_start(int tid, int stages, int rows_here, uint32_t bar0, Issue&& issue) {
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(bar0 + 8 * uint32_t(s), 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0)
    for (int j = 0; j < min(stages, rows_here); ++j) issue(j, j);
}

template <typename T, int kTiles = 1>
struct GridRowRing {
  static_assert(kTiles == 1 || kTiles == 2, "a stage holds one or two tensors' tiles");
  static constexpr int VEC = 16 / sizeof(T);
  static constexpr int TH = kNormGridCtaThreads;
  static constexpr int KV = kNormGridCtaElems / VEC;  // vectors a thread
  using V = RawVec<T, VEC>;

  const T* x;
  int64_t x_stride;
  const T* x2;  // kTiles = 2: the second tensor (its tile after x's in each stage)
  int64_t x2_stride;
  int ranks, rank, tid;
  int64_t group, groups, cols, nfull;
  int64_t tile, vb, ve;  // vectors a rank; this rank's [vb, ve) of the row's
  uint32_t bar0, stage0, tile_bytes, bulk_bytes;
  int stages, rows_here;
  // This thread's vectors of the tile (GridTileVecs; past the tile: zero).
  // Every thread of every rank but the last has all KV in the stage
  // (`full`): the hot path, with no test a vector.
  int nin, nval, part;
  bool full;
  // Phase A's next stage and its parity; phase B's next stage.
  int sa, sb;
  uint32_t pa;

  // The layout of the CTA `blockIdx.x` of a grid of `ranks`-CTA groups
  // (rows: the tensor's; stages: the ring's, after `header` bytes of
  // `smem`: norm_fwd_grid_header of the step's words a rank, or with two
  // tiles kNormGridHeader; x2: kTiles = 2's second tensor, whose rows have
  // x's columns).
  __device__ __forceinline__ static GridRowRing make(unsigned char* smem, const T* x, int64_t x_stride, int64_t rows,
                                                     int64_t cols, int ranks, int64_t groups, int64_t tile,
                                                     int stages, size_t header, const T* x2 = nullptr,
                                                     int64_t x2_stride = 0) {
    GridRowRing g;
    g.x = x;
    g.x_stride = x_stride;
    g.x2 = x2;
    g.x2_stride = x2_stride;
    g.ranks = ranks;
    g.rank = int(blockIdx.x) % ranks;
    g.tid = int(threadIdx.x);
    g.group = int64_t(blockIdx.x) / ranks;
    g.groups = groups;
    g.cols = cols;
    const int64_t nvec = (cols + VEC - 1) / VEC;
    g.nfull = cols / VEC;
    g.tile = tile;
    g.vb = int64_t(g.rank) * tile;
    g.ve = min(nvec, g.vb + tile);
    const int64_t bulk_vecs = max(int64_t(0), min(g.ve, g.nfull) - g.vb);  // whole vectors, copied in bulk
    g.bar0 = smem_addr(smem) + kNormGridBarOffset;
    g.stage0 = smem_addr(smem) + uint32_t(header);
    g.tile_bytes = uint32_t(tile) * 16;
    g.bulk_bytes = uint32_t(bulk_vecs) * 16;
    g.stages = stages;
    // Rows of this group (fewer than 2^31: choose_norm_fwd_grid_config).
    g.rows_here = g.group < rows ? int((rows - g.group + groups - 1) / groups) : 0;
    // (The first version tested each vector's 64-bit position a step: 524
    // instructions a thread a step for 16 elements, the step issue-bound
    // at 0.39 a scheduler-cycle; fp32 RMSNorm 1M 70.8% of copy; H200, ncu,
    // 36328c7.)
    const auto tv = GridTileVecs<KV, TH>::make(g.tid, int(bulk_vecs), int(g.ve - g.vb), int(cols - g.nfull * VEC));
    g.nin = tv.nin;
    g.nval = tv.nval;
    g.part = tv.part;
    g.full = tv.nin == KV;
    g.sa = g.sb = 0;
    g.pa = 0;
    return g;
  }

  __device__ __forceinline__ int64_t row(int j) const { return group + int64_t(j) * groups; }
  // Elements of vector k inside the row (the partial paths).
  __device__ __forceinline__ int valid_at(int k) const { return k < nin ? VEC : (k < nval ? part : 0); }

  // Row `row` of tile kTile's tensor (0: x, 1: x2).
  template <int kTile>
  __device__ __forceinline__ const T* row_ptr(int64_t row) const {
    if constexpr (kTile == 0) return x + row * x_stride;
    else return x2 + row * x2_stride;
  }

  // Stage s's tile `t` (0: x's, 1: x2's).
  __device__ __forceinline__ uint32_t tile_at(int s, int t) const {
    return stage0 + uint32_t(s * kTiles + t) * tile_bytes;
  }

  // Row j of this group into stage s (thread 0).
  __device__ __forceinline__ void issue(int j, int s) const {
    const uint32_t bar = bar0 + 8 * uint32_t(s);
    mbar_arrive_expect_tx(bar, kTiles * bulk_bytes);
    if (bulk_bytes > 0) {
      bulk_g2s(tile_at(s, 0), row_ptr<0>(row(j)) + vb * VEC, bulk_bytes, bar);
      if constexpr (kTiles == 2) bulk_g2s(tile_at(s, 1), row_ptr<1>(row(j)) + vb * VEC, bulk_bytes, bar);
    }
  }

  // The whole CTA, once: the stages' barriers, then the first rows issued.
  __device__ __forceinline__ void start() const {
    grid_ring_start(tid, stages, rows_here, bar0, [&](int j, int s) { issue(j, s); });
  }

  // Phase A: the next row's stage, once its bytes have landed.
  __device__ __forceinline__ int wait_next() {
    const int s = sa;
    mbar_wait(bar0 + 8 * uint32_t(s), pa);
    if (++sa == stages) sa = 0, pa ^= 1u;
    return s;
  }
  // Phase B: the next row's stage (phase A has waited for it).
  __device__ __forceinline__ int next_written() {
    const int s = sb;
    if (++sb == stages) sb = 0;
    return s;
  }

  // Row `row`'s vectors of this thread from stage s, of tile kTile (0: x,
  // 1: x2) (zero past the tile; the row's partial last vector from global
  // memory).
  template <int kTile = 0>
  __device__ __forceinline__ void load_tile(bool whole, int s, int64_t row, V (&xv)[KV]) const {
    static_assert(kTile < kTiles, "a tile of the stage");
    const uint32_t a = tile_at(s, kTile) + uint32_t(tid) * 16u;
#pragma unroll
    for (int k = 0; k < KV; ++k) {
      if (whole) {
        lds<16>(a + uint32_t(k * TH * 16), xv[k].w);
      } else {
        xv[k].zero();
        if (k < nin) lds<16>(a + uint32_t(k * TH * 16), xv[k].w);
        else if (k < nval) xv[k].load_partial(row_ptr<kTile>(row) + nfull * VEC, part);
      }
    }
  }

  // Row `row`'s outputs from stage s: f(k, v) turns vector k's elements
  // (widened to fp32, in place) into its outputs, stored at orow (this
  // thread's first column of the row) + k * TH * VEC; whole: every vector
  // of this thread lies in the stage (else the partial last vector is
  // stored in part and vectors past the tile not at all). kTiles = 2:
  // f(k, v, v2), v2 the same elements of x2's tile.
  template <class F>
  __device__ __forceinline__ void write_tile(bool whole, int s, int64_t row, T* orow, F&& f) const {
    V xv[KV];
    load_tile(whole, s, row, xv);
    V x2v[kTiles == 2 ? KV : 1];
    if constexpr (kTiles == 2) load_tile<1>(whole, s, row, x2v);
#pragma unroll
    for (int k = 0; k < KV; ++k) {
      float v[VEC];
      xv[k].widen(v);
      if constexpr (kTiles == 2) {
        float v2[VEC];
        x2v[k].widen(v2);
        f(k, v, v2);
      } else {
        f(k, v);
      }
      V o;
      o.narrow(v);
      if (whole) {
        o.store(orow + k * TH * VEC);
      } else {
        if (k < nin) o.store(orow + k * TH * VEC);
        else if (k < nval) o.store_partial(orow + k * TH * VEC, part);
      }
    }
  }

  // After a step's last barrier (every thread has read its R rows' stages):
  // row j sat in stage j % stages, which takes row j + stages (thread 0).
  __device__ __forceinline__ void refill(int q, int R) const {
    if (tid == 0 && q * R + stages < rows_here) {
      fence_proxy_async_smem();
      for (int r = 0; r < R; ++r) {
        const int j = q * R + r;
        if (j + stages < rows_here) issue(j + stages, j % stages);
      }
    }
  }
};

// Sums over VEC independent chains, then a fixed tree (the same bits in
// every run): the chains hide the FMA latency a 16-long chain exposed.
template <int VEC>
__device__ __forceinline__ float grid_tree(float (&a)[VEC]) {
#pragma unroll
  for (int h = VEC / 2; h > 0; h /= 2)
#pragma unroll
    for (int e = 0; e < h; ++e) a[e] += a[e + h];
  return a[0];
}

// Host: the grid fields of a grid kernel's parameters (RMSNormFwdParams,
// SoftmaxGridParams) from its configuration, the caller's workspace and
// RowTuning::fwd_grid_prefetch.
template <class P>
inline void set_grid_params(P& gp, const NormGridConfig& g, void* workspace, bool prefetch) {
  gp.exchange = static_cast<uint64_t*>(workspace);
  gp.grid_ranks = g.ranks;
  gp.grid_groups = g.groups;
  gp.grid_lag = g.lag;
  gp.grid_stages = g.stages;
  gp.grid_tile_vecs = g.tile_vecs;
  gp.grid_steps = g.steps;
  gp.grid_prefetch = prefetch ? 1 : 0;
}

// The steps of a group (R rows each), `lag` steps between a step's phase A
// and its phase B: phase_a(i, words) reduces step i's rows into the CTA's
// Ex::kWords words (every thread; the publisher's are published),
// phase_b(q) combines step q's collected words (in `vals`, [rank][word],
// after one barrier) and writes its rows. The collect's words, all of a
// step's in flight at once: kGather a loader.
template <int R, class Ring, class Ex, class PhaseA, class PhaseB>
__device__ __forceinline__ void grid_fwd_steps(Ring& ring, const Ex& ex, float* vals, int lag, bool early,
                                               PhaseA&& phase_a, PhaseB&& phase_b) {
  constexpr int kWords = Ex::kWords;
  constexpr int kGather = (kNormGridMaxRanks * kWords + kGridFwdLoaders - 1) / kGridFwdLoaders;
  const int rows_here = ring.rows_here;
  const int steps = (rows_here + R - 1) / R;
  for (int i = 0; i < steps + lag && rows_here > 0; ++i) {
    const int q = i - lag;
    uint64_t pending[kGather];
    if (early && q >= 0) ex.template gather_issue<kGather>(q, kGridFwdLoaders, pending);
    if (i < steps) {
      float words[kWords];
      phase_a(i, words);
      if (ring.tid == kGridFwdPublisher) ex.publish(i, Ex::Words::get(words));
    }
    if (q >= 0) {
      if (!early) ex.template gather_issue<kGather>(q, kGridFwdLoaders, pending);
      ex.template gather_finish<kGather>(q, pending, vals, kGridFwdLoaders);  // one barrier
      phase_b(q);
      __syncthreads();  // every thread has read the step's stages
      ring.refill(q, R);
    }
  }
}

}  // namespace core
}  // namespace quack
