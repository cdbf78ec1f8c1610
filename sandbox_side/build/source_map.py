"""Map lines of the files load_inline writes (cuda.cu, main.cpp) back to the candidate's .py file.

load_inline joins the candidate's source strings with newlines after a few header lines of its own.
A string that appears verbatim in the .py file (the usual triple-quoted literal) maps line for line;
one built at run time keeps its cuda.cu / main.cpp line numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Header lines load_inline puts before the candidate's strings (torch/extension.h; torch/types.h,
# cuda.h, cuda_runtime.h).
IMPLICIT_LINES = {"main.cpp": 1, "cuda.cu": 3}
# A compiler's file:line, as gcc/clang (file:12:) and nvcc (file(12):) print it.
_LOCATION = re.compile(r"(?P<path>[\w./-]*?(?P<file>main\.cpp|cuda\.cu))(?::(?P<line>\d+)|\((?P<nvline>\d+)\))")
CANDIDATE_NAME = "candidate.py"


@dataclass(frozen=True)
class Segment:
    first_line: int  # in the generated file
    line_count: int
    python_line: int  # where the same text starts in the candidate


@dataclass
class SourceMap:
    candidate: str = ""
    files: dict[str, list[Segment]] = field(default_factory=dict)

    def read_candidate(self, text: str) -> None:
        self.candidate = text

    def add_extension(self, cpp_sources, cuda_sources, no_implicit_headers: bool) -> None:
        def implicit(file: str) -> int:
            return 0 if no_implicit_headers else IMPLICIT_LINES[file]

        self.files["main.cpp"] = self._segments(cpp_sources, implicit("main.cpp"))
        if cuda_sources:
            self.files["cuda.cu"] = self._segments(cuda_sources, implicit("cuda.cu"))

    def _segments(self, sources, implicit: int) -> list[Segment]:
        parts = [sources] if isinstance(sources, str) else list(sources or [])
        segments, line = [], implicit + 1
        for part in parts:
            count = part.count("\n") + 1
            found = self.candidate.find(part) if part.strip() else -1
            if found >= 0:
                segments.append(Segment(line, count, self.candidate.count("\n", 0, found) + 1))
            line += count
        return segments

    def to_json(self) -> dict:
        return {name: [[s.first_line, s.line_count, s.python_line] for s in segments]
                for name, segments in self.files.items()}


def python_line(line_map: dict, file: str, line: int) -> int | None:
    for first, count, start in line_map.get(file, []):
        if first <= line < first + count:
            return start + line - first
    return None


def map_compiler_log(text: str, line_map: dict) -> str:
    """`.../cuda.cu:12:5: error` becomes `candidate.py:40 (cuda.cu:12):5: error` where it maps."""

    def replace(match: re.Match) -> str:
        file = match.group("file")
        line = int(match.group("line") or match.group("nvline"))
        mapped = python_line(line_map, file, line)
        if mapped is None:
            return f"{file}:{line}"
        return f"{CANDIDATE_NAME}:{mapped} ({file}:{line})"

    return _LOCATION.sub(replace, text)
