"""torch's build.ninja for one extension: its flags, and making ninja see fast-built outputs as up to date.

At run time the candidate's own `load_inline` call runs ninja in the same build directory. Ninja
rebuilds an output unless its build log holds the hash of the exact command line and its deps log
has the output's dependencies, in formats that change between ninja versions. So ninja records
them itself: it runs the real command lines once on empty stand-in sources (well under a second
per object), then the fast-built outputs take the stand-ins' place with the recorded timestamps,
and the real sources go back with older ones. A dry run then confirms ninja has nothing to do.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

MAIN_SOURCE = "main.cpp"
CUDA_SOURCE = "cuda.cu"
MAIN_OBJECT = "main.o"
CUDA_OBJECT = "cuda.cuda.o"


class NinjaStateRejected(RuntimeError):
    pass


@dataclass(frozen=True)
class TorchBuildPlan:
    """The variables of torch's generated build.ninja (see cpp_extension._write_ninja_file)."""

    directory: Path
    library: str  # e.g. "scalar_mul.so"
    cflags: list[str]
    post_cflags: list[str]
    cuda_cflags: list[str]
    cuda_post_cflags: list[str]
    ldflags: list[str]

    @property
    def extension_name(self) -> str:
        return self.library.removesuffix(".so")

    @classmethod
    def read(cls, directory: Path) -> TorchBuildPlan:
        variables: dict[str, str] = {}
        library = ""
        for line in (directory / "build.ninja").read_text().splitlines():
            if line.startswith("build ") and ": link " in line:
                library = line.split(":", 1)[0].removeprefix("build ").strip()
            elif " = " in line and not line.startswith((" ", "\t")):
                key, value = line.split(" = ", 1)
                variables[key.strip()] = value
        if not library:
            raise NinjaStateRejected("build.ninja has no link step")

        def flags(name: str) -> list[str]:
            return shlex.split(variables.get(name, ""))

        return cls(directory=directory, library=library, cflags=flags("cflags"),
                   post_cflags=flags("post_cflags"), cuda_cflags=flags("cuda_cflags"),
                   cuda_post_cflags=flags("cuda_post_cflags"), ldflags=flags("ldflags"))


def _ninja(directory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ninja", *args], cwd=directory, capture_output=True, text=True, check=False)


def record_with_stand_ins(directory: Path, targets: list[str]) -> dict[str, int]:
    """Run ninja's own command lines on empty sources; returns each target's recorded mtime (ns).

    Leaves the stand-in sources in place: `install_outputs` puts the real ones back.
    """
    for source in (MAIN_SOURCE, CUDA_SOURCE):
        (directory / source).write_text("")
    result = _ninja(directory, *targets)
    if result.returncode != 0:
        raise NinjaStateRejected(f"ninja failed on the stand-in sources: {result.stdout[-800:]}")
    return {target: (directory / target).stat().st_mtime_ns for target in targets}


def install_outputs(directory: Path, sources: dict[str, str], outputs: dict[str, Path],
                    recorded: dict[str, int]) -> None:
    """Real sources back (older than every output), fast-built outputs in with the recorded mtimes."""
    oldest = min(recorded.values()) - 1_000_000_000
    for name, text in sources.items():
        path = directory / name
        path.write_text(text)
        os.utime(path, ns=(oldest, oldest))
    for target, built in outputs.items():
        destination = directory / target
        os.replace(built, destination)
        os.utime(destination, ns=(recorded[target], recorded[target]))


def confirm_up_to_date(directory: Path, targets: list[str]) -> None:
    result = _ninja(directory, "-n", "-d", "explain", *targets)
    if result.returncode != 0 or "no work to do" not in result.stdout:
        raise NinjaStateRejected("ninja would rebuild the fast-built outputs: "
                                 + (result.stderr or result.stdout)[-600:])
