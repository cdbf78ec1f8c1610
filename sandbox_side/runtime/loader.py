"""Load a user module from a file and turn its outputs into plain, storable tensors."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from types import ModuleType
from typing import Any, TypeVar

import torch

from sandbox_side.runtime.failure_kind import FailureKind

MAX_TRACEBACK_CHARS = 6000
V = TypeVar("V")


class UserCodeError(Exception):
    """User code failed; `kind` says how (compile_error, runtime_error, invalid_output, out_of_memory, or
    protocol for a command out of turn)."""

    def __init__(self, kind: FailureKind, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.kind = FailureKind(kind)
        self.message = message
        self.detail = detail[-MAX_TRACEBACK_CHARS:]


def _is_build_failure(exc: BaseException) -> bool:
    # load_inline raises RuntimeError("Error building extension ...") with the compiler log;
    # Triton raises CompilationError subclasses at first launch, Numba (on a GPU) its typing,
    # lowering and NVVM errors.
    text = str(exc)
    if "Error building extension" in text or "Error compiling objects for extension" in text:
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"CompilationError", "CompileTimeAssertionFailure", "PTXASError",
                "TypingError", "LoweringError", "UnsupportedError", "NvvmError"}:
        return True
    # Under TRITON_INTERPRET the errors that compilation would catch on a GPU (unknown names,
    # bad attributes, type errors in the kernel body) arrive wrapped in an InterpreterError.
    return "InterpreterError" in names and text.startswith(("AttributeError", "NameError", "TypeError"))


def classify(exc: BaseException, during: str) -> UserCodeError:
    if isinstance(exc, UserCodeError):
        return exc
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if _is_build_failure(exc):
        return UserCodeError(FailureKind.compile_error, f"build failed {during}: {str(exc)[:2000]}", detail)
    if isinstance(exc, torch.OutOfMemoryError):  # torch.cuda.OutOfMemoryError is this class
        return UserCodeError(FailureKind.out_of_memory, f"out of device memory {during}: {str(exc)[:2000]}", detail)
    return UserCodeError(FailureKind.runtime_error, f"{type(exc).__name__} {during}: {str(exc)[:2000]}", detail)


def load_module(path: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserCodeError(FailureKind.runtime_error, f"cannot load module from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything, SystemExit included
        raise classify(exc, "while importing the module") from exc
    return module


def flatten_outputs(value: object) -> tuple[str, list[torch.Tensor]]:
    """A model output is a tensor or a tuple/list of tensors; anything else is invalid."""
    if type(value) is torch.Tensor:
        return "tensor", [value]
    if isinstance(value, (tuple, list)) and value:
        items = list(value)
        for index, item in enumerate(items):
            if type(item) is not torch.Tensor:
                raise UserCodeError(
                    FailureKind.invalid_output,
                    f"output {index} is a {type(item).__module__}.{type(item).__qualname__}, "
                    "not a plain torch.Tensor; return a tensor or a tuple of tensors",
                )
        return "tuple", items
    raise UserCodeError(
        FailureKind.invalid_output,
        f"forward returned {type(value).__module__}.{type(value).__qualname__}; "
        "return a plain torch.Tensor or a tuple of tensors",
    )


def to_storable(value: object, device: torch.device | str = "cpu") -> dict:
    """Detach and copy outputs to `device` (the host unless told) as fresh plain tensors (no subclass, no shared
    storage)."""
    kind, tensors = flatten_outputs(value)
    plain = []
    for tensor in tensors:
        if tensor.is_sparse or tensor.layout != torch.strided:
            raise UserCodeError(FailureKind.invalid_output, "outputs must be dense strided tensors")
        # One copy, from wherever it is (not a clone on its device first, then another to the host).
        plain.append(torch.Tensor.to(torch.Tensor.detach(tensor), device, copy=True, memory_format=torch.contiguous_format))
    return {"kind": kind, "tensors": plain}


def to_device(value: V, device: torch.device) -> V:
    """`value` with every tensor in it (in lists and tuples) on `device`: the same structure."""
    moved: Any = value
    if isinstance(value, torch.Tensor):
        moved = value.to(device)
    elif isinstance(value, list):
        moved = [to_device(item, device) for item in value]
    elif isinstance(value, tuple):
        moved = tuple(to_device(item, device) for item in value)
    return moved


def clone_args(args: list) -> list:
    return [arg.clone() if isinstance(arg, torch.Tensor) else arg for arg in args]


def fresh_on(args: list, device: torch.device) -> list:
    """A call's arguments: each tensor copied onto `device` (one copy from wherever it is), the rest as is."""
    return [arg.to(device, copy=True) if isinstance(arg, torch.Tensor) else arg for arg in args]
