"""Two ways to buy a speedup without a faster kernel (issue 23, section 3), through the whole engine on CPU.

- Caching across timed calls: the timing pool's input sets are the same buffers in every block. A candidate
  that keeps its outputs keyed on the data pointers and two sampled values, and returns the stored one on a
  repeated key, got `ok` with speedup 10.6 and nothing flagged. The judge now makes variants of each set
  (values changed at secret positions), the timer writes one before every timed call in the supervisor's
  secret order, and the outputs of a secret sample of calls are checked against the reference's for the
  same variant (KJ-R02).
- Slowing the reference: a candidate's background processes, busy while the reference is timed. The
  supervisor now pauses the candidate's whole sandbox around every reference block.

The attacking candidates are red-team cases (benchmarks/redteam/manifest.json).
"""

from __future__ import annotations

import os
import sys

import pytest

from benchmarks.redteam.corpus import load_corpus
from contract.requests import EvalOptions, EvalRequest, PolicyConfig
from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE
from worker.engine import evaluate
from worker.engine.device_stage import DeviceStage
from worker.engine.policy.registry import RULES
from worker.engine.process_tree import descendants
from worker.engine.reference.judge import JudgeSession
from worker.engine.sandbox import process as process_module

CASES = {case.id: case for case in load_corpus()}
CACHE = CASES["c3_cache_keyed_on_sampled_values"]
LEDGER = CASES["honest_triton_add_buffer_ledger"]
SLOWER = CASES["c3_slow_reference_background_processes"]
ALL_STATIC_OFF = [rule.id for rule in RULES]


def _evaluate(settings, reference: str, candidate: str, *, disabled: tuple = ()):
    options = EvalOptions(timing=True, timing_budget_s=0.5, policy=PolicyConfig(disabled_rules=list(disabled)))
    return evaluate(EvalRequest(reference=reference, candidate=candidate, options=options), settings=settings)


# -- caching across timed calls ---------------------------------------------------------------
def test_an_output_cache_across_timed_calls_is_rejected_with_the_evidence(settings):
    result = _evaluate(settings, CACHE.reference_source, CACHE.candidate_source)
    assert result.status == EvalStatus.rejected and result.reward == 0.0, (result.status, result.error, result.rules)
    assert not [hit for hit in result.rules if not hit.rule.startswith("KJ-R")], "a static rule fired"
    [hit] = [hit for hit in result.rules if hit.rule.startswith("KJ-R02")]
    assert hit.severity == "reject"
    # Which call, which input set and variant, and that the output is the reference's for another variant of
    # the same set: a stored output returned again.
    assert "outputs kept from timed calls differ from the reference's for the same inputs" in hit.evidence
    assert "values changed at secret positions before the call" in hit.evidence or "as generated" in hit.evidence
    assert "an output stored and returned again" in hit.evidence, hit.evidence
    assert all(count >= 1 for count in result.extra.timing_variants.per_input_set)


def test_the_same_ledger_keeping_buffers_it_recomputes_is_accepted(settings):
    result = _evaluate(settings, LEDGER.reference_source, LEDGER.candidate_source)
    assert result.status == EvalStatus.ok and not result.rules, (result.status, result.error, result.rules)
    assert result.timing.clock_check.passed
    assert all(count >= 1 for count in result.extra.timing_variants.per_input_set)


def test_without_variants_the_cache_returns_right_outputs_and_passes(settings):
    # What the variants defend: the same attack with none is `ok` (the outputs it replays are right).
    settings.timing_variants = 0
    settings.reference_cache_entries = 0  # a judge of its own (a cached one keeps the variants it made)
    result = _evaluate(settings, CACHE.reference_source, CACHE.candidate_source)
    assert result.status == EvalStatus.ok, (result.status, result.error, result.rules)
    assert result.extra.timing_variants.per_input_set == [0] * settings.timing_pool_size


