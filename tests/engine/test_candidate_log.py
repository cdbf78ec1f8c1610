"""`candidate_log` is the candidate's own output: what it prints at import and in forward (the
traced call included), on stdout and stderr, and nothing the harness printed (the runner's warm-up
before the job, Kineto's `profiler_start`/`profiler_stop` around the kernel trace)."""

from __future__ import annotations

from collections import Counter

import pytest

from contract.statuses import EvalStatus
from engine.conftest import SILU_REFERENCE, triton_candidate

PRINTING_SILU = triton_candidate('''
    print("cand: forward")
    y = torch.empty_like(x)
    n = x.numel()
    silu_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
    return y
''', extra='import sys\nprint("cand: imported")\nsys.stderr.write("cand: stderr at import\\n")\n')


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_candidate_log_holds_the_candidates_lines_only(run_eval, device):
    # On a GPU the trace also starts CUPTI; its lines must stay out too.
    result = run_eval(SILU_REFERENCE, PRINTING_SILU, trials=2, device=device)
    assert result.status == EvalStatus.ok, result.error
    assert result.coverage is not None, "the kernel trace ran (it calls forward once more)"
    lines = Counter(result.candidate_log.splitlines())
    shape_calls = 1 if result.correctness.shape_trial and result.correctness.shape_trial.ran else 0
    probe_calls = sum(1 for probe in result.correctness.probes if probe.ran)
    forward_calls = len(result.correctness.trials) + probe_calls + shape_calls + 1  # trials, probes, doubled batch, trace
    assert lines == Counter({"cand: imported": 1, "cand: stderr at import": 1, "cand: forward": forward_calls})
