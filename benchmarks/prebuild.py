"""Build CUDA candidates in parallel into the engine's build cache, with no GPU in use.

    python -m benchmarks.prebuild FILE_OR_GLOB... [--threads 8]

The service does the same per job (builds on CPU threads while the GPU times other jobs);
here it lets a GPU session spend its minutes on evaluations instead of serial compiles.
Later evaluations of the same source find the build in KERNELJUDGE_DATA_DIR/build-cache.
"""

from __future__ import annotations

import argparse
import glob
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from contract.statuses import Backend, SandboxKind
from worker.engine.build import builder as build
from worker.engine.engine_settings import EngineSettings
from worker.engine.launch import UserFailure
from worker.engine.policy import detect_backend


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("patterns", nargs="+")
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    settings = EngineSettings.configured()
    import torch

    files = sorted({Path(f) for pattern in args.patterns for f in glob.glob(pattern, recursive=True)})
    cuda_files = [f for f in files if detect_backend(f.read_text()) == Backend.cuda]

    def one(path: Path) -> str:
        start = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "candidate.py"
            source.write_text(path.read_text())
            try:
                outcome = build.build_cuda_candidate(source, source.read_text(), settings=settings, limit_s=600,
                                                     sandbox=SandboxKind.bwrap, torch_version=torch.__version__)
                state = "cached" if outcome.cached else "built"
            except UserFailure as failure:
                state = f"{failure.kind}: {failure.message[:200]}"
        return f"{path}: {state} in {time.monotonic() - start:.1f}s"

    start = time.monotonic()
    with ThreadPoolExecutor(args.threads) as pool:
        for line in pool.map(one, cuda_files):
            print(line, flush=True)
    print(f"{len(cuda_files)} CUDA candidates in {time.monotonic() - start:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
