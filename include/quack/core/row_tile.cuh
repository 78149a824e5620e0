// Register-resident row kernels' building blocks: where a thread's vectors of
// a row lie, loading and storing them with predicated tails, and the row
// reduction (team, then cluster). A thread holds VPT vectors of VEC elements
// (16 bytes of the row's primary tensor each); vector i of thread t in
// cluster rank r starts at column ((r * VPT + i) * team + t) * VEC, so a warp
// touches consecutive 16-byte pieces.
//
// A shifted row (shift(): its first element inside a 16-byte vector, as
// where the row pitch is not a whole number of vectors) is walked from the
// vector that holds that element: the row pointer passed to the loads and
// stores is s elements before the row (s = the element's offset in its
// vector), the row covers cols + s columns, and the first s of them --
// the head of vector 0 of the thread at column 0 -- are neither read nor
// written.
//
// Used by the softmax kernels; the RMSNorm register kernel predates it and
// spells the same geometry out inline.
#pragma once

#include <cstdint>

#include "quack/core/config.hpp"
#include "quack/core/reduce.cuh"
#include "quack/core/vec.cuh"

namespace quack {
namespace core {

// A thread's team in a CTA of `threads` threads whose teams start 1 <<
// shift threads apart (the RMSNorm register kernel's, shift = ceil(log2
// team)): teams of a power of two, several a CTA, or one team of whole
// warps fitted to its row (fewer than 1 << shift threads: RowTuning::
// norm_fit_team), which owns its CTA. team_id, t: the
// thread's team and its index in it; teams: the CTA's teams.
struct TeamSlot {
  int team_id, t, teams;
  __host__ __device__ __forceinline__ static TeamSlot of(int tid, int shift, unsigned threads) {
    return {tid >> shift, tid & ((1 << shift) - 1), int(threads + (1u << shift) - 1) >> shift};
  }
};

// The elements before a row's first in the 16-byte vector that holds it
// (kVecIO; else 0): the row's vectors start that far before it
// (RowGeom::shift's s).
template <typename T, bool kVecIO = true>
__device__ __forceinline__ int row_shift(const T* row) {
  return kVecIO ? vector_offset(reinterpret_cast<uintptr_t>(row), int(sizeof(T))) : 0;
}

template <int VEC, int VPT>
struct RowGeom {
  int team;      // threads per row in the CTA
  int t;         // this thread's index in its team
  int team_id;   // this thread's team in the CTA
  int teams;     // teams per CTA
  int crank;     // CTA rank in the cluster (0 unclustered)
  int cols;      // N
  int col_step;  // columns between a thread's consecutive vectors
  int col0;      // this thread's first column
  bool whole;    // every vector of this thread lies inside the row
  int head;      // elements before the row at the front of this thread's vector 0 (shift(); else 0)

