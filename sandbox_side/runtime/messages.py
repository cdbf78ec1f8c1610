"""The supervisor <-> runner protocol, typed: one class per command and one per reply.

On the wire (as it always was): a command is one JSON line {"op": NAME, field: value, ...} on the runner's
stdin, a reply one JSON line {"event": NAME, field: value, ...} on its reply channel (channel.py). A
message that carries tensors (wire.py) or a packed folder (file_tree.py) says so in "payload" (the tensors'
description; none for a folder) and "payload_bytes", and that many bytes are in a sealed memory file whose
descriptor comes just before the line (sealed_payload.py, `Payload`).

Both sides build messages from these classes (`to_message`) and read them back into them (`decode`),
which checks every field's type: a message that is not one of ours (an unknown name, a field missing or of
another type) raises MessageError. The runner dispatches on a command's class through one table
(runner.Runner.handlers); the supervisor (worker/engine/launch.py RunnerSession.request) reads each reply
into the class it expects and reports anything else as a `protocol` failure: the user code shares its
runner's process and can write to the reply channel, so a reply is evidence, never trusted.

Standard library only: it is imported inside the sandbox (as `sandbox_side.runtime.messages`) and by the
supervisor (as `sandbox_side.runtime.messages`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, TypeVar, Union

from sandbox_side.runtime.failure_kind import FailureKind
from sandbox_side.runtime.sealed_payload import SealedBuffer

M = TypeVar("M", bound="Message")


class MessageError(ValueError):
    """A message that is not one of the protocol's."""


@dataclass
class Payload:
    """A message's payload: tensors (`description` is wire.pack's description of them) or a packed folder
    (no description), `nbytes` of them in a sealed memory file. The supervisor holds that file (`buffer`) and
    passes it on as it came; a runner takes it from its channel itself (channel.Channel.read_payload), so for
    it `buffer` is None."""

    nbytes: int
    description: dict[str, Any] | None = None
    buffer: SealedBuffer | None = None

    def read(self) -> bytes:
        """The bytes (of a packed folder: tensors are copied out by wire.read_tensors)."""
        return self.buffer.read() if self.buffer is not None else b""

    def release(self) -> None:
        """Close this process's descriptor of the file (the memory goes once no process holds it)."""
        if self.buffer is not None:
            self.buffer.close()


@dataclass
class Message:
    """What every command and reply shares: its name on the wire and its fields' checking."""

    KEY: ClassVar[str]  # "op" for a command, "event" for a reply
    NAME: ClassVar[str]

    @property
    def carried(self) -> Payload | None:
        """The payload this message carries (a `payload` field, in the classes that have one)."""
        value = getattr(self, "payload", None)
        return value if isinstance(value, Payload) else None

    def release(self) -> None:
        """Let this message's payload go (Payload.release), once it was passed on or read."""
        if self.carried is not None:
            self.carried.release()

    def to_message(self) -> dict[str, Any]:
        """The JSON line's object (without the payload's bytes, which follow it)."""
        out: dict[str, Any] = {self.KEY: self.NAME}
        for item in dataclasses.fields(self):
            if item.name != "payload":
                value = getattr(self, item.name)
                out[item.name] = value.value if isinstance(value, Enum) else value
        payload = self.carried
        if payload is not None:
            if payload.description is not None:
                out["payload"] = payload.description
            out["payload_bytes"] = payload.nbytes
        return out

    @classmethod
    def decode(cls: type[M], message: dict[str, Any], buffer: SealedBuffer | None = None) -> M:
        """This message's object from a JSON line's object (and its payload's sealed memory file, where the
        caller received it); MessageError when it is not one. Fields the class does not know are ignored."""
        if not isinstance(message, dict):
            raise MessageError("a message that is not an object")
        cls._check_name(message)
        hints = _hints(cls)
        values: dict[str, Any] = {}
        for item in dataclasses.fields(cls):
            if item.name == "payload":
                values["payload"] = _payload(message, buffer)
            elif item.name in message:
                values[item.name] = _checked(message[item.name], hints[item.name], item.name)
            elif item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
                raise MessageError(f"{cls.NAME!r} without its field {item.name!r}")
        return cls(**values)

    @classmethod
    def _check_name(cls, message: dict[str, Any]) -> None:
        if message.get(cls.KEY) != cls.NAME:
            raise MessageError(f"{cls.KEY} {message.get(cls.KEY)!r}, expected {cls.NAME!r}")


