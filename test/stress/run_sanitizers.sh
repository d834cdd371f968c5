#!/usr/bin/env bash
# Build the flex stub, csrc/runtime/*.cpp (no ATen) and the stress
# program (test/stress/pool_stress.cpp) three ways -- plain, ThreadSanitizer,
# AddressSanitizer+UBSan -- run every mode of the program, and report findings.
# No Python extension is involved: the program needs c10 headers and libc10.
#
#   test/stress/run_sanitizers.sh [plain] [tsan] [asan]     (default: all three)
#
# Environment:
#   STRESS_THREADS   threads of the stress mix            (default 8)
#   STRESS_OPS       operations per thread, plain build   (default 100000)
#   STRESS_SAN_OPS   operations per thread, sanitizers    (default 100000)
#   BUILD_DIR        objects and binaries                 (default build/stress)
#   JOBS             parallel compiles                    (default 2)
#
# Exits 0 iff every run passed its checks and no sanitizer reported anything.
# libc10 (torch) is not instrumented; test/stress/tsan.supp documents the only
# suppressions allowed: frames inside libc10 itself.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
THREADS=${STRESS_THREADS:-8}
OPS=${STRESS_OPS:-100000}
SAN_OPS=${STRESS_SAN_OPS:-100000}
BUILD_DIR=${BUILD_DIR:-build/stress}
JOBS=${JOBS:-2}
VARIANTS=("$@")
[ ${#VARIANTS[@]} -eq 0 ] && VARIANTS=(plain tsan asan)

read -r TORCH_INC TORCH_LIB < <("${PYTHON:-python3}" -c \
  "import os, torch; p = os.path.dirname(torch.__file__); print(p + '/include', p + '/lib')")
CXX=${CXX:-g++}
STUB_SRC=(third_party/flex_stub/src/*.cpp)
SPYRE_SRC=(csrc/runtime/*.cpp)
STRESS_SRC=(test/stress/pool_stress.cpp test/stress/audit.cpp)
HEADERS=(third_party/flex_stub/include/flex/*.hpp third_party/flex_stub/src/*.hpp csrc/runtime/*.h
         test/stress/*.hpp "$0")
# Every runtime entry point named in audit.cpp is wrapped (see audit.hpp).
WRAPS=$(sed -n 's/^\(WRAP\|\/\/ WRAP-BY-HAND\)(\(_Z[A-Za-z0-9_]*\).*/-Wl,--wrap=\2/p' test/stress/audit.cpp)

flags_for() {
  case "$1" in
    plain) echo "-O2 -g" ;;
    tsan) echo "-O1 -g -fsanitize=thread" ;;
    asan) echo "-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" ;;
  esac
}

newest_header=$(ls -t "${HEADERS[@]}" | head -1)

# compile <variant flags> <std> <extra> <src> <obj>: only when out of date.
compile() {
  local flags=$1 std=$2 extra=$3 src=$4 obj=$5
  if [ -f "$obj" ] && [ "$obj" -nt "$src" ] && [ "$obj" -nt "$newest_header" ]; then return 0; fi
  # shellcheck disable=SC2086
  $CXX $flags $std -fPIC -pthread -Wall -Wextra -Wno-interference-size \
    -I third_party/flex_stub/include -I csrc $extra -c "$src" -o "$obj"
}

build() {
  local variant=$1 flags obj_dir objs=() pids=() src obj
  flags=$(flags_for "$variant")
  obj_dir="$BUILD_DIR/$variant/obj"
  mkdir -p "$obj_dir"
  local -a jobs=()
  for src in "${STUB_SRC[@]}"; do
    jobs+=("-std=c++17|$src|$obj_dir/stub_$(basename "$src").o|")
  done
  for src in "${SPYRE_SRC[@]}" "${STRESS_SRC[@]}"; do
    jobs+=("-std=c++20|$src|$obj_dir/$(basename "$src").o|-DSPYRE_LOCK_AUDIT -isystem $TORCH_INC")
  done
  local job std extra running=0
  for job in "${jobs[@]}"; do
    IFS='|' read -r std src obj extra <<<"$job"
    objs+=("$obj")
    compile "$flags" "$std" "$extra" "$src" "$obj" &
    pids+=($!)
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
  done
  local failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [ "$failed" -eq 0 ] || { echo "[$variant] compile failed"; return 1; }
  local bin="$BUILD_DIR/$variant/pool_stress"
  # shellcheck disable=SC2086
  $CXX $flags -pthread "${objs[@]}" -L "$TORCH_LIB" -lc10 -Wl,-rpath,"$TORCH_LIB" $WRAPS -o "$bin"
}