  // Values are made opaque to the optimiser: in a persistent row loop it would
  // otherwise keep every row-invariant address and predicate live across
  // rows, and spill (see rmsnorm_fwd_reg_kernel).
  // An unclustered team is a register-row team (RegRowConfig): a power of
  // two, or one team of whole warps fitted to its row that owns its CTA
  // (TeamSlot's case), so shifts by ceil(log2 team) serve where two integer
  // divisions (~40 dependent instructions, a MUFU.RCP among them) stood
  // between the kernel's start and its first load, which decode-sized
  // calls wait on (bench_latency's small batches:
  // bench/results/2026-12-06-latency-dd5bc91-h100.md). Clustered rows
  // (persistent, throughput-bound) keep the divisions: with the shifts and
  // the rank from %cluster_ctarank both, ptxas spilled 4-24 bytes in the
  // clustered fp32 norm backward and 16-bit softmax backward tiles. So do
  // callers that pass shifts = false (the norm backward's persistent
  // register rows: its unclustered fp32 LayerNorm 4-vector tile spilled 4
  // bytes with them).
  __device__ __forceinline__ static RowGeom make(int team_param, int cluster, int64_t cols_param, bool clustered,
                                                 bool shifts = true) {
    RowGeom g;
    int team = team_param, tid = int(threadIdx.x);
    asm volatile("" : "+r"(team), "+r"(tid));
    g.team = team;
    if (clustered || !shifts) {
      g.team_id = tid / team;
      g.t = tid % team;
      g.teams = int(blockDim.x) / team;
      g.crank = clustered ? int(blockIdx.x % unsigned(cluster)) : 0;
    } else {
      const TeamSlot slot = TeamSlot::of(tid, 32 - __clz(team - 1), blockDim.x);
      g.team_id = slot.team_id;
      g.t = slot.t;
      g.teams = slot.teams;
      g.crank = 0;
    }
    g.cols = int(cols_param);
    g.col_step = team * VEC;
    // (first_col, spelled out: through the call, nvcc 13.0 schedules the
    // aligned kernels differently -- ce_staged_kernel 3160 -> 3168
    // instructions -- for the same arithmetic)
    g.col0 = (g.crank * VPT * team + g.t) * VEC;
    g.head = 0;
    g.whole = g.ends_inside();
    return g;
  }
  // A lean row (the lean kernels: RegRowConfig::lean): one team owning its
  // CTA, one row a CTA, and the row exactly the tile (cols == VPT * team *
  // VEC), so every vector of every thread lies inside it -- whole is true
  // where the compiler sees it, and the bounds, tails and their branches
  // fold away.
  __device__ __forceinline__ static RowGeom make_lean(int team, int64_t cols_param) {
    RowGeom g;
    const int tid = int(threadIdx.x);
    g.team = team;
    g.t = tid;
    g.team_id = 0;
    g.teams = 1;
    g.crank = 0;
    g.cols = int(cols_param);
    g.col_step = team * VEC;
    g.col0 = tid * VEC;
    g.head = 0;
    g.whole = true;
    return g;
  }
  // An unclustered row of `team` threads, `teams` a CTA, team_log2 =
  // ceil(log2 team): the same layout, with shifts where make divides by the
  // run-time team (two integer divisions, ~40 instructions, where a
  // persistent kernel rebuilds the geometry every row). The team is a power
  // of two, or (TeamSlot's case) one team of whole warps fitted to its row
  // that owns its CTA (RowTuning::bwd_pipe_fit_team), whose threads all
  // fall below 2^team_log2. The launch passes team and teams (computed
  // here from the shift, 1 << team_log2 and blockDim.x >> team_log2, the
  // pipelined kernels ran ~25% more instructions: e3e07fe -> fc2d24d).
  // A clustered row (team == blockDim.x, a power of two) passes its CTA's
  // rank.
  __device__ __forceinline__ static RowGeom make_pow2(int team_log2, int team, int teams, int64_t cols_param,
                                                      int crank = 0) {
    RowGeom g;
    int lg = team_log2, tid = int(threadIdx.x);
    asm volatile("" : "+r"(lg), "+r"(tid), "+r"(team), "+r"(teams));
    g.team = team;
    g.team_id = tid >> lg;
    g.t = tid & ((1 << lg) - 1);
    g.teams = teams;
    g.crank = crank;
    g.cols = int(cols_param);
    g.col_step = g.team * VEC;
    g.col0 = (((crank * VPT) << lg) + g.t) * VEC;  // first_col, with the shift
    g.head = 0;
    g.whole = g.ends_inside();
    return g;
  }
  // The row shifted by s elements (0 <= s < VEC; see the top): the caller
  // passes its row pointers s elements early. The thread holding column 0
  // is not whole when s > 0 (its vector 0 is masked by head).
  __host__ __device__ __forceinline__ void shift(int s) {
    cols += s;
    head = col0 == 0 ? s : 0;
    whole = head == 0 && ends_inside();
  }
  // Thread t of a team of `team` in cluster rank crank, rows of `cols`
  // (make's layout without the thread's registers: host tests of the
  // geometry; the kernels use make / make_pow2).
  __host__ __device__ static RowGeom at(int team, int t, int crank, int cols) {
    RowGeom g;
    g.team = team;
    g.t = t;
    g.team_id = 0;
    g.teams = 1;
    g.crank = crank;
    g.cols = cols;
    g.col_step = team * VEC;
    g.col0 = first_col(team, t, crank);
    g.head = 0;
    g.whole = g.ends_inside();
    return g;
  }
  // The first column of thread t of a team of `team` in cluster rank crank.
  __host__ __device__ __forceinline__ static int first_col(int team, int t, int crank) {
    return (crank * VPT * team + t) * VEC;
  }
  __host__ __device__ __forceinline__ int col(int i) const { return col0 + i * col_step; }
  // Vector i lies wholly inside the row's columns (a shifted row's: its
  // head vector too, masked by lo()).
  __host__ __device__ __forceinline__ bool inside(int i) const { return col(i) + VEC <= cols; }
  // This thread's last vector ends inside the row.
  __host__ __device__ __forceinline__ bool ends_inside() const { return inside(VPT - 1); }
  // Elements of vector i before the row: head for vector 0, else 0.
  __host__ __device__ __forceinline__ int lo(int i) const { return i == 0 ? head : 0; }
  // Elements of vector i inside the row: VEC, fewer for the row's last
  // partial vector, 0 past the end.
  __host__ __device__ __forceinline__ int valid(int i) const {
    const int c = col(i);
    return whole ? VEC : (c >= cols ? 0 : (cols - c < VEC ? cols - c : VEC));
  }
  // Loads vector i of `row` (zeros outside the row: past its end, and in
  // a shifted row before its start -- its head is loaded with the vector
  // and zeroed: the 16-byte-aligned segment that holds the row's first
  // element, so on its page, and inside any allocation aligned to 16 bytes
  // or more (cudaMalloc's are to 256). Those head bytes belong to whatever
  // precedes the row -- the previous row's tail or pitch padding -- and
  // are never used: an uninitialised gap there is what initcheck reports
  // as a read, not an error in a result.)
  template <typename T>
  __device__ __forceinline__ void load(RawVec<T, VEC>& v, const T* row, int i) const {
    const int n = valid(i), l = lo(i);
    if (n == VEC) {
      v.load(row + col(i));
      if (l > 0) v.fill_head(l, 0u);
    } else if (n > l) {
      v.load_range(row + col(i), l, n);
    } else {
      v.zero();
    }
  }
  // Stores the row's elements of vector i.
  template <typename T>
  __device__ __forceinline__ void store(const RawVec<T, VEC>& v, T* row, int i) const {
    const int n = valid(i), l = lo(i);
    if (n == VEC && l == 0) v.store(row + col(i));
    else if (n > l) v.store_range(row + col(i), l, n);
  }
  // Loads this thread's vectors kFirst .. kFirst + N - 1 of `row` into
  // v[0 .. N): where every vector lies inside the row (whole), straight
  // from the row pointer formed once; otherwise each by load() (zeros past
  // the row's end).
  template <int kFirst, int N, typename T>
  __device__ __forceinline__ void load_vecs(RawVec<T, VEC> (&v)[N], const T* row) const {
    static_assert(kFirst >= 0 && kFirst + N <= VPT, "load_vecs: vectors beyond the tile");
    if (whole) {
      const T* r0 = row + col0;
#pragma unroll
      for (int k = 0; k < N; ++k) v[k].load(r0 + (kFirst + k) * col_step);
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) load(v[k], row, kFirst + k);
    }
  }
  // Shared-memory address of this thread's vector i in the staged kernels'
  // layout (slot0: its vector 0; vector i at slot0 + i * team * 16, each
  // slot written and read by its thread alone).
  __device__ __forceinline__ uint32_t slot(uint32_t slot0, int i) const { return slot0 + uint32_t(i * team) * 16; }
  // Issues cp.async of this thread's first kCount vectors of `row` into
  // their slots (slot()), unrolled by kUnroll.
  // kWhole (every vector inside the row): 16-byte copies from the row
  // pointer formed once; otherwise zeros outside the row (past its end by
  // zero fill; a shifted row's head vector is loaded by the thread, its
  // head zeroed, and stored) -- the caller fills what its padding needs.
  // The caller commits and waits.
  template <bool kWhole, int kUnroll, int kCount = VPT, typename T>
  __device__ __forceinline__ void stage_async(uint32_t slot0, const T* row) const {
    static_assert(kCount >= 1 && kCount <= VPT, "stage_async: vectors beyond the tile");
    const T* r0 = row + col0;
#pragma unroll kUnroll
    for (int i = 0; i < kCount; ++i) {
      const uint32_t dst = slot(slot0, i);
      if constexpr (kWhole) {
        cp_async16(dst, r0 + i * col_step);
      } else {
        const int n = valid(i);
        if (lo(i) > 0) {
          RawVec<T, VEC> v;
          load(v, row, i);
          sts16(dst, v.w);
        } else {
          cp_async_zfill<16>(dst, row + (n > 0 ? col(i) : 0), n * int(sizeof(T)));
        }
      }
    }
  }
};

// A row's reduction: over the team (a warp or sub-warp, or the whole CTA),
// then, when clustered, over the cluster through ClusterExchange. Scratch:
// scratch_bytes() of shared memory, 16-byte aligned.
template <class Op, bool kCluster>
struct RowReduce {
  using T = typename Op::T;
  static constexpr uint32_t kClusterOffset = uint32_t((RowReducer<Op>::scratch_bytes() + 15) / 16 * 16);
  __host__ __device__ static constexpr size_t scratch_bytes() {
    return kClusterOffset + ClusterExchange<Op>::scratch_bytes();
  }

