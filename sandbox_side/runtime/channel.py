"""Message channel to the supervisor: commands on stdin, JSON-line replies on a dedicated fd.

stdout/stderr are the user code's own logs; the supervisor never parses them. A message may carry tensors
(see wire) or a packed folder: its line says how many bytes ("payload_bytes"), and the bytes are in a
sealed memory file whose descriptor comes over the descriptor socket (KJ_FD_SOCK) just before the line
(sealed_payload). The messages themselves are messages.py's classes (`reply`); `send_line` writes a line as
given.
"""

from __future__ import annotations

import io
import json
import os
import socket
import sys
from collections.abc import Callable
from typing import Any, cast

from sandbox_side.runtime import sealed_payload, wire
from sandbox_side.runtime.messages import Payload, Reply
from sandbox_side.runtime.sealed_payload import SealedBuffer

MAX_LINE_BYTES = 16 * 1024 * 1024


class Channel:
    def __init__(self) -> None:
        self._out = os.fdopen(int(os.environ["KJ_MSG_FD"]), "wb", buffering=1 << 16, closefd=True)
        self._in = cast(io.BufferedReader, sys.stdin.buffer)  # what sys.stdin.buffer is (typeshed: BinaryIO)
        self._fds = socket.socket(fileno=int(os.environ["KJ_FD_SOCK"]))
        self._received: SealedBuffer | None = None  # the last command's payload, until its handler reads it

    def reply(self, reply: Reply, tensors: object = None) -> None:
        """A reply; `tensors`: a value whose tensors go with it (see wire), its payload."""
        self.reply_sealed(reply, wire.seal(tensors) if tensors is not None else None)

    def reply_sealed(self, reply: Reply, sealed: wire.SealedTensors | None) -> None:
        """A reply with tensors already sealed (a judge's input sets, sealed once for all its candidates)."""
        fields = reply.to_message()
        if sealed is not None:
            fields["payload"] = sealed.description
        self._send(fields, sealed.buffer if sealed is not None else None)

    def reply_bytes(self, reply: Reply, data: bytes) -> None:
        """A reply with raw bytes (a packed folder, see file_tree), not tensors."""
        buffer = SealedBuffer.from_bytes(data) if data else None
        self._send(reply.to_message(), buffer)
        if buffer is not None:
            buffer.close()

    def send_line(self, fields: dict[str, Any]) -> None:
        """A line as given, without a payload (a build's error, with Built's fields beside it)."""
        self._send(dict(fields), None)

    def _send(self, fields: dict[str, Any], buffer: SealedBuffer | None) -> None:
        if buffer is not None and buffer.nbytes:
            buffer.send(self._fds)  # before the line: the supervisor takes it when it reads the line
            fields["payload_bytes"] = buffer.nbytes
        elif "payload" in fields:
            fields["payload_bytes"] = 0
        # Flushed at once: the supervisor waits for the reply with nothing else coming after it.
        self._out.write((json.dumps(fields) + "\n").encode())
        self._out.flush()

    def receive(self) -> dict[str, Any] | None:
        self.skip_payload()
        line = self._in.readline(MAX_LINE_BYTES)
        if not line:
            return None
        command = json.loads(line)
        nbytes = int(command.get("payload_bytes") or 0)
        if nbytes:
            self._received = sealed_payload.receive(self._fds, nbytes)
        return command

    def read_payload(self, payload: Payload | None, choose: Callable[[object], None] = wire.want_all) -> object:
        """The last command's value (its payload), with the tensors `choose` marked wanted (views of a private
        mapping of it, see wire)."""
        description = payload.description if payload is not None else None
        specs = wire.parse_specs(description)
        received = self._received
        assert description is not None  # parse_specs took it
        value = wire.unpack_tree(description, specs)
        choose(value)
        wanted = {p.index for p in wire.pending(value) if p.wanted}
        try:
            tensors = wire.read_tensors(received, specs, wanted)
        finally:
            self.skip_payload()
        return wire.resolve(value, tensors)

    def skip_payload(self) -> None:
        """Let the last command's payload go (read or not)."""
        received, self._received = self._received, None
        if received is not None:
            received.close()
