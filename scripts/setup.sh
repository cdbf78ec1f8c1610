#!/usr/bin/env bash
# Set up kerneljudge on a fresh Debian/Ubuntu machine: system packages, a virtualenv in .venv,
# torch (from pip's configured index, or KERNELJUDGE_TORCH_INDEX), and the project with its extras.
#   scripts/setup.sh            service + worker (default)
#   scripts/setup.sh dev        + test tools (pytest, ruff, mypy, schemathesis, psycopg, playwright + apt chromium)
# Idempotent: re-running it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
extra=${1:-server}
venv=${KERNELJUDGE_VENV:-.venv}

need_apt=()
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
if [ "$extra" = dev ]; then
    command -v redis-server >/dev/null || need_apt+=(redis-server)
    command -v pg_ctlcluster >/dev/null || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need_apt+=(postgresql)
    # The dashboard's browser test drives this Chromium with Playwright (pip, dev extra).
    [ -x /usr/bin/chromium ] || need_apt+=(chromium)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing ${need_apt[*]} with apt-get" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
    else
        echo "setup: please install these Debian packages first: ${need_apt[*]}" >&2
        exit 1
    fi
fi

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
py="$venv/bin/python"
# The service runs on Python 3.10+; the test extra needs 3.11 to 3.13 (trl: 3.11+, verifiers 0.3: before 3.14).
minimum=$([ "$extra" = dev ] && echo 11 || echo 10)
if ! "$py" -c "import sys; sys.exit(sys.version_info < (3, $minimum))"; then
    echo "setup: '$extra' needs Python 3.$minimum or newer; $venv has $("$py" -V 2>&1)." >&2
    echo "setup: remove $venv and run again with a newer python3 on PATH (or set KERNELJUDGE_VENV)." >&2
    exit 1
fi
if [ "$extra" = dev ] && ! "$py" -c "import sys; sys.exit(sys.version_info >= (3, 14))"; then
    echo "setup: 'dev' (the test suite's trainer libraries: verifiers 0.3) needs Python 3.13 or older; $venv has" \
        "$("$py" -V 2>&1). Remove $venv and run again with python3.11-3.13 on PATH (or set KERNELJUDGE_VENV)." >&2
    exit 1
fi
"$py" -m pip install --quiet --upgrade pip
# torch from pip's configured index: on plain PyPI the Linux wheel is the CUDA build (several GB of CUDA
# libraries); KERNELJUDGE_TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the CPU build instead.
if ! "$py" -c "import torch" 2>/dev/null; then
    "$py" -m pip install --quiet ${KERNELJUDGE_TORCH_INDEX:+--index-url "$KERNELJUDGE_TORCH_INDEX"} \
        "torch==${KERNELJUDGE_TORCH_VERSION:-2.13.0}"
fi
"$py" -m pip install --quiet "triton==${KERNELJUDGE_TRITON_VERSION:-3.6.0}"
"$py" -m pip install --quiet -e ".[$extra]"
if [ "$extra" = dev ]; then
    # nvcc for building CUDA candidates without a CUDA install (tests/build): NVIDIA's pip wheels. The
    # CPU torch wheel lacks one generated header; sandbox_side/build/support/ has a stub for it.
    "$py" -m pip install --quiet nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
        nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
fi
echo "setup: ready ($("$py" -c 'import numba, torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "numba", numba.__version__)'))" >&2
