"""A lane's EngineSettings come from the configuration tree's engine and sandbox sections
(EngineSettings.from_config): every configured value reaches the lane, whatever its field."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from worker.config.tree import KernelJudgeConfig
from worker.engine.engine_settings import EngineSettings
from worker.engine.sandbox.spec import MIB

# Lane settings made from a section's field under another name or unit.
CONVERTED = {"isolation", "sandbox_tmp_bytes", "sandbox_shm_bytes", "sandbox_ext_bytes", "sandbox_memory_bytes",
             "build_memory_bytes"}
# Lane settings that are no configuration: folders under the data dir, and what the pipeline sets at run time.
RUN_TIME = {"work_root", "build_cache", "triton_cache", "baselines", "gpu_schedule", "compile_baseline_timeout_s"}


def _other(value: object) -> object:
    """A value of the same kind that no default has."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value + 0.5
    return "changed" if isinstance(value, str) or value is None else value


def test_every_field_of_the_engine_and_sandbox_sections_reaches_the_lane():
    defaults = KernelJudgeConfig()
    engine_fields, sandbox_fields = type(defaults.engine).model_fields, type(defaults.sandbox).model_fields
    lane_fields = {f.name for f in dataclasses.fields(EngineSettings)}
    same_named = lane_fields & (set(engine_fields) | set(sandbox_fields))
    assert lane_fields == same_named | CONVERTED | RUN_TIME, lane_fields - same_named - CONVERTED - RUN_TIME
    engine = defaults.engine.model_copy(update={name: _other(getattr(defaults.engine, name))
                                                for name in same_named & set(engine_fields)})
    sandbox = defaults.sandbox.model_copy(update={
        **{name: _other(getattr(defaults.sandbox, name)) for name in same_named & set(sandbox_fields)},
        "tmp_mb": 11, "shm_mb": 12, "ext_mb": 13, "memory_bytes": 14 * MIB})
    engine = engine.model_copy(update={"build_memory_gb": 0.5})
    settings = EngineSettings.from_config(defaults.model_copy(update={"engine": engine, "sandbox": sandbox}))
    for name in same_named:
        section = engine if name in engine_fields else sandbox
        assert getattr(settings, name) == getattr(section, name) != getattr(EngineSettings(), name), name
    assert (settings.sandbox_tmp_bytes, settings.sandbox_shm_bytes, settings.sandbox_ext_bytes) == \
        (11 * MIB, 12 * MIB, 13 * MIB)
    assert settings.sandbox_memory_bytes == 14 * MIB and settings.build_memory_bytes == 512 * 1024**2
    assert settings.isolation == sandbox.isolation()


def test_the_folders_are_under_the_data_dir_when_one_is_set(tmp_path: Path):
    defaults = KernelJudgeConfig()
    config = defaults.model_copy(update={"jobs": defaults.jobs.model_copy(update={"data_dir": tmp_path})})
    settings = EngineSettings.from_config(config)
    assert (settings.work_root, settings.build_cache, settings.triton_cache) == \
        (tmp_path / "work", tmp_path / "build-cache", tmp_path / "triton-cache")
