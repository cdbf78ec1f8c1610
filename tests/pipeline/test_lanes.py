"""One lane per GPU, embedded and in Celery workers: each knows its place on the host (its reserved cores)
and gets the service's baseline book and a warm runner pool sized to it."""

from __future__ import annotations

from worker.jobs.celery_cli import plan_workers
from worker.jobs.engine_call import EngineCalls, WorkerIdentity
from worker.jobs.pipeline import JobPipeline, PipelineConfig
from worker.jobs.store import JobStore
from worker.jobs.store.baseline_rows import StoreBaselineBook


def test_embedded_lanes_one_per_gpu_know_their_place(tmp_path):
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    identities = [WorkerIdentity(f"embedded@test:gpu{g}", "cuda", str(g)) for g in range(2)]
    config = PipelineConfig(device_concurrency=2, prepare_ahead=4, prepare_threads=2)
    pipeline = JobPipeline(store, identities, config, engine=EngineCalls(prepare=None, execute=None))
    try:
        lanes = pipeline.lanes
        assert [lane.settings.gpu_index for lane in lanes] == [0, 1]
        assert [lane.settings.lane_index for lane in lanes] == [0, 1]
        assert {lane.settings.lanes_on_host for lane in lanes} == {2}
        assert all(isinstance(lane.settings.baselines, StoreBaselineBook) for lane in lanes)
        assert {lane.settings.pool_size() for lane in lanes} == {config.device_concurrency + 2}
        assert lanes[0].schedule is not lanes[1].schedule
    finally:
        pipeline.stop(timeout_s=1)
        store.close()


def test_celery_workers_one_per_gpu_know_their_place():
    plan = plan_workers("cuda", "0,1,3")
    assert [env["CUDA_VISIBLE_DEVICES"] for _, env in plan] == ["0", "1", "3"]
    assert [env["KERNELJUDGE_LANE_INDEX"] for _, env in plan] == ["0", "1", "2"]
    assert {env["KERNELJUDGE_LANES_ON_HOST"] for _, env in plan} == {"3"}


def test_a_gpu_lane_shares_its_device_among_more_jobs_than_a_cpu_worker_unless_configured(monkeypatch):
    from worker.config.pipeline_section import DEFAULT_DEVICE_CONCURRENCY, DEFAULT_GPU_CONCURRENCY
    from worker.config.tree import load_config

    monkeypatch.delenv("KERNELJUDGE_DEVICE_CONCURRENCY", raising=False)
    config = load_config()
    gpu, cpu = PipelineConfig.from_config(config, "cuda"), PipelineConfig.from_config(config, "cpu")
    assert (gpu.device_concurrency, cpu.device_concurrency) == (DEFAULT_GPU_CONCURRENCY, DEFAULT_DEVICE_CONCURRENCY)
    assert gpu.device_concurrency > cpu.device_concurrency
    monkeypatch.setenv("KERNELJUDGE_WORKER_DEVICE", "cuda")  # a Celery worker's device, when none is named
    assert PipelineConfig.from_config(load_config()).device_concurrency == DEFAULT_GPU_CONCURRENCY
    monkeypatch.setenv("KERNELJUDGE_DEVICE_CONCURRENCY", "3")
    assert PipelineConfig.from_config(load_config(), "cuda").device_concurrency == 3


def test_the_lanes_of_a_process_share_the_builds_prepared_ahead(monkeypatch, tmp_path):
    """Each lane prepares its share of the node's build slots ahead, not all of them: on two H100s each lane
    preparing all of them put twice as many jobs in `building`, each with a judge started ahead."""
    from worker.config.tree import load_config

    monkeypatch.setenv("KERNELJUDGE_DEVICE_CONCURRENCY", "3")
    monkeypatch.setenv("KERNELJUDGE_BUILD_SLOTS", "20")
    monkeypatch.delenv("KERNELJUDGE_PREPARE_AHEAD", raising=False)
    config = load_config()
    ahead = {lanes: PipelineConfig.from_config(config, "cuda", lanes=lanes).prepare_ahead for lanes in (1, 2, 8)}
    assert ahead == {1: 20, 2: 10, 8: 3}  # never fewer than the jobs one device runs at once
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    identities = [WorkerIdentity(f"embedded@test:gpu{g}", "cuda", str(g)) for g in range(2)]
    pipeline = JobPipeline(store, identities, engine=EngineCalls(prepare=None, execute=None),
                           process_config=config)
    try:  # a process's pipeline sizes its lanes by how many it has
        assert pipeline.config.prepare_ahead == 10 and len(pipeline.lanes) == 2
    finally:
        pipeline.stop(timeout_s=1)
        store.close()
    monkeypatch.setenv("KERNELJUDGE_PREPARE_AHEAD", "5")  # configured: as configured, per lane
    assert PipelineConfig.from_config(load_config(), "cuda", lanes=2).prepare_ahead == 5
