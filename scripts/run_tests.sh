#!/usr/bin/env bash
# Quick start 2: set up the project's virtual environment (.venv/) and run the
# whole test suite with it: both tiers (plain `pytest` is the inner loop and skips
# the `slow` tier). pytest prints each file's name as it starts it, and the 30
# slowest tests at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh
bash scripts/setup_env.sh
phase "running the test suite (both tiers)"
status=0
# Arguments replace the default selection (pyproject.toml's testpaths: test/).
.venv/bin/python -m pytest -m "slow or not slow" --durations=30 "$@" || status=$?
phase "tests finished (pytest exit status $status)"
exit "$status"
