"""JSON request bodies are checked before anything parses them: UTF-8, valid Unicode, finite numbers.

JSON lets a string hold "\\ud800" (a lone surrogate, which is no character and cannot be stored: it
crashed the store's encoder into a 500) and a number be 1e999 (infinite as a float); Python's
json also reads NaN and Infinity. None of these means anything in a request, so such a body is
answered 422 here, naming where each bad value is, for every route at once. (The models refuse
non-finite numbers too, `allow_inf_nan=False`, for callers that build them in Python.)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from .limits import reply_json

CHECKED_METHODS = frozenset({"POST", "PUT", "PATCH"})
MAX_REPORTED = 20
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class _NonFinite:
    """Stands for a number that is not finite while the body is parsed (json's parse hooks)."""

    def __init__(self, text: str):
        self.text = text


def _problems(value: Any, loc: list) -> Iterator[dict]:
    if isinstance(value, _NonFinite):
        yield {"type": "finite_number", "loc": loc,
               "msg": f"{value.text} is not a finite number; send a finite JSON number"}
    elif isinstance(value, str):
        if not _valid_unicode(value):
            yield {"type": "unicode_error", "loc": loc,
                   "msg": "text holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape), which is not "
                          "a character; send valid Unicode"}
    elif isinstance(value, dict):
        for key, item in value.items():
            if not _valid_unicode(key):
                yield {"type": "unicode_error", "loc": loc, "msg": "a key holds a lone UTF-16 surrogate; send "
                                                                   "valid Unicode"}
            yield from _problems(item, [*loc, key if _valid_unicode(key) else "?"])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _problems(item, [*loc, index])


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")  # json has joined escaped pairs: any surrogate left is a lone one
    except UnicodeEncodeError:
        return False
    return True


def body_problems(body: bytes) -> list[dict]:
    """What is wrong with a JSON body, as 422 `detail` items (empty: nothing, or not JSON at all,
    which the route's own parsing reports in its words)."""
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
    problems = list(_problems(parsed, ["body"]))
    return problems[:MAX_REPORTED]


def _is_json(scope) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or media.endswith(b"+json")
    return True  # FastAPI reads a body without a content type as JSON too


class StrictJsonBody:
    """ASGI middleware: answer 422 for a JSON body with invalid Unicode or non-finite numbers.

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
