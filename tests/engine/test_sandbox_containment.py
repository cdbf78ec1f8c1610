"""Issue 15 through the real engine on CPU (judge and candidate in bubblewrap, static rules off): a
secret of the server is nowhere a candidate or a reference can look, and floods and fills stop at
their caps with a verdict that says so, while the host folder behind the run stays empty."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import threading
from pathlib import Path

import pytest

from contract.statuses import EvalStatus
from tests.engine.conftest import SILU_KERNEL, SILU_REFERENCE, TRITON_HEADER, triton_candidate
from tests.engine.test_failures import LAUNCH, NO_STATIC_POLICY
from tests.sandbox.test_containment import uid_python  # noqa: F401 - a fixture
from worker.engine import sandbox_pool
from worker.engine.sandbox.spec import MIB

REPO = Path(__file__).resolve().parents[2]
SECRET = "kj-engine-secret-9b3e27"

# Every /proc entry the sandbox sees, for the secret and for the name of the API keys variable. The
# source holds both reversed, so that the running code's own files and memory maps hold neither.
SCAN = f'''
import os

def _places():
    wanted = [w[::-1].encode() for w in ({SECRET[::-1]!r}, {"KERNELJUDGE_API_KEYS"[::-1]!r})]
    found, pids = [], 0
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        pids += 1
        paths = [f"/proc/{{pid}}/{{n}}" for n in ("environ", "cmdline", "maps")]
        try:
            paths += [f"/proc/{{pid}}/fd/{{fd}}" for fd in os.listdir(f"/proc/{{pid}}/fd")]
        except OSError:
            pass
        for path in paths:
            try:
                data = open(path, "rb").read(1 << 20) if os.path.isfile(path) or "/fd/" not in path else b""
                data += os.readlink(path).encode() if "/fd/" in path else b""
            except OSError:
                continue
            found += [path for w in wanted if w in data]
    return pids, found
'''

SCANNING_CANDIDATE = triton_candidate(LAUNCH + '''
pids, found = _places()
print("candidate scanned", pids, "processes; found:", found)
return y
''', extra=SCAN)

# The reference is untrusted code too: its output moves (and the honest candidate fails) if it finds either.
SCANNING_REFERENCE = SCAN + SILU_REFERENCE.replace("return x * torch.sigmoid(x)",
                                                  "return x * torch.sigmoid(x) + float(len(_places()[1]))")



def flooding_at_construction(imports: str, flood: str) -> str:
    """An honest SiLU whose constructor first starts far more threads or processes than the cap allows;
    without the cap it gets to the end, and the job is ok."""
    return (TRITON_HEADER + imports + SILU_KERNEL + "\nclass ModelNew(torch.nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n" + textwrap.indent(flood, " " * 8)
            + "\n    def forward(self, x):\n" + textwrap.indent(LAUNCH + "return y", " " * 8) + "\n")


# Small stacks: the address-space cap of a CPU sandbox is not what should stop the threads.
THREAD_FLOOD = flooding_at_construction("import threading\n", """\
self.stop = threading.Event()
threading.stack_size(1 << 16)
for _ in range(3000):
    threading.Thread(target=self.stop.wait, daemon=True).start()""")

PROCESS_FLOOD = flooding_at_construction("import os\n", """\
for _ in range(3000):
    os.posix_spawn("/bin/sleep", ["sleep", "600"], {})""")

FILLS = triton_candidate(LAUNCH + '''
import errno
try:
    open("/kj/ext-built/planted", "wb").write(b"x")  # the built extension is read-only
    raise AssertionError("wrote into the built extension")
except OSError as exc:
    assert exc.errno == errno.EROFS, exc
block = b"x" * (1 << 20)
with open(PLACE + "/fill", "wb") as handle:
    for _ in range(256):
        handle.write(block)
        handle.flush()
return y
''', extra="import os\n")


def test_a_planted_secret_is_nowhere_the_candidate_or_the_reference_can_look(run_eval, monkeypatch):
    monkeypatch.setenv("KERNELJUDGE_API_KEYS", f"{SECRET}:admin,other-key")
    monkeypatch.setenv("SECRET", SECRET)
    result = run_eval(SCANNING_REFERENCE, SCANNING_CANDIDATE, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.ok, (result.error, result.candidate_log)
    assert "found: []" in result.candidate_log
    assert SECRET not in result.model_dump_json()


@pytest.mark.gpu
def test_on_the_gpu_a_planted_secret_is_invisible_and_a_flood_stops_at_the_cap(run_eval, monkeypatch):
    monkeypatch.setenv("KERNELJUDGE_API_KEYS", f"{SECRET}:admin,other-key")
    monkeypatch.setenv("SECRET", SECRET)
    scan = run_eval(SCANNING_REFERENCE, SCANNING_CANDIDATE, device="cuda", policy=NO_STATIC_POLICY)
    assert scan.status == EvalStatus.ok, (scan.error, scan.candidate_log)
    assert "found: []" in scan.candidate_log and SECRET not in scan.model_dump_json()
    flood = run_eval(SILU_REFERENCE, THREAD_FLOOD, device="cuda", policy=NO_STATIC_POLICY)
    assert flood.status == EvalStatus.runtime_error and "can't start new thread" in flood.error.message


def test_a_thread_flood_stops_at_the_cap_and_the_verdict_says_so(run_eval):
    result = run_eval(SILU_REFERENCE, THREAD_FLOOD, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.runtime_error, result.error
    assert "can't start new thread" in result.error.message


def test_a_process_flood_stops_at_the_cap_and_the_verdict_says_so(run_eval):
    result = run_eval(SILU_REFERENCE, PROCESS_FLOOD, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.runtime_error, result.error
    assert "Resource temporarily unavailable" in result.error.message


def test_dev_shm_fill_stops_at_its_cap(run_eval, settings):
    settings.sandbox_shm_bytes = 64 * MIB
    result = run_eval(SILU_REFERENCE, FILLS.replace("PLACE", '"/dev/shm"'), policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.runtime_error, result.error
    assert "No space left on device" in result.error.message


def test_extension_folder_fill_stops_at_its_cap_and_the_host_folder_stays_empty(run_eval, settings, monkeypatch):
    settings.sandbox_ext_bytes = 64 * MIB
    sizes: list[int] = []
    closed = threading.Event()
    close = sandbox_pool.WarmRunner.close

    def measured_close(runner) -> None:
        if runner.slot_dir is not None and not closed.is_set():
            sizes.append(sum(p.stat().st_size for p in runner.slot_dir.rglob("*") if p.is_file()))
            closed.set()
        close(runner)

    monkeypatch.setattr(sandbox_pool.WarmRunner, "close", measured_close)
    result = run_eval(SILU_REFERENCE, FILLS.replace("PLACE", 'os.environ["TORCH_EXTENSIONS_DIR"]'),
                      policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.runtime_error, result.error
    assert "No space left on device" in result.error.message
    assert closed.wait(60), "the used runner was never retired"
    assert sizes == [0]


# Through the engine with every sandbox (judge and candidate) running as an unprivileged uid of its
# own: what each needs is reachable by that uid, and the caps and the environment hold there too.
AS_UID = """
import json, sys
from pathlib import Path
from worker.engine import evaluate
from worker.engine.engine_settings import EngineSettings
from contract.requests import EvalOptions, EvalRequest
from worker.engine.sandbox.spec import IsolationConfig
cases = json.loads(sys.argv[1])
settings = EngineSettings.configured()
settings.cpu_threads = 1
settings.isolation = IsolationConfig(mode="uid", lock_dir=Path(cases.pop("lock_dir")))
out = {}
for name, (reference, candidate, policy) in cases.items():
    request = EvalRequest(reference=reference, candidate=candidate, options=EvalOptions(timing=False, policy=policy))
    result = evaluate(request, settings=settings)
    out[name] = {"status": result.status.value, "error": result.error.message if result.error else None,
                 "log": result.candidate_log, "json": result.model_dump_json()}
print(json.dumps(out))
"""


def test_judge_and_candidate_running_as_their_own_uids(uid_python, tmp_path):  # noqa: F811 - fixture
    policy = NO_STATIC_POLICY.model_dump()
    cases = {"scan": [SCANNING_REFERENCE, SCANNING_CANDIDATE, policy],
             "threads": [SILU_REFERENCE, THREAD_FLOOD, policy], "lock_dir": str(tmp_path / "uids")}
    work = tmp_path / "data"
    env = {"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", ""), "KERNELJUDGE_DATA_DIR": str(work),
           "KERNELJUDGE_API_KEYS": f"{SECRET}:admin", "SECRET": SECRET, "KERNELJUDGE_WARM_SANDBOXES": "0"}
    done = subprocess.run([str(uid_python), "-c", AS_UID, json.dumps(cases)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["scan"]["status"] == "ok", out["scan"]
    assert "found: []" in out["scan"]["log"] and SECRET not in out["scan"]["json"]
    assert out["threads"]["status"] == "runtime_error" and "can't start new thread" in out["threads"]["error"]