@dataclass
class Command(Message):
    KEY: ClassVar[str] = "op"


@dataclass
class Reply(Message):
    KEY: ClassVar[str] = "event"


@dataclass
class Done(Reply):
    """The reply to a command that did its work: "done", with the command's name as its "op"."""

    NAME: ClassVar[str] = "done"
    OP: ClassVar[str]

    def to_message(self) -> dict[str, Any]:
        return {**super().to_message(), "op": self.OP}

    @classmethod
    def _check_name(cls, message: dict[str, Any]) -> None:
        super()._check_name(message)
        if message.get("op") != cls.OP:
            raise MessageError(f"done for op {message.get('op')!r}, expected {cls.OP!r}")


def decode_command(message: dict[str, Any], commands: Iterable[type[Command]]) -> Command:
    """A runner's next command, as the class among `commands` (its role's) that its "op" names."""
    op = message.get("op") if isinstance(message, dict) else None
    for command in commands:
        if command.NAME == op:
            return command.decode(message)
    raise MessageError(f"unknown op {op!r}")


# == commands: the supervisor to a runner ======================================================================
@dataclass
class Exit(Command):
    """Leave (sent by SandboxProcess.close; no reply)."""

    NAME: ClassVar[str] = "exit"


@dataclass
class Ping(Command):
    """Answer at once (Pong), whatever the role and before any load: before each timed block the supervisor
    waits for this round trip, so that the block's clock starts on a runner that is running and reading (one
    thawed from a pause a moment ago is still waking up). Reply: Pong."""

    NAME: ClassVar[str] = "ping"


@dataclass
class Load(Command):
    """Import the module this runner serves, once (the reference's for a judge). Reply: Loaded."""

    NAME: ClassVar[str] = "load"
    source: str
    cpu_s: int | None = None  # the job's CPU limit, set before the user code runs


@dataclass
class Time(Command):
    """One block of timed calls (timer.time_model): `warmup` untimed calls, then `runs` timed ones, in `order`
    (codes of the input set and variant each call gets); `keep`: the timed calls whose outputs are kept (sent
    by TimedOutputs; a judge keeps none). `compiled`: a judge times its torch.compile'd reference. `spacer_ms`:
    the device time between calls, the same for both sides of a window (sandbox_side/timing/spacer.py). Reply:
    Timing."""

    NAME: ClassVar[str] = "time"
    runs: int
    warmup: int
    order: list[int] | None = None
    keep: list[int] | None = None
    compiled: bool = False
    spacer_ms: float | None = None


# -- a candidate's runner --------------------------------------------------------------------------------------
@dataclass
class Run(Command):
    """Construct ModelNew and run it on the judge's inputs (the payload, an InputsDone's as it came). Reply:
    RunDone."""

    NAME: ClassVar[str] = "run"
    init_seed: int
    poison_bytes: int = 0  # freed device memory filled with NaN before each trial
    payload: Payload | None = None


@dataclass
class Trace(Command):
    """The kernels one forward call ran (kernel_trace). Reply: Traced."""

    NAME: ClassVar[str] = "trace"


@dataclass
class TritonCache(Command):
    """The Triton kernels this runner compiled, packed. Reply: TritonCacheDone."""

    NAME: ClassVar[str] = "triton_cache"
    max_bytes: int


