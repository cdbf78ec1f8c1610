"""Builds for these tests share one cache (and so one set of precompiled torch headers, built once)."""

from __future__ import annotations

import pytest

from worker.engine.build import builder as build
from worker.engine.engine_settings import EngineSettings


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """A KERNELJUDGE_DATA_DIR whose build cache the tests share."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="session")
def build_settings(data_dir) -> EngineSettings:
    settings = EngineSettings()
    settings.build_cache = data_dir / "build-cache"
    settings.cuda_arch_list = build.ARCH_WITHOUT_GPU
    return settings
