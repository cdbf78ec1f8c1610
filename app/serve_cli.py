"""`kerneljudge serve`: the HTTP API with embedded local workers (or Celery with --broker)."""

from __future__ import annotations

import argparse
import faulthandler
import io
import ipaddress
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.config.tree import KernelJudgeConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                        help="device of the embedded workers (default: env KERNELJUDGE_DEVICE or auto)")
    parser.add_argument("--workers", type=int, default=None,
                        help="embedded workers (default: one per visible GPU, else one CPU worker)")
    parser.add_argument("--broker", default=None,
                        help="redis://... : send jobs to `kerneljudge worker` processes instead of local threads")
    parser.add_argument("--open", action="store_true",
                        help="no API keys (only allowed with a loopback --host)")
    parser.add_argument("--problems", action="append", default=[], metavar="NAME",
                        help="register a bundled problem set at start: `all`, a kernel class or a problem "
                             "(repeatable; `kerneljudge problems list` shows them)")
    parser.add_argument("--log-level", default="info")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    from worker.config.tree import load_config

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from worker.engine.sandbox.spawner import start_spawner

    start_spawner()  # before any thread: every sandbox (judge, runner, build) starts through it
    try:  # `kill -USR1 <pid>`: every thread's stack to stderr, for a stuck server
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, ValueError, io.UnsupportedOperation):
        pass  # no SIGUSR1 here, or stderr is not a file (run inside another program): no dump, nothing else lost
    try:
        config = load_config()  # once for this process: the app, its workers and the checks below share it
    except (OSError, ValueError) as exc:
        print(f"kerneljudge serve: bad configuration: {exc}", file=sys.stderr)
        return 2
    config = _with_flags(config, args)
    api = config.api
    if api.open_mode and not is_loopback(args.host):
        print("kerneljudge serve: open mode (no API keys) is only allowed on a loopback address; "
              "set KERNELJUDGE_API_KEYS or bind --host 127.0.0.1", file=sys.stderr)
        return 2
    if not api.open_mode and not api.api_keys:
        print("kerneljudge serve: no API keys configured; set KERNELJUDGE_API_KEYS=key1,key2 "
              "(or KERNELJUDGE_API_KEYS_FILE), or pass --open on a loopback address", file=sys.stderr)
        return 2

    try:
        library_problems = _library_problems(args.problems)
    except ValueError as exc:
        print(f"kerneljudge serve: --problems: {exc}", file=sys.stderr)
        return 2

    from worker.engine.engine_settings import EngineSettings

    startup_check = None
    if not config.jobs.broker_url and not config.sandbox.skip_selfcheck:
        # Embedded workers run here: make sure the sandbox works before accepting jobs (refuse to start
        # when it does not), then prove the real path with one evaluation in the background; /v1/ready
        # stays false until it passes.
        from contract.statuses import Device
        from worker.engine.sandbox import SandboxUnavailable
        from worker.engine.sandbox.selfcheck import require_working_sandbox
        from worker.engine.startup_check import StartupCheckRun

        engine_settings = EngineSettings.from_config(config)
        use_gpu = api.device != "cpu" and os.path.exists("/dev/nvidiactl")
        try:
            check = require_working_sandbox(use_gpu=use_gpu, gpu_index=None,
                                            isolate_network=engine_settings.isolate_network,
                                            isolation=engine_settings.isolation)
        except SandboxUnavailable as exc:
            print(f"kerneljudge serve: the sandbox does not work on this host: {exc}", file=sys.stderr)
            return 2
        logging.getLogger(__name__).info("sandbox self-check passed in %.1fs: %s", check.seconds, check.report)
        gpus = None
        if use_gpu:
            from worker.jobs.distributed.devices import visible_gpus

            gpus = [int(g) for g in visible_gpus() if g.isdigit()]
        startup_check = StartupCheckRun(engine_settings, Device.cuda if use_gpu else Device.cpu, gpus).start()
    pch_warmup = None
    if not config.jobs.broker_url:  # embedded workers that build: the precompiled header now, not on a job's path
        from worker.engine.build.builder import start_pch_warmup

        pch_warmup = start_pch_warmup(EngineSettings.from_config(config), api.device)

    import uvicorn

    from app.main import create_app

    app = create_app(config)
    app.state.startup_check = startup_check
    app.state.pch_warmup = pch_warmup
    if library_problems:
        from problem_library.register import register_in_store

        created = register_in_store(app.state.store, library_problems)
        logging.getLogger(__name__).info("problem library: %d problems registered (%d new) from %s",
                                         len(library_problems), created, ", ".join(args.problems))
    # One process: the embedded workers live in it (several uvicorn workers would multiply them).
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=10)
    return 0


def _with_flags(config: KernelJudgeConfig, args: argparse.Namespace) -> KernelJudgeConfig:
    """The configuration with the flags given on the command line in place of their variables."""
    api: dict[str, object] = {"open_mode": config.api.open_mode or args.open}
    if args.device:
        api["device"] = args.device
    if args.workers is not None:
        api["local_workers"] = args.workers
    jobs = {"broker_url": args.broker} if args.broker else {}
    return config.model_copy(update={"api": config.api.model_copy(update=api),
                                     "jobs": config.jobs.model_copy(update=jobs)})


def _library_problems(names: list[str]) -> tuple:
    """The bundled problems named by --problems (none when not given); ValueError names the known sets."""
    if not names:
        return ()
    from problem_library.catalog import select

    return select(names)
