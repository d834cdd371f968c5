#!/usr/bin/env bash
# Quick start 2: set up the project's virtual environment (.venv/) and run the
# whole test suite with it: both tiers (plain `pytest` is the inner loop and skips
# the `slow` tier), spread over pytest-xdist workers (TEST_WORKERS overrides how
# many). pytest prints each file's name as a worker starts it, and the 30 slowest
# tests at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh
bash scripts/setup_env.sh
source scripts/ccache_env.sh  # for the builds the tests run; after the setup, which may install it
# pytest-xdist workers: one per core, 2 to 4. Most tests wait (on subprocesses, the
# runtime's threads, builds), so one process alone keeps under one core busy.
WORKERS=${TEST_WORKERS:-$(nproc)}
[ "$WORKERS" -lt 2 ] && WORKERS=2
[ "$WORKERS" -gt 4 ] && WORKERS=4
phase "running the test suite (both tiers, $WORKERS pytest-xdist workers)"
status=0
# Arguments replace the default selection (pyproject.toml's testpaths: test/).
.venv/bin/python -m pytest -m "slow or not slow" -n "$WORKERS" --dist worksteal --durations=30 "$@" ||
    status=$?
phase "tests finished (pytest exit status $status)"
exit "$status"
