#!/usr/bin/env bash
# Runs the comch fast-path benchmark (two processes, pinned to cpus 0 and 1) and rewrites the
# "## comch" section of docs/BENCHMARKS.md with its results; other sections are left alone.
#   bench/run_comch.sh <build_dir> [zc_comch_bench flags...]
set -euo pipefail
# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
bench_setup comch "${1:-}"
shift
BIN="$BIN/zc_comch_bench"
cmake --build "$BUILD" --target zc_comch_bench >/dev/null
[ "$(nproc)" -ge 2 ] || bench_die "comch bench needs 2 cpus (it pins to cpus 0 and 1)"

TABLE=$WORK/table.md
echo "== comch: $BIN $*"
"$BIN" "$@" | tee "$TABLE"
bench_finish

{
  echo "## comch"
  echo
  echo "Command: \`scripts/dev.sh bench comch\` (release build, then"
  echo "\`bench/run_comch.sh <build_dir>$( [ $# -gt 0 ] && printf ' %s' "$@")\`), which runs"
  echo "\`zc_comch_bench$( [ $# -gt 0 ] && printf ' %s' "$@")\`."
  echo "Measured $(date -u +%Y-%m-%d) on $(bench_machine), load average"
  echo "$LOAD_START when it started."
  echo
  cat "$TABLE"
  echo
  cat <<'NOTES'
Two processes pinned to cpus 0 and 1: the parent runs a comch server, the child a client; each
has a consumer and a producer on a worker progress engine in the given poll mode. Rate: the
child sends 64-byte messages to the parent's consumer, which re-posts each buffer from its
receive callback (256 posted buffers); counted from the first to the last arrival. Latency: one
message in flight, echoed by the child; one-way = arrival time minus the child's send time (both
CLOCK_MONOTONIC on one host), RTT/2 beside it. The baseline is a bare SPSC ring of 64-byte slots
in a shared memfd (cached indices, no tasks, no posted buffers) between the same two cpus; its
event row adds an eventfd doorbell for a sleeping consumer (a full ring makes its producer yield).

Reading it: a comch send is one copy into a buffer the consumer posted, with the task and
progress-engine machinery around it, so it moves more cache lines per message than the bare ring
(the posted-buffer slot goes consumer -> producer -> consumer, plus the data line). In event mode
the latency rows are the cost of one sleep and one eventfd wake-up per message (the ring +
eventfd row pays the same without comch); a stream rarely sleeps. The two vCPUs of these VMs move
between host cores from minute to minute (the cross-core latency changes about threefold), so the
phases are interleaved and each figure is a median over rounds; compare rows of one run, and the
per-round ratio line rather than two rates.
NOTES
  echo
} >"$WORK/section.md"

bench_write_section comch "$WORK/section.md"
echo "== wrote the comch section of $DOC"
