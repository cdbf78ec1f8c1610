"""Message channel to the supervisor: commands on stdin, JSON-line replies on a dedicated fd.

stdout/stderr are the user code's own logs; the supervisor never parses them.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


class Channel:
    def __init__(self) -> None:
        fd = int(os.environ["KJ_MSG_FD"])
        self._out = os.fdopen(fd, "w", buffering=1, closefd=True)
        self._in = sys.stdin

    def send(self, event: str, **fields: Any) -> None:
        self._out.write(json.dumps({"event": event, **fields}) + "\n")
        self._out.flush()

    def receive(self) -> dict[str, Any] | None:
        line = self._in.readline()
        if not line:
            return None
        return json.loads(line)
