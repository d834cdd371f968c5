#!/usr/bin/env bash
# Install torch (the CPU 2.13.0 wheel), build dependencies and torch_spyre itself
# (editable, so tests and examples use this checkout). Safe to run repeatedly: the
# first run (a fresh clone) builds from nothing; later runs rebuild in place with
# the objects kept in build/, so ninja recompiles only what changed (seconds when
# nothing did).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0" numpy
# The build's own requirements (pyproject.toml's build-system.requires), installed
# explicitly: the builds below use --no-build-isolation.
python -m pip install --quiet --disable-pip-version-check "setuptools>=64" wheel
python -m pip install --quiet --disable-pip-version-check ninja "pytest>=8" pytest-timeout expecttest matplotlib

# True when torch_spyre is installed editable from this folder.
installed_here() {
    python - <<'PY'
import importlib.metadata as md, json, os, sys, urllib.parse, urllib.request
try:
    info = json.loads(md.distribution("torch_spyre").read_text("direct_url.json") or "{}")
except md.PackageNotFoundError:
    sys.exit(1)
path = urllib.request.url2pathname(urllib.parse.urlparse(info.get("url", "")).path)
editable = info.get("dir_info", {}).get("editable", False)
sys.exit(0 if editable and os.path.isdir(path) and os.path.samefile(path, ".") else 1)
PY
}

# The metadata (entry point, dependencies) is pyproject.toml's: install again when it changed.
STAMP=build/installed-pyproject.toml
if installed_here && cmp -s pyproject.toml "$STAMP"; then
    python setup.py --quiet build_ext --inplace
else
    python -m pip install --quiet --disable-pip-version-check --no-build-isolation -e .
    mkdir -p build && cp pyproject.toml "$STAMP"
fi
