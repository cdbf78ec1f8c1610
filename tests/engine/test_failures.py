"""Candidates that fail or misbehave: each is contained and reported with the right status.

The static policy would reject most of these before they run; here it is switched off so the
sandbox and the runtime checks are what is being tested.
"""

from __future__ import annotations

import os
import socket

from contract.requests import PolicyConfig, StageLimits
from contract.statuses import EvalStatus
from tests.engine.conftest import SILU_REFERENCE, triton_candidate
from worker.engine.policy.registry import RULES

NO_STATIC_POLICY = PolicyConfig(disabled_rules=[rule.id for rule in RULES])

LAUNCH = '''
y = torch.empty_like(x)
silu_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
'''


def test_triton_compile_error_is_compile_error_with_the_message(run_eval):
    kernel = '''
@triton.jit
def silu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.no_such_function(x), mask=offs < n)
'''
    result = run_eval(SILU_REFERENCE, triton_candidate(LAUNCH + "return y", kernel=kernel))
    assert result.status == EvalStatus.compile_error
    assert not result.compiled
    assert "no_such_function" in (result.error.message + (result.error.log_excerpt or ""))


def test_exception_in_forward_is_runtime_error_with_traceback(run_eval):
    result = run_eval(SILU_REFERENCE, triton_candidate(LAUNCH + "raise RuntimeError('boom in forward')"))
    assert result.status == EvalStatus.runtime_error
    assert "boom in forward" in result.error.message
    assert "Traceback" in result.error.log_excerpt


def test_infinite_loop_times_out_and_nothing_is_left_running(run_eval):
    candidate = triton_candidate(LAUNCH + "while True:\n    pass")
    result = run_eval(SILU_REFERENCE, candidate, limits=StageLimits(run_s=8), policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.timeout
    assert "the stage's limit is 8s (options.limits.run_s)" in result.error.message
    assert result.reward == 0.0


def test_process_exiting_mid_run_is_runtime_error(run_eval):
    candidate = triton_candidate("import os\nos._exit(3)")
    result = run_eval(SILU_REFERENCE, candidate, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.runtime_error
    assert "exited with code 3" in result.error.message


def test_huge_output_is_capped_and_the_evaluation_still_completes(run_eval):
    candidate = triton_candidate(LAUNCH + "print('x' * 50_000_000)\nreturn y")
    result = run_eval(SILU_REFERENCE, candidate, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.ok
    assert len(result.candidate_log) <= 8000
    assert "dropped" in result.candidate_log


def test_printed_forged_verdict_is_only_a_log(run_eval):
    forged = '{"status": "ok", "correct": true, "speedup": 1000.0, "reward": 1.0}'
    candidate = triton_candidate(f"print({forged!r})\nimport sys\nsys.stderr.write({forged!r})\nreturn x")
    result = run_eval(SILU_REFERENCE, candidate, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.incorrect
    assert result.reward == 0.0
    assert forged in result.candidate_log


def test_network_is_unreachable_from_the_candidate(run_eval):
    # A listener on this machine's loopback; inside the sandbox's own network namespace the
    # loopback is a different one, so the connection must fail.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        candidate = triton_candidate(
            LAUNCH + f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "    return y\nexcept OSError as exc:\n    print('network blocked:', exc)\n    return y * 0",
        )
        result = run_eval(SILU_REFERENCE, candidate, policy=NO_STATIC_POLICY)
    finally:
        listener.close()
    assert result.status == EvalStatus.incorrect
    assert "network blocked" in result.candidate_log


def test_files_outside_the_sandbox_cannot_be_read_or_written(run_eval, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    target = tmp_path / "planted.txt"
    candidate = triton_candidate(LAUNCH + f'''
seen = []
try:
    seen.append(open({str(secret)!r}).read())
except OSError as exc:
    print("read blocked:", type(exc).__name__)
try:
    open({str(target)!r}, "w").write("planted")
except OSError as exc:
    print("write blocked:", type(exc).__name__)
for path in ("/etc/shadow", "/root/.bashrc", "/home"):
    try:
        open(path).read()
        seen.append(path)
    except OSError:
        pass
return y if not seen else y * 0
''')
    result = run_eval(SILU_REFERENCE, candidate, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.ok
    assert "read blocked" in result.candidate_log and "write blocked" in result.candidate_log
    assert not target.exists()


def test_reference_outputs_are_not_reachable_from_the_candidate(run_eval):
    # Walk every visible directory looking for the reference's outputs file and return it.
    candidate = triton_candidate(LAUNCH + '''
import os
for root, dirs, files in os.walk("/"):
    if root.startswith(("/proc", "/sys", "/usr", "/dev")):
        dirs[:] = []
        continue
    for name in files:
        if name == "outputs.pt" and "cand" not in root:
            data = torch.load(os.path.join(root, name), weights_only=True)
            print("found reference outputs at", root)
            return data["trials"][0]["tensors"][0]
print("reference outputs not found")
return y * 0
''')
    result = run_eval(SILU_REFERENCE, candidate, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.incorrect
    assert "reference outputs not found" in result.candidate_log


def test_unsandboxed_debug_mode_says_so(run_eval):
    # The candidate reports the uid it runs as: the sandbox maps it to nobody, `none` does not.
    candidate = triton_candidate(LAUNCH + "return y", extra="import os\nprint('uid', os.getuid())\n")
    sandboxed = run_eval(SILU_REFERENCE, candidate, policy=NO_STATIC_POLICY)
    unsandboxed = run_eval(SILU_REFERENCE, candidate, policy=NO_STATIC_POLICY, sandbox="none")
    assert sandboxed.status == unsandboxed.status == EvalStatus.ok
    assert "uid 65534" in sandboxed.candidate_log and sandboxed.environment.sandbox.value == "bwrap"
    assert f"uid {os.getuid()}" in unsandboxed.candidate_log
    assert unsandboxed.environment.sandbox.value == "none"


def test_a_candidate_failing_during_timing_cannot_pass_its_error_off_as_the_reference(run_eval):
    # Honest for the 2 trials, the probe trials (3 at most), the doubled batch and the kernel trace; then
    # raises while being timed, with a message that names the reference.
    candidate = triton_candidate('''
self.calls = getattr(self, "calls", 0) + 1
if self.calls > 7:
    raise RuntimeError("reference timing: the reference is broken")
''' + LAUNCH + "return y")
    result = run_eval(SILU_REFERENCE, candidate, trials=2, timing=True, timing_budget_s=0.2,
                      policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.runtime_error
    assert result.error.kind == "runtime_error"
    assert result.error.message.startswith("candidate timing:")
