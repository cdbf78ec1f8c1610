"""Split load_inline's cuda.cu into device code (for nvcc, without torch) and host code (for the
host compiler, against the precompiled torch header), from clang's parse of the source.

The parse sees the source with its torch includes left out, so every declaration that needs torch
comes out with errors: that is what makes it host code. Kernels, device functions and the types and
macros they use go to the device file; the host file gets the rest, with each kernel replaced by a
declaration of a generated launcher and each `kernel<<<...>>>(args)` by a call to it. Both files
keep every byte of the source at its line and column (what is left out becomes spaces), so compiler
messages point at the lines of cuda.cu. Whatever the split cannot place with certainty raises
NotSplittable, and the caller builds the candidate the usual way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from clang import cindex

from sandbox_side.build.toolchain import Toolchain

K = cindex.CursorKind
CUDA_ATTRIBUTES = {K.CUDAGLOBAL_ATTR, K.CUDADEVICE_ATTR, K.CUDAHOST_ATTR, K.CUDACONSTANT_ATTR,
                   K.CUDASHARED_ATTR}
CUDA_KEYWORDS = {"__global__", "__device__", "__constant__", "__shared__", "__managed__"}
TORCH_HEADER_PREFIXES = ("torch/", "ATen/", "c10/", "pybind11/", "caffe2/", "THC/")
CUDA_HEADER_PREFIXES = ("cuda", "cub/", "thrust/", "cooperative_groups", "nv/", "crt/", "sm_", "device_",
                        "vector_", "math_constants.h", "mma.h", "cuComplex.h", "driver_types.h",
                        "builtin_types.h", "host_defines.h", "library_types.h")
STANDARD_HEADERS = {
    "algorithm", "array", "cassert", "cfloat", "climits", "cmath", "cstddef", "cstdint", "cstdio", "cstdlib",
    "cstring", "functional", "initializer_list", "iostream", "limits", "memory", "numeric", "sstream",
    "stdexcept", "string", "tuple", "type_traits", "utility", "vector", "assert.h", "float.h", "limits.h",
    "math.h", "stdint.h", "stdio.h", "stdlib.h", "string.h", "cinttypes", "iomanip", "map", "unordered_map",
    "optional", "chrono", "random", "bit", "complex", "atomic",
}
# Declarations that may go to both files when they parse without torch.
SHARED_KINDS = {K.STRUCT_DECL, K.CLASS_DECL, K.UNION_DECL, K.ENUM_DECL, K.TYPEDEF_DECL, K.TYPE_ALIAS_DECL,
                K.CLASS_TEMPLATE, K.TYPE_ALIAS_TEMPLATE_DECL, K.USING_DIRECTIVE, K.USING_DECLARATION,
                K.NAMESPACE_ALIAS, K.STATIC_ASSERT}
FUNCTION_KINDS = {K.FUNCTION_DECL, K.FUNCTION_TEMPLATE}
TEMPLATE_PARAMETER_KINDS = {K.TEMPLATE_TYPE_PARAMETER, K.TEMPLATE_NON_TYPE_PARAMETER,
                            K.TEMPLATE_TEMPLATE_PARAMETER}
LAUNCHER_PREFIX = "kj_launch_"
HALF_HEADERS = ("c10/util/Half.h", "c10/util/BFloat16.h")
DEVICE_INCLUDE = Path(__file__).resolve().parent / "device_include"


class NotSplittable(Exception):
    """The fast build cannot place this source with certainty; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Kernel:
    name: str
    template_header: str  # "" or "template <typename T, int N>"
    template_arguments: str  # "" or "<T, N>"
    parameters: tuple[str, ...]  # declarations as written, e.g. "const float* __restrict__ x"
    parameter_names: tuple[str, ...]

    @property
    def launcher(self) -> str:
        return LAUNCHER_PREFIX + self.name

    def launcher_signature(self) -> str:
        params = ", ".join(("dim3 kj_grid", "dim3 kj_block", "size_t kj_shared_bytes", "cudaStream_t kj_stream",
                            *self.parameters))
        head = f"{self.template_header} " if self.template_header else ""
        return f"{head}void {self.launcher}({params})"

    def launcher_definition(self) -> str:
        args = ", ".join(self.parameter_names)
        return (f"{self.launcher_signature()} {{\n"
                f"  {self.name}{self.template_arguments}<<<kj_grid, kj_block, kj_shared_bytes, kj_stream>>>({args});\n"
                "}\n")


