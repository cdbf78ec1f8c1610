"""Side streams the source provably joins back into the current stream (lifts KJ301 for them).

Work on a side stream hides from timing on the current stream only if the current stream
never waits for it. A `torch.cuda.Stream` is accepted when every use of it is one of:

    s = torch.cuda.Stream(...)              created once per name, never aliased or passed on
    s.wait_stream(x) / s.wait_event(e)      the side stream waits (for its inputs)
    s.synchronize() / s.query()             the host waits or asks
    t.record_stream(s)                      allocator bookkeeping
    with torch.cuda.stream(s): ...          no return or yield inside, not nested in another
                                            stream context, and followed in the same block,
                                            unconditionally, by the join below
    <current>.wait_stream(s)                the join

where <current> is `torch.cuda.current_stream()` written at the join, or a name assigned once,
at the top level of the same function, from that call. Anything else (`s.cuda_stream`, a stream
handed to a function, a join under an `if`) keeps KJ301. Streams are either local names (one
function) or `self.<attr>` (the whole class, e.g. created in __init__ and used in forward).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from .context import PolicyContext, resolved_name
from .pyfacts import FunctionNode

STREAM_CLASS = "torch.cuda.Stream"
STREAM_CONTEXT = "torch.cuda.stream"
CURRENT_STREAM = "torch.cuda.current_stream"
SIDE_WAITS = frozenset({"wait_stream", "wait_event", "synchronize", "query"})


@dataclass(frozen=True, eq=False)
class StreamVar:
    """A stream variable: a local name inside `scope`, or `self.<name>` (scope None) class-wide."""

    name: str
    scope: FunctionNode | None

    def matches(self, ctx: PolicyContext, node: ast.AST) -> bool:
        if self.scope is None:
            return ctx.facts.is_self_attr(node, {self.name})
        return isinstance(node, ast.Name) and node.id == self.name

    def occurrences(self, ctx: PolicyContext) -> Iterator[ast.AST]:
        root = ctx.facts.tree if self.scope is None else self.scope
        return (node for node in ast.walk(root) if self.matches(ctx, node))


def joined_stream_references(ctx: PolicyContext) -> set[int]:
    """Ids of the `torch.cuda.Stream` / `torch.cuda.stream` name nodes that belong to joined streams."""
    creations: dict[tuple[str, int], tuple[StreamVar, list[ast.Assign]]] = {}
    for node in ast.walk(ctx.facts.tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and _is_call_to(ctx, node.value, STREAM_CLASS):
            var = _stream_var(ctx, node.targets[0], node)
            if var is not None:
                creations.setdefault((var.name, id(var.scope)), (var, []))[1].append(node)
    accepted: set[int] = set()
    for var, assigns in creations.values():
        if var.scope is not None and len(assigns) > 1:
            continue  # rebinding a local stream name: too clever to follow
        references = _joined_references(ctx, var, assigns)
        if references is not None:
            accepted |= references
    return accepted


def _is_call_to(ctx: PolicyContext, node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and resolved_name(ctx, node.func) == name


def _stream_var(ctx: PolicyContext, target: ast.AST, at: ast.AST) -> StreamVar | None:
    if isinstance(target, ast.Name):
        scope = ctx.facts.enclosing_function(at)
        return StreamVar(target.id, scope) if scope is not None else None
    if ctx.facts.is_self_attr(target):
        return StreamVar(target.attr, None)
    return None


def _joined_references(ctx: PolicyContext, var: StreamVar, assigns: list[ast.Assign]) -> set[int] | None:
    """The accepted reference nodes of this stream, or None if any use breaks the pattern."""
    parents = ctx.facts.parents
    targets = {id(a.targets[0]) for a in assigns}
    references = {id(a.value.func) for a in assigns}
    for node in var.occurrences(ctx):
        if id(node) in targets:
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.attr in SIDE_WAITS and _called(ctx, parent):
            continue
        if not (isinstance(parent, ast.Call) and parent.args == [node] and not parent.keywords):
            return None
        func = parent.func
        if isinstance(func, ast.Attribute) and func.attr == "record_stream":
            continue
        if isinstance(func, ast.Attribute) and func.attr == "wait_stream" and _is_current(ctx, func.value, parent):
            continue
        if resolved_name(ctx, func) == STREAM_CONTEXT and _block_is_joined(ctx, parent, var):
            references.add(id(func))
            continue
        return None
    return references


def _called(ctx: PolicyContext, attribute: ast.Attribute) -> bool:
    call = ctx.facts.parents.get(attribute)
    return isinstance(call, ast.Call) and call.func is attribute


def _is_current(ctx: PolicyContext, node: ast.AST, at: ast.AST) -> bool:
    """`torch.cuda.current_stream()`, or a name bound once to it at the function's top level."""
    if _is_call_to(ctx, node, CURRENT_STREAM):
        return not _inside_stream_context(ctx, at)
    if not isinstance(node, ast.Name):
        return False
    scope = ctx.facts.enclosing_function(at)
    if scope is None:
        return False
    bindings = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == node.id
                and isinstance(n.ctx, (ast.Store, ast.Del))]
    if len(bindings) != 1:
        return False
    assign = ctx.facts.parents.get(bindings[0])
    return (isinstance(assign, ast.Assign) and assign in scope.body and len(assign.targets) == 1
            and _is_call_to(ctx, assign.value, CURRENT_STREAM))


def _inside_stream_context(ctx: PolicyContext, node: ast.AST) -> bool:
    parent = ctx.facts.parents.get(node)
    while parent is not None and not isinstance(parent, FunctionNode):
        if isinstance(parent, (ast.With, ast.AsyncWith)) and any(
            _is_call_to(ctx, item.context_expr, STREAM_CONTEXT) for item in parent.items
        ):
            return True
        parent = ctx.facts.parents.get(parent)
    return False


def _block_is_joined(ctx: PolicyContext, context_call: ast.Call, var: StreamVar) -> bool:
    parents = ctx.facts.parents
    with_node = parents.get(parents.get(context_call))  # Call -> withitem -> With
    if not isinstance(with_node, ast.With) or _inside_stream_context(ctx, with_node):
        return False
    if any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom)) for n in _walk_same_function(with_node)):
        return False
    block = _statement_list(ctx, with_node)
    if block is None:
        return False
    for statement in block[block.index(with_node) + 1:]:
        if isinstance(statement, (ast.Return, ast.Raise)):
            return False
        if _is_join(ctx, statement, var):
            return True
    return False


def _is_join(ctx: PolicyContext, statement: ast.stmt, var: StreamVar) -> bool:
    """`<current>.wait_stream(<var>)` as a statement of its own."""
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return False
    call = statement.value
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr == "wait_stream" and len(call.args) == 1
            and var.matches(ctx, call.args[0]) and _is_current(ctx, func.value, call))


def _walk_same_function(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk that does not enter nested functions or lambdas."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        child = todo.pop()
        yield child
        if not isinstance(child, FunctionNode):
            todo.extend(ast.iter_child_nodes(child))


def _statement_list(ctx: PolicyContext, statement: ast.stmt) -> list[ast.stmt] | None:
    parent = ctx.facts.parents.get(statement)
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and statement in block:
            return block
    return None
