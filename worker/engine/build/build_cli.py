"""`kerneljudge build CANDIDATE.py`: build a CUDA candidate without a GPU, the way the service does.

Prints the path taken (fast, or full and why), the time and the trimmed compiler errors.
Exit code 0 when it built, 1 when the candidate did not compile, 3 when the builder itself could not
run (no sandbox, no CUDA toolkit).
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import asdict
from pathlib import Path

from contract.statuses import SandboxKind

DEFAULT_BUILD_LIMIT_S = 600.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("candidate", type=Path, help="candidate file calling torch.utils.cpp_extension.load_inline")
    parser.add_argument("--json", action="store_true", help="print the build record as JSON")
    parser.add_argument("--full", action="store_true", help="take the full load_inline build (for comparison)")
    parser.add_argument("--arch", default=None,
                        help="TORCH_CUDA_ARCH_LIST to build for (default: this machine's GPU, else 9.0)")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_BUILD_LIMIT_S, help="seconds")
    parser.add_argument("--rebuild", action="store_true",
                        help="build again even when the build cache has this candidate already")
    parser.add_argument("--sandbox", choices=[s.value for s in SandboxKind], default="bwrap")


def _print_summary(result: dict) -> None:
    print(f"build:     {result['status']}   path: {result['path']}   {result['seconds']:.2f}s"
          + ("   (cached)" if result.get("cached") else ""))
    if result["reason"]:
        print(f"fallback:  {result['reason']}")
    for extension in result.get("extensions", []):
        steps = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in extension.get("steps", {}).items())
        print(f"extension: {extension['name']}  {extension['path']}  {extension['seconds']:.2f}s"
              + (f"  [{steps}]" if steps else ""))
        if extension.get("abi_check"):
            print(f"  host ABI check (CPU torch): {extension['abi_check']}")
        if not extension.get("linked", True):
            print("  not linked against CUDA torch (this torch has no CUDA libraries)")
    if result.get("error"):
        print(f"error:     [{result['error']['kind']}] {result['error']['message'][:300]}")
        for line in result["error"]["log"].splitlines()[:40]:
            print(f"  | {line}")


def run(args: argparse.Namespace) -> int:
    from worker.engine.sandbox.spawner import start_spawner

    start_spawner()  # before torch or any thread: the build sandboxes start through it
    import torch

    from worker.config.tree import load_config
    from worker.engine.build.builder import BuildFailure, build_cuda_candidate, cache_key
    from worker.engine.engine_settings import EngineSettings
    from worker.engine.launch import UserFailure
    from worker.engine.sandbox import SandboxUnavailable

    try:
        candidate = args.candidate.read_text()
    except OSError as exc:
        raise SystemExit(f"kerneljudge build: cannot read {args.candidate}: {exc.strerror}") from None
    settings = EngineSettings.from_config(load_config())
    if args.arch:
        settings.cuda_arch_list = args.arch
    build_path = "full" if args.full else "auto"
    if args.rebuild:
        key = cache_key(candidate, torch.__version__, settings, build_path, SandboxKind(args.sandbox))
        shutil.rmtree(settings.build_cache / key, ignore_errors=True)
    result: dict = {"candidate": str(args.candidate)}
    try:
        outcome = build_cuda_candidate(args.candidate.resolve(), candidate, settings=settings,
                                       limit_s=args.time_limit, sandbox=SandboxKind(args.sandbox),
                                       torch_version=torch.__version__, build_path=build_path)
        result.update(status="built", cached=outcome.cached, **asdict(outcome.record))
        code = 0
    except BuildFailure as failure:
        record = asdict(failure.record) if failure.record else {"path": "?", "reason": "", "seconds": 0.0}
        result.update(status="failed", **record,
                      error={"kind": failure.kind, "message": failure.message, "log": failure.detail})
        code = 1
    except UserFailure as failure:
        result.update(status="failed", path="?", reason="", seconds=0.0,
                      error={"kind": failure.kind, "message": failure.message, "log": failure.detail})
        code = 1
    except SandboxUnavailable as exc:
        result.update(status="unavailable", path="?", reason=str(exc), seconds=0.0)
        code = 3
    print(json.dumps(result, indent=2) if args.json else "", end="\n" if args.json else "")
    if not args.json:
        _print_summary(result)
    return code
