#!/usr/bin/env bash
# Measure torch_spyre against the next torch (not part of CI): in a separate virtual
# environment (never .venv/ or the interpreter python3 names), install TORCH_NEXT
# (default 2.14.1, the newest this machine installs: from its local wheel store, a
# CUDA build that runs on the CPU), build torch_spyre against it from a copy of this
# checkout, and run the inner test tier there (a first build compiles every file: minutes
# with the default MAX_JOBS=1; run it under `nice` on a shared machine). Writes to
# $TORCH_NEXT_DIR (default /tmp/torch_spyre-next)/out/:
#   selfcheck.log  the patch self-check's verdict on every feature (torch_spyre/_patches/)
#   inner.log      pytest's output;  inner.xml  its JUnit report
#   summary.txt    the counts, and the failures grouped by their error's first line
#   override.*     the compile suites again with the self-check overridden: this torch's
#                  hashes taken as the recorded ones, so every patch applies as written for
#                  torch 2.13 (what the differences the self-check found actually break)
# TORCH_NEXT_PHASES selects "inner", "override" or both (the default).
# Arguments go to pytest's inner tier run (they replace the default selection, test/).
# docs/compatibility.md records the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh

TORCH_NEXT=${TORCH_NEXT:-2.14.1}
WORK=${TORCH_NEXT_DIR:-/tmp/torch_spyre-next}
VENV=$WORK/venv
SRC=$WORK/src
OUT=$WORK/out
mkdir -p "$WORK" "$OUT"
export MAX_JOBS=${MAX_JOBS:-1}

# The checkout as it is (tracked and new files, uncommitted edits included), copied with
# its times kept: the copy's build/ then recompiles only what changed since the last run.
# Files the previous copy had and this checkout no longer has are removed from the copy.
phase "copying this checkout to $SRC"
mkdir -p "$SRC"
git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done > "$WORK/files.new"
if [ -f "$WORK/files" ]; then
    comm -z -23 <(sort -z "$WORK/files") <(sort -z "$WORK/files.new") |
        while IFS= read -r -d '' f; do rm -f "$SRC/$f"; done
fi
tar --null -T "$WORK/files.new" -cf - | tar -xf - -C "$SRC"
mv "$WORK/files.new" "$WORK/files"

if [ ! -x "$VENV/bin/python" ]; then
    phase "creating $VENV"
    python3 -m venv "$VENV"
fi
PY=$VENV/bin/python
REQUIREMENTS=("torch==$TORCH_NEXT" numpy "setuptools>=64" wheel ninja "pytest>=8" pytest-timeout expecttest
              matplotlib "transformers==4.57.1" "accelerate==1.15.0")
STAMP=$VENV/torch-next-requirements.txt
if [ "$(printf '%s\n' "${REQUIREMENTS[@]}")" != "$(cat "$STAMP" 2>/dev/null)" ]; then
    phase "installing torch $TORCH_NEXT and the build and test tools into $VENV (pip)"
    "$PY" -m pip install --quiet --disable-pip-version-check "${REQUIREMENTS[@]}"
    printf '%s\n' "${REQUIREMENTS[@]}" > "$STAMP"
fi
phase "torch $("$PY" -c 'import torch; print(torch.__version__)') in $VENV"

PATH="$("$PY" -c 'import ninja; print(ninja.BIN_DIR)'):$PATH"
if [ -d /usr/lib/ccache ] && command -v ccache >/dev/null; then
    PATH="/usr/lib/ccache:$PATH"
    export CCACHE_BASEDIR="$SRC"
fi
export PATH

cd "$SRC"
# pyproject.toml says torch<2.14: --no-deps installs anyway (pip names the conflict and goes on).
if [ ! -f build/torch-next-installed ]; then
    phase "building torch_spyre and installing it editable into $VENV (MAX_JOBS=$MAX_JOBS; log: $OUT/build.log)"
    "$PY" -m pip install -v --disable-pip-version-check --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 ||
        { tail -n 40 "$OUT/build.log" >&2; die "the build against torch $TORCH_NEXT failed (log: $OUT/build.log)"; }
    touch build/torch-next-installed
