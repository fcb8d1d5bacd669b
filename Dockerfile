# fedmst worker image: Python 3.11, a venv in /opt/fedmst with torch (CPU) and fedmst, nothing else.
# The host starts it with --network none --cap-drop ALL --security-opt no-new-privileges, wires its
# network namespace from outside and runs `python -m fedmst.workers.agent ...` in it with `docker exec`.
#
# Online (any Docker host):  docker build -t fedmst-worker .
# Offline (this repo's way): scripts/setup-docker.sh puts every dependency as a wheel in build/wheels
#   and builds with --network none on a base made by debootstrap; then nothing is downloaded.
ARG BASE=python:3.11-slim

# Stage "deps": the venv with every dependency. It is a stage of its own because COPYing the
# wheels into the image leaves them in a layer for good, whatever a later RUN deletes; only the
# finished venv is carried over into the image.
FROM ${BASE} AS deps

# Index for the CPU build of torch on the online path (unused when build/wheels has wheels).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

# PATH is spelled out in full: an image made with `docker import` has no PATH of its own to extend.
ENV VIRTUAL_ENV=/opt/fedmst \
    PATH=/opt/fedmst/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python3 -m venv /opt/fedmst

# The dependencies, taken from pyproject.toml: the runtime ones plus the build backend that the
# image's last step needs. buil[d]/wheel[s] is a glob in both parts so that build/ or build/wheels
# may be absent (online build, fresh clone): BuildKit fails on `build/wheel[s]` when build/ itself is
# missing, the classic builder does not. A directory's contents land in /tmp/in/ itself. The fedmst
# wheel is kept out of the context by .dockerignore, so an edit to fedmst's code does not reinstall
# torch.
COPY pyproject.toml buil[d]/wheel[s] /tmp/in/
# (No heredocs here: the classic builder of Debian's docker 20.10 does not know them.)
RUN set -eu; \
    python -c 'import tomllib; p = tomllib.load(open("/tmp/in/pyproject.toml", "rb")); \
print("\n".join(p["project"]["dependencies"] + p["build-system"]["requires"]))' \
        >/tmp/in/requirements.txt; \
    if ls /tmp/in/*.whl >/dev/null 2>&1; then \
        echo "installing from the wheelhouse only (--no-index)"; \
        pip install --no-index --find-links /tmp/in -r /tmp/in/requirements.txt; \
    else \
        echo "no wheelhouse: torch from $TORCH_INDEX, the rest from the package index"; \
        pip install --extra-index-url "$TORCH_INDEX" -r /tmp/in/requirements.txt; \
    fi; \
    rm -rf /tmp/in /root/.cache

# The image: the base, the finished venv, then fedmst itself in a layer of its own, so that an edit
# to fedmst's code rebuilds only that small layer. Its dependencies and build backend are already in
# the venv, so this step needs no network on either path; pip check fails the build if anything is
# missing.
FROM ${BASE}

LABEL org.fedmst.image=worker

# HOME=/tmp: anything that wants a writable home or cache finds one under --read-only --tmpfs /tmp.
ENV VIRTUAL_ENV=/opt/fedmst \
    PATH=/opt/fedmst/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    HOME=/tmp \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY --from=deps /opt/fedmst /opt/fedmst
COPY pyproject.toml README.md /src/
COPY fedmst /src/fedmst
RUN set -eu; \
    pip install --no-index --no-deps --no-build-isolation /src; \
    pip check; \
    rm -rf /src /root/.cache; \
    python -c "import fedmst.workers.agent, torch; print('fedmst worker ready, torch', torch.__version__)"

# Idles until the host runs the agent with `docker exec`. sleep ignores SIGTERM as PID 1, so
# `docker stop` sends SIGKILL straight away instead of waiting out its timeout.
STOPSIGNAL SIGKILL
CMD ["sleep", "infinity"]
