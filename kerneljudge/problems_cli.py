"""`kerneljudge problems`: the bundled problem library from the command line (no torch needed).

  kerneljudge problems list [SET]                 name, kernel class, profile, description
  kerneljudge problems show NAME [--source KIND]  metadata and the reference (or a candidate's source)
  kerneljudge problems register [NAME ...] [--all] [--export FILE.jsonl]
  kerneljudge problems export [NAME ...] [--all] --out FILE.jsonl
NAME is a problem, a kernel class or `all`. `register` talks to the server (--server / --api-key, or
KERNELJUDGE_URL / KERNELJUDGE_API_KEY); `export` writes the RL dataset rows without a server.
Exit status: 0 ok, 2 for usage or service errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kerneljudge.client import KernelJudgeClient
from kerneljudge.errors import KernelJudgeError
from problem_library.catalog import (
    ALL_KINDS,
    LibraryError,
    LibraryProblem,
    get_problem,
    load_library,
    select,
    set_names,
)
from problem_library.dataset import write_dataset


def _add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME", help="problems, kernel classes or `all`")
    parser.add_argument("--all", action="store_true", help="every bundled problem")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list the bundled problems")
    listing.add_argument("set", nargs="?", default="all", help="a set: `all` or a kernel class (default all)")
    show = actions.add_parser("show", help="show one problem")
    show.add_argument("name")
    show.add_argument("--source", choices=["reference", *ALL_KINDS], default="reference",
                      help="which source to print (default reference)")
    register = actions.add_parser("register", help="register problems on a server (idempotent)")
    _add_selection(register)
    register.add_argument("--export", type=Path, help="also write the registered set as an RL dataset (JSONL)")
    register.add_argument("--server", help="API base URL (default: $KERNELJUDGE_URL or http://127.0.0.1:8000)")
    register.add_argument("--api-key", help="API key (default: $KERNELJUDGE_API_KEY)")
    export = actions.add_parser("export", help="write a set as an RL dataset (JSONL), no server needed")
    _add_selection(export)
    export.add_argument("--out", type=Path, required=True, help="the JSONL file to write")


def run(args: argparse.Namespace) -> int:
    try:
        return {"list": _list, "show": _show, "register": _register, "export": _export}[args.action](args)
    except (LibraryError, KernelJudgeError, OSError) as exc:
        print(f"kerneljudge problems {args.action}: {exc}", file=sys.stderr)
        return 2


def _selection(args: argparse.Namespace) -> tuple[LibraryProblem, ...]:
    if args.all == bool(args.names):
        raise LibraryError(f"name the problems or sets ({', '.join(set_names())}), or pass --all; not both")
    return load_library() if args.all else select(args.names)


def _list(args: argparse.Namespace) -> int:
    problems = select([args.set])
    width = max(len(p.name) for p in problems)
    for problem in problems:
        print(f"{problem.name:<{width}}  {problem.kernel_class:<13}  {problem.profile:<7}  {problem.description}")
    return 0


def _show(args: argparse.Namespace) -> int:
    problem = get_problem(args.name)
    if args.source != "reference":
        print(problem.candidate(args.source), end="")
        return 0
    tolerance = "default" if problem.atol is None and problem.rtol is None else f"atol={problem.atol} rtol={problem.rtol}"
    print(f"name:              {problem.name}\n"
          f"kernel class:      {problem.kernel_class}\n"
          f"problem id:        {problem.problem_id}\n"
          f"profile:           {problem.profile}\n"
          f"tolerance:         {tolerance}\n"
          f"degenerate output: {'yes' if problem.degenerate_output else 'no'}\n"
          f"description:       {problem.description}\n"
          f"candidates:        {', '.join(problem.kinds)}\n"
          f"wrong candidates:  " + "\n                   ".join(f"{kind}: {bug}" for kind, bug in problem.bugs.items())
          + "\n")
    print(problem.reference, end="")
    return 0


def _register(args: argparse.Namespace) -> int:
    problems = _selection(args)
    with KernelJudgeClient(args.server, args.api_key) as client:
        for problem in problems:
            registered = client.register_problem(problem.reference, profile=problem.profile)
            print(f"{registered.id}  {problem.name}")
    if args.export is not None:
        _write(problems, args.export)
    return 0


def _export(args: argparse.Namespace) -> int:
    _write(_selection(args), args.out)
    return 0


def _write(problems: tuple[LibraryProblem, ...], path: Path) -> None:
    rows = write_dataset(problems, path)
    print(json.dumps({"dataset": str(path), "rows": rows}), file=sys.stderr)
