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

from .context import PolicyContext, resolved_name

STREAM_CLASS = "torch.cuda.Stream"
STREAM_CONTEXT = "torch.cuda.stream"
CURRENT_STREAM = "torch.cuda.current_stream"
SIDE_WAITS = frozenset({"wait_stream", "wait_event", "synchronize", "query"})
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
# The findings this module may lift, as name_findings words them.
LIFTABLE = frozenset({f"{verb} {name}" for verb in ("calls", "uses") for name in (STREAM_CLASS, STREAM_CONTEXT)})


def joined_stream_lines(ctx: PolicyContext) -> set[int]:
    """Lines whose every torch.cuda.Stream / torch.cuda.stream reference belongs to a joined stream."""
    streams: dict[tuple, list[ast.Assign]] = {}
    for node in ast.walk(ctx.facts.tree):
        if isinstance(node, ast.Assign) and _is_call_to(ctx, node.value, STREAM_CLASS):
            key = _stream_key(ctx, node.targets[0], node) if len(node.targets) == 1 else None
            if key is not None:
                streams.setdefault(key, []).append(node)
    accepted: set[int] = set()  # ids of the Stream(...) / stream(...) reference nodes of joined streams
    for key, creations in streams.items():
        if key[0] == "local" and len(creations) > 1:
            continue  # rebinding a local stream name: too clever to follow
        references = _joined_references(ctx, key, creations)
        if references is not None:
            accepted |= references
    by_line: dict[int, bool] = {}
    for node in ast.walk(ctx.facts.tree):
        if isinstance(node, (ast.Attribute, ast.Name)) and resolved_name(ctx, node) in (STREAM_CLASS, STREAM_CONTEXT):
            line = node.lineno
            by_line[line] = by_line.get(line, True) and id(node) in accepted
    return {line for line, ok in by_line.items() if ok}


def _is_call_to(ctx: PolicyContext, node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and resolved_name(ctx, node.func) == name


def _stream_key(ctx: PolicyContext, target: ast.AST, at: ast.AST) -> tuple | None:
    if isinstance(target, ast.Name):
        scope = ctx.facts.enclosing_function(at)
        return ("local", id(scope), target.id) if scope is not None else None
    if ctx.facts.is_self_attr(target) and isinstance(target, ast.Attribute):
        return ("self", target.attr)
    return None


def _occurrences(ctx: PolicyContext, key: tuple) -> Iterator[ast.AST]:
    if key[0] == "local":
        scope = next(n for n in ast.walk(ctx.facts.tree) if id(n) == key[1])
        yield from (n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == key[2])
    else:
        for node in ast.walk(ctx.facts.tree):
            if isinstance(node, ast.Attribute) and node.attr == key[1] and ctx.facts.is_self_attr(node):
                yield node


def _joined_references(ctx: PolicyContext, key: tuple, creations: list[ast.Assign]) -> set[int] | None:
    """The accepted reference nodes of this stream, or None if any use breaks the pattern."""
    parents = ctx.facts.parents
    targets = {id(c.targets[0]) for c in creations}
    references = {id(c.value.func) for c in creations}
    for node in _occurrences(ctx, key):
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
        if resolved_name(ctx, func) == STREAM_CONTEXT and _block_is_joined(ctx, parent, key):
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
    while parent is not None and not isinstance(parent, FUNCTIONS):
        if isinstance(parent, (ast.With, ast.AsyncWith)) and any(
            _is_call_to(ctx, item.context_expr, STREAM_CONTEXT) for item in parent.items
        ):
            return True
        parent = ctx.facts.parents.get(parent)
    return False


def _block_is_joined(ctx: PolicyContext, context_call: ast.Call, key: tuple) -> bool:
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
        if _is_join(ctx, statement, key):
            return True
    return False


def _is_join(ctx: PolicyContext, statement: ast.stmt, key: tuple) -> bool:
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return False
    call = statement.value
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "wait_stream" and len(call.args) == 1):
        return False
    arg = call.args[0]
    same = (isinstance(arg, ast.Name) and key[0] == "local" and arg.id == key[2]) or (
        isinstance(arg, ast.Attribute) and key[0] == "self" and arg.attr == key[1] and ctx.facts.is_self_attr(arg))
    return same and _is_current(ctx, func.value, call)


def _walk_same_function(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk that does not enter nested functions or lambdas."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        child = todo.pop()
        yield child
        if not isinstance(child, FUNCTIONS):
            todo.extend(ast.iter_child_nodes(child))


def _statement_list(ctx: PolicyContext, statement: ast.stmt) -> list[ast.stmt] | None:
    parent = ctx.facts.parents.get(statement)
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and statement in block:
            return block
    return None
