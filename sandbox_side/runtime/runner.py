"""Entry point inside the sandbox: start warm, load one user module, serve the supervisor's commands.

A runner starts before it knows its job (the warm pool): it imports torch and Triton and
initialises the device, then says `ready`. `load` hands it the module's source, which it imports
once; a runner never loads a second module. The candidate role is served here; the reference
role is the judge (judge_process.py), which keeps the reference's inputs and outputs in memory
and compares.

Environment: KJ_ROLE (reference|candidate), KJ_DEVICE (cpu|cuda), KJ_MSG_FD (reply channel).
Commands and replies are messages.py's classes (one JSON line each, tensors after it, see wire); a
role's commands are its `handlers` table. A candidate's: Load, Run (the trials with the inputs as
forward left them, then the doubled batch), Trace (the kernels one call ran), TritonCache,
ApplyTimingVariants (the timing pool's variants, from the judge), Time, TimedOutputs, Exit.
Replies: Ready, Loaded, Timing, a Done per command, ErrorReply.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from sandbox_side.runtime import cuda_sync, file_tree, kernel_trace
from sandbox_side.runtime.channel import Channel
from sandbox_side.runtime.failure_kind import FailureKind
from sandbox_side.runtime.harness_output import mark_user_output_start
from sandbox_side.runtime.integrity import IntegrityWatch
from sandbox_side.runtime.loader import (
    UserCodeError,
    classify,
    clone_args,
    fresh_on,
    load_module,
    to_storable,
)
from sandbox_side.runtime.messages import (
    ApplyTimingVariants,
    Command,
    ErrorReply,
    Exit,
    Load,
    Loaded,
    MessageError,
    Ping,
    Pong,
    Ready,
    Run,
    RunDone,
    Time,
    TimedOutputs,
    TimedOutputsDone,
    Timing,
    Trace,
    Traced,
    TritonCache,
    TritonCacheDone,
    VariantsApplied,
    decode_command,
)
from sandbox_side.timing import timer

# A command's handler: called with a command of the class it is registered under.
Handler = Callable[[Any], None]

INPUT_CHECK_TRIALS = 2
# The parts of a Run the runner times (RunDone.parts_s, the result's `candidate_run_s`): the judge's inputs read
# from their sealed file, ModelNew's construction, the trials' inputs onto the device (with the freed memory's
# poison), the first trial's call (Triton's compiles and first launches are in it), the other trials' calls, their
# outputs (and inputs as forward left them) copied to the host, the timing pool onto the device, the doubled batch.
RUN_PARTS = ("read", "construct", "inputs", "first_call", "calls", "outputs", "pool", "shape")
_clock = time.perf_counter
REQUIRED_NAMES = {"reference": ("Model", "get_inputs", "get_init_inputs"), "candidate": ("ModelNew",)}


def environment(device: torch.device, sync_wait_not_set: str | None = None) -> dict:
    info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if device.type == "cuda":
        info["gpu_name"] = torch.cuda.get_device_name(device)
        try:
            with open("/proc/driver/nvidia/version") as handle:
                first = handle.readline()
            match = re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", first)
            info["driver"] = match.group(1) if match else None
        except OSError:
            info["driver"] = None
        wait = cuda_sync.primary_wait(device.index or 0)
        info["cuda_sync_wait"] = (wait.name if wait is not None else "unknown") + (
            f" (asked for {os.environ.get(cuda_sync.ENV)}, not set: {sync_wait_not_set})" if sync_wait_not_set else "")
    return info


class StartClock:
    """This process's CPU seconds (every thread's: time.process_time) by part of its start, the first part being
    everything before `start`: the interpreter, torch's and the harness's imports. On an H200 host a candidate's
    sandbox cost 7.6-8.9 CPU s a job, and 6-7 even where the candidate failed at once: mostly its start, whose
    parts are reported so that the largest can be cut."""

    def __init__(self) -> None:
        self._mark = time.process_time()
        self.seconds: dict[str, float] = {"imports": round(self._mark, 3)}

    def step(self, name: str) -> None:
        now = time.process_time()
        self.seconds[name] = round(now - self._mark, 3)
        self._mark = now


def install_built_extension() -> None:
    """The built extension (KJ_EXT_BUILT, mounted read-only) into TORCH_EXTENSIONS_DIR: torch needs it
    writable (a lock file), and it is the size-capped extension folder; copy2 keeps the mtimes, so the
    candidate's load_inline finds the build up to date."""
    built = os.environ.get("KJ_EXT_BUILT")
    if built and os.path.isdir(built):
        shutil.copytree(built, os.environ["TORCH_EXTENSIONS_DIR"], dirs_exist_ok=True)


