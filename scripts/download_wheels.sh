#!/usr/bin/env bash
# Download everything the worker and service need that a GPU image may lack, as files,
# for an offline install (air-gapped GPU clusters, or the device machine here):
#   scripts/download_wheels.sh [DEST] [PYTHON_VERSION]        (defaults: wheelhouse 3.12)
# Then, on the GPU host:  scripts/offline_install.sh DEST
# torch and triton are NOT downloaded: use the CUDA build the GPU image already has (numpy comes along as
# numba's dependency; pip keeps the image's own numpy when it satisfies numba's range).
# Numba candidates need numba, llvmlite, numba-cuda and its CUDA Python bindings (cuda-bindings 13,
# cuda-core, cuda-pathfinder); NVVM, NVRTC and libdevice come from the image's CUDA toolkit (CUDA_HOME).
set -euo pipefail
dest=${1:-wheelhouse}
pyver=${2:-3.12}
mkdir -p "$dest"
python3 -m pip download --quiet --dest "$dest" --only-binary=:all: \
    --python-version "$pyver" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any \
    "pydantic>=2.6" "httpx>=0.27" "fastapi>=0.110" "uvicorn>=0.29" "sqlalchemy>=2.0" "alembic>=1.13,<2" \
    "pydantic-settings>=2.7" "celery>=5.4" "redis>=5.0" "prometheus-client>=0.20" "pytest>=8" "setuptools>=68" "wheel" \
    "ninja>=1.11" "libclang-ng==22.1.4.2" "numba>=0.61" "numba-cuda>=0.30,<0.31" "cuda-bindings>=13,<14"
# bubblewrap as a .deb: unpacked with `dpkg -x` where apt cannot reach a mirror.
if command -v apt-get >/dev/null; then
    (cd "$dest" && apt-get download bubblewrap >/dev/null 2>&1) || echo "note: could not download the bubblewrap .deb" >&2
    # clang-22 and the libraries it needs beyond glibc and libstdc++ (about 60 MB, in a folder of their own):
    # scripts/unpack_clang.sh makes the fast build's host compiler of them on a GPU image without clang.
    mkdir -p "$dest/clang"
    (cd "$dest/clang" && apt-get download clang-22 libclang-cpp22 libllvm22 libclang-common-22-dev libz3-4 libedit2 \
        libbsd0 libmd0 libxml2 libicu72 >/dev/null 2>&1) || echo "note: could not download clang-22's .debs" >&2
fi
du -sh "$dest"