else
    phase "building torch_spyre in place (MAX_JOBS=$MAX_JOBS; log: $OUT/build.log)"
    "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1 ||
        { tail -n 40 "$OUT/build.log" >&2; die "the build against torch $TORCH_NEXT failed (log: $OUT/build.log)"; }
fi

phase "import torch_spyre: the patch self-check (log: $OUT/selfcheck.log)"
"$PY" -W always - > "$OUT/selfcheck.log" 2>&1 <<'PY' || true
import importlib, torch, torch_spyre
print("torch", torch.__version__, "torch_spyre", torch_spyre.__file__)
from torch_spyre import _patches
# What each feature's check waits for: dynamo's device registry, inductor's compile_fx and
# cudagraph_utils loading; the sanitizer's host reads are checked when it is first enabled.
for name in ("torch._dynamo.device_interface", "torch._inductor.compile_fx",
             "torch._inductor.cudagraph_utils"):
    importlib.import_module(name)
_patches.check(_patches.HOST_READS)
for feature, state in _patches.report().items():
    print(f"{feature}: {state}")
PY
cat "$OUT/selfcheck.log"

# A JUnit report's counts, and its failures grouped by their error's first line.
summarize() {
"$PY" - "$1" <<'PY'
import collections, re, sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
counts = collections.Counter()
groups = collections.defaultdict(list)
for case in root.iter("testcase"):
    bad = case.find("failure")
    if bad is None:
        bad = case.find("error")
    if case.find("skipped") is not None:
        counts["skipped"] += 1
    elif bad is None:
        counts["passed"] += 1
    else:
        counts[bad.tag] += 1
        first = (bad.get("message") or "").strip().splitlines()[:1] or [""]
        # Addresses, ids and numbers vary between tests of one cause.
        key = re.sub(r"0x[0-9a-f]+|\d+", "N", first[0])[:200]
        groups[key].append(f"{case.get('classname')}::{case.get('name')}")
print(" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
for key, tests in sorted(groups.items(), key=lambda kv: -len(kv[1])):
    print(f"\n[{len(tests)}] {key}")
    for t in tests:
        print(f"    {t}")
PY
}

PHASES=${TORCH_NEXT_PHASES:-inner override}
status=0
if [[ " $PHASES " == *" inner "* ]]; then
    phase "running the inner tier against torch $TORCH_NEXT (log: $OUT/inner.log)"
    "$PY" -m pytest -p no:cacheprovider -q -rfE --junitxml="$OUT/inner.xml" "$@" > "$OUT/inner.log" 2>&1 ||
        status=$?
    tail -n 1 "$OUT/inner.log"
    summarize "$OUT/inner.xml" > "$OUT/summary.txt"
    phase "inner tier: pytest exit status $status; grouped failures: $OUT/summary.txt"
fi

if [[ " $PHASES " == *" override "* ]]; then
    # A pytest plugin, loaded before any test: records this torch's hashes as the expected
    # ones (the import hooks held off meanwhile, then run for what loaded).
    cat > "$WORK/override_self_check.py" <<'PY'
import sys

from torch_spyre import _patches
from torch_spyre._patches.after_import import AfterImport

hooks = [f for f in sys.meta_path if isinstance(f, AfterImport)]
sys.meta_path[:] = [f for f in sys.meta_path if f not in hooks]
for feature in _patches.TARGETS:
    _patches.TARGETS[feature].update(_patches.current_fingerprints(feature))
for hook in hooks:
    if hook.name in sys.modules:
        hook.callback(sys.modules[hook.name])
    else:
        sys.meta_path.insert(0, hook)
PY
    phase "the compile suites with the self-check overridden (log: $OUT/override.log)"
    override=0
    PYTHONPATH="$WORK${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -p no:cacheprovider -p override_self_check \
        -q -rfE --junitxml="$OUT/override.xml" test/compile/test_compile.py \
        test/compile/test_compiled_kernels.py test/graphs/test_graph_trees.py test/graphs/test_graphs.py \
        > "$OUT/override.log" 2>&1 || override=$?
    tail -n 1 "$OUT/override.log"
    summarize "$OUT/override.xml" > "$OUT/override-summary.txt"
    phase "overridden: pytest exit status $override; grouped failures: $OUT/override-summary.txt"
fi
exit "$status"
