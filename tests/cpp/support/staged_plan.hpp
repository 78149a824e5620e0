// The tests' reading of staged plans: a plan string's CTA, cluster and tile,
// and the CTA RowTuning::reg_staged_balance fits to a row -- restated here
// from its definition (the fewest whole warps that cover the row at the
// plan's cluster and tile), not taken from src/config.cpp.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace quack {
namespace test {

struct StagedPlan {
  int team = 0, threads = 0, cluster = 0, vpt = 0;
};

// "stage team T thr H cl C vpt V ..." (any spacing): false for any other plan.
inline bool parse_staged_plan(const std::string& plan, StagedPlan* p) {
  return std::sscanf(plan.c_str(), "stage team %d thr %d cl %d vpt %d", &p->team, &p->threads, &p->cluster,
                     &p->vpt) == 4;
}

// The balanced CTA of a row of `nvec` vectors at `cluster` CTAs of `vpt`
// vectors a thread.
inline int64_t balanced_threads(int64_t nvec, int64_t cluster, int64_t vpt) {
  const int64_t need = (nvec + cluster * vpt - 1) / (cluster * vpt);
  return (need + 31) / 32 * 32;
}

}  // namespace test
}  // namespace quack
