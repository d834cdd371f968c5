#!/usr/bin/env bash
# Install torch (the CPU 2.13.0 wheel), build dependencies and torch_spyre itself
# (editable, so tests and examples use this checkout). Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0" numpy
python -m pip install --quiet --disable-pip-version-check ninja "pytest>=8" expecttest matplotlib
python -m pip install --quiet --disable-pip-version-check --no-build-isolation -e .
