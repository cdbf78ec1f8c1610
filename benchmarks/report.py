"""What a small benchmark's command line and markdown report share: its parser, the report's first lines (title
and date, the host, the command that made it), and the report printed and written."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from datetime import date
from pathlib import Path


def parser_for(module: str, doc: str | None) -> argparse.ArgumentParser:
    """`python -m module`'s parser, its help the module's docstring as written; `--out FILE.md` added."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="the markdown report")
    return parser


def report_head(title: str, module: str) -> list[str]:
    """`# title (date)`, a blank line, the host's processor and cores, and `python -m module` with this run's
    arguments."""
    return [f"# {title} ({date.today().isoformat()})", "",
            f"- host: {platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            f"- command: `python -m {module} {' '.join(sys.argv[1:])}`"]


def finish_report(lines: list[str], out: Path | None) -> int:
    """Print the report, write it to `out` if given; the benchmark's exit status."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        out.write_text(text)
    return 0
