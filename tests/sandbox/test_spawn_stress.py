"""Sandboxes start through one spawner process: hundreds of starts from many threads, while other threads
import modules and log, never hang, and the supervisor itself never forks.

The fault (two H100s, 2026-11-25): sandbox starts forked the supervisor, a process full of threads, and ran
Python in the child before exec; children inherited locks other threads held and hung before exec, and
the service with them. The stress runs in a process of its own with a hard time limit: a hang fails it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STARTS = 240
LIMIT_S = 600

STRESS = r'''
import importlib, json, logging, os, sys, tempfile, threading, time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, sys.argv[1])
from worker.engine.sandbox import ResourceLimits, SandboxProcess, SandboxSpec
from worker.engine.sandbox.spawner import start_spawner

starts = int(sys.argv[2])
start_spawner()  # as `kerneljudge serve` does, before any thread

forks = []
os.register_at_fork(before=lambda: forks.append(threading.current_thread().name))

# Threads that hold the import lock and logging's locks as often as they can, as the GPU host's did.
package = tempfile.mkdtemp(prefix="kj-stress-modules-")
sys.path.insert(0, package)
stop = threading.Event()
logging.basicConfig(level=logging.DEBUG, handlers=[logging.FileHandler(os.path.join(package, "log"))])

def importer(n):
    i = 0
    while not stop.is_set():
        name = f"kj_stress_{n}_{i}"
        with open(os.path.join(package, name + ".py"), "w") as handle:
            handle.write("import logging\nlog = logging.getLogger(__name__)\nlog.debug('imported')\n")
        importlib.invalidate_caches()
        importlib.import_module(name)
        i += 1

def logger(n):
    log = logging.getLogger(f"stress{n}")
    while not stop.is_set():
        log.info("line %d", n)

noise = [threading.Thread(target=f, args=(n,), daemon=True) for n in range(3) for f in (importer, logger)]
for thread in noise:
    thread.start()

REPLY = "import os, json; os.write(int(os.environ['KJ_MSG_FD']), (json.dumps({'pid': os.getpid()}) + '\\n').encode())"

def one(index):
    spec = SandboxSpec(env={"PATH": "/usr/bin:/bin"}, limits=ResourceLimits(extra_processes=64))
    process = SandboxProcess(spec, [sys.executable, "-I", "-S", "-c", REPLY], name=f"stress{index}")
    process.start()
    try:
        return "pid" in process.receive(120)
    finally:
        process.close(grace_s=0)

started = time.monotonic()
with ThreadPoolExecutor(16) as pool:
    answered = sum(pool.map(one, range(starts)))
stop.set()
print(json.dumps({"answered": answered, "forks": forks, "seconds": time.monotonic() - started}))
'''


def test_hundreds_of_sandbox_starts_from_many_threads_never_hang_and_never_fork_the_supervisor():
    done = subprocess.run([sys.executable, "-c", STRESS, str(REPO), str(STARTS)], capture_output=True, text=True,
                          timeout=LIMIT_S, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["answered"] == STARTS
    # Not one fork of the threaded supervisor: every sandbox was forked by the single-threaded spawner.
    assert report["forks"] == []
