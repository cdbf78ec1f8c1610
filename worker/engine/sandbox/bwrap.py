"""bubblewrap command line for a SandboxSpec.

The child sees: the system read-only (/usr, /lib*, /bin, /sbin, /opt, a few /etc files,
the Python roots, where the supervisor's own packages, if installed there, are empty folders), a fresh /proc, a fresh read-only /dev with a size-capped /dev/shm, a private
size-limited /tmp and the spec's other scratch folders (tmpfs, size-limited), the job's own
read-only mounts, and only the GPU device nodes it was given. New user, PID, IPC, UTS, cgroup and
(by default) network namespaces; no capabilities; it dies with its supervisor. bwrap itself is
started with an empty environment: the child's comes from --setenv only, so no variable of the
server's (API keys included) is in any process the sandbox can see.
"""

from __future__ import annotations

import glob
import os
import shutil
import stat

from worker.engine.sandbox.python_roots import covered, python_roots, supervisor_package_dirs
from worker.engine.sandbox.spec import SandboxSpec

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
ETC_FILES = (
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
    "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime", "/etc/OpenCL",
)
SANDBOX_UID = 65534


def find_bwrap(configured: str | None = None) -> str | None:
    """The configured binary (IsolationConfig.bwrap, KERNELJUDGE_BWRAP), else `bwrap` on PATH."""
    return configured or shutil.which("bwrap")


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


def _others_can_open(node: str) -> bool:
    try:
        return bool(os.stat(node).st_mode & stat.S_IROTH)
    except OSError:
        return False


def host_paths(bwrap: str, spec: SandboxSpec) -> list[str]:
    """Every host path bwrap opens for this spec (all must be reachable by an unprivileged sandbox uid)."""
    paths = [bwrap, *(p for p in SYSTEM_DIRS if os.path.isdir(p) and not os.path.islink(p)),
             *(p for p in ETC_FILES if os.path.exists(p)), *python_roots()]
    return paths + [str(mount.source) for mount in spec.mounts]


def build_argv(bwrap: str, spec: SandboxSpec, command: list[str], *, unprivileged: bool = False) -> list[str]:
    """`unprivileged`: bwrap runs as an unprivileged host uid, which cannot open root-only device nodes."""
    argv = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox"]
    if spec.isolate_network:
        argv.append("--unshare-net")
    # /proc, /dev and /tmp first: later binds (a Python prefix under /tmp) go on top of them.
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(spec.shm_size_bytes), "--tmpfs", "/dev/shm",
             "--size", str(spec.tmp_size_bytes), "--tmpfs", "/tmp"]
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
    for root in python_roots():
        if not covered(root, ro_roots):
            argv += ["--ro-bind", root, root]
            ro_roots.append(root)
    for package in supervisor_package_dirs(ro_roots):
        argv += ["--size", "4096", "--tmpfs", package]
    if spec.gpu_device_nodes:
        for node in spec.gpu_device_nodes:
            if not unprivileged or _others_can_open(node):
                argv += ["--dev-bind", node, node]
        # The CUDA driver reads topology and device attributes from sysfs.
        argv += ["--ro-bind", "/sys", "/sys"]
    for mount in spec.mounts:
        argv += ["--ro-bind", str(mount.source), mount.target]
    for scratch in spec.scratch:
        argv += ["--size", str(scratch.size_bytes), "--tmpfs", scratch.target]
    # Everything outside /tmp, /dev/shm and the scratch folders is read-only: the sandbox's own root
    # (bwrap builds it on a tmpfs that would otherwise take writes) and /dev (another tmpfs).
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", spec.workdir, "--clearenv"]
    for key, value in sorted(spec.env.items()):
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]


def host_env(spec: SandboxSpec, scratch_dirs: dict[str, str]) -> dict[str, str]:
    """For the `none` backend: the spec's environment with mount targets mapped to their sources
    and scratch targets to the host folders standing in for them."""
    env = {}
    places = {mount.target: str(mount.source) for mount in spec.mounts} | scratch_dirs
    targets = sorted(places, key=len, reverse=True)  # most specific first
    for key, value in spec.env.items():
        for target in targets:
            if value == target or value.startswith(target + "/"):
                value = places[target] + value[len(target):]
                break
        env[key] = value
    env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
    return env
