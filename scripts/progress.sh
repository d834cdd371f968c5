# Sourced by the Quick-start scripts: one line per phase, with the time since
# the first script of the command started (QUICKSTART_START, exported).
: "${QUICKSTART_START:=$(date +%s)}"
export QUICKSTART_START

phase() {
    local elapsed=$(( $(date +%s) - QUICKSTART_START ))
    printf '[%d:%02d] %s\n' $((elapsed / 60)) $((elapsed % 60)) "$*"
}

# A missing prerequisite: one line saying what to install, then stop.
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}
