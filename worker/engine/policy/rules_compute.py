"""Threat class 1, in the Python source: outsourcing that the source shows unambiguously.

Which kernels did the work (the candidate's own, PyTorch's, a vendor library's) is decided at run
time from the kernels that ran; here only fallbacks, imports of the reference, the absence of any
kernel, and compilers/graphs/backend knobs that generate or change kernels for the candidate.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from worker.engine.policy.context import NameRule, PolicyContext, name_findings
from worker.engine.policy.registry import Finding

OUTSOURCING_NAMES = [
    NameRule("torch.compile", "KJ111-torch-compile"),
    NameRule("torch.jit", "KJ111-torch-compile"),
    NameRule("torch._dynamo", "KJ111-torch-compile"),
    NameRule("torch._inductor", "KJ111-torch-compile"),
    NameRule("torch.export", "KJ111-torch-compile"),
    NameRule("torch.fx", "KJ111-torch-compile"),
    NameRule("functorch.compile", "KJ111-torch-compile"),
    NameRule("torch.cuda.graph", "KJ112-cuda-graph"),
    NameRule("torch.cuda.graphs", "KJ112-cuda-graph"),
    NameRule("torch.cuda.CUDAGraph", "KJ112-cuda-graph"),
    NameRule("torch.cuda.make_graphed_callables", "KJ112-cuda-graph"),
    NameRule("torch.backends", "KJ113-torch-backend-knob"),
    NameRule("torch.set_float32_matmul_precision", "KJ113-torch-backend-knob"),
    NameRule("torch.set_flush_denormal", "KJ113-torch-backend-knob"),
    NameRule("torch.use_deterministic_algorithms", "KJ113-torch-backend-knob"),
    NameRule("torch.set_default_dtype", "KJ113-torch-backend-knob"),
    NameRule("torch.set_default_device", "KJ113-torch-backend-knob"),
    NameRule("torch.set_default_tensor_type", "KJ113-torch-backend-knob"),
    NameRule("torch.set_num_threads", "KJ113-torch-backend-knob"),
]
# Module names the harness's reference goes by (the engine writes it as reference.py).
REFERENCE_MODULES = {"reference", "kj_reference", "ref", "problem", "harness", "solution", "model"}


def detect_fallback(ctx: PolicyContext) -> Iterator[Finding]:
    facts, rule = ctx.facts, "KJ103-pytorch-fallback"
    scopes: list[ast.AST] = list(facts.reachable)
    module_tries = [s for s in facts.tree.body if isinstance(s, ast.Try)]
    for node in (n for scope in scopes for n in ast.walk(scope)):
        if isinstance(node, ast.Try) and _swallows(node):
            yield ctx.finding(rule, "catches exceptions in the forward path instead of letting them fail", node,
                              evidence=_try_evidence(ctx, node))
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if (facts.qualname(getattr(item.context_expr, "func", item.context_expr)) or "").endswith("suppress"):
                    yield ctx.finding(rule, "suppresses exceptions in the forward path", node)
    for node in module_tries:
        builds_kernel = any(facts.is_load_inline(n) or isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(node))
        if builds_kernel and _swallows(node):
            yield ctx.finding(rule, "catches a failure to import or build its kernels and carries on without them",
                              node, evidence=_try_evidence(ctx, node))


def _swallows(node: ast.Try) -> bool:
    return any(not any(isinstance(s, ast.Raise) for s in handler.body) for handler in node.handlers)


def _try_evidence(ctx: PolicyContext, node: ast.Try) -> str:
    handler = next(h for h in node.handlers if not any(isinstance(s, ast.Raise) for s in h.body))
    return f"try: ... {ctx.facts.segment(handler, 120)}"


def detect_reference_model(ctx: PolicyContext) -> Iterator[Finding]:
    """Imports of the reference: a name `Model` from any module, or a module named like the reference.

    A `Model` class the candidate defines itself (KernelBench prompts contain one) is its own code;
    whether it ran instead of the candidate's kernels is judged at run time."""
    for node in ast.walk(ctx.facts.tree):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            from_reference = (node.module or "").split(".")[0] in REFERENCE_MODULES
            for alias in node.names:
                # `from . import reference` names the module in the alias
                if alias.name == "Model" or from_reference or (node.module is None and alias.name in REFERENCE_MODULES):
                    yield ctx.finding("KJ104-reference-model-used", f"imports {alias.name} from {module}", node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in REFERENCE_MODULES:
                    yield ctx.finding("KJ104-reference-model-used", f"imports the module {alias.name}", node)


def detect_no_kernel(ctx: PolicyContext) -> Iterator[Finding]:
    """No kernel defined at all. Whether a defined kernel is launched is decided at run time.

    With an explicit `pytorch` backend, check_candidate drops this rule (CUSTOM_KERNEL_RULES)."""
    facts = ctx.facts
    if not facts.python_kernels and not facts.load_inline_calls:
        where = facts.model_classes[0] if facts.model_classes else None
        yield ctx.finding("KJ107-no-custom-kernel", "defines no @triton.jit or @cuda.jit kernel and calls no load_inline",
                          where,
                          evidence=f"class {where.name}" if isinstance(where, ast.ClassDef) else None)


def detect_outsourcing(ctx: PolicyContext) -> Iterator[Finding]:
    yield from name_findings(ctx, OUTSOURCING_NAMES)


DETECTORS = (detect_fallback, detect_reference_model, detect_no_kernel, detect_outsourcing)
