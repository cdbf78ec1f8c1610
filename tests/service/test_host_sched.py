"""The throughput benchmark's host sampler (benchmarks/host_sched.py) puts a thread's CPU time in its sandbox's
class, read from the role the service writes into every sandbox's environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.host_sched import SchedSampler

# Busy for a fixed amount of work, then says so and waits to be let go (so that the sampler's last look finds
# it alive: a thread that ends between two looks loses what it ran since the last one).
CHILD = "x = 0\nfor i in range(3_000_000): x += i\nprint('done', flush=True)\ninput()\n"


@pytest.mark.skipif(not SchedSampler().available, reason="this kernel keeps no per-thread schedstat")
@pytest.mark.parametrize(("role", "mode", "purpose", "klass"), [
    ("candidate", "build", None, "build"), ("reference", "run", None, "judge"), ("candidate", "run", None, "runner"),
    ("reference", "run", "compile-baseline", "baseline")])
def test_a_sandbox_s_threads_count_in_its_role(role, mode, purpose, klass):
    env = {**os.environ, "KJ_ROLE": role, "KJ_MODE": mode, **({"KJ_PURPOSE": purpose} if purpose else {})}
    with SchedSampler(server_pid=os.getpid(), every_s=0.05) as sampler:
        child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline().strip() == "done"
    child.communicate("\n", timeout=30)
    klass_seen, cpu_s = sampler.process(child.pid) or ("unseen", 0.0)
    assert (klass_seen, cpu_s > 0.05) == (klass, True)  # its loop ran, and counted in its role
    assert sampler.totals()[klass].cpu_s >= cpu_s and klass in sampler.summary()
    assert sampler.process(os.getpid())[0] == "server"
