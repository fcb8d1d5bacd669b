#!/usr/bin/env bash
# Set up (scripts/setup.sh --all, scripts/setup-docker.sh), lint (ruff) and run the whole test suite: unit tests,
# real-Mininet integration tests and Docker-worker tests. A dockerd this script had to start is
# stopped again at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --all
had_dockerd=$([[ -f /run/fedmst-dockerd.pid ]] || docker info >/dev/null 2>&1 && echo yes || echo no)
bash scripts/setup-docker.sh
if [[ $had_dockerd == no ]]; then
    trap 'bash scripts/setup-docker.sh --stop' EXIT
fi
.venv/bin/ruff check fedmst tests scripts
# the pure tests on every core; those that build real networks or run the command as root one at a
# time, since two emulations on these cores change each other's timings (a selection with no test: fine)
pytest() { .venv/bin/python -m pytest -q "$@" || { rc=$?; [[ $rc -eq 5 ]] || exit $rc; }; }
pytest -n auto -m "not integration and not host" "$@"
pytest -m "integration or host" --durations=15 "$@"  # the slowest, each run: where the suite's time goes
