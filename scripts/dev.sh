#!/usr/bin/env bash
# zcstore developer entry point. Idempotent; installs what it needs from Debian packages.
#   scripts/dev.sh deps                 install build/test dependencies (apt-get, only if missing)
#   scripts/dev.sh build [release|asan] configure + build (default release)
#   scripts/dev.sh test                 release build + all tests, ASan/UBSan build + all tests,
#                                       then the libFuzzer harnesses for a bounded time
#   scripts/dev.sh fuzz [seconds]       build with clang + libFuzzer and fuzz every decoder
#   scripts/dev.sh demo                 build and run the local demo, print what happened
#   scripts/dev.sh bench [rdma|comch|target|pipeline|gga|nbd|all]   run benchmarks, write docs/BENCHMARKS.md
#   scripts/dev.sh doca-install [PREFIX] build libzcstore-doca and install its headers, library and
#                                       pkg-config files under PREFIX (default build/doca-prefix)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=$(nproc)

PACKAGES=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev clang-format
  libucx-dev ucx-utils libisal-dev liblz4-dev libcli11-dev nlohmann-json3-dev libspdlog-dev
  libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev libgnutls28-dev iproute2
  libnbd-bin python3-libnbd qemu-utils fio nbdkit e2fsprogs mount meson)
# Only the benchmarks need these: nbdkit and fio (the pipeline's and nbd's comparison), qemu-utils
# (qemu-nbd, nbd's second peer), jq (JSON parsing), linux-perf (gga's profile of the service,
# nbd's of zcstore_nbd).
BENCH_PACKAGES=(nbdkit qemu-utils fio jq linux-perf)

log() { printf '\033[1m== %s\033[0m\n' "$*"; }

# deps [PACKAGE...]: installs the given packages (default: PACKAGES) that are missing.
deps() {
  local missing=() wanted=("$@")
  [ ${#wanted[@]} -gt 0 ] || wanted=("${PACKAGES[@]}")
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then return 0; fi
  log "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# UCX settings every zcstore process wants on these machines (DESIGN.md, UCX_MEASURED.md):
# error handling on shared memory, a 1 s keepalive so dead peers are found, loopback only.
ucx_env() {
  export UCX_MM_ERROR_HANDLING=${UCX_MM_ERROR_HANDLING:-y}
  export UCX_KEEPALIVE_INTERVAL=${UCX_KEEPALIVE_INTERVAL:-1s}
  export UCX_WARN_UNUSED_ENV_VARS=n
}

build() {
  local kind=${1:-release}
  shift || true
  local dir="$ROOT/build/$kind"
  local args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo)
  case "$kind" in
    release) ;;
    asan) args+=(-DZC_SANITIZE=ON -DZC_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1) ;;
    fuzz) args+=(-DZC_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1) ;;
    *) echo "unknown build kind: $kind" >&2; exit 2 ;;
  esac
  log "build $kind"
  cmake -S "$ROOT" -B "$dir" "${args[@]}" >/dev/null
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$dir" -j "$JOBS" "${targets[@]}"
}

run_ctest() {
  local kind=$1
  log "test $kind"
  ucx_env
  (cd "$ROOT/build/$kind" && ctest --output-on-failure -j "$JOBS" --timeout 300)
}

fuzz() {
  local seconds=${1:-20}
  shopt -s nullglob
  local harnesses=()
  for src in "$ROOT"/tests/fuzz/*_fuzz.cpp; do harnesses+=("$(basename "$src" .cpp)"); done
  [ ${#harnesses[@]} -gt 0 ] || return 0
  build fuzz "${harnesses[@]}"
  ucx_env
  for f in "$ROOT"/build/fuzz/tests/fuzz/*_fuzz; do
    local name corpus
    name=$(basename "$f")
    corpus=$(mktemp -d)
    cp -r "$ROOT/tests/fuzz/corpus/$name/." "$corpus/" 2>/dev/null || true
    log "fuzz $name for ${seconds}s"
    "$f" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$corpus" \
      2>&1 | tail -n 3
    rm -rf "$corpus"
  done
}

test_all() {
  deps
  build release
  run_ctest release
  # UCX's memory hooks intercept malloc/mmap, which AddressSanitizer also owns: turn them off.
  export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  build asan
  run_ctest asan
  fuzz "${ZC_FUZZ_SECONDS:-15}"
  log "all tests passed"
}

case "${1:-}" in
  deps) deps ;;
  build) deps; shift; build "${1:-release}" "${@:2}" ;;
  test) test_all ;;
  fuzz) deps; fuzz "${2:-60}" ;;
  demo) deps; build release; ucx_env; exec "$ROOT/scripts/demo.sh" "$ROOT/build/release" ;;
  bench)
    deps
    case "${2:-all}" in pipeline | gga | nbd | all) deps "${BENCH_PACKAGES[@]}" ;; esac
    build release
    ucx_env
    exec "$ROOT/bench/run.sh" "$ROOT/build/release" "${2:-all}"
    ;;
  doca-install)
    deps
    prefix=$(realpath -m "${2:-$ROOT/build/doca-prefix}")
    build release zc_doca
    cmake --install "$ROOT/build/release" --prefix "$prefix" >/dev/null
    pc_dir=$(dirname "$(find "$prefix" -name doca-common.pc -print -quit)")
    log "libzcstore-doca installed: export PKG_CONFIG_PATH=$pc_dir"
    ;;
  *) sed -n '2,11p' "$0"; exit 2 ;;
esac
