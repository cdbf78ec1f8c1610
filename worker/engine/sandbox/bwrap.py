"""bubblewrap command line for a SandboxSpec.

The child sees: the system read-only (/usr, /lib*, /bin, /sbin, /opt, a few /etc files,
the Python prefixes), fresh /proc and /dev, a private size-limited /tmp, the job's own
mounts, and only the GPU device nodes it was given. New user, PID, IPC, UTS, cgroup and
(by default) network namespaces; no capabilities; it dies with its supervisor.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys

from .spec import SandboxSpec

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
ETC_FILES = (
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
    "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime", "/etc/OpenCL",
)
SANDBOX_UID = 65534


def find_bwrap() -> str | None:
    return os.environ.get("KERNELJUDGE_BWRAP") or shutil.which("bwrap")


def python_prefixes() -> list[str]:
    """Directories the interpreter and its packages live in, which the child must read."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    return sorted(p for p in {os.path.realpath(c) for c in candidates} | candidates if os.path.isdir(p))


def gpu_device_nodes(gpu_index: int | None) -> list[str]:
    """Control nodes plus one GPU's node (or all GPUs' when no index is given)."""
    nodes = [p for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                         "/dev/nvidia-modeset") if os.path.exists(p)]
    nodes += sorted(glob.glob("/dev/nvidia-caps/*"))
    if gpu_index is None:
        nodes += sorted(p for p in glob.glob("/dev/nvidia[0-9]*"))
    elif os.path.exists(f"/dev/nvidia{gpu_index}"):
        nodes.append(f"/dev/nvidia{gpu_index}")
    return nodes


def _covered(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def build_argv(bwrap: str, spec: SandboxSpec, command: list[str]) -> list[str]:
    argv = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox"]
    if spec.isolate_network:
        argv.append("--unshare-net")
    # /proc, /dev and /tmp first: later binds (a Python prefix under /tmp) go on top of them.
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(spec.tmp_size_bytes), "--tmpfs", "/tmp"]
    ro_roots: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
            ro_roots.append(path)
    for path in ETC_FILES:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for prefix in python_prefixes():
        if not _covered(prefix, ro_roots):
            argv += ["--ro-bind", prefix, prefix]
            ro_roots.append(prefix)
    if spec.gpu_device_nodes:
        for node in spec.gpu_device_nodes:
            argv += ["--dev-bind", node, node]
        # The CUDA driver reads topology and device attributes from sysfs.
        argv += ["--ro-bind", "/sys", "/sys"]
    for mount in spec.mounts:
        argv += ["--bind" if mount.writable else "--ro-bind", str(mount.source), mount.target]
    # Everything outside the writable binds and /tmp is read-only, the sandbox's own root
    # included (bwrap builds it on a tmpfs that would otherwise accept writes).
    argv += ["--remount-ro", "/", "--chdir", spec.workdir, "--clearenv"]
    for key, value in sorted(spec.env.items()):
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]


def host_env(spec: SandboxSpec) -> dict[str, str]:
    """For the `none` backend: the spec's environment with mount targets mapped to sources."""
    env = {}
    mounts = sorted(spec.mounts, key=lambda m: len(m.target), reverse=True)  # most specific first
    for key, value in spec.env.items():
        for mount in mounts:
            if value == mount.target or value.startswith(mount.target + "/"):
                value = str(mount.source) + value[len(mount.target):]
                break
        env[key] = value
    env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
    return env
