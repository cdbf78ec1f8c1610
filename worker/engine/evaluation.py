"""Evaluation engine: runs the stages of one evaluation in order.

Split in two so that builds can run on CPU cores while the GPU is busy timing another job:
`prepare` (validate, policy, build; no GPU) and `execute` (reference, candidate, compare,
timing, verification, reward; needs the device). `evaluate` does both.

Trust boundary: every piece of user code runs in a sandboxed child (worker.engine.launch). The
reference runs in the problem's judge (worker.engine.reference.judge), which keeps its outputs and compares; the
verdict is made in this process; a candidate's runner gets the inputs only.
"""

from __future__ import annotations

import logging
import socket
import uuid

from contract.requests import EvalRequest
from contract.results import EnvironmentInfo, ErrorKind, EvalResult
from contract.statuses import Backend, Device, EvalStatus
from worker.engine import validate
from worker.engine.build import builder as build
from worker.engine.build import triton_cache
from worker.engine.device_stage import DeviceStage
from worker.engine.engine_settings import EngineSettings
from worker.engine.launch import UserFailure
from worker.engine.prepared_job import PreparedJob, StageCallback
from worker.engine.prepared_job import notify as _notify
from worker.engine.sandbox import SandboxUnavailable
from worker.engine.stage import Stage
from worker.engine.verdict.result_builder import ResultBuilder

log = logging.getLogger(__name__)


def evaluate(request: EvalRequest, *, settings: EngineSettings | None = None,
             on_stage: StageCallback | None = None) -> EvalResult:
    settings = settings or EngineSettings.configured()
    prepared = prepare(request, settings=settings, on_stage=on_stage)
    if isinstance(prepared, EvalResult):
        return prepared
    return execute(prepared, settings=settings, on_stage=on_stage)


def _torch_version() -> str:
    import torch

    return torch.__version__


def prepare(request: EvalRequest, *, settings: EngineSettings | None = None,
            on_stage: StageCallback | None = None) -> PreparedJob | EvalResult:
    """Validate both sources, apply the static policy and build the candidate (no GPU)."""
    settings = settings or EngineSettings.configured()
    options = request.options
    builder = ResultBuilder(options)
    builder.environment = EnvironmentInfo(device=options.device, sandbox=options.sandbox,
                                          hostname=socket.gethostname())
    _notify(on_stage, Stage.validate)
    with builder.stage(Stage.validate):
        try:
            validate.validate_reference(request.reference)
            validate.validate_candidate(request.candidate)
        except validate.SourceProblem as problem:
            return builder.fail(EvalStatus.invalid_input, problem.kind, problem.message, line=problem.line)
        from worker.engine.policy import check_candidate, detect_backend

        backend = options.backend or detect_backend(request.candidate)
        builder.backend = backend
        # The policy gets only an explicit override: handing it the detected backend would tell it
        # a PyTorch-only candidate is meant to be one, and switch the custom-kernel rules off.
        static_rules = check_candidate(request.candidate, options.backend, options.policy)
    builder.add_rules(static_rules)
    if builder.rejected:
        return builder.finish()
    if backend == Backend.cuda and options.device == Device.cpu:
        return builder.fail(EvalStatus.invalid_input, ErrorKind.gpu_required,
                            "this candidate compiles CUDA C++ (load_inline), which needs a GPU: "
                            "submit it with device 'cuda' or send a Triton candidate for CPU mode")
    # Only the build reads files: runners get their sources and tensors over their pipes.
    workdir = settings.work_root / uuid.uuid4().hex
    (workdir / "src_cand").mkdir(parents=True, exist_ok=True)
    (workdir / "src_cand" / "candidate.py").write_text(request.candidate)
    prepared = PreparedJob(request=request, backend=backend, workdir=workdir, builder=builder)
    if backend != Backend.cuda:
        # Triton compiles at first launch, on the device: the run stage reports its errors. Its
        # kernels compile once per candidate source: the runner starts from the source's own cache.
        if options.device == Device.cuda:
            prepared.ext_dir = triton_cache.folder_for(settings.triton_cache, request.candidate)
        return prepared
    _notify(on_stage, Stage.build)
    with builder.stage(Stage.build):
        try:
            outcome = build.build_cuda_candidate(
                workdir / "src_cand" / "candidate.py", request.candidate, settings=settings,
                limit_s=options.limits.build_s, sandbox=options.sandbox, torch_version=_torch_version())
        except UserFailure as failure:
            prepared.discard()
            if isinstance(failure, build.BuildFailure) and failure.record is not None:
                builder.extra.build = failure.record.summary()
            return builder.candidate_failure(failure, during="build")
        except SandboxUnavailable as exc:
            prepared.discard()
            return builder.fail(EvalStatus.sandbox_error, ErrorKind.sandbox_unavailable, str(exc))
    builder.compiled = True
    builder.extra.build_cached = outcome.cached
    builder.extra.build = outcome.record.summary()
    prepared.ext_dir = outcome.ext_dir
    return prepared


def execute(prepared: PreparedJob, *, settings: EngineSettings | None = None,
            on_stage: StageCallback | None = None) -> EvalResult:
    """Run reference and candidate on the device, compare, time, verify and score."""
    settings = settings or EngineSettings.configured()
    try:
        return DeviceStage(prepared, settings, on_stage).run()
    except SandboxUnavailable as exc:
        return prepared.builder.fail(EvalStatus.sandbox_error, ErrorKind.sandbox_unavailable, str(exc))
    except Exception as exc:  # an engine bug: logged with context and reported, never hidden
        log.exception("evaluation failed inside the engine (workdir %s)", prepared.workdir)
        return prepared.builder.fail(EvalStatus.sandbox_error, ErrorKind.internal_error,
                                     f"the evaluator failed internally ({type(exc).__name__}: {exc}); "
                                     "this is not the candidate's fault, please report it")
    finally:
        if not settings.keep_workdirs:
            prepared.discard()


__all__ = ["PreparedJob", "StageCallback", "evaluate", "execute", "prepare"]
