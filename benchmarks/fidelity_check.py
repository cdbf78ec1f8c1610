"""The independent check of the fidelity benchmark: one (reference, candidate) pair, run plainly.

No sandbox, no harness, no kerneljudge engine: both modules are imported in this process, built
with the same init seed, run on identical inputs for a few trials, and compared with
`torch.allclose` at the problem's tolerance (the engine's defaults per dtype), its absolute part raised to
SCALE_TOLERANCE_FACTOR x rtol x the output's RMS where the reference rounds at that scale against a float64 run
of itself (correctness.rounds_at_scale: a reduction whose terms cancel), as the engine defines correctness.
TF32 is off on both sides, as in the engine. Prints one JSON line: {"correct": bool, "max_abs_error", "message"}.

A candidate's load_inline is answered from the engine's build of the same source (--ext-dir) so
the check does not compile it again; without one it compiles as usual.
"""

from __future__ import annotations

import argparse
import copy
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

import torch

from sandbox_side.judging.correctness import (
    SCALE_TOLERANCE_FACTOR,
    Outputs,
    finite_rms,
    rounds_at_scale,
    tolerance_for,
)


def _use_prebuilt_extensions(ext_dir: Path | None) -> None:
    import torch.utils.cpp_extension as cpp_extension

    real_load_inline = cpp_extension.load_inline

    def load_inline(name, *args, **kwargs):
        found = sorted(ext_dir.rglob(f"{name}*.so")) if ext_dir else []
        if not found:
            return real_load_inline(name, *args, **kwargs)
        loader = importlib.machinery.ExtensionFileLoader(name, str(found[0]))
        spec = importlib.util.spec_from_file_location(name, str(found[0]), loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module

    cpp_extension.load_inline = load_inline


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    return value


def _flat(value) -> list[torch.Tensor]:
    return [value] if isinstance(value, torch.Tensor) else [v for v in value if isinstance(v, torch.Tensor)]


def _rounds_at_scale(double: torch.nn.Module, inputs: list, expected: list[torch.Tensor]) -> list[bool]:
    """Per output, whether the reference rounds at the output's scale on these inputs (none where it cannot
    run in float64)."""
    args = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)  # tensors the reference makes inside forward, as the engine does
        truth = _flat(double(*args))
    except Exception:  # noqa: BLE001 - a reference that cannot run in float64 keeps the elementwise tolerance
        return []
    finally:
        torch.set_default_dtype(previous)
    return rounds_at_scale([Outputs("tuple", expected)], [Outputs("tuple", truth)])


def check(reference: Path, candidate: Path, device: str, trials: int, seed: int) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ref_module = _load(reference, "fidelity_reference")
    cand_module = _load(candidate, "fidelity_candidate")
    torch.manual_seed(seed)
    init = list(ref_module.get_init_inputs())
    torch.manual_seed(seed)
    model = ref_module.Model(*init).to(device)
    torch.manual_seed(seed)
    new = cand_module.ModelNew(*init).to(device)
    double = copy.deepcopy(model).double()
    worst = 0.0
    for trial in range(trials):
        torch.manual_seed(seed + 1 + trial)
        inputs = _to(list(ref_module.get_inputs()), device)
        with torch.no_grad():
            expected = _flat(model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
            got = _flat(new(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
            at_scale = _rounds_at_scale(double, inputs, expected)
        if len(expected) != len(got):
            return {"correct": False, "max_abs_error": None, "message": "different number of outputs"}
        for index, (e, g) in enumerate(zip(expected, got, strict=True)):
            if e.shape != g.shape:
                return {"correct": False, "max_abs_error": None,
                        "message": f"shape {tuple(g.shape)} != {tuple(e.shape)}"}
            atol, rtol = tolerance_for(e.dtype, None, None)
            g = g.to(e.dtype)
            if e.is_floating_point():
                diff = (e.double() - g.double()).abs()
                finite = torch.isfinite(diff)
                worst = max(worst, float(diff[finite].max()) if finite.any() else 0.0)
            if index < len(at_scale) and at_scale[index]:
                atol = max(atol, SCALE_TOLERANCE_FACTOR * rtol * finite_rms(e))
            if not torch.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True):
                return {"correct": False, "max_abs_error": worst,
                        "message": f"trial {trial}: not allclose (atol {atol:g}, rtol {rtol:g})"}
    return {"correct": True, "max_abs_error": worst, "message": None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path)
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--ext-dir", type=Path)
    args = parser.parse_args()
    if args.device == "cpu":  # Triton runs on CPU only in its interpreter, as in the engine's CPU mode
        os.environ["TRITON_INTERPRET"] = "1"
    _use_prebuilt_extensions(args.ext_dir)
    try:
        outcome = check(args.reference, args.candidate, args.device, args.trials, args.seed)
    except torch.OutOfMemoryError as exc:  # the device was shared, not the pair's fault: no verdict
        outcome = {"correct": False, "max_abs_error": None, "out_of_memory": True,
                   "message": f"OutOfMemoryError: {str(exc)[:300]}"}
    except Exception as exc:  # noqa: BLE001 - any other failure of the pair is the verdict
        outcome = {"correct": False, "max_abs_error": None, "message": f"{type(exc).__name__}: {str(exc)[:300]}"}
    print(json.dumps(outcome))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
