// LayerNorm forward kernels (the RMSNorm kernels' centred mode) for x in
// Float16: one translation unit per dtype and norm keeps a clean build
// parallel and each TU small.
#define QUACK_RMSNORM_FWD_TU
#include "quack/ops/norm_fwd_grid.cuh"
#include "quack/ops/rmsnorm.cuh"

namespace quack {
namespace ops {
QUACK_RMSNORM_FWD_INSTANTIATION(, DType::kFloat16, true)
QUACK_NORM_FWD_GRID_INSTANTIATION(, DType::kFloat16, true)
}  // namespace ops
}  // namespace quack