SUPP="$ROOT/test/stress/tsan.supp"
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$SUPP"
export ASAN_OPTIONS="halt_on_error=1 exitcode=66 detect_leaks=1 detect_stack_use_after_return=1 check_initialization_order=1 strict_init_order=1"
export UBSAN_OPTIONS="halt_on_error=1 exitcode=66 print_stacktrace=1"
# gcc 12's TSAN needs the address space layout it expects; disabling ASLR
# for the child avoids "unexpected memory mapping" on kernels with high mmap entropy.
RUN_PREFIX=()
if command -v setarch >/dev/null && setarch "$(uname -m)" -R true 2>/dev/null; then
  RUN_PREFIX=(setarch "$(uname -m)" -R)
fi

FINDINGS=0
FAILURES=0

# run <variant> <label> <max seconds> <args...>: pass = exit 0, nothing on
# stderr, within the time limit.
run() {
  local variant=$1 label=$2 limit=$3
  shift 3
  local bin="$BUILD_DIR/$variant/pool_stress" out err rc start elapsed
  out=$(mktemp) err=$(mktemp)
  start=$(date +%s%N)
  set +e
  timeout -k 5 "$limit" "${RUN_PREFIX[@]}" "$bin" "$@" >"$out" 2>"$err"
  rc=$?
  set -e
  elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
  elapsed="$((elapsed / 1000)).$(( (elapsed % 1000) / 100 ))"
  if grep -qE 'ThreadSanitizer|AddressSanitizer|LeakSanitizer|runtime error:' "$err" || [ "$rc" -eq 66 ]; then
    FINDINGS=$((FINDINGS + 1))
    echo "[$variant] $label: SANITIZER FINDING (exit $rc, ${elapsed}s)"
    head -60 "$err"
  elif [ "$rc" -ne 0 ] || [ -s "$err" ]; then
    FAILURES=$((FAILURES + 1))
    echo "[$variant] $label: FAILED (exit $rc, ${elapsed}s)"
    cat "$out"
    head -40 "$err"
  else
    echo "[$variant] $label: ok (${elapsed}s) $(grep -hE '^(stress|lock-hold|faults|capture-join|hazard-order|peer-windows):' "$out" | tr '\n' ' ')"
  fi
  rm -f "$out" "$err"
}

for variant in "${VARIANTS[@]}"; do
  start=$(date +%s)
  build "$variant"
  echo "[$variant] built in $(( $(date +%s) - start ))s"
  ops=$SAN_OPS
  [ "$variant" = plain ] && ops=$OPS
  run "$variant" "stress ${THREADS}x${ops}" 600 --threads "$THREADS" --ops "$ops"
  run "$variant" "lock-hold" 120 --mode lock-hold --slow-create-ms 20 --readers 4
  run "$variant" "exit-queued" 10 --mode exit-queued
  run "$variant" "exit-thread" 10 --mode exit-thread
  run "$variant" "exit-during" 10 --mode exit-during --threads "$THREADS" --ops 100000000
  run "$variant" "capture-join 2x2000" 300 --mode capture-join --ops 2000
  run "$variant" "hazard-order 2x2000" 300 --mode hazard-order --ops 2000
  run "$variant" "peer-windows" 120 --mode peer-windows --threads "$THREADS" --ops 500
done

echo "sanitizers: variants=${VARIANTS[*]} findings=$FINDINGS failures=$FAILURES"
[ "$FINDINGS" -eq 0 ] && [ "$FAILURES" -eq 0 ]
