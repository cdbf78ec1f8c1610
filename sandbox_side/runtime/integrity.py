"""Notice when user code rebinds the functions a fair evaluation depends on.

Three watches, all recorded before any user code runs:
- well-known functions of time, torch and builtins (a candidate that rebinds torch.cuda.synchronize);
- the dispatcher's table of the ATen operators the harness calls here (HARNESS_OPERATORS): a kernel registered
  for one of them from C++ or torch.library replaces it for the harness's calls too;
- the harness's own modules (this package): which module object each name in sys.modules is, every
  module-level binding, every method of their classes and every function's code object. A candidate
  shares this process and can reach them through attribute chains (`torch.sys.modules[...]`) that
  static rules do not see.

The timer binds its own references first, so rebinding a public function cannot change the numbers;
this records the attempt so the supervisor can reject the candidate for it (KJ-R01). It is defence in
depth: a candidate that patches this module too is caught by the supervisor's own clock
(worker/engine/timing/clock_check.py), which no code in this process can reach.
"""

from __future__ import annotations

import builtins
import sys
import time
import types
from collections.abc import Mapping

import torch

# (owner, attribute) pairs watched for rebinding.
WATCHED = [
    (time, "perf_counter"), (time, "time"), (time, "monotonic"), (time, "perf_counter_ns"),
    (torch, "allclose"), (torch, "equal"), (torch, "isclose"), (torch, "save"), (torch, "load"),
    (torch.Tensor, "__eq__"), (torch.Tensor, "clone"), (torch.Tensor, "cpu"), (torch.Tensor, "detach"),
    (torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda.Event, "record"),
    (torch.cuda.Event, "elapsed_time"), (torch.cuda.Event, "synchronize"), (torch.cuda.Event, "query"),
    (torch._C, "_cuda_synchronize"), (torch._C, "_cuda_sleep"), (builtins, "print"), (builtins, "open"),
    (builtins, "isinstance"), (builtins, "type"),
]
HARNESS_PACKAGE = __name__.split(".")[0]  # "sandbox_side": every harness module, the timer included
# ATen operators the harness calls in this process (the timer's L2 flush is a zero_, its input variants an
# index_copy_, its kept outputs clones; outputs leave through copies). A kernel registered for one of them
# (TORCH_LIBRARY_IMPL(aten, CUDA, m) in a C++ extension, torch.library in Python) replaces it for the harness too:
# a zero_ that skips the flush leaves the candidate's inputs in L2 and its timed calls faster. The dispatcher's
# table for each, as it printed it before user code, is watched.
HARNESS_OPERATORS = ("aten::zero_", "aten::fill_.Scalar", "aten::index_copy_", "aten::clone", "aten::copy_",
                     "aten::_to_copy", "aten::empty.memory_format", "aten::empty_strided")
# The dispatch keys a call on a real tensor goes through (their kernels run); torch itself registers Python kernels
# for others later (Meta, for fake tensors), which change nothing the harness runs.
EXECUTED_KEYS = frozenset({
    "CPU", "CUDA", "AutogradCPU", "AutogradCUDA", "Autograd[alias]", "CompositeImplicitAutograd[alias]",
    "CompositeExplicitAutograd[alias]", "CompositeExplicitAutogradNonFunctional[alias]", "ADInplaceOrView",
    "BackendSelect", "AutocastCPU", "AutocastCUDA", "Python", "PythonTLSSnapshot", "PreDispatch"})
_dispatch_dump = getattr(torch._C, "_dispatch_dump", None)
_MISSING = object()


def _code_of(value: object) -> object | None:
    return getattr(value, "__code__", None) if isinstance(value, types.FunctionType) else None


def _bindings(namespace: Mapping[str, object]) -> dict[str, tuple[object, object | None]]:
    """Every non-dunder binding with its code object (functions), read off a module's or class's dict."""
    return {name: (value, _code_of(value)) for name, value in list(namespace.items())
            if not (name.startswith("__") and name.endswith("__"))}


class _SealedModule:
    """One harness module as it was before user code ran."""

    def __init__(self, name: str, module: types.ModuleType) -> None:
        self.name = name
        self.module = module
        self.bindings = _bindings(vars(module))
        self.classes = {name: (cls, _bindings(vars(cls))) for name, (cls, _) in self.bindings.items()
                        if isinstance(cls, type) and cls.__module__ == module.__name__}

    def changes(self) -> list[str]:
        if sys.modules.get(self.name) is not self.module:
            return [f"sys.modules[{self.name!r}]"]
        found = _changed_bindings(self.name, vars(self.module), self.bindings)
        for class_name, (cls, methods) in self.classes.items():
            found += _changed_bindings(f"{self.name}.{class_name}", vars(cls), methods)
        return found


def _changed_bindings(owner: str, namespace: Mapping[str, object], sealed: dict[str, tuple[object, object | None]]) -> list[str]:
    found = []
    for name, (value, code) in sealed.items():
        current = namespace.get(name, _MISSING)
        if current is not value:
            found.append(f"{owner}.{name}")
        elif code is not None and _code_of(current) is not code:
            found.append(f"{owner}.{name}.__code__")
    return found


def _operator_tables() -> dict[str, frozenset[str]]:
    """Each harness operator's kernels for the keys a real call goes through, as the dispatcher prints them (each
    line names its key and where the kernel was registered); empty where this torch cannot print them."""
    if _dispatch_dump is None:
        return {}
    tables = {}
    for name in HARNESS_OPERATORS:
        lines = _dispatch_dump(name).splitlines()
        tables[name] = frozenset(line for line in lines
                                 if line.split(":", 1)[0].removesuffix(" (inactive)") in EXECUTED_KEYS)
    return tables


class IntegrityWatch:
    def __init__(self) -> None:
        self._baseline = {self._name(o, a): getattr(o, a, None) for o, a in WATCHED}
        self._operators: dict[str, frozenset[str]] = {}  # sealed with the harness: after CUDA's and Triton's set-up
        self._harness: list[_SealedModule] = []

    def seal_harness(self) -> None:
        """Record the harness's modules and operators as they are now: called once, just before user code loads."""
        self._operators = _operator_tables()
        self._harness = [_SealedModule(name, module) for name, module in sorted(sys.modules.items())
                         if isinstance(module, types.ModuleType)
                         and (name == HARNESS_PACKAGE or name.startswith(HARNESS_PACKAGE + "."))]

    @staticmethod
    def _name(owner: object, attribute: str) -> str:
        return f"{getattr(owner, '__name__', type(owner).__name__)}.{attribute}"

    def changed(self) -> list[str]:
        found = [
            self._name(o, a) for o, a in WATCHED
            if getattr(o, a, None) is not self._baseline[self._name(o, a)]
        ]
        for sealed in self._harness:
            found += sealed.changes()
        tables = _operator_tables() if self._operators else {}
        found += [f"{name} (a kernel of it was registered again)" for name, table in tables.items()
                  if table != self._operators.get(name)]
        return found
