#!/usr/bin/env bash
# Quick start 2: set up this machine and run the whole test suite: both tiers
# (plain `pytest` is the inner loop and skips the `slow` tier).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
python -m pytest -q test -m "slow or not slow" "$@"
