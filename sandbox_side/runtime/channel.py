"""Message channel to the supervisor: commands on stdin, JSON-line replies on a dedicated fd.

stdout/stderr are the user code's own logs; the supervisor never parses them. A message may
carry tensors (see wire): its line says how many bytes follow ("payload_bytes"), and the bytes
come right after it on the same pipe. The messages themselves are messages.py's classes (`reply`);
`send` and `send_bytes` write a line as given.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable
from typing import Any, cast

import torch

from sandbox_side.runtime import wire
from sandbox_side.runtime.messages import Payload, Reply

MAX_LINE_BYTES = 16 * 1024 * 1024


class Channel:
    def __init__(self) -> None:
        fd = int(os.environ["KJ_MSG_FD"])
        self._out = os.fdopen(fd, "wb", buffering=1 << 20, closefd=True)
        self._in = cast(io.BufferedReader, sys.stdin.buffer)  # what sys.stdin.buffer is (typeshed: BinaryIO)
        self._unread = 0  # payload bytes of the last command that its handler did not read

    def reply(self, reply: Reply, tensors: object = None) -> None:
        """A reply; `tensors`: a value whose tensors follow it (see wire), its payload."""
        fields = reply.to_message()
        self.send(fields.pop("event"), tensors, **fields)

    def reply_bytes(self, reply: Reply, data: bytes) -> None:
        """A reply followed by raw bytes (a packed folder, see file_tree), not tensors."""
        fields = reply.to_message()
        self.send_bytes(fields.pop("event"), data, **fields)

    def send(self, event: str, payload: object = None, **fields: Any) -> None:
        tensors: list[torch.Tensor] = []
        if payload is not None:
            description, tensors = wire.pack(payload)
            fields["payload"] = description
            fields["payload_bytes"] = wire.payload_bytes(description)
        self._out.write((json.dumps({"event": event, **fields}) + "\n").encode())
        wire.write_tensors(self._out, tensors)

    def send_bytes(self, event: str, data: bytes, **fields: Any) -> None:
        """A reply followed by raw bytes (a packed folder, see file_tree), not tensors."""
        self._out.write((json.dumps({"event": event, **fields, "payload_bytes": len(data)}) + "\n").encode())
        self._out.write(data)
        self._out.flush()  # the reply is complete: nothing follows it that would push it out of the buffer

    def receive(self) -> dict[str, Any] | None:
        self.skip_payload()
        line = self._in.readline(MAX_LINE_BYTES)
        if not line:
            return None
        command = json.loads(line)
        self._unread = int(command.get("payload_bytes") or 0)
        return command

    def read_payload(self, payload: Payload | None, choose: Callable[[object], None] = wire.want_all) -> object:
        """The last command's value (its payload), with the tensors `choose` marked wanted read into fresh
        storage."""
        description = payload.description if payload is not None else None
        specs = wire.parse_specs(description)
        if sum(spec.nbytes for spec in specs) != self._unread:
            raise wire.WireError("payload size does not match its description")
        assert description is not None  # parse_specs took it
        value = wire.unpack_tree(description, specs)
        choose(value)
        wanted = {p.index for p in wire.pending(value) if p.wanted}
        self._unread = 0
        tensors = wire.read_tensors(self._in, specs, wanted)
        return wire.resolve(value, tensors)

    def skip_payload(self) -> None:
        while self._unread:
            chunk = self._in.read(min(self._unread, wire.SKIP_CHUNK))
            if not chunk:
                break
            self._unread -= len(chunk)

