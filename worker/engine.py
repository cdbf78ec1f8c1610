"""Evaluation engine: runs the stages of one evaluation in order.

Split in two so that builds can run on CPU cores while the GPU is busy timing another job:
`prepare` (validate, policy, build; no GPU) and `execute` (reference, candidate, compare,
timing, verification, reward; needs the device). `evaluate` does both.

Trust boundary: every piece of user code runs in a sandboxed child (worker.launch). The
reference's outputs, the comparison and the verdict stay in this process; the candidate's
child gets the inputs only.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import build, validate
from .launch import RunnerConfig, RunnerPaths, RunnerSession, UserFailure
from .models import (
    Backend,
    Device,
    EnvironmentInfo,
    EvalRequest,
    EvalResult,
    EvalStatus,
)
from .result_builder import ResultBuilder
from .sandbox import ResourceLimits, SandboxUnavailable
from .settings import EngineSettings

log = logging.getLogger(__name__)

# Called with the name of each stage as it starts: validate, build, reference, candidate,
# compare, timing, reward. The service uses it to move a job from `building` to `running`.
StageCallback = Callable[[str], None]


@dataclass
class PreparedJob:
    """A validated and built candidate, ready for the device stage."""

    request: EvalRequest
    backend: Backend
    workdir: Path
    builder: ResultBuilder
    ext_dir: Path | None = None

    def discard(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def evaluate(request: EvalRequest, *, settings: EngineSettings | None = None,
             on_stage: StageCallback | None = None) -> EvalResult:
    settings = settings or EngineSettings.from_env()
    prepared = prepare(request, settings=settings, on_stage=on_stage)
    if isinstance(prepared, EvalResult):
        return prepared
    return execute(prepared, settings=settings, on_stage=on_stage)


def _notify(on_stage: StageCallback | None, stage: str) -> None:
    if on_stage is not None:
        on_stage(stage)


def _torch_version() -> str:
    import torch

    return torch.__version__


def prepare(request: EvalRequest, *, settings: EngineSettings | None = None,
            on_stage: StageCallback | None = None) -> PreparedJob | EvalResult:
    """Validate both sources, apply the static policy and build the candidate (no GPU)."""
    settings = settings or EngineSettings.from_env()
    options = request.options
    builder = ResultBuilder(options)
    builder.environment = EnvironmentInfo(device=options.device, sandbox=options.sandbox,
                                          hostname=socket.gethostname())
    _notify(on_stage, "validate")
    with builder.stage("validate"):
        try:
            validate.validate_reference(request.reference)
            validate.validate_candidate(request.candidate)
        except validate.SourceProblem as problem:
            return builder.fail(EvalStatus.invalid_input, problem.kind, problem.message, line=problem.line)
        from .policy import check_candidate, detect_backend

        backend = options.backend or detect_backend(request.candidate)
        builder.backend = backend
        # The policy gets only an explicit override: handing it the detected backend would tell it
        # a PyTorch-only candidate is meant to be one, and switch the custom-kernel rules off.
        static_rules = check_candidate(request.candidate, options.backend, options.policy)
    builder.add_rules(static_rules)
    if builder.rejected:
        return builder.finish()
    if backend == Backend.cuda and options.device == Device.cpu:
        return builder.fail(EvalStatus.invalid_input, "gpu_required",
                            "this candidate compiles CUDA C++ (load_inline), which needs a GPU: "
                            "submit it with device 'cuda' or send a Triton candidate for CPU mode")
    workdir = settings.work_root / uuid.uuid4().hex
    for sub in ("src_ref", "src_cand", "ref_out", "cand_in", "cand_out"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    (workdir / "src_ref" / "reference.py").write_text(request.reference)
    (workdir / "src_cand" / "candidate.py").write_text(request.candidate)
    prepared = PreparedJob(request=request, backend=backend, workdir=workdir, builder=builder)
    if backend != Backend.cuda:
        # Triton compiles at first launch, on the device: the run stage reports its errors.
        return prepared
    _notify(on_stage, "build")
    with builder.stage("build"):
        try:
            outcome = build.build_cuda_candidate(
                workdir / "src_cand" / "candidate.py", request.candidate, settings=settings,
                limit_s=options.limits.build_s, sandbox=options.sandbox, torch_version=_torch_version())
        except UserFailure as failure:
            prepared.discard()
            if isinstance(failure, build.BuildFailure) and failure.record is not None:
                builder.extra["build"] = failure.record.summary()
            return builder.candidate_failure(failure, during="build")
        except SandboxUnavailable as exc:
            prepared.discard()
            return builder.fail(EvalStatus.sandbox_error, "sandbox_unavailable", str(exc))
    builder.compiled = True
    builder.extra["build_cached"] = outcome.cached
    builder.extra["build"] = outcome.record.summary()  # {"path": fast|full, "reason", "seconds"}
    prepared.ext_dir = outcome.ext_dir
    return prepared


def execute(prepared: PreparedJob, *, settings: EngineSettings | None = None,
            on_stage: StageCallback | None = None) -> EvalResult:
    """Run reference and candidate on the device, compare, time, verify and score."""
    settings = settings or EngineSettings.from_env()
    try:
        from .device_stage import DeviceStage

        return DeviceStage(prepared, settings, on_stage).run()
    except SandboxUnavailable as exc:
        return prepared.builder.fail(EvalStatus.sandbox_error, "sandbox_unavailable", str(exc))
    except Exception as exc:  # an engine bug: logged with context and reported, never hidden
        log.exception("evaluation failed inside the engine (workdir %s)", prepared.workdir)
        return prepared.builder.fail(EvalStatus.sandbox_error, "internal_error",
                                     f"the evaluator failed internally ({type(exc).__name__}: {exc}); "
                                     "this is not the candidate's fault, please report it")
    finally:
        if not settings.keep_workdirs:
            prepared.discard()


def new_seeds(master: int | None, trials: int, pool: int) -> dict:
    """Seeds the candidate cannot know: drawn from a secret master seed unless one is given."""
    import random

    rng = random.Random(master if master is not None else secrets.randbits(63))
    return {
        "trial_seeds": [rng.randrange(2**31) for _ in range(trials)],
        "pool_seeds": [rng.randrange(2**31) for _ in range(pool)],
        "init_seed": rng.randrange(2**31),
        # Drawn last so that the seeds above stay what they were for a given master seed.
        "shape_seeds": [rng.randrange(2**31) for _ in range(2)],
    }


def runner(prepared: PreparedJob, settings: EngineSettings, *, role: str, limit_s: float) -> RunnerSession:
    options = prepared.request.options
    work = prepared.workdir
    if role == "reference":
        paths = RunnerPaths(source=work / "src_ref" / "reference.py", out_dir=work / "ref_out")
    else:
        ext = None
        if prepared.ext_dir is not None:
            ext = build.private_copy(prepared.ext_dir, work / "cand_ext")
        paths = RunnerPaths(source=work / "src_cand" / "candidate.py", out_dir=work / "cand_out",
                            in_dir=work / "cand_in", ext_dir=ext)
    cuda = options.device == Device.cuda
    limits = ResourceLimits(
        cpu_s=int(limit_s * 4) + 60,
        address_space_bytes=None if cuda else 16 * 1024**3,
    )
    config = RunnerConfig(role=role, mode="run", device=options.device.value, paths=paths,
                          sandbox=options.sandbox)
    return RunnerSession(config, settings, limits)


def link_inputs(prepared: PreparedJob) -> None:
    """Give the candidate the inputs file only; the reference's outputs stay behind."""
    source = prepared.workdir / "ref_out" / "inputs.pt"
    target = prepared.workdir / "cand_in" / "inputs.pt"
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


__all__ = ["PreparedJob", "StageCallback", "evaluate", "execute", "prepare"]
