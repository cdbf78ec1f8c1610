"""Shared test configuration: GPU tests run only where a CUDA device exists."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    # Only asks the driver; the pytest process never allocates on the GPU itself.
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
