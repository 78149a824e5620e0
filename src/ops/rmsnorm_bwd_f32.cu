// RMSNorm backward register-resident kernels for Float32 rows: one
// translation unit per dtype keeps a clean build parallel and each TU small.
#define QUACK_RMSNORM_BWD_TU
#include "quack/ops/rmsnorm_bwd.cuh"

namespace quack {
namespace ops {
QUACK_RMSNORM_BWD_INSTANTIATION(, DType::kFloat32, false)
}  // namespace ops
}  // namespace quack
