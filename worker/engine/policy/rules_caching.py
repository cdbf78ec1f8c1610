"""Threat class 3, in the Python source: state that lets forward replay outputs across calls."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from worker.engine.policy.context import NameRule, PolicyContext, name_findings, resolved_name
from worker.engine.policy.pyfacts import CandidateFacts, decorator_name
from worker.engine.policy.registry import Finding
from worker.engine.policy.vocab import ALLOCATION_CALLS

MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "update", "setdefault", "add", "__setitem__", "put", "appendleft", "push",
})
MEMOIZERS = ("functools.lru_cache", "functools.cache", "functools.cached_property", "lru_cache", "cache")
IDENTITY_ATTRS = frozenset({"_version", "_cdata", "_base"})
IDENTITY_METHODS = frozenset({"data_ptr", "untyped_storage", "storage", "_storage", "storage_offset"})
CACHE_NAMES = [NameRule("weakref", "KJ312-identity-keyed-cache")]  # memoizers: detect_memoization (KJ314)
# Stream and event handles hold no values: keeping them on the module (created lazily in forward)
# caches nothing a later call could replay. What runs on them is judged from the kernel trace.
STREAM_HANDLES = frozenset({"torch.cuda.Stream", "torch.cuda.Event", "torch.Stream", "torch.Event",
                            "torch.cuda.current_stream", "torch.cuda.default_stream"})


def _self_attr_root(facts: CandidateFacts, node: ast.AST) -> str | None:
    """`self.X` for targets like self.X, self.X[k], self.X.y."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        if facts.is_self_attr(node):
            return node.attr
        node = node.value
    return None


def _is_allocation(ctx: PolicyContext, value: ast.expr) -> bool:
    if not isinstance(value, ast.Call):
        return False
    name = ctx.facts.qualname(value.func) or ""
    last = name.rsplit(".", 1)[-1] if name else getattr(value.func, "attr", "")
    return last in ALLOCATION_CALLS


def _is_stream_handle(ctx: PolicyContext, value: ast.expr) -> bool:
    """torch.cuda.Stream() / Event() / current_stream(), or a list, tuple or comprehension of them."""
    if isinstance(value, (ast.List, ast.Tuple)):
        return bool(value.elts) and all(_is_stream_handle(ctx, item) for item in value.elts)
    if isinstance(value, ast.ListComp):
        return _is_stream_handle(ctx, value.elt)
    return isinstance(value, ast.Call) and resolved_name(ctx, value.func) in STREAM_HANDLES


