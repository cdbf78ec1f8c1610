"""Reference-side work that makes correctness discriminative; runs in the reference's sandbox.

- Perturbed trials: when the reference's outputs do not move between trials beyond the tolerance
  (a scalar mean of many elements, say), later trials get their floating-point inputs scaled and
  shifted, kept only where the reference stays finite and its output now moves.
- A float64 ground truth per input set (trials, doubled batch, probes): the same model and inputs
  in double precision, against which both the reference's and the candidate's rounding errors
  are measured.
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


class Float64Reference:
    """The model in float64, built once, run on any input set (every trial, the doubled batch, the
    probe trials). A reference that cannot run in float64 is not checked against it."""

    def __init__(self, model: torch.nn.Module, call: Callable[[object, list], dict],
                 to_device: Callable[[list], list]) -> None:
        self.model, self.call, self.to_device = model, call, to_device
        self._double: object | None = None

    def truths(self, arg_sets: list[list]) -> tuple[list[dict] | None, str | None]:
        """The float64 outputs of every set, or (None, why not)."""
        previous = torch.get_default_dtype()
        try:
            if self._double is None:
                self._double = copy.deepcopy(self.model).double() if isinstance(self.model, torch.nn.Module) \
                    else self.model
            torch.set_default_dtype(torch.float64)
            return [self.call(self._double, self.to_device(promote_to_float64(args))) for args in arg_sets], None
        except Exception as exc:  # noqa: BLE001 - a reference that cannot run in float64 is not checked
            return None, f"the reference does not run in float64: {type(exc).__name__}: {str(exc)[:300]}"
        finally:
            torch.set_default_dtype(previous)

    def close(self) -> None:
        """Drop the float64 copy of the model (its memory is the judge's for the rest of its life)."""
        self._double = None


def promote_to_float64(args: list) -> list:
    return [a.double() if isinstance(a, torch.Tensor) and a.dtype in _FLOATS else a for a in args]
