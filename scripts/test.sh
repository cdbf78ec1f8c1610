#!/usr/bin/env bash
# Run the whole test suite the way CI does: set up, start a throwaway Redis and PostgreSQL on
# loopback, run pytest, stop them again. GPU tests are skipped on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
py=${KERNELJUDGE_VENV:-.venv}/bin/python
run_dir=$(mktemp -d /tmp/kj-test-services.XXXXXX)
cleanup() { scripts/test_services.sh stop "$run_dir" || true; rm -rf "$run_dir"; }
trap cleanup EXIT
eval "$(scripts/test_services.sh start "$run_dir")"
"$py" -m ruff check .
"$py" -m mypy
"$py" -m pytest -q -p no:cacheprovider "$@"
