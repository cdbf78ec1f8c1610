"""The stages of one evaluation, by name.

The engine notifies each stage as it starts (`prepared_job.StageCallback`): the service moves a job from
`building` to `running` by them and the job's device lease (gpu_schedule.DeviceLease) holds the device
shared, exclusively or not at all by them. The result's `stages` holds the seconds spent in each stage
the engine times (`ResultBuilder.stage`). A `str` enum: the values are what the store, the API's JSON and
the dashboard show, unchanged.
"""

from __future__ import annotations

from enum import Enum


class Stage(str, Enum):
    # Host work (prepare): notified and timed.
    validate = "validate"
    build = "build"
    # Device work (execute): notified and timed.
    reference = "reference"
    candidate = "candidate"
    compare = "compare"
    # The timing's set-up and its check share the device; only the measured window ("timing") holds it alone.
    timing_setup = "timing_setup"
    timing = "timing"
    timing_check = "timing_check"
    # Notified and timed, holding nothing on the device: the wait for a warm candidate runner (whose start is
    # paused while a job holds the device alone).
    runner_take = "runner_take"
    # Timed only, inside the hold of the stage around them: the torch.compile baseline (compare's), the
    # judge's inputs handed over and the candidate's module loaded (the candidate stage's, before its call),
    # the kernel trace (compare's), and the runner's stop with its Triton cache published (after the job's
    # last device stage).
    compile_baseline = "compile_baseline"
    inputs = "inputs"
    load = "load"
    trace = "trace"
    cleanup = "cleanup"
    # Notified only: the score is computed on the host.
    reward = "reward"
    # Notified only: waits inside a job's device stages that must not hold the device, for its problem's
    # judge being started ahead (judge_start) and for its problem's compile baseline (baseline_worker),
    # both of which need the device themselves.
    reference_wait = "reference_wait"
    compile_baseline_wait = "compile_baseline_wait"
    # Notified only: from here on every device stage of the job holds the device exclusively (the engine
    # runs a job again alone when it ran out of device memory while sharing it, device_stage.py).
    alone = "alone"

    def __str__(self) -> str:  # the name as stored and shown (format() too, on every Python version)
        return self.value

