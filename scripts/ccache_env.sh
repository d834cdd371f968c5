# Sourced by the Quick-start scripts: ccache, where installed, keeps compiled
# objects across clean builds and copies of the checkout (paths under this folder
# are hashed relative to it). The test command exports it too, so the builds the
# suite runs (the fresh clone of the Quick-start and wheel tests, the sanitizer
# stress builds) reuse the objects of earlier runs. The working folder stays out
# of the hash, or a copy in another folder would miss every object (the debug
# info's compile folder is then the first copy's).
if [ -d /usr/lib/ccache ] && command -v ccache >/dev/null; then
    case ":$PATH:" in *:/usr/lib/ccache:*) ;; *) PATH="/usr/lib/ccache:$PATH" ;; esac
    export PATH
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
    export CCACHE_NOHASHDIR=1
fi
