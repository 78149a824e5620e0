// Softmax kernels for Float32 rows: one translation unit per dtype keeps a clean
// build parallel and each TU small.
#define QUACK_SOFTMAX_TU
#include "quack/ops/softmax.cuh"
#include "quack/ops/softmax_grid.cuh"

namespace quack {
namespace ops {
QUACK_SOFTMAX_INSTANTIATION(, DType::kFloat32)
QUACK_SOFTMAX_GRID_INSTANTIATION(, DType::kFloat32)
}  // namespace ops
}  // namespace quack
