"""How a sandbox's CUDA waits for the device: spinning on a core, or asleep until the device is done.

CUDA's default (`CU_CTX_SCHED_AUTO`) spins whenever a process has fewer CUDA contexts than the host has logical
cores, which is every process here: each `synchronize`, `.item()` or device-to-host copy of a judge or a runner
keeps a core at 100% for as long as the device takes, also while the device runs another process's work. Blocking
sync puts the waiting thread to sleep in the driver and wakes it when the work is done.

The flags belong to the device's primary context (the one torch uses), so they are set through the driver API
before torch starts CUDA.
"""

from __future__ import annotations

import ctypes
import enum
import os


class SyncWait(enum.IntEnum):
    """CUctx_flags' scheduling bits."""

    auto = 0x0
    spin = 0x1
    yield_ = 0x2
    blocking = 0x4


SCHED_MASK = 0x7
# The supervisor's choice for a sandbox (worker/engine/launch.py): a SyncWait name; unset or `auto`: CUDA's default.
ENV = "KJ_CUDA_SYNC_WAIT"


def _driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def set_primary_wait(wait: SyncWait) -> str | None:
    """Set how every visible device's primary context waits, before CUDA starts in this process. None when set;
    else why not (no driver, no device, a driver error): the process then keeps CUDA's default."""
    try:
        driver = _driver()
    except OSError as exc:
        return f"no CUDA driver: {exc}"
    if (code := driver.cuInit(0)) != 0:
        return f"cuInit failed ({code})"
    count = ctypes.c_int(0)
    if (code := driver.cuDeviceGetCount(ctypes.byref(count))) != 0 or count.value == 0:
        return f"no device ({code})"
    set_flags = getattr(driver, "cuDevicePrimaryCtxSetFlags_v2", None) or driver.cuDevicePrimaryCtxSetFlags
    for ordinal in range(count.value):
        device = ctypes.c_int(0)
        if (code := driver.cuDeviceGet(ctypes.byref(device), ordinal)) != 0:
            return f"cuDeviceGet({ordinal}) failed ({code})"
        if (code := set_flags(device, ctypes.c_uint(int(wait)))) != 0:
            return f"cuDevicePrimaryCtxSetFlags({ordinal}) failed ({code})"
    return None


def primary_wait(ordinal: int = 0) -> SyncWait | None:
    """How the primary context of a visible device waits now; None where the driver cannot say."""
    try:
        driver = _driver()
    except OSError:
        return None
    device, flags, active = ctypes.c_int(0), ctypes.c_uint(0), ctypes.c_int(0)
    if driver.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
        return None
    if driver.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active)) != 0:
        return None
    return SyncWait(flags.value & SCHED_MASK)


def set_primary_wait_from_env() -> str | None:
    """Set the wait the supervisor asked for in KJ_CUDA_SYNC_WAIT, if any; why not where it could not be."""
    asked = os.environ.get(ENV, "auto")
    if asked == "auto":
        return None
    if asked not in SyncWait.__members__:
        return f"unknown wait {asked!r}"
    return set_primary_wait(SyncWait[asked])