  unsigned char* scratch;
  ClusterExchange<Op> cl;

  // At kernel start, every thread.
  __device__ __forceinline__ void start(unsigned char* smem) {
    scratch = smem;
    if constexpr (kCluster) cl.start(smem + kClusterOffset);
  }
  // Every thread of the CTA (of every CTA of the cluster), once per row block.
  // Clustered rows own their CTAs (team == blockDim.x).
  __device__ __forceinline__ T reduce(T v, int team, int cluster, int crank) {
    if constexpr (kCluster) {
      v = block_reduce<Op>(v, reinterpret_cast<T*>(scratch) + 32 * (cl.count & 1));
      return cl.reduce(v, cluster, crank);
    } else {
      RowReducer<Op> red(scratch, team, 1);
      return red.reduce(v);
    }
  }
  // A lean row's reduction (one team owning its CTA, one row a CTA): the
  // CTA's, with no test of the team's size (block_reduce_narrow).
  __device__ __forceinline__ T reduce_cta(T v) {
    static_assert(!kCluster, "lean rows are unclustered");
    return block_reduce_narrow<Op>(v, reinterpret_cast<T*>(scratch));
  }
  // Before exit, every thread.
  __device__ __forceinline__ void finish() {
    if constexpr (kCluster) cl.finish();
  }
};

// A grid kernel's thread (ops/norm_fwd_grid.cuh, ops/rmsnorm_bwd.cuh) in
// its rank's tile of a row: vectors k = 0..KV-1 at tile offsets
// tid + k * TH. The first nin lie in the shared-memory stage (whole vectors,
// bulk-copied: in_stage of the tile's vectors); where nval > nin the next is
// the row's partial last vector (`part` elements, read from global); the
// rest are past the tile (in_tile vectors). Counted once, so that a vector
// costs a 32-bit test instead of its 64-bit position.
template <int KV, int TH>
struct GridTileVecs {
  int nin, nval, part;
  __device__ __forceinline__ static GridTileVecs make(int tid, int in_stage, int in_tile, int part) {
    auto count = [&](int lim) { return lim <= tid ? 0 : min(KV, (lim - tid + TH - 1) / TH); };
    return {count(in_stage), count(in_tile), part};
  }
  // The counts, opaque to the optimiser: for the partial paths, whose
  // per-vector tests (k < nin, k < nval) ptxas otherwise hoists out of the
  // row loop as 2 * KV predicates held for the whole kernel -- past the 7
  // predicate registers, moved to general ones and spilled (the grid
  // backward, ptxas -v). Re-derived at each use, they cost the hot path
  // nothing.
  __device__ __forceinline__ GridTileVecs fresh() const {
    return {fresh_i32(nin), fresh_i32(nval), part};
  }
};

// Runs f(row_block) for this CTA's row blocks: its own one (one CTA or
// cluster per row block), or, kCluster, every grid-th one from its cluster's
// (a persistent grid of clusters).
template <bool kCluster, class F>
__device__ __forceinline__ void for_row_blocks(int64_t row_blocks, int cluster, F&& f) {
  if constexpr (kCluster) {
    const int64_t grid_blocks = gridDim.x / unsigned(cluster);
    for (int64_t blk = blockIdx.x / unsigned(cluster); blk < row_blocks; blk += grid_blocks) f(blk);
  } else {
    f(int64_t(blockIdx.x));
  }
}

}  // namespace core
}  // namespace quack
