"""Entry point inside the sandbox: load one user module and serve the supervisor's commands.

Environment: KJ_ROLE (reference|candidate), KJ_MODE (build|run), KJ_DEVICE (cpu|cuda),
KJ_SOURCE (the module file), KJ_IN_DIR / KJ_OUT_DIR, KJ_MSG_FD (reply channel).
Commands (one JSON object per line on stdin): generate (reference: inputs, outputs, their
float64 ground truth and the doubled-batch trial), run (candidate: the trials with the inputs
as forward left them, then the doubled batch), trace (the kernels one call ran), time,
save_timed, exit. Replies: ready, done, timing, error.
"""

from __future__ import annotations

import os
import platform
import re
import traceback

import torch

from . import (
    kernel_trace,
    reference_checks,
    timer,  # binds clocks and sync before any user code is imported
)
from .channel import Channel
from .integrity import IntegrityWatch
from .loader import (
    MAX_TRACEBACK_CHARS,
    UserCodeError,
    classify,
    clone_args,
    load_module,
    to_device,
    to_storable,
)
from .shape_variant import input_bytes, input_shapes, wider_batch_plans

INPUT_CHECK_TRIALS = 2
REQUIRED_NAMES = {"reference": ("Model", "get_inputs", "get_init_inputs"), "candidate": ("ModelNew",)}


def environment(device: torch.device) -> dict:
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
    return info


