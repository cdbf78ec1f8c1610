"""Values with tensors between processes: a JSON description, and the raw bytes in a sealed memory file.

A packed value is a JSON tree in which every tensor is replaced by {"t": index} and described in a list of
specs (dtype, shape, nbytes); the bytes of all tensors, in that order, each at an offset aligned to ALIGN
(`layout`), fill one sealed memory file (sealed_payload), whose descriptor goes beside the message line that
carries the description. The receiver reads the description, decides which tensors it will take (the judge
takes only those whose shape and dtype are the ones it expects) and only then maps the file: each taken
tensor is a view of a private copy-on-write mapping (its writes reach nobody; the sender can no longer change
it; no copy is made until someone writes); the others stand as meta tensors, which have a shape and a dtype
but no data.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import torch

from sandbox_side.runtime.sealed_payload import SealedBuffer

DTYPES: dict[str, torch.dtype] = {
    str(dtype): dtype for dtype in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
        torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
    )
}
MAX_DIMS = 16
MAX_TREE_DEPTH = 32
# Each tensor's bytes start at a multiple of this in the payload (any dtype's alignment, a cache line).
ALIGN = 64


class WireError(ValueError):
    """A payload description that is not one of ours (bad dtype, shape, sizes or structure)."""


@dataclass
class TensorSpec:
    dtype: torch.dtype
    shape: tuple[int, ...]
    nbytes: int


@dataclass
class Pending:
    """A tensor announced in a payload, not read yet."""

    index: int
    spec: TensorSpec
    wanted: bool = False

    def matches(self, expected: torch.Tensor | None) -> bool:
        return (expected is not None and self.spec.dtype == expected.dtype
                and self.spec.shape == tuple(expected.shape))


# -- sending ---------------------------------------------------------------------------------
def pack(value: object) -> tuple[dict, list[torch.Tensor | None]]:
    """(description, tensors in order, detached: where they are, as they are; never None here: seal_packed
    empties the list as it writes)."""
    tensors: list[torch.Tensor] = []

    def walk(item: object, depth: int) -> object:
        if depth > MAX_TREE_DEPTH:
            raise WireError("value nested too deeply")
        if type(item) is torch.Tensor or isinstance(item, torch.nn.Parameter):
            tensor = torch.Tensor.detach(item)
            if str(tensor.dtype) not in DTYPES:
                raise WireError(f"tensors of dtype {tensor.dtype} cannot be exchanged")
            tensors.append(tensor)
            return {"t": len(tensors) - 1}
        if isinstance(item, list):
            return {"l": [walk(x, depth + 1) for x in item]}
        if isinstance(item, tuple):
            return {"u": [walk(x, depth + 1) for x in item]}
        if isinstance(item, dict):
            return {"d": {str(k): walk(v, depth + 1) for k, v in item.items()}}
        if item is None or isinstance(item, (bool, int, float, str)):
            return {"v": item}
        raise WireError(f"a {type(item).__name__} cannot be exchanged (tensors, numbers, strings and "
                        "lists/tuples/dicts of them only)")

    tree = walk(value, 0)
    specs = [{"dtype": str(t.dtype), "shape": list(t.shape), "nbytes": t.numel() * t.element_size()}
             for t in tensors]
    return {"tree": tree, "tensors": specs}, cast(list[torch.Tensor | None], tensors)  # the same list: see seal_packed


@dataclass
class SealedTensors:
    """A packed value: its description, and its tensors' bytes sealed (None when they have none)."""

    description: dict
    buffer: SealedBuffer | None


def seal(value: object) -> SealedTensors:
    """`value` packed: its tensors' bytes written into one new sealed memory file (from the host: a tensor on
    a device is copied to the host first)."""
    return seal_packed(*pack(value))


def seal_packed(description: dict, tensors: list[torch.Tensor | None]) -> SealedTensors:
    """`pack`'s description and tensors sealed. The list is emptied as each tensor is written: a caller that
    keeps no other reference to them holds one copy of the bytes at a time, not two (see `unseal`)."""
    sizes = [int(spec["nbytes"]) for spec in description["tensors"]]
    offsets, nbytes = layout(sizes)

    def pieces() -> Iterator[tuple[int, memoryview]]:
        for index, (offset, size) in enumerate(zip(offsets, sizes, strict=True)):
            tensor, tensors[index] = tensors[index], None
            assert tensor is not None
            if size:
                yield offset, tensor.cpu().reshape(-1).view(torch.uint8).numpy().data

    return SealedTensors(description, SealedBuffer.create(nbytes, pieces()) if nbytes else None)