@dataclass
class ApplyTimingVariants(Command):
    """The timing pool's variants onto this runner's pool (the payload, a VariantsMade's as it came). Reply:
    VariantsApplied."""

    NAME: ClassVar[str] = "timing_variants"
    payload: Payload | None = None


@dataclass
class TimedOutputs(Command):
    """The outputs the timed calls kept. Reply: TimedOutputsDone."""

    NAME: ClassVar[str] = "timed_outputs"


# -- the judge ----------------------------------------------------------------------------------------------------
@dataclass
class Generate(Command):
    """Make the input sets from these seeds and run the reference on them (judge_process). Reply: Generated."""

    NAME: ClassVar[str] = "generate"
    init_seed: int
    trial_seeds: list[int]
    pool_seeds: list[int]
    shape_seeds: list[int] = field(default_factory=list)
    shape_max_bytes: int = 0
    probe_max_bytes: int = 0
    atol: float | None = None
    rtol: float | None = None
    physics_measures: list[str] = field(default_factory=list)
    trial_bytes_budget: int = 0
    # The most a candidate's reply (outputs of every trial, the doubled batch and the probes) may take: a sandbox
    # cannot write a larger file (RLIMIT_FSIZE). 0: no limit.
    reply_max_bytes: int = 0


@dataclass
class Proceed(Command):
    """Go on past the step the judge reached (StepReached): the supervisor's hold on the device is what the step
    asked for. No reply of its own: the next is the next step's, or Generated."""

    NAME: ClassVar[str] = "proceed"


@dataclass
class Inputs(Command):
    """The input sets for one candidate. Reply: InputsDone."""

    NAME: ClassVar[str] = "inputs"


@dataclass
class Compare(Command):
    """Compare a candidate's run (the payload, a RunDone's as it came). Reply: Compared."""

    NAME: ClassVar[str] = "compare"
    atol: float | None = None
    rtol: float | None = None
    shape_check: bool = True
    shape_rule: str = ""
    probe_check: bool = True
    payload: Payload | None = None


@dataclass
class MakeTimingVariants(Command):
    """The timing pool's variants, made on the first request of a judge's life. Reply: VariantsMade."""

    NAME: ClassVar[str] = "timing_variants"
    seed: int
    count: int
    max_bytes: int
    atol: float | None = None
    rtol: float | None = None


@dataclass
class CheckTimed(Command):
    """Check the outputs a candidate kept while timed (the payload, a TimedOutputsDone's as it came), each
    against the reference's for the (input set, variant) `expected` says its call had. Reply: TimedChecked."""

    NAME: ClassVar[str] = "check_timed"
    expected: list[tuple[int, int]]
    atol: float | None = None
    rtol: float | None = None
    payload: Payload | None = None


@dataclass
class Compile(Command):
    """Compile the reference with torch.compile, once per judge. Reply: Compiled."""

    NAME: ClassVar[str] = "compile"
    atol: float | None = None
    rtol: float | None = None


# == replies: a runner to the supervisor ===========================================================================
@dataclass
class Ready(Reply):
    """Warm, before any user code: what it runs on, and the CPU seconds each part of its start took (the
    interpreter and imports, the device's set-up, Triton's import, the role's warm-up)."""

    NAME: ClassVar[str] = "ready"
    environment: dict[str, Any] = field(default_factory=dict)
    start_cpu_s: dict[str, float] = field(default_factory=dict)


@dataclass
class Loaded(Reply):
    NAME: ClassVar[str] = "loaded"


@dataclass
class Pong(Reply):
    NAME: ClassVar[str] = "pong"


