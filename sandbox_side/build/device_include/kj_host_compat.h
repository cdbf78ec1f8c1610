// Included first in the host half of cuda.cu, which the fast build compiles as C++ rather than
// through nvcc. Torch declares RestrictPtrTraits only `#if defined(__CUDACC__)`; this declares it as
// nvcc's host pass sees it, with torch's own definition. Should a torch version place it elsewhere,
// the launchers' symbols stop matching the device half's and the fast build falls back (fast.py).
#pragma once
#include <ATen/core/TensorAccessor.h>
#if __has_include(<torch/headeronly/core/TensorAccessor.h>)
namespace torch::headeronly {
template <typename T>
struct RestrictPtrTraits {
  typedef T* __restrict__ PtrType;
};
}  // namespace torch::headeronly
namespace at {
using torch::headeronly::RestrictPtrTraits;
}
#else
namespace at {
template <typename T>
struct RestrictPtrTraits {
  typedef T* __restrict__ PtrType;
};
}  // namespace at
#endif
