"""Malformed sources and outputs: clear invalid_input / incorrect messages, never our traceback."""

from __future__ import annotations

from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE, triton_candidate


def test_syntax_error_in_candidate_names_the_line(run_eval):
    result = run_eval(SILU_REFERENCE, "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x)\n")
    assert result.status == EvalStatus.invalid_input
    assert result.error.kind == "syntax_error"
    assert result.error.line == 4
    assert "line 4" in result.error.message and "candidate" in result.error.message


def test_missing_reference_function_is_named(run_eval):
    reference = SILU_REFERENCE.replace("def get_init_inputs", "def get_init_inputz")
    result = run_eval(reference, HONEST_SILU)
    assert result.status == EvalStatus.invalid_input
    assert result.error.kind == "missing_name"
    assert "get_init_inputs" in result.error.message


def test_missing_model_new_is_named(run_eval):
    result = run_eval(SILU_REFERENCE, HONEST_SILU.replace("class ModelNew", "class ModelOld"))
    assert result.status == EvalStatus.invalid_input
    assert "ModelNew" in result.error.message


def test_non_tensor_output_is_incorrect_with_a_clear_message(run_eval):
    candidate = triton_candidate('''
        y = torch.empty_like(x)
        silu_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return {"out": y}
    ''')
    result = run_eval(SILU_REFERENCE, candidate)
    assert result.status == EvalStatus.incorrect
    assert result.error.kind == "invalid_output"
    assert "dict" in result.error.message and "torch.Tensor" in result.error.message


def test_shape_mismatch_is_reported(run_eval):
    candidate = triton_candidate('''
        n = x.numel() - 1
        y = torch.empty(n, dtype=x.dtype, device=x.device)
        silu_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
        return y
    ''')
    result = run_eval(SILU_REFERENCE, candidate, trials=2)
    assert result.status == EvalStatus.incorrect
    assert all(not t.passed for t in result.correctness.trials)
    assert "shape (999,) != expected (1000,)" in result.correctness.trials[0].message


def test_reference_that_raises_is_invalid_input_not_a_candidate_failure(run_eval):
    reference = SILU_REFERENCE.replace("return x * torch.sigmoid(x)", "raise ValueError('bad problem')")
    result = run_eval(reference, HONEST_SILU)
    assert result.status == EvalStatus.invalid_input
    assert result.error.kind == "reference_runtime_error"
    assert "bad problem" in result.error.message