@dataclass
class ErrorReply(Reply):
    """The command failed (the user code's fault, or a command out of turn); the runner may exit after it.
    A kind that is none of FailureKind's reads as `protocol`, with what was sent in its message."""

    NAME: ClassVar[str] = "error"
    kind: FailureKind
    message: str = ""
    detail: str = ""

    @classmethod
    def read(cls, message: dict[str, Any]) -> ErrorReply:
        """Whatever an "error" reply holds, as the failure it reports (never MessageError: a malformed one is a
        protocol failure itself)."""
        raw = message.get("kind")
        kind = FailureKind.reported(raw)
        text, detail = message.get("message", ""), message.get("detail", "")
        text = text if isinstance(text, str) else repr(text)
        detail = detail if isinstance(detail, str) else repr(detail)
        if kind.value != raw:
            text = f"the sandbox reported a failure of no known kind ({str(raw)[:100]!r}): {text}"
        return cls(kind=kind, message=text, detail=detail)


@dataclass
class StepReached(Reply):
    """A judge generating its reference's outputs reached `step`, its device work so far ended (synchronised);
    `device`: whether the step's work uses the device. It waits for Proceed (gpu_schedule: the supervisor lets a
    waiting timing go first, and holds nothing over host-only steps)."""

    NAME: ClassVar[str] = "step"
    step: str
    device: bool


@dataclass
class Timing(Reply):
    """A Time block's samples, as the runner measured them (the supervisor checks them against its own clock)."""

    NAME: ClassVar[str] = "timing"
    device_ms: list[float]
    warmup_runs: int = 0
    tampered: list[str] = field(default_factory=list)
    queue_ms_per_call: float | None = None  # the host's time per call to queue the block (GPU; diagnostic only)
    cover_ms: float | None = None  # the host's median time a spacer covers (GPU): sizes the next spacer


@dataclass
class RunDone(Done):
    """The trials' outputs (with the inputs as forward left them, for the first trials) and the doubled batch's,
    in the payload: {"trials": [...], "shape_trials": [...]}. `parts_s`: wall seconds by part of the run
    (runner.RUN_PARTS), as the runner measured them (diagnostic only)."""

    OP: ClassVar[str] = "run"
    tampered: list[str] = field(default_factory=list)
    payload: Payload | None = None
    parts_s: dict[str, float] = field(default_factory=dict)


@dataclass
class Traced(Done):
    OP: ClassVar[str] = "trace"
    events: dict[str, Any] = field(default_factory=dict)  # kernel_trace's raw events
    tampered: list[str] = field(default_factory=list)


@dataclass
class TritonCacheDone(Done):
    """`files` and the packed folder (file_tree.pack) in the payload; none when there were too many bytes."""

    OP: ClassVar[str] = "triton_cache"
    files: list[Any] = field(default_factory=list)
    payload: Payload | None = None


@dataclass
class VariantsApplied(Done):
    OP: ClassVar[str] = "timing_variants"


@dataclass
class TimedOutputsDone(Done):
    """The kept outputs in the payload: {"kept": [...]}."""

    OP: ClassVar[str] = "timed_outputs"
    tampered: list[str] = field(default_factory=list)
    payload: Payload | None = None


@dataclass
class Generated(Done):
    """What the judge learned running the reference (no tensors: they stay in the judge)."""

    OP: ClassVar[str] = "generate"
    shape_trial: dict[str, Any] = field(default_factory=dict)
    perturbed_trials: list[int] = field(default_factory=list)
    physics: dict[str, Any] = field(default_factory=dict)
    trials_sized: dict[str, Any] | None = None
    truth_skipped: str | None = None
    tampered: list[str] = field(default_factory=list)
    output_bytes: int = 0  # one trial's outputs
    reply_bytes: int = 0  # an honest candidate's run reply
    input_bytes: int = 0  # its sealed input sets (the file every candidate gets)
    device_bytes: int = 0  # what the judge holds on its device


@dataclass
class InputsDone(Done):
    """The input sets for a candidate in the payload: {"init_inputs", "trials", "pool", "shape_trials"}."""

    OP: ClassVar[str] = "inputs"
    payload: Payload | None = None


@dataclass
class Compared(Done):
    """The judge's report (a CorrectnessReport's model_dump), or why the outputs could not be read."""

    OP: ClassVar[str] = "compare"
    report: dict[str, Any] | None = None
    invalid: str | None = None
    perturbed_trials: list[int] = field(default_factory=list)


