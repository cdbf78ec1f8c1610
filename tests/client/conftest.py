from __future__ import annotations

import pytest

from client.fake_api import FakeApi
from kerneljudge.client import AsyncKernelJudgeClient, KernelJudgeClient

REFERENCE = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
GOOD = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n# speedup=4.0\n"
WRONG = GOOD.replace("# speedup=4.0", "# wrong")


class FakeClock:
    """Time that moves only when the client sleeps: backoff and deadlines without real waiting."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def client(api, clock):
    with KernelJudgeClient("http://judge.test", "secret", transport=api.transport(), clock=clock,
                           sleep=clock.sleep, timeout=60) as c:
        yield c


@pytest.fixture
def make_async_client(api, clock):
    def make(**kwargs) -> AsyncKernelJudgeClient:
        kwargs.setdefault("timeout", 60)
        return AsyncKernelJudgeClient("http://judge.test", "secret", transport=api.transport(), clock=clock,
                                      sleep=clock.async_sleep, **kwargs)

    return make