# -- background processes while the reference is timed ------------------------------------------
def _cpu_ns(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/schedstat") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _runner_processes(root: int) -> dict[int, int]:
    """CPU time of the sandbox's Python processes (not bwrap's): the runner and its forks."""
    found = {}
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if handle.read().split(b"\0")[0] == sys.executable.encode():
                    found[pid] = _cpu_ns(pid)
        except OSError:
            continue
    return found


@pytest.fixture(params=["freezer", "signal"])
def pause_mode(request, monkeypatch):
    if request.param == "freezer" and os.geteuid() != 0:
        pytest.skip("freezer cgroups are for a root-run service; this run is not root")
    if request.param == "signal":  # as without a freezer cgroup (not root, or none mounted)
        def no_freezer(*_args, **_kwargs):
            raise OSError("no freezer on this host")

        monkeypatch.setattr(process_module, "freeze", no_freezer)
    return request.param


def test_background_processes_of_the_candidate_cannot_run_while_the_reference_is_timed(settings, monkeypatch,
                                                                                       pause_mode):
    seen: dict = {"root": None, "blocks": []}
    real_timing, real_time = DeviceStage._timing, JudgeSession.time

    def timing(self, entry, runner, *args):
        seen["root"] = runner.session.process.pid
        seen["start"] = _runner_processes(seen["root"])
        seen["helpers"] = [pid for pid in seen["start"] if _parent(pid) in seen["start"]]  # the runner's forks
        try:
            return real_timing(self, entry, runner, *args)
        finally:
            seen["end"] = _runner_processes(seen["root"])

    def time_reference(self, *args, **kwargs):
        root = seen["root"]
        before = _runner_processes(root) if root else {}
        try:
            return real_time(self, *args, **kwargs)
        finally:
            if root:
                seen["blocks"].append((before, _runner_processes(root)))

    monkeypatch.setattr(DeviceStage, "_timing", timing)
    monkeypatch.setattr(JudgeSession, "time", time_reference)
    result = _evaluate(settings, SLOWER.reference_source, SLOWER.candidate_source, disabled=tuple(ALL_STATIC_OFF))
    assert result.timing is not None, (result.status, result.error, result.rules)
    # The busy helpers were there, and spun whenever the reference was not timed...
    helpers = seen["helpers"]
    assert len(helpers) == 3, seen["start"]
    assert all(seen["end"][pid] > seen["start"][pid] for pid in helpers), (seen["start"], seen["end"])
    # ... and not once while it was: no process of the candidate got any CPU time in a reference block.
    assert len(seen["blocks"]) >= 3
    for before, after in seen["blocks"]:
        assert set(before) >= set(helpers)
        assert after == before, "a process of the candidate ran while the reference was timed"
    expected = "frozen (cgroup" if pause_mode == "freezer" else "stopped by signal"
    assert result.extra.candidate_paused and all(how.startswith(expected) for how in result.extra.candidate_paused)


def test_an_honest_candidates_timing_is_unaffected_by_the_pauses(settings):
    result = _evaluate(settings, SILU_REFERENCE, HONEST_SILU)
    assert result.status == EvalStatus.ok and not result.rules, (result.status, result.error, result.rules)
    assert result.extra.candidate_paused and all(how.startswith(("frozen", "stopped"))
                                                    for how in result.extra.candidate_paused)
    timing = result.timing
    assert timing.clock_check.passed and timing.speedup_ci95[0] <= timing.speedup <= timing.speedup_ci95[1]


def test_every_timed_block_of_either_side_starts_after_a_ping_answered_off_its_clock(settings, monkeypatch):
    # The candidate's sandbox is frozen through each reference block: the ping is what makes its next block's
    # clock start on a process that runs again (and the reference's on one that has just answered, as alike).
    sent: list[tuple[str, str]] = []
    real_send = process_module.SandboxProcess.send

    def send(self, message, payload=None):
        sent.append((self.name, message.get("op")))
        return real_send(self, message, payload)

    monkeypatch.setattr(process_module.SandboxProcess, "send", send)
    result = _evaluate(settings, SILU_REFERENCE, HONEST_SILU)
    assert result.status == EvalStatus.ok and result.timing is not None, (result.status, result.error, result.rules)
    timed = [index for index, (_, op) in enumerate(sent) if op == "time"]
    sides = {sent[index][0] for index in timed}
    assert len(sides) == 2, sent  # the judge's blocks and the candidate's
    assert len(timed) >= 2 * (1 + result.timing.pairs)
    assert all(sent[index - 1] == (sent[index][0], "ping") for index in timed), sent
