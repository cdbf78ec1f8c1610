"""scripts/unpack_clang.sh: clang from Debian packages where apt cannot install it (the GPU image has no clang, so
every fast build's host half took g++'s 8-15 s instead of clang's ~3 s). Checked with a made-up package that holds
a stand-in clang++, so the script's unpacking and its wrapper are what is tested, not a 60 MB download."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "unpack_clang.sh"
pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb (Debian tools)")

STAND_IN = """#!/bin/sh
echo "stand-in clang $*"
echo "libraries: $LD_LIBRARY_PATH"
"""


def _package(root: Path, debs: Path) -> None:
    tree = root / "pkg"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text("Package: fake-clang\nVersion: 1.0\nArchitecture: amd64\n"
                                             "Maintainer: kerneljudge tests\nDescription: a stand-in clang\n")
    compiler = tree / "usr" / "lib" / "llvm-99" / "bin" / "clang++"
    compiler.parent.mkdir(parents=True)
    compiler.write_text(STAND_IN)
    compiler.chmod(0o755)
    (tree / "usr" / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    (tree / "usr" / "lib" / "x86_64-linux-gnu" / "libLLVM.so.99").write_bytes(b"")
    debs.mkdir()
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(tree), str(debs / "fake-clang.deb")],
                   check=True, capture_output=True)


def test_the_wrapper_runs_the_unpacked_clang_with_its_packages_libraries_first(tmp_path):
    debs, prefix = tmp_path / "debs", tmp_path / "kj-clang"
    _package(tmp_path, debs)
    done = subprocess.run(["bash", str(SCRIPT), str(debs), str(prefix)], capture_output=True, text=True, check=True)
    wrapper = prefix / "clang++"
    assert done.stdout.strip() == str(wrapper)
    ran = subprocess.run([str(wrapper), "-O2", "-c", "x.cpp"], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/elsewhere"})
    assert ran.stdout.splitlines()[0] == "stand-in clang -O2 -c x.cpp"
    assert ran.stdout.splitlines()[1] == (f"libraries: {prefix}/usr/lib/x86_64-linux-gnu:{prefix}/usr/lib/llvm-99/lib"
                                          ":/elsewhere")
    # The wrapper sits at the prefix's top: the build sandbox mounts the compiler's folder, the whole tree.
    assert wrapper.parent == prefix and "clang" in wrapper.name  # toolchain.fast_cxx_is_clang reads the name


def test_a_folder_without_packages_is_refused(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path), str(tmp_path / "kj-clang")], capture_output=True,
                          text=True)
    assert done.returncode == 2 and "no .deb" in done.stderr
