"""Jobs sharing a worker: a warm runner serves one candidate, a problem's judge serves jobs of that
problem only, and what one candidate does (crash, hang, planting files) changes no other verdict."""

from __future__ import annotations

from contract.requests import StageLimits
from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE, triton_candidate
from tests.engine.test_failures import LAUNCH, NO_STATIC_POLICY


def _verdict(result) -> tuple:
    return (result.status, [(t.passed, t.max_abs_error) for t in result.correctness.trials])


def test_a_crash_or_hang_in_one_candidate_leaves_the_next_verdicts_unchanged(run_eval):
    first = run_eval(SILU_REFERENCE, HONEST_SILU, seed=3)
    crashed = run_eval(SILU_REFERENCE, triton_candidate("import os\nos._exit(3)"), seed=3, policy=NO_STATIC_POLICY)
    hung = run_eval(SILU_REFERENCE, triton_candidate(LAUNCH + "while True:\n    pass"), seed=3,
                    limits=StageLimits(run_s=8), policy=NO_STATIC_POLICY)
    again = run_eval(SILU_REFERENCE, HONEST_SILU, seed=3)
    assert crashed.status == EvalStatus.runtime_error and hung.status == EvalStatus.timeout
    assert first.status == EvalStatus.ok and _verdict(again) == _verdict(first)
    # The same judge served all four: the candidates' failures did not touch it.
    assert [r.extra.reference_cache for r in (crashed, hung, again)] == ["hit", "hit", "hit"]


PLANT = triton_candidate(LAUNCH + '''
import os
os.makedirs("/tmp/triton-cache/planted", exist_ok=True)
open("/tmp/planted-by-an-earlier-candidate", "w").write("x")
return y
''')

LOOK = triton_candidate(LAUNCH + '''
import os
found = [p for p in ("/tmp/planted-by-an-earlier-candidate", "/tmp/triton-cache/planted") if os.path.exists(p)]
print("found:", found)
return y if not found else y * 0
''')


def test_a_runner_is_used_once_nothing_a_candidate_leaves_reaches_the_next(run_eval):
    planted = run_eval(SILU_REFERENCE, PLANT, policy=NO_STATIC_POLICY)
    looked = run_eval(SILU_REFERENCE, LOOK, policy=NO_STATIC_POLICY)
    assert planted.status == EvalStatus.ok
    assert looked.status == EvalStatus.ok, looked.candidate_log
    assert "found: []" in looked.candidate_log


SEARCH = triton_candidate(LAUNCH + '''
import os, sys
found = []
# Everything but the system and the read-only Python installation (whose test data has .npy files),
# and the folder this candidate's own source was written to.
system = ("/proc", "/sys", "/usr", "/dev", "/lib", "/bin", "/sbin", "/opt", "/etc", sys.prefix, sys.base_prefix)
own = os.path.dirname(os.path.abspath(__file__))
for root, dirs, files in os.walk("/"):
    if root.startswith(system) or root == own:
        dirs[:] = []
        continue
    dirs[:] = [d for d in dirs if os.path.join(root, d) != own]
    found += [os.path.join(root, f) for f in files if f.endswith((".pt", ".pth", ".npy"))]
    found += [os.path.join(root, d) for d in dirs if "kerneljudge" in d or d.startswith("kj-")]
others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
others = [p for p in others if os.path.exists(f"/proc/{p}/cmdline")
          and b"sandbox_side" in open(f"/proc/{p}/cmdline", "rb").read()
          and int(p) != os.getppid()]
print("found:", found, "other runners:", others)
return y if not (found or others) else y * 0
''')


def test_a_candidate_finds_no_other_jobs_inputs_outputs_or_cached_reference(run_eval):
    # Another problem's judge and this problem's judge are both alive (the cache keeps them).
    run_eval(SILU_REFERENCE.replace("N = 1000", "N = 512"), HONEST_SILU)
    result = run_eval(SILU_REFERENCE, SEARCH, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.ok, result.candidate_log
    assert "found: [] other runners: []" in result.candidate_log