def detect_state_on_self(ctx: PolicyContext) -> Iterator[Finding]:
    facts = ctx.facts
    state_attrs: dict[str, ast.AST] = {}
    writes: set[int] = set()
    for node in facts.reachable_nodes():
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                attr = _self_attr_root(facts, target)
                if attr is None:
                    continue
                writes.add(id(target))
                whole_attr = facts.is_self_attr(target)
                if whole_attr and _is_stream_handle(ctx, node.value):
                    continue
                if whole_attr and isinstance(node.value, ast.Constant):
                    state_attrs.setdefault(attr, node)  # a counter or a toggle
                elif whole_attr and _is_allocation(ctx, node.value) and not isinstance(node, ast.AugAssign):
                    yield ctx.finding("KJ316-workspace-cached-on-self", f"caches an allocation in self.{attr}", node)
                else:
                    yield ctx.finding("KJ310-output-cached-on-self", f"stores a value computed in forward in self.{attr}",
                                      node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATING_METHODS:
            attr = _self_attr_root(facts, node.func.value)
            if attr is not None and not facts.is_extension_ref(node.func.value):
                yield ctx.finding("KJ310-output-cached-on-self",
                                  f"adds values computed in forward to self.{attr}.{node.func.attr}()", node)
    if not state_attrs:
        return
    for node in facts.reachable_nodes():
        if facts.is_self_attr(node) and node.attr in state_attrs and isinstance(node.ctx, ast.Load):
            parent = facts.parents.get(node)
            if isinstance(parent, ast.AugAssign) and parent.target is node:
                continue
            yield ctx.finding("KJ311-call-counter",
                              f"forward's behaviour depends on self.{node.attr}, which forward itself updates", parent or node)


def _identity_names(facts) -> set[str]:
    """Local names assigned from expressions built on id()/data_ptr()/storage identity."""
    names: set[str] = set()
    for node in facts.reachable_nodes():
        if isinstance(node, ast.Assign) and any(_is_identity_expr(facts, n) for n in ast.walk(node.value)):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _is_identity_expr(facts, node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("id", "hash"):
        return node.func.id not in facts.functions
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in IDENTITY_METHODS and node.func.attr != "storage_offset"
    return isinstance(node, ast.Attribute) and node.attr in IDENTITY_ATTRS


def detect_identity_keys(ctx: PolicyContext) -> Iterator[Finding]:
    facts, rule = ctx.facts, "KJ312-identity-keyed-cache"
    identity_names = _identity_names(facts)
    for node in facts.reachable_nodes():
        if isinstance(node, ast.Name) and node.id in identity_names and isinstance(node.ctx, ast.Load):
            if _used_as_key(facts, node):
                yield ctx.finding(rule, f"uses {node.id} (built from object identity) as a key or in a comparison",
                                  facts.parents.get(node) or node)
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("id", "hash"):
            if node.func.id not in facts.functions:
                yield ctx.finding(rule, f"uses {node.func.id}() of an object in the forward path", node)
        elif isinstance(node, ast.Attribute) and node.attr in IDENTITY_ATTRS:
            yield ctx.finding(rule, f"reads the tensor's {node.attr}", node)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in IDENTITY_METHODS
            and _used_as_key(facts, node)
        ):
            yield ctx.finding(rule, f"uses .{node.func.attr}() as a key or in an identity comparison", node)
    yield from name_findings(ctx, CACHE_NAMES)


def _used_as_key(facts, node: ast.AST) -> bool:
    parent = facts.parents.get(node)
    while isinstance(parent, ast.Tuple):  # (a.data_ptr(), b.data_ptr())
        node, parent = parent, facts.parents.get(parent)
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return True
    if isinstance(parent, ast.Dict) and node in parent.keys:
        return True
    if isinstance(parent, ast.Compare):
        return any(isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in parent.ops)
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute):
        return parent.func.attr in ("get", "setdefault", "pop", "__contains__", "__getitem__", "add")
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        return any(_self_attr_root(facts, t) for t in targets)
    return False


def detect_global_state(ctx: PolicyContext) -> Iterator[Finding]:
    facts, rule = ctx.facts, "KJ313-global-state-in-forward"
    class_names = set(facts.classes)
    for function in facts.reachable:
        local_names = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local_names |= {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
            for default in function.args.defaults + [d for d in function.args.kw_defaults if d is not None]:
                if isinstance(default, (ast.Dict, ast.List, ast.Set)) or (
                    isinstance(default, ast.Call) and getattr(default.func, "id", "") in ("dict", "list", "set")
                ):
                    yield ctx.finding(rule, "keeps state in a mutable default argument", default)
        shared = (facts.module_names | class_names) - facts.imported
        for node in ast.walk(function):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                yield ctx.finding(rule, f"declares {type(node).__name__.lower()} {', '.join(node.names)}", node)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    root = _root_name(target)
                    if _is_class_of_self(target) or (
                        root is not None and target is not root and root.id in shared and root.id not in local_names
                    ):
                        owner = root.id if root is not None else "type(self)"
                        yield ctx.finding(rule, f"writes to the module-level or class-level object {owner}", node)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                root = _root_name(node.func.value)
                if (
                    node.func.attr in MUTATING_METHODS
                    and root is not None
                    and root.id in shared
                    and root.id not in local_names
                    and resolved_name(ctx, node.func.value) is None
                    and not facts.is_extension_ref(node.func.value)
                ):
                    yield ctx.finding(rule, f"adds to the module-level object {root.id}", node)


def _root_name(node: ast.AST) -> ast.Name | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def _is_class_of_self(target: ast.AST) -> bool:
    """type(self).x = ... or self.__class__.x = ..."""
    node = target.value if isinstance(target, (ast.Attribute, ast.Subscript)) else None
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "type":
        return True
    return isinstance(node, ast.Attribute) and node.attr == "__class__"


def detect_memoization(ctx: PolicyContext) -> Iterator[Finding]:
    facts = ctx.facts
    reachable = {id(f) for f in facts.reachable}
    for node in ast.walk(facts.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                name = facts.qualname(decorator_name(decorator)) or ""
                if name in MEMOIZERS and (id(node) in reachable or name.endswith("cached_property")):
                    yield ctx.finding("KJ314-memoization", f"memoizes {node.name} with @{name}", node,
                                      evidence=f"@{name} def {node.name}(...)")


DETECTORS = (detect_state_on_self, detect_identity_keys, detect_global_state, detect_memoization)
