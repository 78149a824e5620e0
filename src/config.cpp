// The row-kernel configuration heuristic. Every constant below is a tuning
// threshold; each cites the measurement that set it (bench/results/).
#include "quack/core/config.hpp"

#include <algorithm>

namespace quack {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t pow2_ceil(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Staged bytes above which a row is split over a cluster. 64 KB keeps at
// least three CTAs resident per SM (228 KB), so one CTA's loads overlap
// another's reduction and stores.
// Measured: bench/results/2026-11-30-rmsnorm-fwd.md (H200, N sweep).
constexpr int64_t kCtaTargetBytes = 64 * 1024;
// Staged bytes per CTA beyond which a row is chunked (two passes over HBM):
// what is left of the opt-in 227 KB after scratch, capped at 200 KB so a
// 16-CTA cluster still fits where the GPCs leave room.
constexpr int64_t kCtaMaxBytes = 200 * 1024;
// Vectors (16 B of x) per thread per row: 4 puts 64 B per thread in flight,
// enough with >= 1024 threads per SM to cover HBM latency.
constexpr int64_t kVptTarget = 4;
// Threads per CTA when several sub-warp teams share a CTA.
constexpr int kSmallTeamThreads = 256;
// A sub-warp team stages this many rows at once so that a thread keeps at
// least kVptTarget vectors in flight even when a row is only a few vectors.
constexpr int kMaxRowsPerTeam = 4;

}  // namespace

RowConfig choose_row_config(const RowProblem& prob, const DeviceLimits& lim) {
  RowConfig c;
  const int64_t cols = std::max<int64_t>(prob.cols, 1);
  c.vec = 16 / prob.x_elem_bytes;
  const int64_t nvec = ceil_div(cols, c.vec);
  const int64_t vec_bytes = int64_t(c.vec) * prob.staged_elem_bytes;

  // 1. Cluster: split the row while a CTA's share is above the target.
  int cluster = 1;
  while (cluster < lim.max_cluster && ceil_div(nvec, cluster) * vec_bytes > kCtaTargetBytes)
    cluster *= 2;
  cluster = std::min(cluster, lim.max_cluster);
  c.cluster = cluster;
  c.seg_vecs = ceil_div(nvec, cluster);

  // 2. Chunks: a share above the on-chip cap is staged in several passes.
  const int64_t cap = std::min<int64_t>(
      kCtaMaxBytes, int64_t(lim.max_smem_per_block) - int64_t(prob.scratch_bytes));
  c.chunks = int(ceil_div(c.seg_vecs * vec_bytes, cap));
  const int64_t chunk_need = ceil_div(c.seg_vecs, c.chunks);

  // 3. Team size and vectors per thread.
  int64_t team = pow2_ceil(ceil_div(chunk_need, kVptTarget));
  team = std::min<int64_t>(team, 1024);
  if (cluster > 1 || c.chunks > 1) team = std::max<int64_t>(team, 32);
  c.team = int(team);
  c.vpt = int(ceil_div(chunk_need, team));

  // 4. CTA shape: teams of up to one warp share a CTA; larger teams own it.
  if (c.team <= 32 && cluster == 1 && c.chunks == 1) {
    c.threads = kSmallTeamThreads;
    c.rows_per_team = int(std::min<int64_t>(kMaxRowsPerTeam, ceil_div(kVptTarget, c.vpt)));
  } else {
    c.threads = c.team;
    c.rows_per_team = 1;
  }
  c.smem_bytes = size_t(c.threads) * c.rows_per_team * c.vpt * vec_bytes + prob.scratch_bytes;
  const int64_t row_blocks = ceil_div(prob.rows, c.rows_per_cta());
  c.grid = row_blocks * c.cluster;
  return c;
}

const char* check_row_config(const RowConfig& c, const RowProblem& prob,
                             const DeviceLimits& lim) {
  const int64_t nvec = ceil_div(std::max<int64_t>(prob.cols, 1), c.vec);
  if (c.vec * prob.x_elem_bytes != 16) return "vector is not 16 bytes of x";
  if (c.team < 1 || c.team > 1024 || (c.team & (c.team - 1))) return "team is not a power of two in [1, 1024]";
  if (c.threads < c.team || c.threads > 1024 || c.threads % c.team) return "threads is not a multiple of team in [team, 1024]";
  if (c.threads % 32) return "threads is not a whole number of warps";
  if (c.cluster < 1 || c.cluster > lim.max_cluster) return "cluster outside [1, max_cluster]";
  if (c.cluster > 1 && c.threads != c.team) return "a clustered row must own whole CTAs";
  if (c.chunks > 1 && c.threads != c.team) return "a chunked row must own whole CTAs";
  if (c.threads != c.team && c.team > 32) return "a team larger than a warp must own its CTA";
  if (c.rows_per_team < 1 || (c.rows_per_team > 1 && c.team > 32)) return "rows_per_team > 1 needs a team of at most a warp";
  if (c.vpt < 1) return "vpt < 1";
  if (c.seg_vecs * c.cluster < nvec) return "cluster segments do not cover the row";
  if (c.chunk_vecs() * c.chunks < c.seg_vecs) return "chunks do not cover the segment";
  if (c.smem_bytes > lim.max_smem_per_block) return "shared memory exceeds the per-CTA limit";
  if (c.grid < 0 || c.grid > int64_t(0x7fffffff)) return "grid exceeds gridDim.x";
  if (c.grid % c.cluster) return "grid is not a whole number of clusters";
  if (c.grid / c.cluster * c.rows_per_cta() < prob.rows) return "grid does not cover the rows";
  return nullptr;
}

}  // namespace quack
