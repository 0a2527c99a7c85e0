#!/usr/bin/env bash
# Runs benchmark suites: bench/run.sh BUILD_DIR [rdma|comch|target|pipeline|gga|nbd|all]
# Each suite is bench/run_<name>.sh BUILD_DIR; "all" runs every run_*.sh present.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:?usage: bench/run.sh BUILD_DIR [rdma|comch|target|pipeline|gga|nbd|all]}
WHICH=${2:-all}
BUILD=$(cd "$BUILD" && pwd)

suites=()
if [ "$WHICH" = all ]; then
  shopt -s nullglob
  for f in "$HERE"/run_*.sh; do
    name=$(basename "$f" .sh)
    suites+=("${name#run_}")
  done
else
  suites=("$WHICH")
fi
if [ ${#suites[@]} -eq 0 ]; then
  echo "bench/run.sh: no benchmark suites (bench/run_*.sh) found" >&2
  exit 1
fi

failed=0
for s in "${suites[@]}"; do
  script="$HERE/run_$s.sh"
  if [ ! -f "$script" ]; then
    echo "bench/run.sh: unknown suite '$s' (no $script)" >&2
    exit 2
  fi
  printf '\033[1m== bench %s\033[0m\n' "$s"
  bash "$script" "$BUILD" || { echo "bench/run.sh: suite $s failed" >&2; failed=1; }
done
exit $failed
