"""scripts/setup.sh installs the project editable (`pip install -e .`): pip calls setuptools' PEP 660 hook
`build_editable`, here called the same way (in a child process, every warning shown). The build must be
silent (no "Editable installation" warning at every `make serve` / `make test`) and give a plain .pth entry
for the repository root, where the three packages are."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOOK = "import sys; from setuptools import build_meta; print(build_meta.build_editable(sys.argv[1]))"


def test_editable_install_is_a_silent_pth_for_the_repository(tmp_path):
    done = subprocess.run([sys.executable, "-W", "always", "-c", HOOK, str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert "Warning:" not in output and "Editable installation." not in output, output[-3000:]
    wheel = tmp_path / done.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as archive:
        pth = [name for name in archive.namelist() if name.endswith(".pth")]
        assert len(pth) == 1 and pth[0].startswith("__editable__.kerneljudge-")
        assert Path(archive.read(pth[0]).decode().strip()) == REPO
