#!/usr/bin/env bash
# Quick start 1: set up the project's virtual environment (.venv/) and run the
# main demo with it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh
bash scripts/setup_env.sh
phase "running the streams demo (examples/streams_demo.py)"
.venv/bin/python examples/streams_demo.py "$@"
phase "done"
