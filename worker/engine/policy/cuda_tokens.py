"""A small C/C++/CUDA tokenizer for the policy: comments dropped, strings kept apart from code.

It is not a compiler front end; it only has to make sure that rules see identifiers as code
(never inside a comment or a string) and can read string literals (asm bodies, printf formats)
and preprocessor directives on their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TokenKind = Literal["ident", "number", "string", "char", "punct", "directive"]
_MULTI_PUNCT = ("<<<", ">>>", "::", "->", "<<", ">>", "==", "!=", "<=", ">=", "&&", "||", "##", "++", "--")


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str
    line: int  # 0-based line within the source text

    @property
    def value(self) -> str:
        """A string literal's content without quotes (the raw text otherwise)."""
        if self.kind == "string" and self.text.startswith("R\""):
            open_paren = self.text.index("(")
            return self.text[open_paren + 1 : self.text.rindex(")")]
        if self.kind in ("string", "char"):
            return self.text[1:-1]
        return self.text


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    i, line, n = 0, 0, len(text)
    at_line_start = True
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            i += 1
            at_line_start = True
            continue
        if ch in " \t\r\f\v":
            i += 1
            continue
        if text.startswith("//", i):
            i = _skip_to_newline(text, i)
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += text.count("\n", i, end)
            i = end
            continue
        if ch == "#" and at_line_start:
            start_line = line
            directive, i, line = _read_directive(text, i, line)
            tokens.append(Token("directive", directive, start_line))
            continue
        at_line_start = False
        if ch == "R" and text.startswith('R"', i):
            end = _raw_string_end(text, i)
            tokens.append(Token("string", text[i:end], line))
            line += text.count("\n", i, end)
            i = end
            continue
        if ch in "\"'":
            end = _quoted_end(text, i, ch)
            tokens.append(Token("string" if ch == '"' else "char", text[i:end], line))
            line += text.count("\n", i, end)
            i = end
            continue
        if ch.isalpha() or ch == "_":
            end = i + 1
            while end < n and (text[end].isalnum() or text[end] == "_"):
                end += 1
            tokens.append(Token("ident", text[i:end], line))
            i = end
            continue
        if ch.isdigit():
            end = i + 1
            while end < n and (text[end].isalnum() or text[end] in "._'"):
                end += 1
            tokens.append(Token("number", text[i:end], line))
            i = end
            continue
        punct = next((p for p in _MULTI_PUNCT if text.startswith(p, i)), ch)
        tokens.append(Token("punct", punct, line))
        i += len(punct)
    return tokens


def _skip_to_newline(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end


def _quoted_end(text: str, i: int, quote: str) -> int:
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == quote or text[j] == "\n":
            return j + 1
        j += 1
    return len(text)


def _raw_string_end(text: str, i: int) -> int:
    open_paren = text.find("(", i + 2)
    if open_paren < 0:
        return _quoted_end(text, i + 1, '"')
    delimiter = text[i + 2 : open_paren]
    close = text.find(")" + delimiter + '"', open_paren)
    return len(text) if close < 0 else close + len(delimiter) + 2


def _read_directive(text: str, i: int, line: int) -> tuple[str, int, int]:
    """Read a preprocessor line (with backslash continuations), dropping its comments."""
    parts: list[str] = []
    n = len(text)
    while i < n and text[i] != "\n":
        if text.startswith("\\\n", i):
            i += 2
            line += 1
            parts.append(" ")
            continue
        if text.startswith("//", i):
            i = _skip_to_newline(text, i)
            break
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += text.count("\n", i, end)
            i = end
            parts.append(" ")
            continue
        parts.append(text[i])
        i += 1
    return " ".join("".join(parts).split()), i, line


def directive_body_tokens(directive: Token) -> list[Token]:
    """Tokens of a #define body (so macros cannot hide identifiers from the rules)."""
    text = directive.text.lstrip("#").strip()
    if not text.startswith("define"):
        return []
    return [Token(t.kind, t.text, directive.line) for t in tokenize(text[len("define"):])]


def include_target(directive: Token) -> str | None:
    text = directive.text.lstrip("#").strip()
    if not text.startswith("include"):
        return None
    return text[len("include"):].strip().strip("<>\"")
