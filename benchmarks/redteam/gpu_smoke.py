"""Engine-free smoke test of the GPU cases: does each candidate build, run and match the reference?

Runs each case in its own subprocess (with a time limit), directly on torch + CUDA, so it works
on a bare GPU machine without the engine or pydantic. It checks that the corpus is real code
(honest kernels are correct; attacks behave as their descriptions say), not the verdicts:

    python3 -m benchmarks.redteam.gpu_smoke [--jobs 8] [--timeout 240] [--cases GLOB]
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_one(case: dict) -> dict:
    """In the child: build both models, run them on CUDA twice with fresh inputs, compare."""
    import torch

    reference = _load(CORPUS_DIR / case["reference"], "kj_reference")
    candidate = _load(CORPUS_DIR / case["candidate"], "kj_candidate")
    torch.manual_seed(0)
    ref_model = reference.Model(*reference.get_init_inputs()).cuda()
    torch.manual_seed(0)
    cand_model = candidate.ModelNew(*reference.get_init_inputs()).cuda()
    worst = 0.0
    for trial in range(2):
        torch.manual_seed(100 + trial)
        inputs = [x.cuda() for x in reference.get_inputs()]
        expected = ref_model(*[x.clone() for x in inputs])
        got = cand_model(*[x.clone() for x in inputs])
        torch.cuda.synchronize()
        if type(got) is not torch.Tensor or got.shape != expected.shape:
            return {"status": "bad-output", "detail": f"{type(got).__name__} {getattr(got, 'shape', None)}"}
        worst = max(worst, (got.float() - expected.float()).abs().max().item())
    return {"status": "match" if worst <= 1e-3 else "mismatch", "max_abs_error": worst}


def run_case(case: dict, timeout: float) -> dict:
    started = time.monotonic()
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=tempfile.mkdtemp(prefix=f"kj_{case['id']}_"))
    command = [sys.executable, "-m", "benchmarks.redteam.gpu_smoke", "--child", json.dumps(case)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=CORPUS_DIR.parents[1])
    except subprocess.TimeoutExpired:
        return {"id": case["id"], "status": "timeout", "seconds": round(time.monotonic() - started, 1)}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{\"kj_result\"")]
    if lines:
        result = json.loads(lines[-1])["kj_result"]
    else:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        result = {"status": f"exit-{done.returncode}", "detail": " | ".join(tail)[:300]}
    result.update(id=case["id"], seconds=round(time.monotonic() - started, 1))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--cases", default="*")
    parser.add_argument("--child")
    args = parser.parse_args(argv)
    if args.child:
        try:
            result = run_one(json.loads(args.child))
        except Exception as error:  # reported to the parent as this case's result
            result = {"status": "error", "detail": f"{type(error).__name__}: {error}"[:300]}
        print(json.dumps({"kj_result": result}), flush=True)
        return 0
    cases = [c for c in json.loads((CORPUS_DIR / "manifest.json").read_text())["cases"]
             if c["needs_gpu"] and fnmatch.fnmatch(c["id"], args.cases)]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: run_case(c, args.timeout), cases))
    for case, result in zip(cases, results, strict=True):
        print(f"{case['id']:<40} expected={case['expected']:<16} smoke={result['status']:<11} "
              f"{result.get('max_abs_error', '')} {result.get('detail', '')} ({result['seconds']}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
