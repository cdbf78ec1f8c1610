"""Everything that runs INSIDE a sandbox, next to untrusted user code: the trust boundary as a folder.

A sandbox mounts this package and `contract` read-only (worker/engine/launch.py, SANDBOX_LIB) and imports
them normally; nothing of the supervisor's (`worker`, `app`, `kerneljudge`) is mounted or imported here
(tests/engine/test_sandbox_side.py checks both). The supervisor may import from here (the message classes,
the build's toolchain), never the other way round.

- runtime/: a runner's process: loading the module, the pipe and its typed messages, tensors over the
  pipe, the kernel trace, integrity checks; `boot.py` is the entry point and picks the role.
- judging/: the judge (judge_process.py): input sets, reference outputs, float64 truth, and the
  comparison (correctness, probes, discrimination, input checks, precision), the physics measurements.
- timing/: the timed loop (timer.py) and the timing inputs' variants.
- build/: the sandboxed CUDA build (sandboxed.py) and what it shares with the supervisor (toolchain,
  precompiled header, the extension folder as a message).

Nothing a process here reports is believed without evidence it cannot edit: the supervisor validates
every reply (sandbox_side/runtime/messages.py) and judges from what it measured.
"""
