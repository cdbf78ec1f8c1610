"""Extract the candidate source from a raw model completion.

Rules (in this order):
  1. Reasoning: if the completion has a `</think>` tag, only the text after the last one is the
     answer. A `<think>` that is never closed means the model ran out of tokens while reasoning:
     extraction fails.
  2. Fenced blocks (``` or ~~~, CommonMark style, any info string: python, py, cpp, cuda, bare...)
     are collected. A block is *plausible* when it defines `ModelNew` at module level: checked
     with `ast` when the block parses as Python, otherwise textually (a `class ModelNew...:`
     line) for blocks tagged as Python or untagged. A cpp/cuda-tagged block counts only if it
     actually parses as Python defining ModelNew (a mislabelled fence).
  3. A block whose closing fence is missing (the completion stops inside it, e.g. because the
     trainer used "```" as a stop string) is plausible only if it parses as Python.
  4. Several plausible blocks: the last one that parses is chosen (models draft, then refine;
     the final answer comes last); if none parses, the last one is chosen and the engine will
     report its syntax error. The message says how many there were.
  5. No fence at all: the whole answer is accepted if it parses as Python defining ModelNew.

Pure Python (no torch), so the API process and trainer-side adapters can use it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

TARGET_NAME = "ModelNew"

_PYTHON_TAGS = {"python", "py", "python3", "py3", "ipython", "pycon"}
_LANGUAGE_ALIASES = {"c++": "cpp", "cu": "cuda", "cxx": "cpp", "cc": "cpp", "h": "cpp", "hpp": "cpp"}
_FENCE_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_TEXTUAL_CLASS = re.compile(rf"^class[ \t]+{TARGET_NAME}\b[^\n]*:[ \t]*(#[^\n]*)?$", re.MULTILINE)
_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"


@dataclass(frozen=True)
class Extraction:
    """Outcome of extraction. `ok` means `code` holds the candidate source to evaluate."""

    ok: bool
    code: str | None
    language: str | None
    message: str
    candidates_found: int


@dataclass(frozen=True)
class _Block:
    code: str
    language: str | None  # normalised fence tag; None for a bare fence
    start_line: int  # 1-based line of the opening fence in the answer text
    closed: bool


@dataclass(frozen=True)
class _Candidate:
    block: _Block
    parses: bool


def extract_candidate(text: str) -> Extraction:
    """Find the candidate source (defining `ModelNew`) in a model completion; see module doc."""
    if not isinstance(text, str) or not text.strip():
        return Extraction(False, None, None, "the completion is empty; expected a ```python block defining "
                          f"class {TARGET_NAME}", 0)
    answer, reasoning_problem = _strip_reasoning(text)
    if reasoning_problem:
        return Extraction(False, None, None, reasoning_problem, 0)

    blocks = _fenced_blocks(answer)
    if not blocks:
        return _unfenced(answer)

    candidates = [c for c in (_as_candidate(b) for b in blocks) if c is not None]
    if not candidates:
        return Extraction(False, None, None, _none_plausible_message(blocks), 0)

    parsing = [c for c in candidates if c.parses]
    chosen = (parsing or candidates)[-1]
    return Extraction(True, chosen.block.code, _reported_language(chosen), _chosen_message(chosen, candidates,
                                                                                           len(blocks)),
                      len(candidates))


def _strip_reasoning(text: str) -> tuple[str, str | None]:
    close_at = text.rfind(_THINK_CLOSE)
    if close_at >= 0:
        return text[close_at + len(_THINK_CLOSE):], None
    if _THINK_OPEN in text:
        return "", (f"the completion opens {_THINK_OPEN} but never closes it (it ran out of tokens while "
                    "reasoning); no answer to evaluate")
    return text, None


def _fenced_blocks(text: str) -> list[_Block]:
    lines = text.split("\n")
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE_OPEN.match(lines[i].rstrip("\r"))
        if opening is None:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not closing.match(lines[j].rstrip("\r")):
            body.append(_unindent(lines[j].rstrip("\r"), indent))
            j += 1
        closed = j < len(lines)
        blocks.append(_Block("\n".join(body).strip("\n") + "\n", _normalise_tag(opening["info"]), i + 1, closed))
        i = j + 1
    return blocks


def _unindent(line: str, width: int) -> str:
    # CommonMark: content lines lose up to the opening fence's indentation.
    stripped = 0
    while stripped < width and stripped < len(line) and line[stripped] == " ":
        stripped += 1
    return line[stripped:]


def _normalise_tag(info: str) -> str | None:
    words = info.strip().split()
    if not words:
        return None
    tag = words[0].lower().lstrip("{.").rstrip("}")
    if tag in _PYTHON_TAGS:
        return "python"
    return _LANGUAGE_ALIASES.get(tag, tag)


def _as_candidate(block: _Block) -> _Candidate | None:
    parsed = _parse(block.code)
    if parsed is not None:
        return _Candidate(block, True) if _defines_target(parsed) else None
    # It does not parse: a truncated block or a non-Python fence cannot be judged textually.
    if not block.closed or block.language not in (None, "python"):
        return None
    return _Candidate(block, False) if _TEXTUAL_CLASS.search(block.code) else None


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # ValueError: null bytes; RecursionError/MemoryError: pathological nesting.
        return None


def _defines_target(module: ast.Module) -> bool:
    """True if `ModelNew` is bound at module level (class, assignment or import alias)."""
    pending: list[ast.stmt] = list(module.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.ClassDef) and node.name == TARGET_NAME:
            return True
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == TARGET_NAME for t in targets):
                return True
        if isinstance(node, ast.Import | ast.ImportFrom):
            if any((alias.asname or alias.name) == TARGET_NAME for alias in node.names):
                return True
        # Module-level control flow (if/try/with) still binds names at module level.
        if isinstance(node, ast.If | ast.Try | ast.With):
            for field in ("body", "orelse", "finalbody"):
                pending.extend(getattr(node, field, []))
            for handler in getattr(node, "handlers", []):
                pending.extend(handler.body)
    return False


def _unfenced(answer: str) -> Extraction:
    parsed = _parse(answer)
    if parsed is not None and _defines_target(parsed):
        return Extraction(True, answer.strip("\n") + "\n", "python",
                          f"no code fence; the whole completion is Python defining {TARGET_NAME}", 1)
    return Extraction(False, None, None, f"no code block found; put the candidate in a ```python block that "
                      f"defines class {TARGET_NAME}", 0)


def _none_plausible_message(blocks: list[_Block]) -> str:
    unclosed = [b for b in blocks if not b.closed]
    if unclosed and _TEXTUAL_CLASS.search(unclosed[-1].code):
        return (f"the code block opened on line {unclosed[-1].start_line} is never closed and does not parse "
                "(the completion looks truncated); no complete candidate")
    return (f"found {len(blocks)} code block(s) but none defines class {TARGET_NAME}; the candidate must be a "
            f"Python module defining {TARGET_NAME}")


def _reported_language(chosen: _Candidate) -> str:
    # The candidate is always evaluated as a Python module, whatever its fence said.
    return "python" if chosen.parses or chosen.block.language is None else chosen.block.language


def _chosen_message(chosen: _Candidate, candidates: list[_Candidate], n_blocks: int) -> str:
    where = f"the block on line {chosen.block.start_line}"
    notes = []
    if len(candidates) > 1:
        notes.append(f"{len(candidates)} blocks define {TARGET_NAME}; chose the last one that parses ({where})"
                     if chosen.parses else
                     f"{len(candidates)} blocks define {TARGET_NAME} and none parses; chose the last ({where})")
    else:
        notes.append(f"chose {where} ({n_blocks} block(s) in the completion)")
    if not chosen.block.closed:
        notes.append("its closing fence is missing")
    if chosen.block.language not in (None, "python") and chosen.parses:
        notes.append(f"it was fenced as {chosen.block.language!r} but is Python")
    if not chosen.parses:
        notes.append("it does not parse as Python")
    return "; ".join(notes)
