// Pre-included into device code that names torch's tensor accessors (PackedTensorAccessor32 and
// friends): ATen's accessor header compiles without the rest of torch, and torch::X names the same
// thing as at::X, as torch/types.h has it.
#pragma once
#include <ATen/core/TensorAccessor.h>
namespace torch {
using namespace at;
}
