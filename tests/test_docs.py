"""The documentation as users meet it: docs/configuration.md lists exactly the variables the code reads, and
the README's links lead to pages that exist.

What counts as "read by the code":
  - the configuration tree (worker/config/): the variable each field of each section is read from;
  - elsewhere in Python (scanned: app/, worker/, sandbox_side/, kerneljudge/, scripts/, benchmarks/, tests/), a
    string constant that is exactly a variable name (`os.environ.get("KERNELJUDGE_X")`, an environment handed to
    a child process); names that only appear inside a longer text (a docstring, an error message) do not count;
  - in shell, Make, Docker and compose files (the Makefile, the Dockerfile, docker-compose.yml, scripts/,
    benchmarks/, .ci/), an expansion: `$KERNELJUDGE_X` or `${KERNELJUDGE_X...}`.
Left out: benchmarks/redteam/cases/ (attacking candidates probe for variables that do not exist) and this file.
Documented: every KERNELJUDGE_* name written anywhere in docs/configuration.md.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from worker.config.tree import KernelJudgeConfig

REPO = Path(__file__).resolve().parents[1]
CONFIG_DOC = REPO / "docs" / "configuration.md"
NAME = re.compile(r"KERNELJUDGE_[A-Z0-9_]+")
EXACT_NAME = re.compile(r"^KERNELJUDGE_[A-Z0-9_]*[A-Z0-9]$")
SHELL_EXPANSION = re.compile(r"\$\{?(KERNELJUDGE_[A-Z0-9_]*[A-Z0-9])")
PYTHON_ROOTS = ("app", "worker", "sandbox_side", "kerneljudge", "scripts", "benchmarks", "tests")
SHELL_FILES = ("Makefile", "Dockerfile", "docker-compose.yml")
SHELL_ROOTS = ("scripts", "benchmarks", ".ci")
LEFT_OUT = (REPO / "benchmarks" / "redteam" / "cases", Path(__file__).resolve())


def _scanned(path: Path) -> bool:
    return not any(path == skip or skip in path.parents for skip in LEFT_OUT)


def _python_reads(path: Path) -> dict[str, str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return {node.value: str(path.relative_to(REPO)) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and EXACT_NAME.match(node.value)}


def tree_variables() -> dict[str, str]:
    """Each variable the configuration tree reads, with the file of its section."""
    found: dict[str, str] = {}
    for section in KernelJudgeConfig.sections().values():
        where = str(Path(inspect.getfile(section)).resolve().relative_to(REPO))
        for field in section.model_fields.values():
            if isinstance(field.validation_alias, str):
                found[field.validation_alias] = where
    return found


def variables_read() -> dict[str, str]:
    """Each variable the code reads, with one file that reads it."""
    found = tree_variables()
    for root in PYTHON_ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            if _scanned(path):
                for name, where in _python_reads(path).items():
                    found.setdefault(name, where)
    shell = [REPO / name for name in SHELL_FILES]
    shell += [p for root in SHELL_ROOTS for p in (REPO / root).rglob("*") if p.is_file() and p.suffix != ".py"]
    for path in shell:
        if path.is_file() and _scanned(path):
            for name in SHELL_EXPANSION.findall(path.read_text(errors="replace")):
                found.setdefault(name, str(path.relative_to(REPO)))
    return found


def variables_documented() -> set[str]:
    return set(NAME.findall(CONFIG_DOC.read_text()))


def test_every_variable_the_code_reads_is_documented_and_no_other():
    read = variables_read()
    documented = variables_documented()
    missing = sorted(set(read) - documented)
    extra = sorted(documented - set(read))
    assert not missing and not extra, (
        "docs/configuration.md is out of step with the code.\n"
        + "".join(f"  read but not documented: {name} (e.g. in {read[name]})\n" for name in missing)
        + "".join(f"  documented but read nowhere: {name}\n" for name in extra))


def test_the_scan_finds_reads_of_each_kind():
    """The scanner itself: the tree's sections, a plain os.environ read, a shell expansion, a compose default."""
    read = variables_read()
    tree = tree_variables()
    assert {"KERNELJUDGE_MAX_BATCH", "KERNELJUDGE_DATA_DIR", "KERNELJUDGE_CLAIM_BURST", "KERNELJUDGE_TIMED_CHECKS",
            "KERNELJUDGE_BWRAP"} <= set(tree)
    assert read["KERNELJUDGE_MAX_BATCH"] == "worker/config/api_section.py"
    assert read["KERNELJUDGE_BWRAP"] == "worker/config/sandbox_section.py"
    assert read["KERNELJUDGE_FAST_CXX"].startswith(("worker/", "sandbox_side/"))
    assert read["KERNELJUDGE_CHROMIUM"].startswith("tests/")
    assert read["KERNELJUDGE_VENV"].startswith("scripts/")
    assert read["KERNELJUDGE_BASE_IMAGE"] == "docker-compose.yml"
    assert "KERNELJUDGE_PHASE" not in read  # only a red-team candidate looks for it


def test_only_the_configuration_tree_reads_the_service_variables():
    """app/ and worker/ take their KERNELJUDGE_* values from the tree they are given (worker/config/); none
    reads one from os.environ itself (writing one into a child's environment is not reading it)."""
    readers = []
    for root in ("app", "worker"):
        for path in sorted((REPO / root).rglob("*.py")):
            if (REPO / "worker" / "config") in path.parents:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and _environ_read(node.func) and node.args \
                        and isinstance(node.args[0], ast.Constant) and NAME.match(str(node.args[0].value)):
                    readers.append(f"{path.relative_to(REPO)}:{node.lineno} {node.args[0].value}")
                elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                        and ast.unparse(node.value) == "os.environ" and isinstance(node.slice, ast.Constant) \
                        and NAME.match(str(node.slice.value)):
                    readers.append(f"{path.relative_to(REPO)}:{node.lineno} {node.slice.value}")
    assert readers == []


def _environ_read(func: ast.expr) -> bool:
    return ast.unparse(func) in ("os.environ.get", "os.getenv", "environ.get", "getenv")


def test_readme_and_docs_links_lead_somewhere():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL))  # no code
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked.read_text()):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    headings = re.findall(r"^#+\s+(.*)$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


VERDICTS_DOC = REPO / "docs" / "verdicts-and-rules.md"


def test_the_error_kinds_table_lists_exactly_the_error_kinds():
    """docs/verdicts-and-rules.md's `error.kind` table against contract.results.ErrorKind, both ways."""
    from contract.results import ErrorKind

    text = VERDICTS_DOC.read_text()
    table = text[text.index("### Error kinds"):]
    table = table[:table.index("\n\n", table.index("| `error.kind`"))]
    documented = {name for row in table.splitlines() if row.startswith("| `")
                  for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}
    kinds = {kind.value for kind in ErrorKind}
    assert documented == kinds, (f"documented but no kind: {sorted(documented - kinds)}; "
                                 f"kinds not documented: {sorted(kinds - documented)}")
