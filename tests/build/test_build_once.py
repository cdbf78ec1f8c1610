"""Identical candidate sources are built once: a batch that holds one source several times (RL batches
hold exact duplicates) builds it once while the other prepares wait for that build and share its result,
a compile error included; a failure that may be the host's is not handed on. Real sandboxed builds;
each test's sources are its own (a unique comment), so nothing comes from an earlier test's cache."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tests.build import candidates
from worker.engine.build import builder as build
from worker.engine.launch import UserFailure

COPIES = 4


def unique(source: str) -> str:
    return f"{source}\n# {uuid.uuid4().hex}\n"


class BuildSpy:
    """Counts the sandboxed builds (each call starts one builder process) and when they ran."""

    def __init__(self, monkeypatch, fail_first_with: UserFailure | None = None):
        self.real = build.run_build_sandbox
        self.calls: list[tuple[str, float, float]] = []  # (cache entry, started, ended)
        self.fail_first_with = fail_first_with
        self.lock = threading.Lock()
        monkeypatch.setattr(build, "run_build_sandbox", self)

    def __call__(self, source_file, ext_dir, **kwargs):
        started = time.monotonic()
        try:
            with self.lock:
                failure, self.fail_first_with = self.fail_first_with, None
            if failure is not None:
                time.sleep(3)  # the other prepares join this build meanwhile
                raise failure
            return self.real(source_file, ext_dir, **kwargs)
        finally:
            with self.lock:
                self.calls.append((ext_dir.name, started, time.monotonic()))

    def entries(self) -> list[str]:
        return [entry for entry, _, _ in self.calls]


def prepare_all(settings, tmp_path, sources: list[str]) -> list[tuple[float, object]]:
    """Each source built from a thread of its own, all started together, as the prepare threads do:
    (when it asked, its outcome or the exception it raised)."""
    barrier = threading.Barrier(len(sources))

    def prepare(index: int):
        path = tmp_path / f"job{index}" / "candidate.py"
        path.parent.mkdir(parents=True)
        path.write_text(sources[index])
        barrier.wait()
        asked = time.monotonic()
        try:
            return asked, build.build_cuda_candidate(path, sources[index], settings=settings, limit_s=600,
                                                     sandbox=build.SandboxKind.bwrap, torch_version=torch.__version__)
        except (UserFailure, build.SandboxUnavailable) as exc:
            return asked, exc

    with ThreadPoolExecutor(len(sources)) as threads:
        return list(threads.map(prepare, range(len(sources))))


@pytest.fixture
def warm_headers(build_settings):
    """The session's precompiled headers exist before the timing-sensitive part (a real build of them
    takes minutes here)."""
    build.pch_root(build_settings, torch.__version__)
    return build_settings


def test_concurrent_prepares_of_one_source_build_it_once_and_all_get_it(warm_headers, tmp_path, monkeypatch):
    spy = BuildSpy(monkeypatch)
    source = unique(candidates.PLAIN)
    results = prepare_all(warm_headers, tmp_path, [source] * COPIES)
    key = build.cache_key(source, torch.__version__, warm_headers)
    assert spy.entries() == [key], "one sandboxed build for all the copies"
    (_, started, ended), = spy.calls
    assert max(asked for asked, _ in results) < ended, "every copy asked while that build ran"
    outcomes = [outcome for _, outcome in results]
    assert sorted(outcome.cached for outcome in outcomes) == [False] + [True] * (COPIES - 1)
    for outcome in outcomes:
        assert outcome.ext_dir == warm_headers.build_cache / key
        assert (outcome.ext_dir / build.BUILT_MARKER).exists()
        assert (outcome.ext_dir / "kj_test_plain" / "cuda.cuda.o").exists()
        assert outcome.record.path == "fast", outcome.record
        assert outcome.record.extensions[0]["abi_check"] == "loaded; functions: twice_cuda"


def test_a_compile_error_is_built_once_and_reaches_every_copy(warm_headers, tmp_path, monkeypatch):
    spy = BuildSpy(monkeypatch)
    source = unique(candidates.KERNEL_ERROR)
    results = prepare_all(warm_headers, tmp_path, [source] * COPIES)
    assert len(spy.calls) == 1
    failures = [failure for _, failure in results]
    assert all(isinstance(failure, build.BuildFailure) for failure in failures), failures
    assert len({id(failure) for failure in failures}) == COPIES, "each job raises an exception of its own"
    for failure in failures:
        assert failure.kind == "compile_error"
        assert "undeclared_factor" in failure.detail and "candidate.py:" in failure.detail
    # Failures are not cached: the same source later builds again.
    prepare_all(warm_headers, tmp_path / "later", [source])
    assert len(spy.calls) == 2


def test_a_failure_that_may_be_the_hosts_is_not_handed_to_the_copies(warm_headers, tmp_path, monkeypatch):
    # The first build runs out of time (as under load); the waiting copies build again, once, and share
    # what that build found: the candidate's own compile error.
    spy = BuildSpy(monkeypatch, fail_first_with=UserFailure("timeout", "the build exceeded its time limit"))
    source = unique(candidates.KERNEL_ERROR)
    results = prepare_all(warm_headers, tmp_path, [source] * COPIES)
    assert len(spy.calls) == 2
    kinds = sorted(type(failure).__name__ + ":" + failure.kind for _, failure in results)
    assert kinds == ["BuildFailure:compile_error"] * (COPIES - 1) + ["UserFailure:timeout"]


def test_two_different_sources_build_separately(warm_headers, tmp_path, monkeypatch):
    spy = BuildSpy(monkeypatch)
    sources = [unique(candidates.PLAIN), unique(candidates.PLAIN)]
    results = prepare_all(warm_headers, tmp_path, sources)
    keys = [build.cache_key(source, torch.__version__, warm_headers) for source in sources]
    assert sorted(spy.entries()) == sorted(keys)
    for (_, outcome), key in zip(results, keys, strict=True):
        assert not outcome.cached and outcome.ext_dir.name == key
        assert outcome.record.extensions[0]["abi_check"] == "loaded; functions: twice_cuda"


def test_a_builder_that_died_without_a_report_is_built_once_more(warm_headers, tmp_path, monkeypatch):
    # As on the GPU host under a batch: an honest source's builder exited before it reported, once.
    spy = BuildSpy(monkeypatch, fail_first_with=UserFailure(
        "crashed", "the process exited with code 1 before it reported a result"))
    source = unique(candidates.PLAIN)
    [(_, outcome)] = prepare_all(warm_headers, tmp_path, [source])
    assert not isinstance(outcome, Exception), outcome
    key = build.cache_key(source, torch.__version__, warm_headers)
    assert spy.entries() == [key, key]
    assert (outcome.ext_dir / build.BUILT_MARKER).exists() and not outcome.cached
    assert outcome.record.extensions[0]["abi_check"] == "loaded; functions: twice_cuda"


def test_a_builder_that_dies_every_time_fails_its_job_after_the_second_try(warm_headers, tmp_path, monkeypatch):
    tries = []

    def dies(source_file, ext_dir, **kwargs):
        tries.append(ext_dir.name)
        raise UserFailure("crashed", "the process exited with code 1 before it reported a result")

    monkeypatch.setattr(build, "run_build_sandbox", dies)
    [(_, failure)] = prepare_all(warm_headers, tmp_path, [unique(candidates.PLAIN)])
    assert isinstance(failure, UserFailure) and failure.kind == "crashed", failure
    assert len(tries) == build.CRASHED_BUILD_ATTEMPTS == 2
    assert not (warm_headers.build_cache / tries[0]).exists(), "nothing of a failed build is left in the cache"