def unseal(sealed: SealedTensors) -> object:
    """The value a SealedTensors holds, each tensor a view of one private copy-on-write mapping of its file
    (the sealer's own copy of what it sent: writes to it reach nobody)."""
    specs = parse_specs(sealed.description)
    value = unpack_tree(sealed.description, specs)
    return resolve(value, read_tensors(sealed.buffer, specs, set(range(len(specs)))))


def layout(sizes: list[int]) -> tuple[list[int], int]:
    """Where each tensor's bytes start in a payload, and the payload's size."""
    offsets, end = [], 0
    for size in sizes:
        offsets.append(end)
        end += -(-size // ALIGN) * ALIGN
    return offsets, end


def payload_bytes(description: dict) -> int:
    return layout([int(spec["nbytes"]) for spec in description["tensors"]])[1]


# -- receiving -------------------------------------------------------------------------------
def parse_specs(description: object) -> list[TensorSpec]:
    if not isinstance(description, dict) or not isinstance(description.get("tensors"), list):
        raise WireError("payload description is malformed")
    specs = []
    for raw in description["tensors"]:
        if not isinstance(raw, dict) or raw.get("dtype") not in DTYPES or not isinstance(raw.get("shape"), list):
            raise WireError("payload tensor description is malformed")
        shape = raw["shape"]
        if len(shape) > MAX_DIMS or not all(type(n) is int and n >= 0 for n in shape):
            raise WireError(f"invalid tensor shape {shape!r}")
        dtype = DTYPES[raw["dtype"]]
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if raw.get("nbytes") != nbytes:
            raise WireError(f"tensor of shape {shape} {raw['dtype']} announced {raw.get('nbytes')!r} bytes")
        specs.append(TensorSpec(dtype, tuple(shape), nbytes))
    return specs


def unpack_tree(description: dict, specs: list[TensorSpec]) -> object:
    """The value with every tensor as a Pending (nothing allocated)."""
    pending = [Pending(i, spec) for i, spec in enumerate(specs)]
    used: set[int] = set()

    def walk(node: object, depth: int) -> object:
        if depth > MAX_TREE_DEPTH or not isinstance(node, dict) or len(node) != 1:
            raise WireError("payload structure is malformed")
        (tag, body), = node.items()
        if tag == "t":
            if type(body) is not int or not 0 <= body < len(pending) or body in used:
                raise WireError("payload tensor reference is malformed")
            used.add(body)
            return pending[body]
        if tag in ("l", "u") and isinstance(body, list):
            items = [walk(x, depth + 1) for x in body]
            return items if tag == "l" else tuple(items)
        if tag == "d" and isinstance(body, dict):
            return {k: walk(v, depth + 1) for k, v in body.items()}
        if tag == "v" and (body is None or isinstance(body, (bool, int, float, str))):
            return body
        raise WireError("payload structure is malformed")

    return walk(description.get("tree"), 0)


def read_tensors(buffer: SealedBuffer | None, specs: list[TensorSpec], wanted: set[int]) -> list[torch.Tensor]:
    """The tensors `wanted`, each a view of one private copy-on-write mapping of the payload (see the module's
    docstring); the others as meta tensors."""
    offsets, nbytes = layout([spec.nbytes for spec in specs])
    if nbytes != (buffer.nbytes if buffer is not None else 0):
        raise WireError("payload size does not match its description")
    mapped = buffer.map_private() if buffer is not None and any(specs[i].nbytes for i in wanted) else None
    out = []
    for index, (spec, offset) in enumerate(zip(specs, offsets, strict=True)):
        if index not in wanted:
            out.append(torch.empty(spec.shape, dtype=spec.dtype, device="meta"))
        elif not spec.nbytes or mapped is None:
            out.append(torch.empty(spec.shape, dtype=spec.dtype))
        else:
            flat = torch.frombuffer(mapped, dtype=torch.uint8, count=spec.nbytes, offset=offset)
            out.append(flat.view(spec.dtype).view(spec.shape))
    return out


def resolve(value: object, tensors: list[torch.Tensor]) -> object:
    """Replace each Pending with its tensor (a meta tensor where it was not wanted)."""
    if isinstance(value, Pending):
        return tensors[value.index]
    if isinstance(value, list):
        return [resolve(x, tensors) for x in value]
    if isinstance(value, tuple):
        return tuple(resolve(x, tensors) for x in value)
    if isinstance(value, dict):
        return {k: resolve(v, tensors) for k, v in value.items()}
    return value


def pending(value: object) -> list[Pending]:
    """The tensors a value announces, in tree order."""
    if isinstance(value, Pending):
        return [value]
    if isinstance(value, (list, tuple)):
        return [p for x in value for p in pending(x)]
    if isinstance(value, dict):
        return [p for x in value.values() for p in pending(x)]
    return []


def want_all(value: object) -> None:
    """Take every tensor (for payloads from the judge, which a candidate never writes)."""
    for announced in pending(value):
        announced.wanted = True
