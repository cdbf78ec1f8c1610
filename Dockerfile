# kerneljudge service / worker image (one image, two roles: `serve` and `worker`).
#
#   docker build -t kerneljudge .                                   # CPU torch, for the API or CPU workers
#   docker build -t kerneljudge-gpu --build-arg BASE_IMAGE=<CUDA image with torch and nvcc> .
#
# BASE_IMAGE: the default is a plain Python image; torch is installed from TORCH_INDEX_URL (the CPU
# build). GPU hosts use an NVIDIA CUDA "devel" image that already has a CUDA build of torch and
# nvcc (CUDA candidates are compiled with load_inline); torch is only installed when the base
# cannot import it, exactly as scripts/setup.sh does. The base must provide python3 and apt-get.
#
# Run (the API refuses to start without keys when bound to 0.0.0.0):
#   docker run -e KERNELJUDGE_API_KEYS=my-secret-key -p 8000:8000 \
#     --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#     --security-opt systempaths=unconfined kerneljudge
# The security options are for the bubblewrap sandbox that runs every candidate: Docker's default
# seccomp profile blocks unprivileged user namespaces, and its masked /proc paths stop bwrap from
# mounting a fresh /proc. An API that only dispatches to Celery workers (--broker) needs none of
# them. Not tested here: this image has not been built in this repository's CI.

ARG BASE_IMAGE=python:3.12-slim
FROM ${BASE_IMAGE}

# torch: the CPU build unless the base already has torch (the CUDA build of a GPU base is kept).
ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX_URL="https://download.pytorch.org/whl/cpu"
ARG TRITON_SPEC="triton==3.6.0"

# PIP_BREAK_SYSTEM_PACKAGES: the container is its own environment; lets pip install on bases whose
# system Python is marked externally managed (PEP 668, e.g. Ubuntu 24.04 based CUDA images).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1 \
    KERNELJUDGE_DATA_DIR=/data

# bubblewrap: the sandbox. procps: ps for debugging a stuck worker. g++ and binutils: CUDA builds (nvcc's
# host compiler, nm and ld for the fast build). clang-22, where the base's Debian has it (bookworm-security
# does): the fast build's host compiler (~3 s per candidate instead of ~12 s with g++); without it, g++.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap procps g++ binutils \
    && (DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends clang-22 \
        || echo "clang-22 is not available on this base: fast CUDA builds use g++") \
    && rm -rf /var/lib/apt/lists/*

# triton too is kept when the base has it: a CUDA torch pins the triton it was built with.
RUN if ! python3 -c "import torch" 2>/dev/null; then \
        python3 -m pip install --index-url "${TORCH_INDEX_URL}" "${TORCH_SPEC}"; \
    fi \
    && if ! python3 -c "import triton" 2>/dev/null; then \
        python3 -m pip install "${TRITON_SPEC}"; \
    fi

WORKDIR /opt/kerneljudge
COPY pyproject.toml README.md ./
COPY contract ./contract
COPY sandbox_side ./sandbox_side
COPY problem_library ./problem_library
COPY app ./app
COPY worker ./worker
COPY kerneljudge ./kerneljudge
RUN python3 -m pip install ".[server]" \
    && python3 -c "import numba, torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'numba', numba.__version__)"

# Non-root: the sandbox itself maps user code to uid 65534 inside its own user namespace.
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin kerneljudge \
    && mkdir -p /data && chown kerneljudge:kerneljudge /data
USER kerneljudge
WORKDIR /home/kerneljudge
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/v1/health', timeout=4)" || exit 1

ENTRYPOINT ["kerneljudge"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
