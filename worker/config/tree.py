"""The root of the configuration tree and the one place it is read from the environment.

Each entry point calls `load_config()` once (`kerneljudge serve`, `kerneljudge worker` and each Celery
worker process, `kerneljudge eval`, `kerneljudge build`) and hands the sections down. A module also used as
a library (tests, benchmarks) may take `load_config()` as its default when it is given none.
`KernelJudgeConfig()` is the tree with every default and no environment read.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from worker.config.api_section import ApiSection
from worker.config.engine_section import EngineSection
from worker.config.env_section import EnvSection
from worker.config.jobs_section import JobsSection
from worker.config.pipeline_section import PipelineSection
from worker.config.sandbox_section import SandboxSection


class KernelJudgeConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    api: ApiSection = Field(default_factory=lambda: ApiSection.from_values())
    jobs: JobsSection = Field(default_factory=lambda: JobsSection.from_values())
    pipeline: PipelineSection = Field(default_factory=lambda: PipelineSection.from_values())
    engine: EngineSection = Field(default_factory=lambda: EngineSection.from_values())
    sandbox: SandboxSection = Field(default_factory=lambda: SandboxSection.from_values())

    @classmethod
    def sections(cls) -> dict[str, type[EnvSection]]:
        """Each section's class by its name in the tree (tests/test_docs.py reads their variables)."""
        return {name: field.annotation for name, field in cls.model_fields.items()
                if isinstance(field.annotation, type) and issubclass(field.annotation, EnvSection)}


def load_config() -> KernelJudgeConfig:
    """Every section as the environment sets it. ConfigError (a ValueError) names each bad variable; a keys
    file that cannot be read raises its OSError."""
    return KernelJudgeConfig(api=ApiSection.from_environment(), jobs=JobsSection.from_environment(),
                             pipeline=PipelineSection.from_environment(),
                             engine=EngineSection.from_environment(),
                             sandbox=SandboxSection.from_environment())