@dataclass
class VariantsMade(Done):
    """How many variants each timing input set has (1: only itself), and their changes in the payload:
    {"slots": [...]}, for a candidate's runner (ApplyTimingVariants)."""

    OP: ClassVar[str] = "timing_variants"
    counts: list[int] = field(default_factory=list)
    variant_bytes: int = 0
    skipped: str | None = None
    made: bool = False
    payload: Payload | None = None


@dataclass
class TimedChecked(Done):
    OP: ClassVar[str] = "check_timed"
    ok: bool = False
    message: str | None = None
    wrong: list[tuple[int, str]] = field(default_factory=list)  # (index among the kept outputs, what differs)
    replayed: int | None = None
    checked: int = 0


@dataclass
class Compiled(Done):
    OP: ClassVar[str] = "compile"
    ok: bool = False
    reason: str | None = None
    compile_s: float = 0.0
    compiles: int = 0


# -- the builder (sandbox_side/build/sandboxed.py), which sends one reply and no command is sent to ------------
@dataclass
class Built(Reply):
    """The candidate's extensions, built: what each load_inline call's build did, the generated sources' lines
    mapped to the candidate's, and the built folder (file_tree.pack) in the payload. A failed build replies
    with an ErrorReply that also holds `extensions` and `line_map`."""

    NAME: ClassVar[str] = "built"
    extensions: list[dict[str, Any]] = field(default_factory=list)
    line_map: dict[str, Any] = field(default_factory=dict)
    files: list[Any] = field(default_factory=list)
    payload: Payload | None = None


# == checking ========================================================================================================
_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _payload(message: dict[str, Any], buffer: SealedBuffer | None) -> Payload | None:
    description, nbytes = message.get("payload"), message.get("payload_bytes", 0)
    if type(nbytes) is not int or nbytes < 0:
        raise MessageError(f"payload_bytes is {nbytes!r}, not a byte count")
    if description is not None and not isinstance(description, dict):
        raise MessageError("the payload's description is not an object")
    if description is None and not nbytes:
        return None
    if buffer is not None and buffer.nbytes != nbytes:
        raise MessageError(f"{buffer.nbytes} payload bytes, {nbytes} announced")
    return Payload(nbytes, description, buffer)


def _checked(value: Any, hint: Any, where: str) -> Any:
    """`value` as the type `hint` says (ints are floats too; lists of two become tuples of two), or
    MessageError."""
    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        for option in typing.get_args(hint):
            try:
                return _checked(value, option, where)
            except MessageError:
                continue
        raise MessageError(f"{where} is {_shown(value)}, not {_name(hint)}")
    if hint is type(None):
        if value is None:
            return None
    elif hint is bool:
        if type(value) is bool:
            return value
    elif hint is int:
        if type(value) is int:
            return value
    elif hint is float:
        if type(value) in (int, float):
            return float(value)
    elif hint is str:
        if type(value) is str:
            return value
    elif isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            pass
    elif origin is list:
        if type(value) is list:
            (item,) = typing.get_args(hint)
            return [_checked(x, item, f"{where}[{i}]") for i, x in enumerate(value)]
    elif origin is tuple:
        items = typing.get_args(hint)
        if type(value) in (list, tuple) and len(value) == len(items):
            return tuple(_checked(x, t, f"{where}[{i}]") for i, (x, t) in enumerate(zip(value, items, strict=True)))
    elif origin is dict:
        if type(value) is dict:
            key_type, item = typing.get_args(hint)
            return {_checked(k, key_type, f"{where} key"): _checked(v, item, f"{where}[{k!r}]")
                    for k, v in value.items()}
    else:
        raise TypeError(f"messages.py cannot check a field of type {hint!r}")  # the classes above, not a message
    raise MessageError(f"{where} is {_shown(value)}, not {_name(hint)}")


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
