"""A build that finds no precompiled header says how its flags differ from the headers there are."""

from __future__ import annotations

import json

from sandbox_side.build.pch import KEY_FILE, READY, find_pch, pch_key, pch_mismatch

FLAGS = ["-DTORCH_API_INCLUDE_EXTENSION_H", "-isystem", "/torch/include", "-fPIC", "-std=c++17"]


def write_header(root, flags, compiler="g++ 13", torch_version="2.11"):
    directory = root / pch_key(flags, compiler, torch_version)
    directory.mkdir(parents=True)
    (directory / KEY_FILE).write_text(json.dumps({"torch": torch_version, "compiler": compiler, "flags": flags}))
    (directory / READY).write_text("")


def test_matching_flags_find_the_header_whatever_the_extension_name(tmp_path):
    write_header(tmp_path, FLAGS)
    assert find_pch(tmp_path, ["-DTORCH_EXTENSION_NAME=relu", *FLAGS], "g++ 13", "2.11") is not None


def test_the_reason_names_the_differing_flags_and_compiler(tmp_path):
    write_header(tmp_path, FLAGS)
    wanted = ["-DTORCH_EXTENSION_NAME=relu", *FLAGS[:2], "/other/include", *FLAGS[3:]]
    assert find_pch(tmp_path, wanted, "c++ 12", "2.11") is None
    reason = pch_mismatch(tmp_path, wanted, "c++ 12", "2.11")
    assert "compiler 'c++ 12' vs header's 'g++ 13'" in reason
    assert "flags only here: /other/include" in reason
    assert "flags only in the header: /torch/include" in reason


def test_no_header_at_all_is_said_plainly(tmp_path):
    assert pch_mismatch(tmp_path, FLAGS, "g++ 13", "2.11") == "no precompiled header has been built"


def test_builds_get_the_compilers_by_absolute_path_and_see_their_directories(tmp_path, monkeypatch):
    from sandbox_side.build.toolchain import find_toolchain
    from worker.engine.build.builder import compiler_mounts

    wrapper = tmp_path / "bin" / "c++"
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\nexec g++ \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:/usr/bin:/bin")
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("KERNELJUDGE_FAST_CXX", "c++")
    toolchain = find_toolchain()
    assert toolchain.host_cxx == toolchain.fast_cxx == str(wrapper)
    assert [str(mount.source) for mount in compiler_mounts(toolchain)] == [str(wrapper.parent)]