class Runner:
    """What both roles share: start, load, the command loop, calls and timing."""

    role = "candidate"

    @property
    def output_device(self) -> torch.device:
        """Where `_call` keeps outputs: the host, for the wire (the judge overrides it)."""
        return torch.device("cpu")

    def __init__(self) -> None:
        device = torch.device(os.environ.get("KJ_DEVICE", "cpu"))
        # CUDA_VISIBLE_DEVICES narrows the view to the worker's GPU, which is then index 0.
        self.device = torch.device("cuda", 0) if device.type == "cuda" and device.index is None else device
        self.channel = Channel()
        self.integrity = IntegrityWatch()
        self.module: Any = None  # the user's module, once loaded (`load`)
        self.model: Any = None  # its Model / ModelNew, once constructed
        self.pool: list[list] = []
        self.variants: timer.InputVariants | None = None  # the timing pool's variants (timing_variants)
        self.sync_wait_not_set: str | None = None  # why the asked-for CUDA wait was not set, if it was not

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        clock = StartClock()
        # Both sides compute in strict float32: TF32 would make the reference's own error as large
        # as the reduced-precision shortcuts the precision check looks for (candidates may not
        # change these settings: KJ113).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        if self.device.type == "cuda":
            self.sync_wait_not_set = cuda_sync.set_primary_wait_from_env()  # before torch starts CUDA
            torch.cuda.set_device(self.device)
            torch.cuda.init()
        else:
            kernel_trace.install_cpu_launch_hooks()
        clock.step("device")
        try:
            import triton  # noqa: F401 - imported while warm, so that the job does not pay for it
        except ImportError:
            pass
        clock.step("triton_import")
        self.warm()
        clock.step("warm")
        self.channel.reply(Ready(environment=environment(self.device, self.sync_wait_not_set),
                                 start_cpu_s=clock.seconds))

    def warm(self) -> None:
        """Role-specific set-up done while the runner waits in the pool, before any user code."""

    def handlers(self) -> dict[type[Command], Handler]:
        """This role's commands, each with its handler (Exit ends `serve`)."""
        return {Load: self.op_load, Time: self.op_time}

    def serve(self) -> None:
        table = self.handlers()
        while True:
            message = self.channel.receive()
            if message is None:
                return
            try:
                command = decode_command(message, [Exit, Ping, *table])
            except MessageError as exc:
                self.channel.reply(ErrorReply(FailureKind.protocol, f"unreadable command: {exc}"))
                continue
            if isinstance(command, Exit):
                return
            if isinstance(command, Ping):
                self.channel.reply(Pong())
                continue
            if not isinstance(command, Load) and self.module is None:
                self.channel.reply(ErrorReply(FailureKind.protocol, f"{command.NAME!r} before load"))
                continue
            table[type(command)](command)

    def op_load(self, command: Load) -> None:
        if self.module is not None:
            raise UserCodeError(FailureKind.protocol, "this runner already loaded a module; runners are used once")
        cpu_s = command.cpu_s
        if cpu_s:
            # The pool starts runners with a generous CPU limit; the job's own is set here, before
            # the user's code runs (it cannot raise it again).
            used = resource.getrusage(resource.RUSAGE_SELF)
            spent = int(used.ru_utime + used.ru_stime) + 1
            _, hard = resource.getrlimit(resource.RLIMIT_CPU)
            soft = spent + int(cpu_s)
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        install_built_extension()
        # The source lives in the sandbox's private /tmp (a private directory without a sandbox).
        folder = tempfile.mkdtemp(prefix="kj-src-")
        path = os.path.join(folder, "module.py")
        with open(path, "w") as handle:
            handle.write(command.source)
        self.integrity.seal_harness()
        mark_user_output_start()  # the log the supervisor returns begins here
        self.module = load_module(path, f"kj_{self.role}")
        missing = [name for name in REQUIRED_NAMES[self.role] if not hasattr(self.module, name)]
        if missing:
            raise UserCodeError(FailureKind.runtime_error, f"the module does not define {', '.join(missing)} after import")
        self.channel.reply(Loaded())

    # -- helpers -------------------------------------------------------------------
    def _sync(self) -> None:
        if self.device.type == "cuda":
            timer._cuda_sync()

    def _construct(self, class_name: str, init_inputs: list, init_seed: int) -> None:
        torch.manual_seed(init_seed)
        try:
            model = getattr(self.module, class_name)(*init_inputs)
            self.model = model.to(self.device) if isinstance(model, torch.nn.Module) else model
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, f"while constructing {class_name}") from exc

    def _call(self, args: list, what: str, model=None) -> dict:
        try:
            with torch.no_grad():
                out = (self.model if model is None else model)(*args)
            self._sync()
            return to_storable(out, self.output_device)
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, what) from exc

    # -- timing (both roles) ----------------------------------------------------------
    def op_time(self, command: Time) -> None:
        self._send_timing(self.model, command)

    def _send_timing(self, model, command: Time) -> None:
        try:
            samples = timer.time_model(model, self.pool, self.device, runs=command.runs, warmup=command.warmup,
                                       keep=frozenset(command.keep or ()), order=command.order,
                                       variants=self.variants, spacer_ms=command.spacer_ms)
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, "while timing forward") from exc
        self._keep_timed(samples.kept)
        self.channel.reply(Timing(device_ms=samples.device_ms, warmup_runs=samples.warmup_runs,
                                  queue_ms_per_call=samples.queue_ms_per_call, cover_ms=samples.cover_ms,
                                  tampered=self.integrity.changed()))

    def _keep_timed(self, outputs: list) -> None:
        """The kept outputs of a timed block (the judge keeps none: it copies them only so that both
        sides' loops do the same work)."""


