"""Reference-side work that makes correctness discriminative; runs in the reference's sandbox.

- Perturbed trials: when the reference's outputs do not move between trials beyond the tolerance
  (a scalar mean of many elements, say), later trials get their floating-point inputs scaled and
  shifted, kept only where the reference stays finite and its output now moves.
- A float64 ground truth per trial: the same model and inputs in double precision, against which
  the supervisor measures both the reference's and the candidate's rounding error.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

# (scale, shift in units of the input's standard deviation), cycled over trials 1, 2, ...
PERTURBATIONS = ((2.0, 0.0), (1.0, 1.0), (0.5, -0.5), (1.5, 0.5), (1.0, -1.0))
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def perturbation_for(trial: int) -> tuple[float, float]:
    return PERTURBATIONS[(trial - 1) % len(PERTURBATIONS)]


def perturb(args: list, scale: float, shift: float) -> list:
    out = []
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.dtype in _FLOATS and arg.numel() > 0:
            std = float(arg.double().std()) if arg.numel() > 1 else 0.0
            out.append(arg * scale + shift * (std if std > 0 else 1.0))
        else:
            out.append(arg)
    return out


def outputs_move(first: dict, other: dict, tolerances: dict[str, list[float]]) -> bool:
    """True when `other` differs from `first` beyond the tolerance somewhere."""
    for a, b in zip(first["tensors"], other["tensors"], strict=False):
        if a.shape != b.shape or a.dtype != b.dtype:
            return True
        if not (a.is_floating_point() or a.is_complex()):
            if not torch.equal(a, b):
                return True
            continue
        atol, rtol = tolerances.get(str(a.dtype), [1e-4, 1e-4])
        if not torch.allclose(b, a, atol=atol, rtol=rtol, equal_nan=True):
            return True
    return False


def finite_where(first: dict, other: dict) -> bool:
    """`other` has no NaN/Inf where `first` had finite values."""
    for a, b in zip(first["tensors"], other["tensors"], strict=False):
        if a.is_floating_point() and a.shape == b.shape and bool((torch.isfinite(a) & ~torch.isfinite(b)).any()):
            return False
    return True


def all_degenerate(outputs: list[dict], tolerances: dict[str, list[float]]) -> bool:
    return len(outputs) > 1 and not any(outputs_move(outputs[0], o, tolerances) for o in outputs[1:])


def float64_truth(model: torch.nn.Module, trials: list[list], call: Callable[[object, list], dict],
                  to_device: Callable[[list], list]) -> tuple[list[dict] | None, str | None]:
    """The model in float64 on every trial's inputs, or (None, why not)."""
    previous = torch.get_default_dtype()
    try:
        double_model = copy.deepcopy(model).double() if isinstance(model, torch.nn.Module) else model
        torch.set_default_dtype(torch.float64)
        truths = []
        for args in trials:
            promoted = [a.double() if isinstance(a, torch.Tensor) and a.dtype in _FLOATS else a for a in args]
            truths.append(call(double_model, to_device(promoted)))
        return truths, None
    except Exception as exc:  # noqa: BLE001 - a reference that cannot run in float64 is not checked
        return None, f"the reference does not run in float64: {type(exc).__name__}: {str(exc)[:300]}"
    finally:
        torch.set_default_dtype(previous)
