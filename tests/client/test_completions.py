"""extract_candidate: fenced blocks, choice among several, failures reported with a reason."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from worker.engine.completions import extract_candidate

CANDIDATE = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""
DRAFT = CANDIDATE.replace("relu", "sigmoid")
REFERENCE_LIKE = CANDIDATE.replace("ModelNew", "Model")


def fenced(code: str, tag: str = "python", fence: str = "```") -> str:
    return f"{fence}{tag}\n{code}{fence}\n"


@pytest.mark.parametrize("tag", ["python", "py", "Python3", "", "cpp", "cuda"])
def test_single_block_with_any_tag_is_extracted_when_it_is_python(tag):
    out = extract_candidate(f"Here is my kernel:\n\n{fenced(CANDIDATE, tag)}\nIt fuses the ops.")
    assert out.ok
    assert out.code == CANDIDATE
    assert out.language == "python"
    assert out.candidates_found == 1


def test_mislabelled_fence_is_reported_in_message():
    out = extract_candidate(fenced(CANDIDATE, "cuda"))
    assert out.ok and "fenced as 'cuda' but is Python" in out.message


def test_cuda_block_next_to_python_block_chooses_python():
    cuda_src = "__global__ void k(float* x) { x[0] = 1; }\nclass ModelNew : public Base {};\n"
    text = fenced(cuda_src, "cuda") + "\n" + fenced(CANDIDATE)
    out = extract_candidate(text)
    assert out.ok and out.code == CANDIDATE and out.candidates_found == 1


def test_cpp_block_alone_is_not_a_candidate():
    out = extract_candidate(fenced("class ModelNew {\n  int x;\n};\n", "cpp"))
    assert not out.ok
    assert out.code is None
    assert "none defines class ModelNew" in out.message


def test_block_without_modelnew_is_rejected_with_reason():
    out = extract_candidate(fenced(REFERENCE_LIKE))
    assert not out.ok and out.candidates_found == 0
    assert "1 code block(s)" in out.message


def test_prompt_echo_of_reference_is_skipped():
    text = "The reference:\n" + fenced(REFERENCE_LIKE) + "My answer:\n" + fenced(CANDIDATE)
    out = extract_candidate(text)
    assert out.ok and out.code == CANDIDATE and out.candidates_found == 1


def test_several_candidates_choose_the_last_and_say_so():
    out = extract_candidate("Draft:\n" + fenced(DRAFT) + "Final:\n" + fenced(CANDIDATE))
    assert out.ok and out.code == CANDIDATE
    assert out.candidates_found == 2
    assert "2 blocks define ModelNew" in out.message and "last one that parses" in out.message


def test_several_candidates_prefer_one_that_parses_over_a_later_broken_one():
    broken = "class ModelNew(nn.Module):\n    def forward(self, x)\n        return x\n"
    out = extract_candidate(fenced(CANDIDATE) + fenced(broken))
    assert out.ok and out.code == CANDIDATE and out.candidates_found == 2


def test_only_broken_candidate_is_extracted_for_the_engine_to_report():
    broken = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x)\n        return x\n"
    out = extract_candidate(fenced(broken))
    assert out.ok and out.code == broken
    assert "does not parse" in out.message


def test_unclosed_block_that_parses_is_accepted():
    # e.g. the trainer used "```" as a stop string, so the closing fence never appears.
    out = extract_candidate("Answer:\n```python\n" + CANDIDATE)
    assert out.ok and out.code == CANDIDATE
    assert "closing fence is missing" in out.message


def test_truncated_block_fails_and_says_truncated():
    truncated = CANDIDATE + "    def extra(self, x):\n        return torch.matmul(x,"
    out = extract_candidate("```python\n" + truncated)
    assert not out.ok
    assert "never closed" in out.message and "truncated" in out.message


def test_unfenced_python_defining_modelnew_is_accepted():
    out = extract_candidate(CANDIDATE)
    assert out.ok and out.code == CANDIDATE and out.language == "python"
    assert "no code fence" in out.message


def test_unfenced_prose_is_rejected():
    out = extract_candidate("I would write a fused ReLU kernel with class ModelNew.")
    assert not out.ok and "no code block found" in out.message


@pytest.mark.parametrize("text", ["", "   \n\t", None])
def test_empty_completion_is_rejected(text):
    out = extract_candidate(text)
    assert not out.ok and "empty" in out.message


def test_answer_after_think_is_used_and_drafts_inside_reasoning_ignored():
    text = "<think>\nmaybe:\n" + fenced(DRAFT) + "\n</think>\nFinal answer:\n" + fenced(CANDIDATE)
    out = extract_candidate(text)
    assert out.ok and out.code == CANDIDATE and out.candidates_found == 1


def test_unclosed_think_fails():
    out = extract_candidate("<think>\nLet me think about " + fenced(CANDIDATE))
    assert not out.ok and "<think>" in out.message


def test_tilde_fence_and_longer_backtick_fence_with_inner_triple_backticks():
    inner = CANDIDATE + 'DOC = """\n```\nnot a fence end\n"""\n'
    out = extract_candidate(fenced(inner, "python", "````"))
    assert out.ok and out.code == inner
    out = extract_candidate(fenced(CANDIDATE, "python", "~~~"))
    assert out.ok and out.code == CANDIDATE


def test_indented_fence_content_is_unindented():
    indented = "\n".join(("  " + line) if line else "" for line in CANDIDATE.splitlines()) + "\n"
    out = extract_candidate("1. Code:\n  ```python\n" + indented + "  ```\n")
    assert out.ok and out.code == CANDIDATE


def test_crlf_line_endings():
    out = extract_candidate(fenced(CANDIDATE).replace("\n", "\r\n"))
    assert out.ok
    ast.parse(out.code)
    assert "class ModelNew" in out.code


@pytest.mark.parametrize(
    "definition",
    [
        "ModelNew = Model\n",
        "from mykernels import Fused as ModelNew\n",
        "try:\n    import x\nexcept ImportError:\n    pass\nelse:\n    pass\nif True:\n    class ModelNew:\n        pass\n",
    ],
)
def test_other_module_level_bindings_of_modelnew_count(definition):
    out = extract_candidate(fenced("class Model:\n    pass\n" + definition))
    assert out.ok


def test_modelnew_defined_only_inside_a_function_does_not_count():
    code = "def make():\n    class ModelNew:\n        pass\n    return ModelNew\n"
    assert not extract_candidate(fenced(code)).ok


def test_pathological_nesting_does_not_crash():
    out = extract_candidate(fenced("x = " + "(" * 100_000 + "\n"))
    assert not out.ok


def test_null_bytes_do_not_crash():
    out = extract_candidate(fenced("class ModelNew:\n    pass\n\x00\n"))
    assert out.ok and "does not parse" in out.message


def test_module_does_not_import_torch():
    code = "import sys, worker.engine.completions; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
