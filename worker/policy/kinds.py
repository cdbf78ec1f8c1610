"""A light guess of which names hold tensors, so `a + b` on tensors is told from `n + 1` on ints.

Each expression gets one of three kinds: "tensor", "scalar" or "unknown". Only expressions
known to be tensors count as PyTorch compute; unknown ones are left alone (honest grid
arithmetic must never be rejected).
"""

from __future__ import annotations

import ast

from .pyfacts import CandidateFacts, FunctionNode, dotted_qualname
from .vocab import ALLOCATION_CALLS, SCALAR_METHODS, TENSOR_COMPUTE_METHODS, VIEW_METHODS

TENSOR, SCALAR, UNKNOWN = "tensor", "scalar", "unknown"
SCALAR_ATTRS = {"shape", "ndim", "dtype", "device", "is_cuda", "layout", "requires_grad", "itemsize", "nbytes"}
TENSOR_ATTRS = {"T", "mT", "H", "mH", "data", "real", "imag", "grad"}
SCALAR_BUILTINS = {"int", "float", "bool", "len", "str", "round", "divmod", "hash", "id", "range", "isinstance"}
SCALAR_ANNOTATIONS = {"int", "float", "bool", "str"}


class KindGuesser:
    """Kinds of names in the forward-reachable functions of one candidate."""

    def __init__(self, facts: CandidateFacts) -> None:
        self.facts = facts
        self._env: dict[int, dict[str, str]] = {}
        self._returns: dict[int, str] = {}
        self._in_progress: set[int] = set()

    def env(self, function: ast.AST) -> dict[str, str]:
        key = id(function)
        if key not in self._env:
            self._env[key] = {}
            self._env[key] = self._build_env(function)
        return self._env[key]

    def kind(self, node: ast.AST, function: ast.AST | None) -> str:
        env = self.env(function) if function is not None else {}
        return self._kind(node, env)

    # ---- environment ------------------------------------------------------------------------
    def _build_env(self, function: ast.AST) -> dict[str, str]:
        env: dict[str, str] = {}
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            positional = function.args.posonlyargs + function.args.args
            defaults = [None] * (len(positional) - len(function.args.defaults)) + list(function.args.defaults)
            for arg, default in zip(positional, defaults, strict=True):
                env[arg.arg] = self._param_kind(arg, default)
            for arg, default in zip(function.args.kwonlyargs, function.args.kw_defaults, strict=True):
                env[arg.arg] = self._param_kind(arg, default)
            env.pop("self", None)
            env.pop("cls", None)
        for _ in range(2):  # two passes so later assignments inform earlier-used names
            for node in ast.walk(function):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        self._bind(target, node.value, env)
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                    self._bind(node.target, node.value, env)
                elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                    iterated = self._kind(node.iter, env)
                    if isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Name):
                        if node.iter.func.id == "range":
                            iterated = SCALAR
                    env.setdefault(node.target.id, iterated)
        return env

    def _param_kind(self, arg: ast.arg, default: ast.expr | None) -> str:
        annotation = arg.annotation
        if isinstance(annotation, ast.Name) and annotation.id in SCALAR_ANNOTATIONS:
            return SCALAR
        if isinstance(default, ast.Constant):
            return SCALAR
        if default is not None:
            return UNKNOWN
        return TENSOR

    def _bind(self, target: ast.AST, value: ast.expr, env: dict[str, str]) -> None:
        if isinstance(target, ast.Name):
            kind = self._kind(value, env)
            if env.get(target.id) != TENSOR:  # once a tensor, always a tensor
                env[target.id] = kind
        elif isinstance(target, (ast.Tuple, ast.List)):
            value_kind = self._unpacked_kind(value, env)
            for element in target.elts:
                if isinstance(element, ast.Name) and env.get(element.id) != TENSOR:
                    env[element.id] = value_kind

    def _unpacked_kind(self, value: ast.expr, env: dict[str, str]) -> str:
        if isinstance(value, ast.Attribute) and value.attr == "shape":
            return SCALAR
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            if value.func.attr in ("size", "stride"):
                return SCALAR
            if value.func.attr in ("chunk", "split", "unbind", "tensor_split"):
                return TENSOR
        if isinstance(value, (ast.Tuple, ast.List)):
            kinds = {self._kind(e, env) for e in value.elts}
            return kinds.pop() if len(kinds) == 1 else UNKNOWN
        return UNKNOWN

    # ---- expressions ------------------------------------------------------------------------
    def _kind(self, node: ast.AST, env: dict[str, str]) -> str:
        facts = self.facts
        if isinstance(node, ast.Constant):
            return SCALAR
        if isinstance(node, ast.Name):
            return env.get(node.id, UNKNOWN)
        if isinstance(node, ast.Attribute):
            if facts.is_self_attr(node):
                return TENSOR if node.attr in facts.tensor_attrs else UNKNOWN
            if node.attr in SCALAR_ATTRS:
                return SCALAR
            if node.attr in TENSOR_ATTRS and self._kind(node.value, env) == TENSOR:
                return TENSOR
            return UNKNOWN
        if isinstance(node, ast.Subscript):
            base = self._kind(node.value, env)
            if isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
                return SCALAR
            if isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
                if node.value.func.attr in ("size", "stride"):
                    return SCALAR
            return TENSOR if base == TENSOR else UNKNOWN
        if isinstance(node, ast.Call):
            return self._call_kind(node, env)
        if isinstance(node, ast.BinOp):
            kinds = {self._kind(node.left, env), self._kind(node.right, env)}
            if TENSOR in kinds or isinstance(node.op, ast.MatMult):
                return TENSOR
            return SCALAR if kinds == {SCALAR} else UNKNOWN
        if isinstance(node, ast.UnaryOp):
            return SCALAR if isinstance(node.op, ast.Not) else self._kind(node.operand, env)
        if isinstance(node, ast.BoolOp):
            kinds = {self._kind(v, env) for v in node.values}
            return TENSOR if TENSOR in kinds else (SCALAR if kinds == {SCALAR} else UNKNOWN)
        if isinstance(node, ast.Compare):
            if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops):
                return SCALAR
            kinds = {self._kind(v, env) for v in [node.left, *node.comparators]}
            return TENSOR if TENSOR in kinds else (SCALAR if kinds == {SCALAR} else UNKNOWN)
        if isinstance(node, ast.IfExp):
            kinds = {self._kind(node.body, env), self._kind(node.orelse, env)}
            return TENSOR if TENSOR in kinds else (SCALAR if kinds == {SCALAR} else UNKNOWN)
        return UNKNOWN

    def _call_kind(self, node: ast.Call, env: dict[str, str]) -> str:
        facts = self.facts
        func = node.func
        name = facts.qualname(func) or ""
        if facts.is_extension_ref(func.value if isinstance(func, ast.Attribute) else func):
            return TENSOR
        if isinstance(func, ast.Subscript) and facts.is_triton_kernel_ref(func.value):
            return UNKNOWN  # a launch returns nothing useful
        if isinstance(func, ast.Name):
            if func.id in SCALAR_BUILTINS:
                return SCALAR
            if func.id in ("max", "min", "abs", "sum", "pow"):
                kinds = {self._kind(a, env) for a in node.args}
                return TENSOR if TENSOR in kinds else (SCALAR if kinds == {SCALAR} else UNKNOWN)
            if func.id in facts.functions and not facts.is_imported_root(func):
                return self._return_kind(facts.functions[func.id])
        if dotted_qualname(name, "math") or name in ("triton.cdiv", "triton.next_power_of_2"):
            return SCALAR
        if name.startswith("torch."):
            last = name.rsplit(".", 1)[-1]
            if last in ALLOCATION_CALLS or last in VIEW_METHODS or last in TENSOR_COMPUTE_METHODS:
                return TENSOR
            if dotted_qualname(name, "torch.nn.functional"):
                return TENSOR
            return UNKNOWN
        if isinstance(func, ast.Attribute):
            if facts.is_imported_root(func):
                return UNKNOWN
            if func.attr in SCALAR_METHODS:
                return SCALAR
            if func.attr in VIEW_METHODS or func.attr in TENSOR_COMPUTE_METHODS or func.attr in ALLOCATION_CALLS:
                return TENSOR
            if facts.is_self_attr(func, facts.layer_attrs):
                return TENSOR
        return UNKNOWN

    def _return_kind(self, function: FunctionNode) -> str:
        key = id(function)
        if key in self._returns:
            return self._returns[key]
        if key in self._in_progress:
            return UNKNOWN
        self._in_progress.add(key)
        env = self.env(function)
        kinds = {self._kind(n.value, env) for n in ast.walk(function) if isinstance(n, ast.Return) and n.value}
        self._in_progress.discard(key)
        result = TENSOR if TENSOR in kinds else (SCALAR if kinds == {SCALAR} else UNKNOWN)
        self._returns[key] = result
        return result
