// LayerNorm backward register-resident kernels (the RMSNorm kernels' centred
// mode) for Float16 rows: one translation unit per dtype and norm.
#define QUACK_RMSNORM_BWD_TU
#include "quack/ops/rmsnorm_bwd.cuh"

namespace quack {
namespace ops {
QUACK_RMSNORM_BWD_INSTANTIATION(, DType::kFloat16, true)
}  // namespace ops
}  // namespace quack
