#!/usr/bin/env bash
# Set up (scripts/setup.sh, scripts/setup-docker.sh), lint (ruff) and run the whole test suite: unit tests,
# real-Mininet integration tests and Docker-worker tests. A dockerd this script had to start is
# stopped again at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
had_dockerd=$([[ -f /run/fedmst-dockerd.pid ]] || docker info >/dev/null 2>&1 && echo yes || echo no)
bash scripts/setup-docker.sh
if [[ $had_dockerd == no ]]; then
    trap 'bash scripts/setup-docker.sh --stop' EXIT
fi
.venv/bin/ruff check fedmst tests scripts
.venv/bin/python -m pytest -q "$@"
