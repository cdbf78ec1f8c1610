"""Interpreters for tests that need one this process is not: a venv of the system Python of the same
version, in a folder every user can pass (a pyenv Python under /root is not)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest


def system_venv(*, sees_packages: bool) -> Path:
    """A venv's folder (`<folder>/venv/bin/python`); `sees_packages`: a .pth file puts this environment's
    packages on its own import path, where the sandbox's isolated interpreter finds them too."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    system_python = f"/usr/bin/python{version}"
    if not os.path.exists(system_python):
        pytest.skip(f"no {system_python} to build a venv from")
    folder = Path(tempfile.mkdtemp(prefix="kj-test-venv-"))
    folder.chmod(0o755)
    subprocess.run([system_python, "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
    if sees_packages:
        site = folder / "venv" / "lib" / f"python{version}" / "site-packages"
        (site / "kerneljudge-tests.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return folder


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
