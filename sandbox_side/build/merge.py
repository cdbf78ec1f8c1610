"""One translation unit for torch's main.cpp and the host half of cuda.cu, where that cannot change either.

With g++ (the GPU hosts have no clang), a precompiled torch header still leaves ~7 s per translation
unit on an H100 host (13 s on the dev machine): the templates that torch's and pybind11's inline
functions use are instantiated and optimised at the end of every unit that includes them, whatever
that unit holds, and a g++ precompiled header cannot keep that work. The fast build compiled two
such units per candidate (main.cpp and the host half); compiled as one, it pays once.

The merged unit is the host half first, exactly as it compiles alone (nothing precedes it), then
main.cpp. Only main.cpp could then see something it would not see alone, so it is merged only when
what the candidate wrote into it (load_inline's `cpp_sources`, between torch's include and its
PYBIND11_MODULE) is plain function declarations made of torch/std types, builtin types and the
names it declares, none of which the candidate's CUDA source defines as a macro. Anything else keeps
the two units apart. A merged unit that does not compile is compiled again as two (fast.py), so a
candidate's compile errors are reported as before.
"""

from __future__ import annotations

import re

MAIN_INCLUDE = "#include <torch/extension.h>"
MODULE_START = "PYBIND11_MODULE("
QUALIFIERS = frozenset({"torch", "at", "c10", "std"})
QUALIFIED = frozenset({
    "Tensor", "TensorList", "IntArrayRef", "Scalar", "ScalarType", "optional", "vector", "tuple", "string",
    "pair", "array", "Device", "Layout", "MemoryFormat", "nullopt", "kFloat", "kHalf", "kBFloat16", "kInt",
    "kLong", "kDouble", "kBool",
})
BUILTIN = frozenset({
    "void", "bool", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "const", "auto",
    "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "size_t",
    "true", "false",
})
_TOKEN = re.compile(r"[A-Za-z_]\w*|::|\d[\w.]*|\S")
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)", re.MULTILINE)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_NAME = re.compile(r"[A-Za-z_]\w*")


def declared_part(main_text: str) -> str | None:
    """What the candidate wrote into main.cpp (between torch's include and its module block)."""
    start = main_text.find(MAIN_INCLUDE)
    end = main_text.find(MODULE_START)
    if start != 0 or end < 0:
        return None
    return main_text[len(MAIN_INCLUDE):end]


def why_not_merged(main_text: str, cuda_text: str) -> str | None:
    """None when main.cpp may follow the host half in one unit, else why not."""
    declared = declared_part(main_text)
    if declared is None:
        return "main.cpp is not torch's usual include, declarations and module block"
    text = _COMMENT.sub(" ", declared)
    if any(mark in text for mark in "{}#\"'"):
        return "cpp_sources holds more than function declarations"
    tokens = _TOKEN.findall(text)
    for index, token in enumerate(tokens):
        if not _NAME.fullmatch(token):
            continue
        before = tokens[index - 1] if index else ""
        after = tokens[index + 1] if index + 1 < len(tokens) else ""
        if after == "::":
            ok = token in QUALIFIERS
        elif before == "::":
            ok = token in QUALIFIED
        else:
            # a builtin type, or a name being declared (the function's, a parameter's): it follows a type
            declared_name = (bool(_NAME.fullmatch(before)) or before in (">", "*", "&")) and \
                after in ("(", ",", ")", "=", "[")
            ok = token in BUILTIN or declared_name
        if not ok:
            return f"cpp_sources names {token!r}, which the host half could give another meaning"
    macros = set(_DEFINE.findall(cuda_text))
    clash = macros & set(_NAME.findall(_COMMENT.sub(" ", main_text)))
    if clash:
        return f"the CUDA source defines {sorted(clash)[0]!r}, which main.cpp uses, as a macro"
    return None


def merged_source(host_text: str, main_text: str) -> str:
    """The host half, then main.cpp (its messages keep main.cpp's name and lines)."""
    return f'{host_text}\n#line 1 "main.cpp"\n{main_text}'
