"""CPU mode for Numba candidates: Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, set by the
supervisor on CPU) made to take torch CPU tensors the way the GPU target takes CUDA tensors.

The convention (docs/numba.md): write the candidate for the GPU and pass torch
tensors to the kernel, directly or through `numba.cuda.as_cuda_array(t)` (CUDA tensors expose
`__cuda_array_interface__`). CPU tensors expose no such interface and the simulator has no
`as_cuda_array`, so under the simulator both become simulator arrays over the tensor's own memory
(a NumPy view, no copy): the kernel's writes land in the tensor, as on the GPU.

Each kernel launch also runs inside kernel_trace's named range: on CPU that range is the only
evidence that the candidate's own kernel ran (KJ-R10, coverage).

Nothing here imports Numba: importing it costs ~0.4 s, which a sandbox whose code never uses Numba
must not pay. A meta-path finder adapts `numba.cuda` right after the candidate's code imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

WATCHED_MODULE = "numba.cuda"
# Where the simulator defines its kernel and array types (the same paths in numba-cuda and in the
# target built into older Numba releases).
KERNEL_MODULE = "numba.cuda.simulator.kernel"
ARRAY_MODULE = "numba.cuda.simulator.cudadrv.devicearray"

LaunchRange = Callable[[str], AbstractContextManager]
# NumPy's typestr per torch dtype; others (bfloat16, complex) have no simulator equivalent here.
NUMPY_TYPESTR = {
    torch.float64: "<f8", torch.float32: "<f4", torch.float16: "<f2", torch.int64: "<i8", torch.int32: "<i4",
    torch.int16: "<i2", torch.int8: "|i1", torch.uint8: "|u1", torch.bool: "|b1",
}


def install(launch_range: LaunchRange) -> None:
    """Adapt the simulator once `numba.cuda` is imported (now, if it already is)."""
    if WATCHED_MODULE in sys.modules:
        adapt(sys.modules[WATCHED_MODULE], launch_range)
        return
    sys.meta_path.insert(0, _AfterImport(WATCHED_MODULE, lambda module: adapt(module, launch_range)))


def adapt(cuda_module, launch_range: LaunchRange) -> None:
    """Record each launch and accept torch tensors; a no-op for the real GPU target."""
    kernel_module: Any = sys.modules.get(KERNEL_MODULE)  # numba-cuda's simulator modules, adapted in place
    array_module = sys.modules.get(ARRAY_MODULE)
    if kernel_module is None or array_module is None or getattr(kernel_module, "_kj_adapted", False):
        return
    kernel_type = kernel_module.FakeCUDAKernel
    fake_array = array_module.FakeCUDAArray
    original_call = kernel_type.__call__

    def as_device_array(value):
        return fake_array(numpy_view(value)) if isinstance(value, torch.Tensor) else value

    def call(self, *args):
        # Device functions and calls made from inside a running kernel are not launches.
        if self._device or kernel_module._get_kernel_context() is not None:
            return original_call(self, *args)
        with launch_range(getattr(self.fn, "__name__", "kernel")):
            return original_call(self, *[as_device_array(arg) for arg in args])

    def as_cuda_array(obj, sync: bool = True):
        """The simulator's stand-in for numba.cuda.as_cuda_array: a view of a CPU tensor."""
        if not isinstance(obj, torch.Tensor):
            raise TypeError(f"{type(obj).__name__} is not a torch tensor (the simulator's as_cuda_array "
                            "takes torch tensors)")
        return as_device_array(obj)

    def is_cuda_array(obj) -> bool:
        return isinstance(obj, (torch.Tensor, fake_array))

    kernel_type.__call__ = call
    cuda_module.as_cuda_array = as_cuda_array
    cuda_module.is_cuda_array = is_cuda_array
    kernel_module._kj_adapted = True


def numpy_view(tensor: torch.Tensor):
    """A NumPy array over the tensor's memory that keeps the tensor alive.

    Built from the array interface rather than `tensor.numpy()`, which runs ATen operators
    (resolve_conj, resolve_neg) that the attribution would count as PyTorch compute."""
    import numpy

    if tensor.device.type != "cpu":
        raise TypeError(f"the CUDA simulator runs on CPU tensors, got one on {tensor.device}")
    typestr = NUMPY_TYPESTR.get(tensor.dtype)
    if typestr is None:
        raise TypeError(f"the CUDA simulator has no array type for {tensor.dtype}")
    itemsize = tensor.element_size()
    return numpy.asarray(_ArrayInterface(tensor, {
        "version": 3, "typestr": typestr, "shape": tuple(tensor.shape),
        "strides": tuple(stride * itemsize for stride in tensor.stride()),
        "data": (tensor.data_ptr(), False),
    }))


class _ArrayInterface:
    """Holds the tensor for as long as the NumPy view (whose base this is) lives."""

    def __init__(self, tensor: torch.Tensor, interface: dict) -> None:
        self.tensor = tensor
        self.__array_interface__ = interface


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then(module)` right after `name` is imported, by wrapping the loader the other finders
    return for it; then steps out of the import system."""

    def __init__(self, name: str, then: Callable[[object], None]) -> None:
        self._name = name
        self._then = then
        self._searching = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self._name or self._searching:
            return None
        self._searching = True
        try:
            spec = importlib.util.find_spec(fullname)  # asks the finders after this one
        finally:
            self._searching = False
        if spec is None or spec.loader is None:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec.loader = _LoaderThen(spec.loader, self._then)
        return spec


class _LoaderThen(importlib.abc.Loader):
    def __init__(self, loader, then: Callable[[object], None]) -> None:
        self._loader = loader
        self._then = then

    def __getattr__(self, name: str):  # get_source, is_package, ...: the real loader's
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._then(module)
