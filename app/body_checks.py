"""JSON request bodies are checked before anything parses them: nesting depth, UTF-8, valid Unicode,
finite numbers.

JSON lets a string hold "\\ud800" (a lone surrogate, which is no character and cannot be stored: it
crashed the store's encoder into a 500) and a number be 1e999 (infinite as a float); Python's
json also reads NaN and Infinity. None of these means anything in a request, so such a body is
answered 422 here, naming where each bad value is, for every route at once. (The models refuse
non-finite numbers too, `allow_inf_nan=False`, for callers that build them in Python.)

Parsing JSON recurses once per level of nesting (json.loads, then FastAPI and pydantic again): a body
of a few thousand `[` ran out of stack, a RecursionError and a 500, before the key was even looked at.
So the depth is measured first on the raw bytes, without parsing or recursion, and a body nested deeper
than MAX_DEPTH (a real request is a few levels deep) is answered 422 before anything parses it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from email.message import Message
from itertools import accumulate
from typing import Any

from app.limits import reply_json

CHECKED_METHODS = frozenset({"POST", "PUT", "PATCH"})
MAX_REPORTED = 20
MAX_DEPTH = 64  # arrays and objects inside one another; requests nest a few levels
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_NOT_STRUCTURE = bytes(byte for byte in range(256) if byte not in b'"[]{}')
_DEPTH_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 opening, -1 (signed) closing


class _NonFinite:
    """Stands for a number that is not finite while the body is parsed (json's parse hooks)."""

    def __init__(self, text: str):
        self.text = text


class _BadKey:
    """Stands for a dict key with a lone surrogate, in _problems' work list."""


def _problems(value: Any) -> Iterator[dict]:
    """Each bad value in a parsed body, in document order (a work list, not recursion)."""
    pending: list[tuple[Any, list]] = [(value, ["body"])]
    while pending:
        value, loc = pending.pop()
        if isinstance(value, _BadKey):
            yield {"type": "unicode_error", "loc": loc, "msg": "a key holds a lone UTF-16 surrogate; send "
                                                               "valid Unicode"}
        elif isinstance(value, _NonFinite):
            yield {"type": "finite_number", "loc": loc,
                   "msg": f"{value.text} is not a finite number; send a finite JSON number"}
        elif isinstance(value, str):
            if not _valid_unicode(value):
                yield {"type": "unicode_error", "loc": loc,
                       "msg": "text holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape), "
                              "which is not a character; send valid Unicode"}
        elif isinstance(value, dict | list):
            pending.extend(reversed(_children(value, loc)))


def _children(value: dict | list, loc: list) -> list[tuple[Any, list]]:
    if isinstance(value, list):
        return [(item, [*loc, index]) for index, item in enumerate(value)]
    children: list[tuple[Any, list]] = []
    for key, item in value.items():
        if not _valid_unicode(key):
            children.append((_BadKey(), loc))
        children.append((item, [*loc, key if _valid_unicode(key) else "?"]))
    return children


def _outside_strings(body: bytes) -> bytes:
    """The body's brackets that are not inside a JSON string, in order (C-speed byte operations only).

    With escaped backslashes, then escaped quotes, taken out (JSON reads escapes left to right, as
    replace does), every quote left opens or closes a string; keeping only quotes and brackets, then
    dropping adjacent quote pairs (strings with no bracket in them), what lies between the remaining
    quotes is inside strings. A string left open runs to the end."""
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = unescaped.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    return b"".join(marks.split(b'"')[::2])


def nesting_depth(body: bytes) -> int:
    """How deeply arrays and objects nest in a JSON body, measured without parsing it (no recursion,
    so any depth is measured), in linear time by a few passes of byte operations."""
    steps = memoryview(_outside_strings(body).translate(_DEPTH_STEP)).cast("b")
    return max(accumulate(steps), default=0)


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")  # json has joined escaped pairs: any surrogate left is a lone one
    except UnicodeEncodeError:
        return False
    return True


def body_problems(body: bytes) -> list[dict]:
    """What is wrong with a JSON body, as 422 `detail` items (empty: nothing, or not JSON at all,
    which the route's own parsing reports in its words)."""
    if json.detect_encoding(body) not in ("utf-8", "utf-8-sig"):  # the route's json.loads(bytes) reads those
        return [{"type": "unicode_error", "loc": ["body"],
                 "msg": "the body is UTF-16 or UTF-32 encoded; send JSON encoded as UTF-8"}]
    depth = nesting_depth(body)  # on the bytes: in UTF-8 no multi-byte character holds a quote or bracket
    if depth > MAX_DEPTH:  # before anything parses it: parsing it would recurse `depth` times
        return [{"type": "json_too_deep", "loc": ["body"],
                 "msg": f"the body nests arrays and objects {depth} levels deep, more than the limit of "
                        f"{MAX_DEPTH}; send a flatter body"}]
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [{"type": "unicode_error", "loc": ["body"],
                 "msg": f"the body is not valid UTF-8 (byte {exc.start}); send JSON encoded as UTF-8"}]
    found: list[_NonFinite] = []

    def number(text: str) -> float | _NonFinite:  # every float, and the NaN/Infinity/-Infinity tokens
        value = float(text)
        if math.isfinite(value):
            return value
        found.append(_NonFinite(text))
        return found[-1]

    try:
        parsed = json.loads(text, parse_constant=number, parse_float=number)
    except ValueError:
        return []
    if not found and not _SURROGATE_ESCAPE.search(body):
        return []
    problems = list(_problems(parsed))
    return problems[:MAX_REPORTED]


def _is_json(scope) -> bool:
    """Whether FastAPI may read this body as JSON: its own test of the Content-Type (email's reading
    of it, so `application/json\\xa0` counts, as there), or no Content-Type at all (checked too)."""
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            header = Message()
            header["content-type"] = value.decode("latin-1")
            subtype = header.get_content_subtype()
            return header.get_content_maintype() == "application" and (
                subtype == "json" or subtype.endswith("+json"))
    return True


class StrictJsonBody:
    """ASGI middleware: answer 422 for a JSON body nested too deep, or with invalid Unicode or
    non-finite numbers.

    Sits inside BodySizeLimit, so the body it reads whole is bounded; the app then gets it as sent."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in CHECKED_METHODS or not _is_json(scope):
            return await self.app(scope, receive, send)
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return await self.app(scope, _replay([message], receive), send)
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problems = body_problems(body) if body else []
        if problems:
            return await reply_json(send, 422, problems)
        await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)


def _replay(messages: list[dict], receive):
    async def replayed():
        return messages.pop(0) if messages else await receive()

    return replayed
