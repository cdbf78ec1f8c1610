"""`kerneljudge` command line: one dispatcher; each subcommand lives with the code it drives.

Each subcommand module exposes `add_arguments(parser)` and `run(args) -> int`, and is
imported only when its subcommand is used (the client commands must work without torch).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "eval": ("worker.engine.eval_cli", "evaluate a candidate against a reference locally (sandboxed)"),
    "build": ("worker.engine.build.build_cli", "build a CUDA candidate without a GPU, as the service does (fast or full path)"),
    "serve": ("app.serve_cli", "run the HTTP API with embedded local workers"),
    "worker": ("worker.jobs.celery_cli", "run Celery GPU workers against a Redis broker"),
    "submit": ("kerneljudge.cli_client", "submit one evaluation to a server"),
    "status": ("kerneljudge.cli_client", "show an evaluation's status"),
    "batch": ("kerneljudge.cli_client", "submit a folder or JSONL file of candidates, write results as JSONL"),
    "problems": ("kerneljudge.problems_cli", "list, show, register or export the bundled problem library"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="kerneljudge", description="Sandboxed GPU-kernel evaluation.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        parser.print_help()
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    name = argv[0]
    module = importlib.import_module(SUBCOMMANDS[name][0])
    sub_parser = argparse.ArgumentParser(prog=f"kerneljudge {name}", description=SUBCOMMANDS[name][1])
    module.add_arguments(sub_parser, name) if _takes_name(module) else module.add_arguments(sub_parser)
    args = sub_parser.parse_args(argv[1:])
    args.command = name
    return int(module.run(args) or 0)


def _takes_name(module) -> bool:
    # Modules that serve several subcommands (the client) receive the subcommand's name.
    return getattr(module, "MULTI_COMMAND", False)


if __name__ == "__main__":
    raise SystemExit(main())
