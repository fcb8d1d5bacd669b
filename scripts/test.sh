#!/usr/bin/env bash
# Set up (scripts/setup.sh --all, scripts/setup-docker.sh), lint (ruff) and run the whole test suite: unit tests,
# real-Mininet integration tests and Docker-worker tests; then torchvision's tests (marked vision) in a second
# virtual environment, .venv-vision (scripts/setup.sh --vision: PyPI's torch with CUDA's libraries, which
# torchvision needs and which would slow every other test's processes). A dockerd this script had to start is
# stopped again at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --all
bash scripts/setup.sh --all --vision --venv .venv-vision
had_dockerd=$([[ -f /run/fedmst-dockerd.pid ]] || docker info >/dev/null 2>&1 && echo yes || echo no)
bash scripts/setup-docker.sh
if [[ $had_dockerd == no ]]; then
    trap 'bash scripts/setup-docker.sh --stop' EXIT
fi
.venv/bin/ruff check fedmst tests scripts
# the pure tests on every core; those that build real networks or run the command as root one at a
# time, since two emulations on these cores change each other's timings (a selection with no test: fine)
pytest() { local venv=$1; shift; "$venv"/bin/python -m pytest -q "$@" || { rc=$?; [[ $rc -eq 5 ]] || exit $rc; }; }
pytest .venv -n auto -m "not integration and not host and not vision" "$@"
pytest .venv -m "(integration or host) and not vision" --durations=15 "$@"  # the slowest: where the time goes
pytest .venv-vision -m vision --durations=5 "$@"
