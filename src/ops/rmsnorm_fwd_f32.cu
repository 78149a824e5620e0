// RMSNorm forward kernels for x in Float32: one translation unit per dtype
// keeps a clean build parallel and each TU small.
#define QUACK_RMSNORM_FWD_TU
#include "quack/ops/norm_fwd_grid.cuh"
#include "quack/ops/rmsnorm.cuh"

namespace quack {
namespace ops {
QUACK_RMSNORM_FWD_INSTANTIATION(, DType::kFloat32, false)
QUACK_NORM_FWD_GRID_INSTANTIATION(, DType::kFloat32, false)
}  // namespace ops
}  // namespace quack
