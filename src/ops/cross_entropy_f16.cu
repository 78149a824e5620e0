// Cross-entropy kernels for Float16 logits: one translation unit per dtype keeps a
// clean build parallel and each TU small.
#define QUACK_CE_TU
#include "quack/ops/cross_entropy.cuh"

namespace quack {
namespace ops {
QUACK_CE_INSTANTIATION(, DType::kFloat16)
}  // namespace ops
}  // namespace quack
