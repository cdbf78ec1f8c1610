"""Typed loader for manifest.json: one entry per case, in the order the runner executes them."""

from __future__ import annotations

import json
import re
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

CORPUS_DIR = Path(__file__).resolve().parent
MANIFEST = CORPUS_DIR / "manifest.json"
RUNTIME_STATUSES = {"incorrect", "runtime_error", "timeout", "compile_error", "invalid_input", "rejected", "sandbox_error"}
# A rejection names its rule by short id: a static rule (KJ104) or a runtime rule (KJ-R10).
_EXPECTED = re.compile(r"^(accepted|flagged|rejected:(KJ\d{3}|KJ-R\d{2})|" + "|".join(sorted(RUNTIME_STATUSES)) + r")$")


class RedteamCase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    candidate: str = Field(description="Path of the candidate, relative to benchmarks/redteam/.")
    reference: str = Field(description="Path of the reference, relative to benchmarks/redteam/.")
    threat_class: Literal[1, 2, 3, 4] | None = Field(description="Issue 4's threat class; null for honest kernels.")
    threat: str = Field(description="The threat-model bullet this case exercises.")
    expected: str = Field(description="accepted | flagged | rejected:<rule> | an engine status such as incorrect.")
    layer: Literal["static", "runtime"] = Field(description="The layer expected to catch it (or, if honest, to pass it).")
    needs_gpu: bool
    description: str
    disabled_rules: list[str] = Field(default_factory=list, description="Static rules off for this case's job.")
    profile: Literal["partial", "full"] = Field(
        default="partial", description="The job's policy profile: the case is an attack (or honest) under it."
    )

    @field_validator("expected")
    @classmethod
    def _known_expectation(cls, value: str) -> str:
        if not _EXPECTED.match(value):
            raise ValueError(f"unknown expectation {value!r}")
        return value

    @property
    def honest(self) -> bool:
        return self.threat_class is None

    @property
    def expected_rule(self) -> str | None:
        return self.expected.split(":", 1)[1] if self.expected.startswith("rejected:") else None

    @cached_property
    def candidate_source(self) -> str:
        return (CORPUS_DIR / self.candidate).read_text()

    @cached_property
    def reference_source(self) -> str:
        return (CORPUS_DIR / self.reference).read_text()


class RedteamManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1]
    cases: list[RedteamCase]

    @field_validator("cases")
    @classmethod
    def _unique_ids(cls, cases: list[RedteamCase]) -> list[RedteamCase]:
        seen: set[str] = set()
        for case in cases:
            if case.id in seen:
                raise ValueError(f"duplicate case id {case.id!r}")
            seen.add(case.id)
        return cases


def load_corpus(path: Path = MANIFEST) -> list[RedteamCase]:
    """Every case of the manifest, with its files checked to exist."""
    manifest = RedteamManifest.model_validate(json.loads(path.read_text()))
    for case in manifest.cases:
        for relative in (case.candidate, case.reference):
            if not (path.parent / relative).is_file():
                raise FileNotFoundError(f"case {case.id}: {relative} does not exist under {path.parent}")
    return manifest.cases
