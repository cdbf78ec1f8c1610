#!/usr/bin/env bash
# Install kerneljudge from a wheelhouse made by download_wheels.sh, with no network.
# Uses the python3 on PATH (which must already have torch and triton), and unpacks the
# bubblewrap .deb into /opt/kj-bwrap when bwrap is missing, and clang's into /opt/kj-clang when there is no clang.
set -euo pipefail
wheels=${1:-wheelhouse}
here=$(cd "$(dirname "$0")/.." && pwd)
python3 -m pip install --quiet --no-index --find-links "$wheels" \
    pydantic httpx fastapi uvicorn sqlalchemy pydantic-settings alembic celery redis prometheus-client pytest ninja libclang-ng \
    numba numba-cuda
python3 -m pip install --quiet --no-index --find-links "$wheels" --no-build-isolation --no-deps -e "$here"
if ! command -v bwrap >/dev/null; then
    deb=$(ls "$wheels"/bubblewrap_*.deb | head -n1)
    dpkg -x "$deb" /opt/kj-bwrap
    echo "bwrap unpacked: export KERNELJUDGE_BWRAP=/opt/kj-bwrap/usr/bin/bwrap"
fi
if ! command -v clang++-22 >/dev/null && ! command -v clang++ >/dev/null && ls "$wheels"/clang/*.deb >/dev/null 2>&1; then
    echo "clang unpacked: export KERNELJUDGE_FAST_CXX=$("$here"/scripts/unpack_clang.sh "$wheels/clang" /opt/kj-clang)"
fi