@dataclass
class SplitSources:
    device: str  # cuda_dev.cu
    host: str  # cuda_host.cpp
    kernels: list[Kernel]
    device_pre_includes: list[str] = field(default_factory=list)

    @property
    def has_template_kernels(self) -> bool:
        return any(kernel.template_header for kernel in self.kernels)


@dataclass(frozen=True)
class _Span:
    start: int  # byte offsets into the source
    end: int


class _Source:
    """The source text with byte offsets for (line, column) positions."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.data = text.encode()
        self.line_starts = [0]
        for index, byte in enumerate(self.data):
            if byte == 0x0A:
                self.line_starts.append(index + 1)

    def offset(self, location: cindex.SourceLocation) -> int:
        return self.line_starts[location.line - 1] + location.column - 1

    def span(self, cursor_or_token) -> _Span:
        extent = cursor_or_token.extent
        return _Span(self.offset(extent.start), self.offset(extent.end))

    def declaration_span(self, cursor: cindex.Cursor) -> _Span:
        """A declaration's extent plus the `;` that ends it (clang's extent stops before it)."""
        span = self.span(cursor)
        end = span.end
        while end < len(self.data) and self.data[end:end + 1] in (b" ", b"\t"):
            end += 1
        if self.data[end:end + 1] == b";":
            return _Span(span.start, end + 1)
        return span

    def line_span(self, line: int) -> _Span:
        end = self.line_starts[line] if line < len(self.line_starts) else len(self.data)
        return _Span(self.line_starts[line - 1], end)

    def slice(self, span: _Span) -> str:
        return self.data[span.start:span.end].decode()


def _header_kind(name: str) -> str:
    if name.startswith(TORCH_HEADER_PREFIXES):
        return "torch"
    if name.startswith(CUDA_HEADER_PREFIXES) or name in STANDARD_HEADERS:
        return "device"
    return "unknown"


@dataclass
class _Directive:
    line: int
    words: list[str]  # the tokens after '#'

    @property
    def keyword(self) -> str:
        return self.words[0] if self.words else ""

    @property
    def header(self) -> str:
        return "".join(self.words[1:]).strip("<>\"")


def _directives(tokens: list[cindex.Token]) -> list[_Directive]:
    directives: list[_Directive] = []
    previous_line = 0
    current: _Directive | None = None
    for token in tokens:
        line = token.location.line
        if current is not None and line == current.line:
            current.words.append(token.spelling)
            continue
        current = None
        if token.spelling == "#" and line != previous_line:
            current = _Directive(line, [])
            directives.append(current)
        previous_line = line
    return directives


def _parse_args(toolchain: Toolchain, torch_includes: list[str], std: str) -> list[str]:
    args = ["-x", "cuda", "--cuda-host-only", f"-std={std}", f"--cuda-path={toolchain.cuda_home}", "-nocudalib",
            "-Wno-unknown-cuda-version", "-ferror-limit=0", "-w",
            "-isystem", str(toolchain.cuda_home / "include"), "-isystem", str(toolchain.cccl_include),
            "-isystem", str(Path(__file__).resolve().parent / "parse_support")]
    for include in torch_includes:
        args += ["-isystem", include]
    return args


def _light_torch_headers(identifiers: set[str]) -> list[str]:
    """Torch headers the device side may use: half types and tensor accessors compile quickly."""
    headers = []
    if identifiers & {"Half", "BFloat16", "Float8_e4m3fn", "Float8_e5m2"}:
        headers += list(HALF_HEADERS)
    if any("TensorAccessor" in name or name.endswith("PtrTraits") for name in identifiers):
        headers += [str(DEVICE_INCLUDE / "kj_tensor_accessor.h")]
    return headers


def _kernel(cursor: cindex.Cursor, source: _Source) -> Kernel:
    params = [child for child in cursor.get_children() if child.kind == K.PARM_DECL]
    declarations, names = [], []
    for param in params:
        if not param.spelling:
            raise NotSplittable(f"kernel {cursor.spelling} has an unnamed parameter")
        text = " ".join(source.slice(source.span(param)).split())
        declarations.append(text)
        names.append(param.spelling)
    header, arguments = "", ""
    if cursor.kind == K.FUNCTION_TEMPLATE:
        template_params = [child for child in cursor.get_children() if child.kind in TEMPLATE_PARAMETER_KINDS]
        texts = [" ".join(source.slice(source.span(param)).split()) for param in template_params]
        header = f"template <{', '.join(texts)}>"
        arguments = "<" + ", ".join(
            param.spelling + ("..." if "..." in text else "") for param, text in zip(template_params, texts, strict=True)) + ">"
    return Kernel(cursor.spelling, header, arguments, tuple(declarations), tuple(names))


def _attributes(cursor: cindex.Cursor) -> set[cindex.CursorKind]:
    return {child.kind for child in cursor.get_children() if child.kind in CUDA_ATTRIBUTES}


def _contains_cuda_code(cursor: cindex.Cursor) -> bool:
    return any(node.kind in CUDA_ATTRIBUTES for node in cursor.walk_preorder())


def _is_constexpr(cursor: cindex.Cursor, source: _Source) -> bool:
    head = source.slice(source.span(cursor)).split("{", 1)[0]
    return "constexpr" in head.split()


def _is_internal_constant(cursor: cindex.Cursor) -> bool:
    return cursor.type.is_const_qualified() or cursor.storage_class == cindex.StorageClass.STATIC


class _Splitter:
    def __init__(self, text: str, toolchain: Toolchain, torch_includes: list[str], std: str) -> None:
        self.source = _Source(text)
        self.toolchain = toolchain
        self.torch_includes = torch_includes
        self.std = std
        self.device_spans: list[_Span] = []  # byte ranges that go to the device file
        self.host_only_spans: list[_Span] = []  # ranges the device file leaves out
        self.host_replacements: list[tuple[_Span, str]] = []
        self.claimed: list[_Span] = []  # declarations the parse placed
        self.directive_spans: list[_Span] = []
        self.conditional_lines: list[int] = []
        self.kernels: dict[str, Kernel] = {}
        self.device_variables: set[str] = set()

    def run(self) -> SplitSources:
        index = cindex.Index.create()
        raw = index.parse("cuda.cu", args=["-x", "c++", "-nostdinc", "-nostdinc++", "-fsyntax-only"],
                          unsaved_files=[("cuda.cu", self.source.text)],
                          options=cindex.TranslationUnit.PARSE_INCOMPLETE)
        tokens = list(raw.get_tokens(extent=raw.cursor.extent))
        identifiers = {token.spelling for token in tokens if token.kind == cindex.TokenKind.IDENTIFIER}
        pre_includes = _light_torch_headers(identifiers)
        view = self._device_view(_directives(tokens))
        args = _parse_args(self.toolchain, self.torch_includes, self.std)
        for header in pre_includes:
            args += ["-include", header]
        unit = index.parse("cuda.cu", args=args, unsaved_files=[("cuda.cu", view)],
                           options=cindex.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
        fatal = [d for d in unit.diagnostics if d.severity >= cindex.Diagnostic.Fatal]
        if fatal:
            raise NotSplittable(f"the CUDA headers do not parse: {fatal[0].spelling}")
        errors = [(self.source.offset(d.location), d) for d in unit.diagnostics
                  if d.severity >= cindex.Diagnostic.Error and d.location.file
                  and d.location.file.name == "cuda.cu"]
        for cursor in unit.cursor.get_children():
            if cursor.location.file is None or cursor.location.file.name != "cuda.cu":
                continue
            self._place(cursor, errors)
        self._check_gaps(list(unit.get_tokens(extent=unit.cursor.extent)))
        self._rewrite_launches(list(unit.get_tokens(extent=unit.cursor.extent)))
        return SplitSources(device=self._device_text(), host=self._host_text(),
                            kernels=list(self.kernels.values()), device_pre_includes=pre_includes)

    # -- includes ---------------------------------------------------------------------------
    def _device_view(self, directives: list[_Directive]) -> str:
        """The source with torch includes blanked out (what the parse and the device file see)."""
        for directive in directives:
            span = self.source.line_span(directive.line)
            self.directive_spans.append(span)
            if directive.keyword in {"if", "ifdef", "ifndef", "elif", "else", "endif"}:
                self.conditional_lines.append(directive.line)
                continue
            if directive.keyword != "include":
                self.device_spans.append(span)  # define, undef, pragma: both files
                continue
            kind = _header_kind(directive.header)
            if kind == "unknown":
                raise NotSplittable(f"cuda.cu:{directive.line} includes <{directive.header}>; the fast build "
                                    "splits only sources that include CUDA, C++ standard and torch headers")
            if kind == "torch":
                self.host_only_spans.append(span)
            else:
                self.device_spans.append(span)
        return _blank(self.source, self.host_only_spans)

    # -- declarations -----------------------------------------------------------------------
    def _place(self, cursor: cindex.Cursor, errors: list) -> None:
        kind = cursor.kind
        if kind in {K.INCLUSION_DIRECTIVE, K.MACRO_INSTANTIATION, K.MACRO_DEFINITION}:
            return  # directives were placed from the tokens
        span = self.source.declaration_span(cursor)
        self.claimed.append(span)
        inside = [d for offset, d in errors if span.start <= offset < span.end]
        attributes = _attributes(cursor)
        if kind in FUNCTION_KINDS and K.CUDAGLOBAL_ATTR in attributes:
            self._require_clean(cursor, inside)
            self._add_kernel(cursor, span)
        elif kind in FUNCTION_KINDS and K.CUDADEVICE_ATTR in attributes:
            self._require_clean(cursor, inside)
            self.device_spans.append(span)
            if K.CUDAHOST_ATTR not in attributes:
                self.host_replacements.append((span, ""))
        elif kind == K.VAR_DECL and attributes:
            self._require_clean(cursor, inside)
            self.device_spans.append(span)
            self.device_variables.add(cursor.spelling)
            self.host_replacements.append((span, ""))
        elif kind in FUNCTION_KINDS:
            if not inside and cursor.is_definition() and _is_constexpr(cursor, self.source):
                self.device_spans.append(span)  # callable from device code (--expt-relaxed-constexpr)
        elif kind in SHARED_KINDS or (kind == K.VAR_DECL and _is_internal_constant(cursor)):
            if _contains_cuda_code(cursor) and inside:
                self._require_clean(cursor, inside)
            if not inside:
                self.device_spans.append(span)
        elif _contains_cuda_code(cursor):
            raise NotSplittable(f"cuda.cu:{cursor.extent.start.line}: CUDA code inside a "
                                f"{kind.name.lower().replace('_', ' ')} ({cursor.spelling or 'unnamed'})")
        # anything else (host functions, globals, namespaces of host code) stays in the host file only

    def _require_clean(self, cursor: cindex.Cursor, inside: list) -> None:
        if inside:
            first = inside[0]
            raise NotSplittable(f"device code does not parse without the torch headers: cuda.cu:{first.location.line}: "
                                f"{first.spelling} (in {cursor.spelling})")

    def _add_kernel(self, cursor: cindex.Cursor, span: _Span) -> None:
        kernel = _kernel(cursor, self.source)
        known = self.kernels.get(kernel.name)
        if known is not None and (known.parameters != kernel.parameters
                                  or known.template_header != kernel.template_header):
            raise NotSplittable(f"kernel {kernel.name} is declared twice with different parameters "
                                "(overloaded kernels are not split)")
        if known is None or cursor.is_definition():
            self.kernels[kernel.name] = kernel
        self.device_spans.append(span)
        self.host_replacements.append((span, kernel.launcher_signature() + ";"))

    # -- what the parse did not place ---------------------------------------------------------
    def _check_gaps(self, tokens: list[cindex.Token]) -> None:
        for line in self.conditional_lines:
            offset = self.source.line_starts[line - 1]
            if not any(span.start < offset < span.end for span in self.claimed):
                raise NotSplittable(f"cuda.cu:{line}: conditional compilation (#if/#ifdef) around "
                                    "declarations is not split")
        device = self.device_spans
        for token in tokens:
            offset = self.source.offset(token.location)
            if token.spelling in self.device_variables and not any(s.start <= offset < s.end for s in device):
                raise NotSplittable(f"cuda.cu:{token.location.line}: host code uses the device variable "
                                    f"{token.spelling!r} (e.g. cudaMemcpyToSymbol on a __constant__)")
            if any(span.start <= offset < span.end for span in self.claimed + self.directive_spans):
                continue
            if token.spelling in CUDA_KEYWORDS:
                raise NotSplittable(f"cuda.cu:{token.location.line}: CUDA code the parser could not place "
                                    "(a declaration with errors, or one made by a macro)")

    # -- kernel launches --------------------------------------------------------------------
    def _rewrite_launches(self, tokens: list[cindex.Token]) -> None:
        spellings = [token.spelling for token in tokens]
        for index, spelling in enumerate(spellings):
            if spelling != "<<<":
                continue
            offset = self.source.offset(tokens[index].location)
            line = tokens[index].location.line
            if any(span.start <= offset < span.end for span in self.device_spans):
                raise NotSplittable(f"cuda.cu:{line}: a kernel launches a kernel (dynamic parallelism)")
            name_index, template_text = self._callee(tokens, index)
            name = spellings[name_index]
            if name not in self.kernels or (name_index > 0 and spellings[name_index - 1] in {"::", ".", "->"}):
                raise NotSplittable(f"cuda.cu:{line}: launch of {name!r}, which is not a kernel defined in "
                                    "this source at namespace scope")
            config, after = self._split_until(tokens, index + 1, ">>>")
            if not 2 <= len(config) <= 4 or after + 1 >= len(tokens) or spellings[after + 1] != "(":
                raise NotSplittable(f"cuda.cu:{line}: kernel launch configuration not understood")
            arguments, _ = self._split_until(tokens, after + 2, ")")
            config += ["0"] * (4 - len(config))
            start = self.source.offset(tokens[name_index].location)
            open_paren = self.source.span(tokens[after + 1])
            call = (f"{LAUNCHER_PREFIX}{name}{template_text}("
                    + ", ".join(config) + (", " if arguments else ""))
            self.host_replacements.append((_Span(start, open_paren.end), call))

    def _callee(self, tokens: list[cindex.Token], launch: int) -> tuple[int, str]:
        """The kernel name's token index and its explicit template arguments' text, if any."""
        index = launch - 1
        if tokens[index].spelling not in {">", ">>"}:
            return index, ""
        depth = 0
        end = self.source.span(tokens[index]).end
        while index >= 0:
            spelling = tokens[index].spelling
            depth += {">": 1, ">>": 2, "<": -1, "<<": -2}.get(spelling, 0)
            if depth == 0:
                break
            index -= 1
        if index <= 0:
            raise NotSplittable(f"cuda.cu:{tokens[launch].location.line}: kernel template arguments not understood")
        start = self.source.offset(tokens[index].location)
        return index - 1, self.source.data[start:end].decode()

    def _split_until(self, tokens: list[cindex.Token], start: int, closing: str) -> tuple[list[str], int]:
        """Top-level comma-separated texts from `start` to the matching `closing`; and its index."""
        parts: list[str] = []
        depth = 0
        part_start = start
        brackets = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}
        index = start
        while index < len(tokens):
            spelling = tokens[index].spelling
            if depth == 0 and spelling in {closing, ","}:
                if index > part_start:
                    first = self.source.offset(tokens[part_start].location)
                    last = self.source.span(tokens[index - 1]).end
                    parts.append(self.source.data[first:last].decode())
                elif spelling == ",":
                    raise NotSplittable(f"cuda.cu:{tokens[index].location.line}: empty argument in a kernel launch")
                if spelling == closing:
                    return parts, index
                part_start = index + 1
            else:
                depth += brackets.get(spelling, 0)
            index += 1
        raise NotSplittable(f"unterminated kernel launch (no {closing!r})")

    # -- output -----------------------------------------------------------------------------
    def _device_text(self) -> str:
        keep = sorted(self.device_spans, key=lambda span: span.start)
        data = self.source.data
        out = bytearray(_blank_bytes(data))
        for span in keep:
            out[span.start:span.end] = data[span.start:span.end]
        text = '#line 1 "cuda.cu"\n' + out.decode()
        launchers = "".join(kernel.launcher_definition() for kernel in self.kernels.values())
        return f'{text}\n#line 1 "kj_launchers.cu"\n{launchers}'

    def _host_text(self) -> str:
        data = self.source.data
        out = bytearray()
        position = 0
        for span, replacement in sorted(self.host_replacements, key=lambda item: item[0].start):
            if span.start < position:
                continue  # a launch inside a region already replaced (cannot happen for host code)
            out += data[position:span.start]
            removed_newlines = data[span.start:span.end].count(b"\n")
            out += replacement.encode() + b"\n" * removed_newlines
            position = span.end
        out += data[position:]
        return f'#include "{DEVICE_INCLUDE / "kj_host_compat.h"}"\n#line 1 "cuda.cu"\n' + out.decode()


def _blank_bytes(data: bytes) -> bytes:
    return bytes(b if b == 0x0A else 0x20 for b in data)


def _blank(source: _Source, spans: list[_Span]) -> str:
    data = bytearray(source.data)
    for span in spans:
        data[span.start:span.end] = _blank_bytes(bytes(data[span.start:span.end]))
    return data.decode()


def split_cuda_source(text: str, toolchain: Toolchain, torch_includes: list[str], std: str = "c++17") -> SplitSources:
    """Split torch's cuda.cu text; raises NotSplittable with the reason when it cannot."""
    return _Splitter(text, toolchain, torch_includes, std).run()
