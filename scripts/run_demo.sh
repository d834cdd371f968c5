#!/usr/bin/env bash
# Quick start 1: set up this machine and run the main demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
python examples/streams_demo.py "$@"
