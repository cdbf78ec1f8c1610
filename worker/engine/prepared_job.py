"""A job between its two halves: validated and built (prepare), waiting for the device (execute)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from contract.requests import EvalRequest
from contract.statuses import Backend
from worker.engine.stage import Stage
from worker.engine.verdict.result_builder import ResultBuilder

# Called with each stage as it starts (stage.Stage: validate, build, reference, candidate, compare,
# timing, reward, and the waits). The service uses it to move a job from `building` to `running`.
StageCallback = Callable[[Stage], None]


@dataclass
class PreparedJob:
    """A validated and built candidate, ready for the device stage."""

    request: EvalRequest
    backend: Backend
    workdir: Path
    builder: ResultBuilder
    ext_dir: Path | None = None

    def discard(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def notify(on_stage: StageCallback | None, stage: Stage) -> None:
    if on_stage is not None:
        on_stage(stage)
