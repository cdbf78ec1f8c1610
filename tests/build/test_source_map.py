"""Compiler messages about cuda.cu and main.cpp point at the candidate's own lines."""

from __future__ import annotations

from sandbox_side.build.source_map import SourceMap, map_compiler_log

CANDIDATE = '''import torch
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void k(float* x) {
    x[0] = oops;
}
"""
cpp_src = "void f();"
'''


def line_map(no_implicit_headers: bool = False) -> dict:
    source_map = SourceMap()
    source_map.read_candidate(CANDIDATE)
    cuda = CANDIDATE.split('cuda_src = """', 1)[1].split('"""', 1)[0]
    source_map.add_extension("void f();", cuda, no_implicit_headers)
    return source_map.to_json()


def test_nvcc_and_gcc_locations_map_to_the_candidate_file():
    # cuda.cu: three header lines, then the string, which starts (with a newline) on line 4 of the .py.
    nvcc = "/kj/ext/ext/cuda.cu(6): error: identifier \"oops\" is undefined"
    assert map_compiler_log(nvcc, line_map()) == 'candidate.py:6 (cuda.cu:6): error: identifier "oops" is undefined'
    gcc = "/kj/ext/ext/main.cpp:2:1: error: expected ';'"
    assert map_compiler_log(gcc, line_map()) == "candidate.py:9 (main.cpp:2):1: error: expected ';'"


def test_without_implicit_headers_the_lines_start_at_the_string():
    assert map_compiler_log("cuda.cu:3:12: error: x", line_map(no_implicit_headers=True)) == \
        "candidate.py:6 (cuda.cu:3):12: error: x"


def test_lines_outside_the_candidates_strings_are_left_as_they_are():
    assert map_compiler_log("cuda.cu(2): error: y", line_map()) == "cuda.cu:2: error: y"