class Runner:
    def __init__(self) -> None:
        self.role = os.environ["KJ_ROLE"]
        self.mode = os.environ.get("KJ_MODE", "run")
        device = torch.device(os.environ.get("KJ_DEVICE", "cpu"))
        # CUDA_VISIBLE_DEVICES narrows the view to the worker's GPU, which is then index 0.
        self.device = torch.device("cuda", 0) if device.type == "cuda" and device.index is None else device
        self.in_dir = os.environ.get("KJ_IN_DIR", "/kj/in")
        self.out_dir = os.environ.get("KJ_OUT_DIR", "/kj/out")
        self.channel = Channel()
        self.integrity = IntegrityWatch()
        self.module = None
        self.model = None
        self.pool: list[list] = []
        # Outputs of the last timing run, per pool slot; written out by `save_timed`.
        self.last_timed: dict[int, object] = {}

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> bool:
        # Both sides compute in strict float32: TF32 would make the reference's own error as large
        # as the reduced-precision shortcuts the precision check looks for (candidates may not
        # change these settings: KJ113).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        if self.device.type == "cuda" and self.mode != "build":
            torch.cuda.set_device(self.device)
            torch.cuda.init()
        else:
            kernel_trace.install_triton_interpreter_hook()
        self.module = load_module(os.environ["KJ_SOURCE"], f"kj_{self.role}")
        missing = [name for name in REQUIRED_NAMES[self.role] if not hasattr(self.module, name)]
        if missing:
            raise UserCodeError("runtime_error", f"the module does not define {', '.join(missing)} after import")
        env_device = self.device if self.mode != "build" else torch.device("cpu")
        self.channel.send("ready", environment=environment(env_device))
        return self.mode != "build"

    def serve(self) -> None:
        while True:
            command = self.channel.receive()
            if command is None or command.get("op") == "exit":
                return
            handler = getattr(self, f"op_{command.get('op')}", None)
            if handler is None:
                self.channel.send("error", kind="protocol", message=f"unknown op {command.get('op')!r}")
                continue
            handler(command)

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
            return to_storable(out)
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, what) from exc

    def _checked_call(self, args: list, what: str, keep_inputs: bool) -> dict:
        """A candidate call that also reports outputs sharing memory with an input and the inputs
        as forward left them (the supervisor compares them with its own copies)."""
        try:
            with torch.no_grad():
                out = self.model(*args)
            self._sync()
            stored = to_storable(out)
            stored["aliases"] = aliased_outputs(out, args)
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, what) from exc
        if keep_inputs:
            stored["inputs_after"] = [torch.Tensor.clone(a).cpu() if type(a) is torch.Tensor else None for a in args]
        return stored

    def _poison(self, nbytes: int) -> None:
        # Freed blocks stay in the caching allocator: fill them with NaN so an output
        # "computed" by torch.empty over stale memory cannot match by luck.
        if self.device.type != "cuda" or nbytes <= 0:
            return
        block = torch.empty(nbytes // 4 + 1, dtype=torch.float32, device=self.device)
        block.fill_(float("nan"))
        del block

    def _inputs(self, seed: int) -> list:
        torch.manual_seed(seed)
        try:
            inputs = list(self.module.get_inputs())
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, "in get_inputs()") from exc
        return inputs

    # -- operations ------------------------------------------------------------------
    def op_generate(self, command: dict) -> None:
        torch.manual_seed(command["init_seed"])
        try:
            init_inputs = list(self.module.get_init_inputs())
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, "in get_init_inputs()") from exc
        trials = [self._inputs(seed) for seed in command["trial_seeds"]]
        pool = [self._inputs(seed) for seed in command["pool_seeds"]]
        self._construct("Model", init_inputs, command["init_seed"])
        trial_outputs = [self._call(to_device(clone_args(a), self.device), f"in Model.forward (trial {i})")
                         for i, a in enumerate(trials)]
        perturbed = self._perturb_degenerate(trials, trial_outputs, command.get("tolerances") or {})
        truths, truth_skipped = reference_checks.float64_truth(
            self.model, trials, lambda model, args: self._call(args, "in Model.forward (float64)", model),
            lambda args: to_device(args, self.device))
        outputs = {
            "trials": trial_outputs,
            "truths": truths or [],
            "pool": [self._call(to_device(clone_args(a), self.device), "in Model.forward (timing inputs)")
                     for a in pool],
        }
        shape_inputs, shape_outputs, shape_info = self._shape_trial(command.get("shape_seeds") or [],
                                                                    command.get("shape_max_bytes", 0))
        outputs["shape_trials"] = shape_outputs
        torch.save({"init_inputs": init_inputs, "trials": trials, "pool": pool, "shape_trials": shape_inputs},
                   f"{self.out_dir}/inputs.pt")
        torch.save(outputs, f"{self.out_dir}/outputs.pt")
        self.pool = [to_device(a, self.device) for a in pool]
        self.channel.send("done", op="generate", shape_trial=shape_info, perturbed_trials=perturbed,
                          truth_skipped=truth_skipped, tampered=self.integrity.changed())

    def _perturb_degenerate(self, trials: list, outputs: list[dict], tolerances: dict) -> list[int]:
        """Scale/shift later trials' inputs when the outputs do not move between trials; returns
        the trials changed (each kept only where the reference's output stays finite and moves)."""
        if not reference_checks.all_degenerate(outputs, tolerances):
            return []
        changed = []
        for index in range(1, len(trials)):
            scale, shift = reference_checks.perturbation_for(index)
            for option in ((scale, shift), (scale, 0.0)):
                args = reference_checks.perturb(trials[index], *option)
                try:
                    out = self._call(to_device(clone_args(args), self.device), "in Model.forward (perturbed)")
                except UserCodeError:
                    continue
                if reference_checks.finite_where(outputs[0], out) and reference_checks.outputs_move(
                        outputs[0], out, tolerances):
                    trials[index], outputs[index] = args, out
                    changed.append(index)
                    break
        return changed

    def _shape_trial(self, seeds: list[int], max_bytes: int) -> tuple[list, list, dict]:
        """One trial on a doubled batch, if the reference accepts one (see shape_variant)."""
        if len(seeds) != 2:
            return [], [], {"skipped": "not requested"}
        first, second = self._inputs(seeds[0]), self._inputs(seeds[1])
        plans = wider_batch_plans(first, second)
        if not plans:
            return [], [], {"skipped": "get_inputs() returns no tensor whose first dimension can be doubled"}
        size = input_bytes(plans[0].args)
        if size > max_bytes:
            return [], [], {"skipped": f"the doubled inputs would take {size} bytes, "
                                       f"over the {max_bytes}-byte limit for this check"}
        refused = []
        for plan in plans:
            try:
                out = self._call(to_device(clone_args(plan.args), self.device), "in Model.forward (doubled batch)")
            except UserCodeError as exc:
                refused.append(f"doubling inputs {plan.widened}: {exc.message}")
                continue
            info = {"widened": plan.widened, "problem_shapes": input_shapes(first),
                    "shapes": input_shapes(plan.args)}
            return [plan.args], [out], info
        return [], [], {"skipped": "the reference does not accept a doubled batch (" + "; ".join(refused) + ")"}

    def op_run(self, command: dict) -> None:
        data = torch.load(f"{self.in_dir}/inputs.pt", weights_only=True)
        self._construct("ModelNew", data["init_inputs"], command["init_seed"])
        results = []
        for index, args in enumerate(data["trials"]):
            self._poison(command.get("poison_bytes", 0))
            # The inputs as forward left them go back for the first trials only: a candidate that
            # writes into its inputs does so on every call, and inputs can be large.
            results.append(self._checked_call(to_device(clone_args(args), self.device),
                                              f"in ModelNew.forward (trial {index})", index < INPUT_CHECK_TRIALS))
        self.pool = [to_device(a, self.device) for a in data["pool"]]
        # Last, and failures kept as results: a candidate that breaks on another shape is judged
        # for that (KJ-R09), not reported as a crash.
        shape_results = []
        for args in data.get("shape_trials") or []:
            try:
                shape_results.append(self._call(to_device(clone_args(args), self.device),
                                                "in ModelNew.forward (doubled batch)"))
            except UserCodeError as exc:
                shape_results.append({"kind": "error", "message": exc.message})
        torch.save({"trials": results, "shape_trials": shape_results}, f"{self.out_dir}/outputs.pt")
        self.channel.send("done", op="run", tampered=self.integrity.changed())

    def op_trace(self, command: dict) -> None:
        args = clone_args(self.pool[0])
        try:
            events = kernel_trace.trace_forward(self.model, args, self.device)
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, "in ModelNew.forward (kernel trace)") from exc
        self.channel.send("done", op="trace", events=events, tampered=self.integrity.changed())

    def op_time(self, command: dict) -> None:
        try:
            samples = timer.time_model(
                self.model,
                self.pool,
                self.device,
                budget_s=command["budget_s"],
                min_runs=command["min_runs"],
                max_runs=command["max_runs"],
                target_rse=command["target_rse"],
                fixed_runs=command.get("fixed_runs"),
            )
        except BaseException as exc:  # noqa: BLE001
            raise classify(exc, "while timing forward") from exc
        # Kept for `save_timed`, which writes them outside the externally clocked request.
        self.last_timed = samples.last_outputs
        self.channel.send(
            "timing",
            device_ms=samples.device_ms,
            host_ms=samples.host_ms,
            warmup_runs=samples.warmup_runs,
            stopped_by=samples.stopped_by,
            tampered=self.integrity.changed(),
        )


    def op_save_timed(self, command: dict) -> None:
        stored = {slot: to_storable(out) for slot, out in self.last_timed.items()}
        torch.save({"pool": stored}, f"{self.out_dir}/timed_outputs_{command['tag']}.pt")
        self.channel.send("done", op="save_timed", tampered=self.integrity.changed())


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


def main() -> int:
    runner = Runner()
    try:
        if runner.start():
            runner.serve()
    except UserCodeError as exc:
        runner.channel.send("error", kind=exc.kind, message=exc.message, detail=exc.detail)
    except BaseException as exc:  # noqa: BLE001 - report, then exit non-zero
        runner.channel.send("error", kind="runtime_error", message=f"{type(exc).__name__}: {exc}",
                            detail=traceback.format_exc()[-MAX_TRACEBACK_CHARS:])
        return 1
    return 0