class CandidateRunner(Runner):
    role = "candidate"

    def __init__(self) -> None:
        super().__init__()
        # Copies of the outputs of the timed calls the supervisor chose, in order; sent by `timed_outputs`.
        self.kept_timed: list[object] = []

    def warm(self) -> None:
        kernel_trace.warm_profiler(self.device)  # the job's `trace` then starts in milliseconds

    def handlers(self) -> dict[type[Command], Handler]:
        return {**super().handlers(), Run: self.op_run, Trace: self.op_trace, TritonCache: self.op_triton_cache,
                ApplyTimingVariants: self.op_timing_variants, TimedOutputs: self.op_timed_outputs}

    def _checked_call(self, args: list, what: str, keep_inputs: bool, lap: Callable[[str], None],
                      call_part: str) -> dict:
        """A candidate call that also reports outputs sharing memory with an input and the inputs
        as forward left them (the judge compares them with its own copies); `lap` ends `call_part` after the
        call, then `outputs` after the copies."""
        try:
            with torch.no_grad():
                out = self.model(*args)
            self._sync()
            lap(call_part)
            stored = to_storable(out)
            stored["aliases"] = aliased_outputs(out, args)
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, what) from exc
        if keep_inputs:
            stored["inputs_after"] = [torch.Tensor.to(a, "cpu", copy=True) if type(a) is torch.Tensor else None
                                      for a in args]
        lap("outputs")
        return stored

    def _poison(self, nbytes: int) -> None:
        # Freed blocks stay in the caching allocator: fill them with NaN so an output
        # "computed" by torch.empty over stale memory cannot match by luck.
        if self.device.type != "cuda" or nbytes <= 0:
            return
        block = torch.empty(nbytes // 4 + 1, dtype=torch.float32, device=self.device)
        block.fill_(float("nan"))
        del block

    def op_run(self, command: Run) -> None:
        parts = dict.fromkeys(RUN_PARTS, 0.0)
        mark = _clock()

        def lap(part: str) -> None:
            nonlocal mark
            now = _clock()
            parts[part] += now - mark
            mark = now

        data: Any = self.channel.read_payload(command.payload)
        lap("read")
        self._construct("ModelNew", data["init_inputs"], command.init_seed)
        lap("construct")
        results = []
        for index, args in enumerate(data["trials"]):
            self._poison(command.poison_bytes)
            args = fresh_on(args, self.device)
            lap("inputs")
            # The inputs as forward left them go back for the first trials only: a candidate that
            # writes into its inputs does so on every call, and inputs can be large.
            results.append(self._checked_call(args, f"in ModelNew.forward (trial {index})", index < INPUT_CHECK_TRIALS,
                                              lap, "calls" if index else "first_call"))
        self.pool = [fresh_on(a, self.device) for a in data["pool"]]  # its own storage, on every device
        lap("pool")
        # Last, and failures kept as results: a candidate that breaks on another shape is judged
        # for that (KJ-R09), not reported as a crash.
        shape_results = []
        for args in data.get("shape_trials") or []:
            try:
                shape_results.append(self._call(fresh_on(args, self.device),
                                                "in ModelNew.forward (doubled batch)"))
            except UserCodeError as exc:
                shape_results.append({"kind": "error", "message": exc.message})
        lap("shape")
        self.channel.reply(RunDone(tampered=self.integrity.changed(),
                                   parts_s={part: round(seconds, 4) for part, seconds in parts.items()}),
                           tensors={"trials": results, "shape_trials": shape_results})

    def op_trace(self, command: Trace) -> None:
        args = clone_args(self.pool[0])
        try:
            events = kernel_trace.trace_forward(self.model, args, self.device)
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, "in ModelNew.forward (kernel trace)") from exc
        self.channel.reply(Traced(events=events, tampered=self.integrity.changed()))

    def op_triton_cache(self, command: TritonCache) -> None:
        """The Triton kernels this runner compiled (TRITON_CACHE_DIR), packed, for the candidate's own
        cache on the host (worker/engine/build/triton_cache.py); nothing when there are more than allowed."""
        folder = os.environ.get("TRITON_CACHE_DIR")
        try:
            files, data = file_tree.pack(Path(folder), command.max_bytes) if folder and os.path.isdir(
                folder) else ([], b"")
        except file_tree.TooLarge:
            files, data = [], b""
        self.channel.reply_bytes(TritonCacheDone(files=files), data)

    def _keep_timed(self, outputs: list) -> None:
        # Sent by `timed_outputs`, outside the externally clocked requests.
        self.kept_timed.extend(outputs)

    def op_timing_variants(self, command: ApplyTimingVariants) -> None:
        """The timing pool's variants, made by the judge (see timing_variants), onto this runner's pool."""
        value: Any = self.channel.read_payload(command.payload)
        self.variants = timer.InputVariants(self.pool, [[(int(c["arg"]), c["positions"], c["values"]) for c in changes]
                                                        for changes in value["slots"]])
        self.channel.reply(VariantsApplied())

    def op_timed_outputs(self, command: TimedOutputs) -> None:
        stored = [to_storable(out) for out in self.kept_timed]
        self.kept_timed = []
        self.channel.reply(TimedOutputsDone(tampered=self.integrity.changed()), tensors={"kept": stored})


def aliased_outputs(out: object, args: list) -> list[str]:
    """Outputs whose memory is an input's (a result written into the input and returned)."""
    tensors = [out] if type(out) is torch.Tensor else [t for t in out if type(t) is torch.Tensor] \
        if isinstance(out, (tuple, list)) else []
    found = []
    for o_index, tensor in enumerate(tensors):
        for a_index, arg in enumerate(args):
            if type(arg) is torch.Tensor and arg.numel() and tensor.numel() and arg.device == tensor.device \
                    and arg.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr():
                found.append(f"output {o_index} shares memory with input {a_index}")
    return found
