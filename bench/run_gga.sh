#!/usr/bin/env bash
# bench/run_gga.sh BUILD_DIR: the gga offload benchmark (issue 9, item 7).
# In one run on one machine:
#   codec:  zc_accel_bench (bench/accel_bench.cpp): the per-block cost of LZ4 compress /
#           decompress and ISA-L encode / decode, raw (liblz4, ISA-L called directly) and through
#           zcstore's src/accel engines;
#   gga:    zcstore_initiator_comch --comch--> zcstore_comch_to_rdma_gga_offload --> three
#           zcstore_target_rdma (data 1, data 2, parity images of the sbc generator, image format
#           v2: every read checked against its crc32c): regular reads, reads with recovery on every
#           read (--trigger-recovery-read-every-n 1), writes (write_throughput_test) and write +
#           read-back transactions (read_write_data_validity_test);
#           incompressible data (random blocks, which v2 stores raw): reads of the generator's
#           images of a random file, and write + read-back transactions of that file;
#           degraded: reads and writes with the data 1 target SIGKILLed before the CPU window
#           (reads rebuild data 1's half through EC, writes go to data 2 and the parity);
#   zc:     the zero-copy pipeline (zcstore_comch_to_rdma_zero_copy, one target) at the same sizes;
#   rebuild: a blank data 1 target beside the generator's data 2 and parity images of
#           ZC_BENCH_REBUILD_MIB MiB, rebuilt by the service in the background at each of
#           ZC_BENCH_REBUILD_RATES MiB/s while the initiator reads at QD1; the rate is the blocks
#           checked over the time between the service's "rebuild of" and "rebuild done" lines.
# Every regular case at QD1 and QD64 for each logical block size (8 KiB and 16 KiB), the
# incompressible and degraded ones at 8 KiB only (ZC_BENCH_EXTRA_SIZES / _DEPTHS); one worker.
# A degraded run's IOPS and CPU per block are those of the degraded part of the run, from the
# initiator's once-a-second progress lines printed after the service said "serving degraded".
# The service's CPU time per block: utime + stime of the service process (/proc/PID/stat) over a
# window of ZC_BENCH_SECONDS inside the initiator's run (opened ZC_BENCH_WARM s after the
# initiator starts, so connecting and the control steps stay out), divided by the blocks served
# in it (the run's IOPS x the window). Compared with the raw codec cost of that block (crc32c
# included: v2 checks every block read against it), and with the zero-copy service's CPU per block
# of the same IO plus 1.5x that cost.
# Prints a table and rewrites the "## gga" section of docs/BENCHMARKS.md.
#
# Placement on 2 cores: the initiator and the service share cpu 0, the targets cpu 1, every
# process in event mode (two busy pollers on one core take turns per scheduler slice, see the
# pipeline section). Every process is pinned with taskset and bounded with timeout.
# Knobs: ZC_BENCH_SECONDS (the CPU window, default 2), ZC_BENCH_WARM (default 0.5),
# ZC_BENCH_SIZES ("8192 16384"), ZC_BENCH_DEPTHS ("1 64"), ZC_BENCH_EXTRA_SIZES ("8192") and
# ZC_BENCH_EXTRA_DEPTHS ("1 64") for the incompressible and degraded cases, ZC_BENCH_DEVICE (auto),
# ZC_BENCH_CLIENT_CPU / ZC_BENCH_SERVICE_CPU / ZC_BENCH_TARGET_CPU (0 / 0 / 1), ZC_BENCH_POLL
# (event), ZC_BENCH_ZC_TARGET_POLL (the zero-copy target's, alone on its core: busy), ZC_BENCH_PERF (1: a perf profile of the service in one extra read run; 0: none),
# ZC_BENCH_QUIET_WAIT / ZC_BENCH_QUIET_PCT (30 s / 15 %), ZC_BENCH_DOC, ZC_BENCH_NO_DOC=1.
set -euo pipefail
# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
bench_setup gga "${1:-}"
SECS=${ZC_BENCH_SECONDS:-2}
WARM=${ZC_BENCH_WARM:-0.5}
SIZES=${ZC_BENCH_SIZES:-"8192 16384"}
DEPTHS=${ZC_BENCH_DEPTHS:-"1 64"}
EXTRA_SIZES=${ZC_BENCH_EXTRA_SIZES:-8192}
EXTRA_DEPTHS=${ZC_BENCH_EXTRA_DEPTHS:-"1 64"}
DEV=${ZC_BENCH_DEVICE:-auto}
CCPU=${ZC_BENCH_CLIENT_CPU:-0}
SCPU=${ZC_BENCH_SERVICE_CPU:-0}
TCPU=${ZC_BENCH_TARGET_CPU:-1}
POLL=${ZC_BENCH_POLL:-event}
ZC_TPOLL=${ZC_BENCH_ZC_TARGET_POLL:-busy}
PERF=${ZC_BENCH_PERF:-1}
QUIET_WAIT=${ZC_BENCH_QUIET_WAIT:-30}
QUIET_PCT=${ZC_BENCH_QUIET_PCT:-15}
STORAGE=$((16 << 20)) # bytes of plain data behind every pipeline
REBUILD_MIB=${ZC_BENCH_REBUILD_MIB:-128}
REBUILD_RATES=${ZC_BENCH_REBUILD_RATES:-"64 100000"}
RUN_TIMEOUT=120
DEGRADED_WAIT=10 # s for the service to say "serving degraded" after the kill
DEGRADED_SETTLE=${ZC_BENCH_DEGRADED_SETTLE:-4} # s from "serving degraded" to a degraded window
# The cases, in the order they run for one block size and queue depth; the extra ones run only
# for ZC_BENCH_EXTRA_SIZES x ZC_BENCH_EXTRA_DEPTHS.
MAIN_TESTS="read recovery write readwrite"
EXTRA_TESTS="rawread rawreadwrite degread degwrite"
APPS=$BUILD/apps
GENERATOR=$APPS/gga_offload_sbc_generator/zcstore_gga_offload_sbc_generator
TARGET=$APPS/target_rdma/zcstore_target_rdma
GGA=$APPS/comch_to_rdma_gga_offload/zcstore_comch_to_rdma_gga_offload
ZERO_COPY=$APPS/comch_to_rdma_zero_copy/zcstore_comch_to_rdma_zero_copy
INITIATOR=$APPS/initiator_comch/zcstore_initiator_comch
CLK_TCK=$(getconf CLK_TCK)

bench_require_commands "util-linux, coreutils, jq" taskset timeout jq
for f in "$GENERATOR" "$TARGET" "$GGA" "$ZERO_COPY" "$INITIATOR" "$BIN/zc_accel_bench"; do
  [ -x "$f" ] || bench_die "$f is missing (build the apps and the bench targets)"
done

# in_list WORD "LIST": true when WORD is one of the words of LIST.
in_list() { case " $2 " in *" $1 "*) return 0 ;; *) return 1 ;; esac }
# union "LIST" "LIST": the numbers of both, sorted, once each.
union() { echo "$1 $2" | tr ' ' '\n' | grep . | sort -n -u | tr '\n' ' ' | sed 's/ $//'; }
ALL_SIZES=$(union "$SIZES" "$EXTRA_SIZES")
ALL_DEPTHS=$(union "$DEPTHS" "$EXTRA_DEPTHS")

FAILED=0
QUIET=$(bench_wait_quiet "$QUIET_WAIT" "$QUIET_PCT")
BUSY_START=$(bench_busy_others)
LOAD_QUIET=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the codec, raw and through the engines (Google Benchmark, cpu time per block).
echo "-- codec: zc_accel_bench on cpu $SCPU"
SIZE_LIST=$(echo "$ALL_SIZES" | tr ' ' ',')
if taskset -c "$SCPU" timeout "$RUN_TIMEOUT" "$BIN/zc_accel_bench" --sizes "$SIZE_LIST" \
  --benchmark_min_time=0.2 --benchmark_format=json >"$WORK/accel.json" 2>"$WORK/accel.err"; then
  jq -r '.benchmarks[] | (.name | split("/")) as $n |
    "result impl=codec kind=\($n[0]) op=\($n[1]) size=\($n[2]) ns=\(.cpu_time)"' "$WORK/accel.json" |
    tee -a "$RESULTS" | sed 's/^result /  /'
else
  echo "run_gga.sh: zc_accel_bench failed:" >&2
  cat "$WORK/accel.err" >&2
  FAILED=1
fi

# ---- the pipelines
# make_plain FILE BYTES: the compressible text zcstore_local gga stores (gga_launcher.cpp).
make_plain() {
  awk -v size="$2" 'BEGIN {
    for (i = 0; n < size; ++i) { l = sprintf("block storage line %d of the gga pipeline\n", (i * 7919) % 10007); printf "%s", l; n += length(l) }
  }' >"$1"
  truncate -s "$2" "$1"
}

# service_ticks PID: utime + stime of the whole process, in clock ticks (fields 14 and 15; the
# command name is cut off first, it may hold spaces).
service_ticks() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  echo $((${12} + ${13}))
}

# child_of PID: the one child of a `timeout` process (the program it runs).
child_of() {
  local c=""
  for _ in $(seq 100); do
    c=$(cat "/proc/$1/task/$1/children" 2>/dev/null || true)
    c=${c%% *}
    if [ -n "$c" ]; then
      echo "$c"
      return 0
    fi
    sleep 0.01
  done
  return 1
}

# kill_data_1 DIR TARGET_TIMEOUT_PID SERVICE_PID INITIATOR_PID: once the initiator runs its IO,
# SIGKILLs the data 1 target (the program under `timeout`, which cannot pass a SIGKILL on) and
# waits for the service to say it serves degraded. Prints how many progress lines the initiator
# had printed by then; false (with the logs) when a step did not happen.
kill_data_1() {
  local dir=$1 tpid=$2 spid=$3 ipid=$4 target
  if ! bench_wait_log "$dir/initiator.log" 'running [a-z_]+' 10 "$ipid" >/dev/null; then
    echo "run_gga.sh: $(basename "$dir"): the initiator did not start its run:" >&2
    tail -n 20 "$dir/initiator.log" >&2
    return 1
  fi
  if ! target=$(child_of "$tpid") || ! kill -KILL "$target" 2>/dev/null; then
    echo "run_gga.sh: $(basename "$dir"): the data 1 target was not there to kill" >&2
    return 1
  fi
  if ! bench_wait_log "$dir/service.log" 'serving degraded' "$DEGRADED_WAIT" "$spid" >/dev/null; then
    echo "run_gga.sh: $(basename "$dir"): the service did not go on degraded:" >&2
    tail -n 20 "$dir/service.log" >&2
    return 1
  fi
  progress_lines "$dir/initiator.log" | wc -l
}

# progress_lines LOG: the initiator's "[   t s] IOPS x MB/s y ops N" lines, as "t N x" (t:
# seconds since its run started, N: operations completed by then, x: the rate of the second
# before).
progress_lines() {
  sed -nE 's/^\[ *([0-9.]+)s\] IOPS ([0-9.]+) .* ops ([0-9]+)$/\1 \3 \2/p' "$1"
}

# run_started LOG: when the initiator's run started (its "running ..." line, logged just before
# its progress clock starts), in seconds since the epoch like EPOCHREALTIME. The log's time of day
# is local time.
run_started() {
  local hms midnight
  hms=$(sed -nE 's/^\[([0-9]{2}):([0-9]{2}):([0-9]{2}\.[0-9]+)\].* running [a-z_]+ on .*/\1 \2 \3/p' "$1" | head -n 1)
  [ -n "$hms" ] || return 1
  midnight=$(date -d 'today 00:00' +%s)
  echo "$hms" | awk -v m="$midnight" -v now="$EPOCHREALTIME" '{
    t = m + $1 * 3600 + $2 * 60 + $3; if (t > now + 60) t -= 86400; printf "%.6f", t }'
}

# service_stat LOG NAME: the number on the service's "| NAME: N" stats line (empty if none).
service_stat() {
  sed -nE "s/^\| $2: ([0-9]+)\$/\1/p" "$1" | tail -n 1
}

# target_ports TAG LOG:PID...: the ports the targets (each its log and its pid) listen on, in
# order, on one line; nothing (the log shown, every target killed) when one did not start.
target_ports() {
  local tag=$1 pair port pids=() out=()
  shift
  for pair in "$@"; do pids+=("${pair##*:}"); done
  for pair in "$@"; do
    if ! port=$(bench_wait_log "${pair%:*}" 'listening on port [0-9]+' 10 "${pair##*:}"); then
      echo "run_gga.sh: $tag: a target did not start:" >&2
      tail -n 20 "${pair%:*}" >&2
      kill "${pids[@]}" 2>/dev/null || true
      return 1
    fi
    out+=("${port##* }")
  done
  echo "${out[@]}"
}

# run_case PIPE TEST QD SIZE OPS TAG [WINDOW]: three (zc) or five (gga) fresh processes; prints
# the result line's fields (without "result") on success. WINDOW 0: no CPU window (pilot runs);
# "perf": a perf profile of the service instead of the CPU window. TEST: read, recovery, write,
# readwrite (text blocks); rawread, rawreadwrite (random blocks, stored raw); degread, degwrite
# (the data 1 target killed once the run is under way).
run_case() {
  local pipe=$1 test=$2 qd=$3 size=$4 ops=$5 tag=$6 window=${7:-1}
  local dir=$WORK/$tag
  mkdir -p "$dir"
  local chan="zc-bench-gga-$$-$tag" tpids=() ports=() logs=() args i
  local images=$WORK/images-$size plain=$WORK/plain-$size.bin degraded=0
  case $test in
    raw*)
      images=$WORK/images-random-$size
      plain=$WORK/random-$size.bin
      ;;
    deg*) degraded=1 ;;
  esac
  if [ "$pipe" = gga ]; then
    for i in 1 2 p; do logs+=("$dir/target-$i.log"); done
  else
    logs=("$dir/target.log")
  fi
  for i in "${!logs[@]}"; do
    if [ "$pipe" = gga ]; then
      args=(--binary-content "$images/data_$(basename "${logs[$i]}" .log | cut -d- -f2).sbc")
    else
      args=(--block-size "$size" --block-count $((STORAGE / size)) --binary-content "$plain")
    fi
    taskset -c "$TCPU" timeout "$RUN_TIMEOUT" "$TARGET" -d "$DEV" --cpu "$TCPU" --listen-port 0 \
      --poll-mode "$([ "$pipe" = gga ] && echo "$POLL" || echo "$ZC_TPOLL")" "${args[@]}" >"${logs[$i]}" 2>&1 &
    tpids+=($!)
  done
  local pairs=()
  for i in "${!logs[@]}"; do pairs+=("${logs[$i]}:${tpids[$i]}"); done
  read -r -a ports <<<"$(target_ports "$tag" "${pairs[@]}")"
  [ "${#ports[@]}" = "${#logs[@]}" ] || return 1
  local service_args
  if [ "$pipe" = gga ]; then
    local every=0
    [ "$test" = recovery ] && every=1
    service_args=("$GGA" --data-1-storage "127.0.0.1:${ports[0]}" --data-2-storage "127.0.0.1:${ports[1]}"
      --data-p-storage "127.0.0.1:${ports[2]}" --matrix-type vandermonde
      --trigger-recovery-read-every-n "$every" --gga-format v2)
  else
    service_args=("$ZERO_COPY" --storage-server "127.0.0.1:${ports[0]}")
  fi
  taskset -c "$SCPU" timeout "$RUN_TIMEOUT" "${service_args[@]}" -d "$DEV" -r auto --cpu "$SCPU" \
    --command-channel-name "$chan" --poll-mode "$POLL" >"$dir/service.log" 2>&1 &
  local spid=$!
  PIDS+=("$spid")
  if ! bench_wait_log "$dir/service.log" "listening on channel" 10 "$spid" >/dev/null; then
    echo "run_gga.sh: $tag: the service did not start:" >&2
    tail -n 20 "$dir/service.log" >&2
    kill "$spid" "${tpids[@]}" 2>/dev/null || true
    return 1
  fi
  local svc
  svc=$(child_of "$spid") || svc=""
  local strategy extra=()
  case $test in
    read | recovery | rawread | degread) strategy=read_throughput_test ;;
    write | degwrite) strategy=write_throughput_test ;;
    readwrite | rawreadwrite)
      strategy=read_write_data_validity_test
      extra=(--storage-plain-content "$plain")
      ;;
  esac
  # A degraded run counts its blocks from the progress lines (stderr, in the log).
  local progress=--no-progress
  [ $degraded = 0 ] || progress=--progress
  taskset -c "$CCPU" timeout "$RUN_TIMEOUT" "$INITIATOR" -d "$DEV" --cpu "$CCPU" \
    --execution-strategy "$strategy" --run-limit-operation-count "$ops" --transaction-count "$qd" \
    --command-channel-name "$chan" --poll-mode "$POLL" --stats-json "$dir/stats.json" "$progress" \
    "${extra[@]}" >"$dir/initiator.log" 2>&1 &
  local ipid=$! t1="" t2="" s1="" s2="" ok=1 before=""
  PIDS+=("$ipid")
  if [ $degraded = 1 ]; then
    before=$(kill_data_1 "$dir" "${tpids[0]}" "$spid" "$ipid") || ok=0
  fi
  if [ $ok = 1 ] && [ "$window" != 0 ] && [ -n "$svc" ]; then
    # A degraded run's window waits out the first seconds after the loss (the service settles
    # what was in flight to the lost target; a write run at QD1 ran at a tenth of its rate for
    # about 3 s then, see the "dip" in the table's notes).
    sleep "$([ $degraded = 1 ] && echo "$DEGRADED_SETTLE" || echo "$WARM")"
    t1=$EPOCHREALTIME
    s1=$(service_ticks "$svc") || s1=""
    if [ "$window" = perf ]; then
      perf record -F 999 --call-graph dwarf -p "$svc" -o "$WORK/perf.data" -- sleep "$SECS" >"$dir/perf.log" 2>&1 || true
    else
      sleep "$SECS"
    fi
    t2=$EPOCHREALTIME
    s2=$(service_ticks "$svc") || s2=""
    # The window counts only when the initiator was still running at its end.
    kill -0 "$ipid" 2>/dev/null || s2=""
  fi
  wait "$ipid" 2>/dev/null || ok=0
  # The service ends with its session and stops the targets; give them a moment, then make sure.
  for _ in $(seq 250); do
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.02
  done
  kill "$spid" "${tpids[@]}" 2>/dev/null || true
  wait "$spid" "${tpids[@]}" 2>/dev/null || true
  if [ $ok = 0 ] || [ ! -s "$dir/stats.json" ]; then
    echo "run_gga.sh: $tag: the initiator failed:" >&2
    tail -n 20 "$dir/initiator.log" "$dir/service.log" >&2
    return 1
  fi
  # The blocks per second the window saw: the whole run's; for a degraded run the operations
  # completed inside the window, interpolated between the progress lines around its edges (the
  # run's end the last point), over its length. dip: the lowest one-second rate after the loss.
  local rate dip=n/a start
  rate=$(jq -r '.operation_count / .duration_seconds' "$dir/stats.json")
  if [ $degraded = 1 ]; then
    rate=n/a
    if [ -n "$s2" ] && start=$(run_started "$dir/initiator.log"); then
      rate=$({
        progress_lines "$dir/initiator.log"
        jq -r '"\(.duration_seconds) \(.operation_count)"' "$dir/stats.json"
      } | awk -v e1="$(awk -v a="$t1" -v b="$start" 'BEGIN { print a - b }')" \
        -v e2="$(awk -v a="$t2" -v b="$start" 'BEGIN { print a - b }')" '
        function at(e) { return pn + (n - pn) * (e - pt) / (t - pt) }
        { t = $1; n = $2 }
        t > pt && n1 == "" && t >= e1 { n1 = at(e1) }
        t > pt && n2 == "" && t >= e2 { n2 = at(e2) }
        t > pt { pt = t; pn = n }
        END { if (n1 != "" && n2 != "" && e2 > e1) printf "%.1f", (n2 - n1) / (e2 - e1); else print "n/a" }')
    fi
    dip=$(progress_lines "$dir/initiator.log" | awk -v skip="$before" '
      NR > skip && (m == "" || $3 < m) { m = $3 } END { print (m == "" ? "n/a" : m) }')
  fi
  local cpu="n/a"
  if [ -n "$s1" ] && [ -n "$s2" ] && [ "$rate" != n/a ]; then
    # µs of service CPU per block: ticks / CLK_TCK over (blocks per second x window x blocks per
    # operation).
    cpu=$(awk -v s1="$s1" -v s2="$s2" -v t1="$t1" -v t2="$t2" -v hz="$CLK_TCK" -v rate="$rate" \
      -v per="$(case $test in *readwrite) echo 2 ;; *) echo 1 ;; esac)" \
      'BEGIN { print ((s2 - s1) / hz * 1e6) / (rate * (t2 - t1) * per) }')
  fi
  local raw_writes degraded_writes
  raw_writes=$(service_stat "$dir/service.log" "Raw writes")
  degraded_writes=$(service_stat "$dir/service.log" "Degraded writes")
  jq -r --arg p "$pipe" --arg t "$test" --arg q "$qd" --arg s "$size" --arg c "$cpu" --arg r "$rate" \
    --arg rw "${raw_writes:-n/a}" --arg dw "${degraded_writes:-n/a}" \
    --arg dip "$dip" \
    '"impl=\($p) test=\($t) qd=\($q) size=\($s) iops=\($r) dip_iops=\($dip) mean_us=\(.latency_us.mean) p50_us=\(.latency_us.p50) p99_us=\(.latency_us.p99) n=\(.operation_count) seconds=\(.duration_seconds) cpu_us=\($c) raw_writes=\($rw) degraded_writes=\($dw)"' \
    "$dir/stats.json"
}

# measure PIPE TEST QD SIZE: a pilot run sizes the measured one so that it outlasts the window. A
# degraded case has no pilot (its run must outlast the kill as well): it is sized from the
# healthy case's measured rate (read or write, same block size and depth), measured before it.
measure() {
  local pipe=$1 test=$2 qd=$3 size=$4 pilot rate ops line tag=$1-$2-$3-$4
  if [ "${test#deg}" != "$test" ]; then
    rate=$(awk -v t="${test#deg}" -v q="$qd" -v s="$size" '$2 == "impl=gga" && $3 == "test=" t &&
      $4 == "qd=" q && $5 == "size=" s { split($6, p, "="); r = p[2] } END { print r + 0 }' "$RESULTS")
    [ "${rate%.*}" -gt 0 ] 2>/dev/null || rate=$([ "$qd" = 1 ] && echo 10000 || echo 150000)
    # The kill, its notice, the settling and the window, with a margin.
    ops=$(awk -v r="$rate" -v w="$DEGRADED_SETTLE" -v s="$SECS" 'BEGIN { print int(r * (w + s + 2) * 1.3) }')
  else
    pilot=$([ "$qd" = 1 ] && echo 3000 || echo 40000)
    if ! line=$(run_case "$pipe" "$test" "$qd" "$size" "$pilot" "$tag-pilot" 0); then
      FAILED=1
      return
    fi
    rate=$(echo "$line" | sed -E 's/.* iops=([0-9.e+]+) .*/\1/')
    ops=$(awk -v r="$rate" -v w="$WARM" -v s="$SECS" 'BEGIN { n = int(r * (w + s) * 1.6 + r * 0.3); if (n < 2000) n = 2000; print n }')
  fi
  if ! line=$(run_case "$pipe" "$test" "$qd" "$size" "$ops" "$tag"); then
    FAILED=1
    return
  fi
  # A run that ended inside the window (a pilot slower than the run, as at QD1 while everything
  # warms up) has no CPU figure: once more, twice as long.
  if [ "${line#* cpu_us=n/a}" != "$line" ]; then
    echo "  (the run ended inside the CPU window: once more with $((ops * 2)) operations)"
    rm -rf "${WORK:?}/$tag"
    if ! line=$(run_case "$pipe" "$test" "$qd" "$size" $((ops * 2)) "$tag"); then
      FAILED=1
      return
    fi
  fi
  echo "result $line" | tee -a "$RESULTS" | sed 's/^result /  /'
  # The case measured what it says only if the service counted it so.
  case "$test ${line##* raw_writes=}" in
    "rawreadwrite 0 "* | "rawreadwrite n/a "* | "degwrite "*" degraded_writes=0" | "degwrite "*" degraded_writes=n/a")
      echo "run_gga.sh: $tag: the service's stats do not show the case (raw / degraded writes: ${line##* raw_writes=})" >&2
      FAILED=1
      ;;
  esac
}

# make_images NAME PLAIN SIZE: the generator's three v2 images of PLAIN in $WORK/NAME.
make_images() {
  mkdir -p "$WORK/$1"
  if ! taskset -c "$CCPU" timeout "$RUN_TIMEOUT" "$GENERATOR" --original-input-data "$2" \
    --block-size "$3" --matrix-type vandermonde --format v2 --data-1 "$WORK/$1/data_1.sbc" \
    --data-2 "$WORK/$1/data_2.sbc" --data-p "$WORK/$1/data_p.sbc" >"$WORK/generator-$1.log" 2>&1; then
    echo "run_gga.sh: the generator failed for $2 in $3-byte blocks:" >&2
    cat "$WORK/generator-$1.log" >&2
    return 1
  fi
}

# planned TEST SIZE QD: true when the case is part of this run.
planned() {
  if in_list "$1" "$MAIN_TESTS zc-read zc-write" && in_list "$2" "$SIZES" && in_list "$3" "$DEPTHS"; then
    return 0
  fi
  in_list "$1" "$EXTRA_TESTS zc-read zc-write" && in_list "$2" "$EXTRA_SIZES" && in_list "$3" "$EXTRA_DEPTHS"
}

what_of() {
  case $1 in
    rawread) echo "read of random blocks (stored raw)" ;;
    rawreadwrite) echo "write + read-back of random blocks (stored raw)" ;;
    degread) echo "read, data 1 target killed" ;;
    degwrite) echo "write, data 1 target killed" ;;
    *) echo "$1" ;;
  esac
}

for size in $ALL_SIZES; do
  make_plain "$WORK/plain-$size.bin" "$STORAGE"
  make_images "images-$size" "$WORK/plain-$size.bin" "$size" || { FAILED=1; continue; }
  if in_list "$size" "$EXTRA_SIZES"; then
    head -c "$STORAGE" /dev/urandom >"$WORK/random-$size.bin"
    make_images "images-random-$size" "$WORK/random-$size.bin" "$size" || FAILED=1
  fi
  for qd in $ALL_DEPTHS; do
    for test in $MAIN_TESTS $EXTRA_TESTS; do
      planned "$test" "$size" "$qd" || continue
      echo "-- gga $(what_of "$test"), $size-byte blocks, QD$qd"
      measure gga "$test" "$qd" "$size"
    done
    for test in read write; do
      planned "zc-$test" "$size" "$qd" || continue
      echo "-- zero-copy $test, $size-byte blocks, QD$qd"
      measure zc "$test" "$qd" "$size"
    done
  done
done

# log_seconds LOG RE: the time of day (s since midnight) of the first line of LOG matching RE.
log_seconds() {
  sed -nE "/$2/{s/^\[([0-9]{2}):([0-9]{2}):([0-9]{2}\.[0-9]+)\].*/\1 \2 \3/p;q}" "$1" |
    awk '{ printf "%.6f", $1 * 3600 + $2 * 60 + $3 }'
}

# run_rebuild SIZE RATE TAG: a blank data 1 target (the geometry of the data 2 image) beside the
# data 2 and parity images in $WORK/images-rebuild-SIZE; the service rebuilds data 1 at RATE
# MiB/s while the initiator reads at QD1. Prints the result line's fields on success.
run_rebuild() {
  local size=$1 rate=$2 tag=$3
  local dir=$WORK/$tag images=$WORK/images-rebuild-$1 chan="zc-bench-gga-$$-$3" tpids=() ports=()
  mkdir -p "$dir"
  local half=$((size / 2)) count
  count=$(od -An -tu4 --endian=big -j12 -N4 "$images/data_2.sbc" | tr -d ' ')
  local i args
  for i in 1 2 p; do
    if [ "$i" = 1 ]; then
      args=(--block-size "$half" --block-count "$count")
    else
      args=(--binary-content "$images/data_$i.sbc")
    fi
    taskset -c "$TCPU" timeout "$RUN_TIMEOUT" "$TARGET" -d "$DEV" --cpu "$TCPU" --listen-port 0 \
      --poll-mode "$POLL" "${args[@]}" >"$dir/target-$i.log" 2>&1 &
    tpids+=($!)
  done
  read -r -a ports <<<"$(target_ports "$tag" "$dir/target-1.log:${tpids[0]}" \
    "$dir/target-2.log:${tpids[1]}" "$dir/target-p.log:${tpids[2]}")"
  [ "${#ports[@]}" = 3 ] || return 1
  taskset -c "$SCPU" timeout "$RUN_TIMEOUT" "$GGA" --data-1-storage "127.0.0.1:${ports[0]}" \
    --data-2-storage "127.0.0.1:${ports[1]}" --data-p-storage "127.0.0.1:${ports[2]}" \
    --matrix-type vandermonde --gga-format v2 --rebuild-rate "$rate" -d "$DEV" -r auto \
    --cpu "$SCPU" --command-channel-name "$chan" --poll-mode "$POLL" >"$dir/service.log" 2>&1 &
  local spid=$!
  PIDS+=("$spid")
  if ! bench_wait_log "$dir/service.log" "listening on channel" 10 "$spid" >/dev/null; then
    echo "run_gga.sh: $tag: the service did not start:" >&2
    tail -n 20 "$dir/service.log" >&2
    kill "$spid" "${tpids[@]}" 2>/dev/null || true
    return 1
  fi
  taskset -c "$CCPU" timeout "$RUN_TIMEOUT" "$INITIATOR" -d "$DEV" --cpu "$CCPU" \
    --execution-strategy read_throughput_test --run-limit-operation-count 1000000000 \
    --transaction-count 1 --command-channel-name "$chan" --poll-mode "$POLL" --no-progress \
    >"$dir/initiator.log" 2>&1 &
  local ipid=$! ok=1
  PIDS+=("$ipid")
  bench_wait_log "$dir/service.log" 'rebuild done: [0-9]+ blocks checked, [0-9]+ slots' \
    $((RUN_TIMEOUT - 10)) "$spid" >/dev/null || ok=0
  kill -INT "$(child_of "$ipid")" 2>/dev/null || true
  wait "$ipid" 2>/dev/null || true
  for _ in $(seq 250); do
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.02
  done
  kill "$spid" "${tpids[@]}" 2>/dev/null || true
  wait "$spid" "${tpids[@]}" 2>/dev/null || true
  local begin end done_line
  begin=$(log_seconds "$dir/service.log" 'rebuild of [0-9]+ blocks')
  end=$(log_seconds "$dir/service.log" 'rebuild done')
  done_line=$(grep -m1 -oE 'rebuild done: [0-9]+ blocks checked, [0-9]+ slots' "$dir/service.log" || true)
  if [ $ok = 0 ] || [ -z "$begin" ] || [ -z "$end" ] || [ -z "$done_line" ]; then
    echo "run_gga.sh: $tag: the rebuild did not finish:" >&2
    tail -n 20 "$dir/service.log" >&2
    return 1
  fi
  local blocks rewritten
  blocks=$(echo "$done_line" | awk '{ print $3 }')
  rewritten=$(echo "$done_line" | awk '{ print $6 }')
  awk -v b="$begin" -v e="$end" -v n="$blocks" -v s="$size" -v r="$rate" -v w="$rewritten" 'BEGIN {
    t = e - b; if (t < 0) t += 86400
    printf "impl=rebuild size=%d rate_set=%d blocks=%d rewritten=%d seconds=%.3f mib_s=%.1f\n", s, r, n, w, t, (t > 0 ? n * s / 1048576 / t : 0) }'
}

for size in $EXTRA_SIZES; do
  make_plain "$WORK/plain-rebuild-$size.bin" $((REBUILD_MIB << 20))
  make_images "images-rebuild-$size" "$WORK/plain-rebuild-$size.bin" "$size" || { FAILED=1; continue; }
  for rate in $REBUILD_RATES; do
    echo "-- gga rebuild of a blank data 1 target, $size-byte blocks, --rebuild-rate $rate"
    if line=$(run_rebuild "$size" "$rate" "rebuild-$size-$rate"); then
      echo "result $line" | tee -a "$RESULTS" | sed 's/^result /  /'
    else
      FAILED=1
    fi
  done
done

# ---- where the service's time goes: one more gga read run under perf (not a measured one).
PROFILE=$WORK/profile.md
: >"$PROFILE"
PSIZE=${SIZES%% *}
if [ "$PERF" = 1 ] && command -v perf >/dev/null; then
  echo "-- perf: gga read, $PSIZE-byte blocks, QD64"
  # Enough IOs to outlast the profile: the measured run's rate, with a margin.
  ops=$(awk -v s="$PSIZE" -v w="$WARM" -v d="$SECS" '$2 == "impl=gga" && $3 == "test=read" && $4 == "qd=64" && $5 == "size=" s {
    split($6, p, "="); r = p[2] } END { print int((r > 0 ? r : 200000) * (w + d + 1) * 1.5) }' "$RESULTS")
  if run_case gga read 64 "$PSIZE" "$ops" perf-read perf >/dev/null && [ -s "$WORK/perf.data" ]; then
    perf report -i "$WORK/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null |
      awk '$1 ~ /%$/ && $1 + 0 >= 0.5 { printf "%s%s %s", sep, $2, $1; sep = ", " }' >"$WORK/perf-dso.txt" || true
    # Inclusive shares (the frame and what it calls) of the frames that tell where a block's time
    # goes; the list is fixed, a frame that did not show is left out.
    perf report -i "$WORK/perf.data" --children --sort sym --stdio -g none 2>/dev/null >"$WORK/perf-children.txt" || true
    {
      echo "| inclusive share of the service's cpu samples | frame | what it is |"
      echo "|---|---|---|"
      while IFS='|' read -r sym what; do
        awk -v s="$sym" -v w="$what" '$1 ~ /%$/ && $NF == s { printf "| %s | `%s` | %s |\n", $1, s, w; exit }' "$WORK/perf-children.txt"
      done <<'FRAMES'
zc::comch::producer::submit|the reply to the initiator over comch, eventfd doorbell included
__GI___libc_write|the comch doorbell: an eventfd write that wakes the sleeping initiator
__libc_sendto|UCX shared memory's wake-up of a sleeping target (a Unix datagram per signalled send)
ucp_am_send_nbx|UCX sends to the targets (storage requests)
ucp_worker_progress|UCX progress: the targets' replies and their data
zc::rdma::context::on_write|the targets' rdma writes landing in the service's memory (a copy, UCX's emulation of RMA)
zc::accel::lz4_engine::decompress|the LZ4 decompression of each block
zc::core::progress_engine::wait|sleeping in epoll and waking up
schedule|the kernel's scheduler: context switches between the service and the initiator on their shared core
FRAMES
    } >"$PROFILE"
  fi
fi

bench_finish
BUSY_END=$(bench_busy_others)

# ---- the tables
TABLE=$WORK/table.md
VERDICT=$WORK/verdict.md
awk -v table="$TABLE" -v verdict="$VERDICT" -v sizes="$ALL_SIZES" -v depths="$ALL_DEPTHS" \
  -v main_sizes="$SIZES" -v main_depths="$DEPTHS" -v extra_sizes="$EXTRA_SIZES" \
  -v extra_depths="$EXTRA_DEPTHS" -v main_tests="$MAIN_TESTS" -v extra_tests="$EXTRA_TESTS" '
  $1 == "result" {
    delete kv
    for (i = 2; i <= NF; ++i) { split($i, p, "="); kv[p[1]] = p[2] }
    if (kv["impl"] == "codec") { ns[kv["kind"] "|" kv["op"] "|" kv["size"]] = kv["ns"]; next }
    k = kv["impl"] "|" kv["test"] "|" kv["qd"] "|" kv["size"]
    for (f in kv) val[k "|" f] = kv[f]
    have[k] = 1
  }
  function get(k, f) { return (k in have) && ((k "|" f) in val) ? val[k "|" f] : "" }
  function us(kind, op, size) { return ((kind "|" op "|" size) in ns) ? ns[kind "|" op "|" size] / 1e3 : "" }
  function in_list(w, list) { return index(" " list " ", " " w " ") > 0 }
  function planned(test, size, qd) {
    if (in_list(test, main_tests)) return in_list(size, main_sizes) && in_list(qd, main_depths)
    return in_list(test, extra_tests) && in_list(size, extra_sizes) && in_list(qd, extra_depths)
  }
  # The sum of the raw codec costs named in `ops` (space-separated, "op" or "op/2"), in µs; ""
  # when one was not measured.
  function sum(ops, size,   n, o, i, t, half, x) {
    n = split(ops, o, " ")
    t = 0
    for (i = 1; i <= n; ++i) {
      half = sub(/\/2$/, "", o[i])
      x = us("raw", o[i], size)
      if (x == "") return ""
      t += half ? x / 2 : x
    }
    return t
  }
  # The raw codec cost of one block of a case (format v2: every block written gets a crc32c of its
  # plain bytes, every block read is checked against it), in µs ("" when not measured).
  function raw(test, size) {
    if (test == "read") return sum("lz4_decompress crc32c", size)
    if (test == "recovery" || test == "degread") return sum("ec_decode lz4_decompress crc32c", size)
    if (test == "write" || test == "degwrite") return sum("lz4_compress_zeros crc32c ec_encode", size)
    if (test == "readwrite") return sum("lz4_compress/2 ec_encode/2 lz4_decompress/2 crc32c", size)
    if (test == "rawread") return sum("memcpy crc32c", size)
    if (test == "rawreadwrite") return sum("lz4_compress_random/2 ec_encode/2 memcpy/2 crc32c", size)
    return ""
  }
  # The zero-copy service CPU per block of the same IO, block size and depth ("" if none).
  function zc_cpu(test, size, qd,   r, w) {
    r = get("zc|read|" qd "|" size, "cpu_us"); w = get("zc|write|" qd "|" size, "cpu_us")
    if (r == "n/a") r = ""
    if (w == "n/a") w = ""
    if (test ~ /readwrite$/) return (r == "" || w == "") ? "" : (r + w) / 2
    if (test ~ /write$/) return w
    return r
  }
  function iops(x) {
    if (x == "" || x == "n/a") return "n/a"
    if (x >= 1e6) return sprintf("%.2fM", x / 1e6)
    return sprintf("%.1fk", x / 1e3)
  }
  function num(x, fmt) { return (x == "" || x == "n/a") ? "n/a" : sprintf(fmt, x) }
  END {
    what["read"] = "read"
    what["recovery"] = "read, recovery on every read"
    what["write"] = "write (zero blocks)"
    what["readwrite"] = "write + read-back (text blocks)"
    what["rawread"] = "read (random blocks, stored raw)"
    what["rawreadwrite"] = "write + read-back (random blocks, stored raw)"
    what["degread"] = "read, degraded (data 1 target killed)"
    what["degwrite"] = "write (zero blocks), degraded (data 1 target killed)"
    base["read"] = "decompress + crc32c"
    base["recovery"] = "EC decode + decompress + crc32c"
    base["write"] = "compress (zeros) + crc32c + EC encode"
    base["readwrite"] = "(compress + crc32c + EC encode + decompress + crc32c) / 2"
    base["rawread"] = "copy + crc32c"
    base["rawreadwrite"] = "(compress attempt (random) + crc32c + EC encode + copy + crc32c) / 2"
    base["degread"] = "EC decode + decompress + crc32c"
    base["degwrite"] = "compress (zeros) + crc32c + EC encode"
    print "| pipeline | IO | block | QD | IOPS | mean µs | p50 µs | p99 µs | service CPU µs / block | raw codec µs / block | service / raw (aim ≤ 1.5×) | zero-copy CPU + 1.5 × raw µs / block (service ≤ it?) |" > table
    print "|---|---|---|---|---|---|---|---|---|---|---|---|" >> table
    ns_ = split(sizes, S, " "); nd = split(depths, D, " ")
    nt = split(main_tests " " extra_tests, T, " ")
    for (a = 1; a <= ns_; ++a) for (b = 1; b <= nd; ++b) {
      for (t = 1; t <= nt; ++t) {
        if (!planned(T[t], S[a], D[b])) continue
        k = "gga|" T[t] "|" D[b] "|" S[a]
        r = raw(T[t], S[a]); c = get(k, "cpu_us")
        if (!(k in have)) { printf "| gga | %s | %d KiB | %s | not run | | | | | | | |\n", what[T[t]], S[a] / 1024, D[b] >> table; continue }
        label = sprintf("%s, %d KiB, QD%s", what[T[t]], S[a] / 1024, D[b])
        ratio = (r == "" || c == "" || c == "n/a" || r == 0) ? "n/a" : sprintf("%.1f× %s", c / r, c / r <= 1.5 ? "(met)" : "(**missed**)")
        if (ratio != "n/a") {
          ++cases; if (c / r <= 1.5) ++met
          if (lo == "" || c / r < lo) { lo = c / r; lo_case = label }
          if (hi == "" || c / r > hi) { hi = c / r; hi_case = label }
        }
        # The aim stated against the zero-copy service: its CPU per block plus 1.5x the codec.
        z = zc_cpu(T[t], S[a], D[b])
        bound = (r == "" || z == "") ? "" : z + 1.5 * r
        zaim = (bound == "" || c == "" || c == "n/a") ? "n/a" : sprintf("%.2f %s", bound, c <= bound ? "(met)" : "(**missed**)")
        if (zaim != "n/a") { ++zcases; if (c <= bound) ++zmet; else zmissed = zmissed (zmissed == "" ? "" : "; ") label }
        d = get(k, "dip_iops")
        if (d != "" && d != "n/a")
          dips = dips (dips == "" ? "" : "; ") sprintf("%s, %d KiB, QD%s: %s (window: %s)", what[T[t]], S[a] / 1024, D[b], iops(d), iops(get(k, "iops")))
        printf "| gga | %s | %d KiB | %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s |\n", what[T[t]], S[a] / 1024, D[b],
          iops(get(k, "iops")), num(get(k, "mean_us"), "%.1f"), num(get(k, "p50_us"), "%.0f"), num(get(k, "p99_us"), "%.0f"),
          num(c, "%.2f"), num(r, "%.2f"), base[T[t]], ratio, zaim >> table
      }
      for (t = 1; t <= 2; ++t) {
        tt = t == 1 ? "read" : "write"
        if (!planned(T[1], S[a], D[b]) && !planned(T[nt], S[a], D[b])) continue
        k = "zc|" tt "|" D[b] "|" S[a]
        if (!(k in have)) { printf "| zero-copy | %s | %d KiB | %s | not run | | | | | | | |\n", tt, S[a] / 1024, D[b] >> table; continue }
        printf "| zero-copy | %s | %d KiB | %s | %s | %s | %s | %s | %s | — | — | — |\n", tt, S[a] / 1024, D[b],
          iops(get(k, "iops")), num(get(k, "mean_us"), "%.1f"), num(get(k, "p50_us"), "%.0f"), num(get(k, "p99_us"), "%.0f"),
          num(get(k, "cpu_us"), "%.2f") >> table
      }
    }
    if (cases > 0)
      printf "**The aim (service CPU per block ≤ 1.5× the raw codec cost of the block) is %s**: met in %d of %d cases; the ratio runs from %.1f× (%s) to %.1f× (%s).\n", \
        met == cases ? "met" : "not met", met, cases, lo, lo_case, hi, hi_case > verdict
    else
      print "**The aim could not be judged**: no case has both figures." > verdict
    if (zcases > 0)
      printf "\n**The aim against the zero-copy service (service CPU per block ≤ the zero-copy service CPU per block of the same IO, block size and depth in this run + 1.5× the raw codec cost; a write + read-back against the mean of its read and write) is %s**: met in %d of %d cases%s.\n", \
        zmet == zcases ? "met" : "not met", zmet, zcases, zmissed == "" ? "" : "; missed: " zmissed >> verdict
    if (dips != "")
      printf "\nThe lowest one-second IOPS after the kill (initiator progress lines), against the window'"'"'s: %s.\n", dips >> verdict
    print "" >> table
    print "| codec operation (one block) | block | raw liblz4 / ISA-L µs | zcstore src/accel engine µs | engine / raw |" >> table
    print "|---|---|---|---|---|" >> table
    no = split("lz4_decompress lz4_compress lz4_compress_zeros lz4_compress_random ec_encode ec_decode crc32c memcpy", O, " ")
    name["lz4_decompress"] = "LZ4 decompress (text block)"
    name["lz4_compress"] = "LZ4 compress (text block)"
    name["lz4_compress_zeros"] = "LZ4 compress (zero block)"
    name["lz4_compress_random"] = "LZ4 compress (random block: does not fit, stored raw)"
    name["ec_encode"] = "EC 2+1 encode (two B/2 halves → parity)"
    name["ec_decode"] = "EC 2+1 decode (one half from the other and parity)"
    name["crc32c"] = "crc32c of the plain block (raw: ISA-L crc32_iscsi; zcstore: core::crc32c)"
    name["memcpy"] = "memcpy (zcstore: the dma engine; a raw block copied out)"
    for (a = 1; a <= ns_; ++a) for (o = 1; o <= no; ++o) {
      zop = O[o] == "memcpy" ? "dma_memcpy" : O[o]
      r = us("raw", O[o], S[a]); z = us("zc", zop, S[a])
      printf "| %s | %d KiB | %s | %s | %s |\n", name[O[o]], S[a] / 1024, num(r, "%.3f"), num(z, "%.3f"),
        (r == "" || z == "" || r == 0) ? "n/a" : sprintf("%.2f×", z / r) >> table
    }
  }
' "$RESULTS"

{
  echo
  echo "| rebuild of a blank data 1 target (host reading at QD1 alongside) | block | \`--rebuild-rate\` MiB/s | blocks checked | slots rewritten (rebuild and host reads) | seconds | MiB/s of blocks checked |"
  echo "|---|---|---|---|---|---|---|"
  awk '$1 == "result" && $2 == "impl=rebuild" {
    delete kv
    for (i = 2; i <= NF; ++i) { split($i, p, "="); kv[p[1]] = p[2] }
    printf "| %d MiB volume | %d KiB | %s | %d | %d | %.2f | %.1f |\n", kv["blocks"] * kv["size"] / 1048576, kv["size"] / 1024, (kv["rate_set"] >= 100000 ? kv["rate_set"] " (no pacing in effect)" : kv["rate_set"]), kv["blocks"], kv["rewritten"], kv["seconds"], kv["mib_s"]
  }' "$RESULTS"
} >>"$TABLE"

if [ "${ZC_BENCH_NO_DOC:-0}" = 1 ]; then
  echo
  cat "$TABLE" "$VERDICT"
  [ -s "$PROFILE" ] && { echo; cat "$PROFILE"; }
  echo "(${ELAPSED} s; load average $LOAD_START → $LOAD_END; ZC_BENCH_NO_DOC=1: $DOC left alone)"
  exit $FAILED
fi

NOTE=$(bench_notes "$BUSY_START" "$BUSY_END")

# The standing analysis of where the service's time goes (from profiles and per-thread CPU
# readings made when this was written); the tables above it are regenerated, it is not.
analysis() {
  cat <<'ANALYSIS'
### Why the aim is missed (analysis)

Standing notes from `perf` profiles of the service and per-thread readings of /proc/PID/task/*/stat made when this benchmark was written (2026-11-23, same machine, same placement). The tables above are regenerated on every run; these notes are not.

- **The codecs are not where the time goes.** LZ4-decompressing an 8 KiB text block costs 0.55-0.85 µs, rebuilding a 4 KiB half with ISA-L 0.12-0.25 µs, and zcstore's engines run them within noise of the raw calls (0.7-1.5× in the codec table, mostly 1.0-1.2×). The service spends several µs of CPU per block at QD64 and 65-165 µs at QD1. At QD64 the zero-copy service, which runs no codec at all, spends about as much per block (its rows): the cost is the IO's messaging, not its data transformation. Per block the gga service receives a comch request, sends two storage requests over UCX (data 1 and data 2; a recovery read: one data half and the parity), receives two replies and two rdma writes of B/2 bytes, and sends a comch reply.
- **Wake-ups.** Every gga process sleeps in epoll when it has nothing to do (event mode, because five processes share two cores). A message to a sleeping peer costs a system call to wake it, and on a shared core the woken peer usually preempts the sender at once: the comch reply rings the initiator's eventfd when the initiator sleeps (`zc::comch::producer::submit`, 25-30 % of the service's samples at QD64 with the switch it triggers); UCX shared memory wakes a sleeping target with a Unix datagram per signalled send (`sendto`, 13-15 %); the scheduler (`schedule`, about 20 %) and `epoll_wait` take most of the rest of the kernel's half of the samples.
- **QD1 is all wake-ups.** Nothing overlaps: each IO puts the service to sleep and wakes it several times. At about 10k IOPS its worker thread was 85 % busy, 15 % in user space and 70 % in the kernel, and cpu 0 (service + initiator) was saturated. That is the price of sleeping and waking on these VMs, about two orders of magnitude over the codec. The zero-copy rows show the same service at 11-13 µs per block at QD1 against a target that busy-polls alone on its core and never needs waking: the three gga targets share one core and must sleep.
- **One more copy than on hardware.** UCX emulates RDMA on this memory with active messages (reference/UCX_MEASURED.md §2), so the targets' writes into the service land through `zc::rdma::context::on_write`, a memcpy (10-12 % at QD64).
- **What would move the ratio**, none of it measured here: cores to busy-poll on (no doorbells, no context switches; this machine has two for five processes), a hardware RDMA transport (no copy, no target wake-ups), and fewer wake-ups per IO on the comch side. The codec through zcstore's engines already costs what the raw calls cost, so the aim is about the per-IO overhead around it, which at QD64 is 3-9 times the codec cost of a block.
- **Format v2 and the rows added with it** (2026-11-27, same machine and placement): the crc32c v2 adds costs about 0.18 µs per 8 KiB block and 0.6 µs per 16 KiB block, under a tenth of the service's CPU per block at QD64. Reads of random blocks stored raw (a copy instead of a decompression) cost the service no more CPU per block than reads of text blocks, degraded reads (data 1's half rebuilt every time) no more than reads with recovery on every read, and degraded writes (two targets) less than healthy ones (three): these rows miss the codec aim for the same reason as the others, the IO's messaging and wake-ups. In three of four runs a degraded write run at QD1 fell to a third of its rate or less for about 3 s after the kill, when the service had retired the slot of the IO in flight to the lost target; the degraded rows' window opens after that (the lowest rate is listed under the table).
ANALYSIS
}
# kib_list "8192 16384": "8 KiB and 16 KiB"; and_list "1 64": "1 and 64".
kib_list() { echo "$1" | awk '{ for (i = 1; i <= NF; ++i) printf "%s%d KiB", (i == 1 ? "" : i == NF ? " and " : ", "), $i / 1024 }'; }
and_list() { echo "$1" | awk '{ for (i = 1; i <= NF; ++i) printf "%s%s", (i == 1 ? "" : i == NF ? " and " : ", "), $i }'; }
SECTION=$WORK/section.md
{
  echo "## gga"
  echo
  echo "The gga offload pipeline (initiator → comch → gga offload service: LZ4 + 2+1 erasure coding → three RAM targets, image format v2) beside the raw per-block cost of its codecs and beside the zero-copy pipeline, measured in the same run on the same machine: $(kib_list "$SIZES") logical blocks, queue depth $(and_list "$DEPTHS"), one worker; incompressible data (random blocks, stored raw) and one target lost (degraded) at $(kib_list "$EXTRA_SIZES"), queue depth $(and_list "$EXTRA_DEPTHS"). Generated by \`bench/run_gga.sh\`; do not edit by hand."
  echo
  echo "- Command: \`scripts/dev.sh bench gga\` (builds build/release, then \`bench/run.sh build/release gga\` → \`$INVOCATION\`), ${ELAPSED} s in total"
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(bench_machine); load average $LOAD_START at start (after waiting up to ${QUIET_WAIT} s for at most ${QUIET_PCT}% busy: it was ${QUIET}%, load $LOAD_QUIET), $LOAD_END at end"
  echo "- Placement: initiator on cpu $CCPU and service on cpu $SCPU, the targets (three for gga, one for zero-copy) on cpu $TCPU; every process $(bench_poll_why "$POLL") but the zero-copy target, alone on its core, $(bench_poll_why "$ZC_TPOLL") as in the pipeline section (in event mode its IOs stalled for milliseconds at a time, p99 10-50 ms); all pinned with \`taskset\` and bounded with \`timeout $RUN_TIMEOUT\`. Event mode because five processes share two cores: a busy-polling process would hold its core for whole scheduler slices while the next step of the IO waits on the same core (see the pipeline section), and a busy service would be charged CPU time for spinning. UCX device \`$DEV\`; UCX_MM_ERROR_HANDLING=y, UCX_KEEPALIVE_INTERVAL=1s everywhere."
  echo "- Data: $((STORAGE >> 20)) MiB of the compressible text \`zcstore_local gga\` makes (\"block storage line N of the gga pipeline\", an 8 KiB block compresses to about 1.2 KiB), turned into three images by \`zcstore_gga_offload_sbc_generator --block-size B --matrix-type vandermonde --format v2\`; the zero-copy target serves the same plain file (\`--binary-content\`). write_throughput_test writes the initiator's memory as it is, zero blocks; read_write_data_validity_test writes each text block, reads it back and compares it, so its IO is a write and a read. **Incompressible data**: $((STORAGE >> 20)) MiB from /dev/urandom through the same generator, which stores every block raw (its LZ4 image does not fit); its rows read those images (read_throughput_test) and write each random block and read it back (read_write_data_validity_test with \`--storage-plain-content\` the random file: the service tries LZ4, stores the block raw, and the read-back is compared byte for byte; the service counted every write of the run in \`| Raw writes:\`)."
  echo "- **Reads are verified** (image format v2, \`--gga-format v2\`, the default): every half carries a 16-byte entry (generation, crc32c of the plain block, lz4 or raw), and every block read is checked against its crc32c before it is answered (a mismatch falls back to the other pair). The service CPU per block of every gga row includes that check, and the raw codec baselines include a crc32c of the block for each read and each write."
  echo "- **Degraded** rows: the data 1 target is killed (SIGKILL) once the initiator prints \"running ...\" (the service's data path must have started: a target lost before it ends the session); the service notices within a fraction of a second and logs \"serving degraded\", and the run goes on without an error: reads rebuild data 1's half from data 2 and the parity (EC decode), writes go to data 2 and the parity (\`| Degraded writes:\`). The CPU window opens ${DEGRADED_SETTLE} s after \"serving degraded\", to measure the steady degraded state (right after the loss the service settles what was in flight to the lost target and retires that IO's slot; the lowest one-second rate after the kill is listed below the table). The run has no pilot (it is sized from the healthy case's rate) and runs the initiator with \`--progress\`: the IOPS of a degraded row, and the blocks behind its CPU per block, are the operations completed inside the window (interpolated between the once-a-second progress lines around its edges) over its length, while mean / p50 / p99 cover the whole run, the kill included."
  echo "- **Rebuild rate** (the table after the main one): the generator's images of $REBUILD_MIB MiB of the same text in $(kib_list "$EXTRA_SIZES") blocks, with the data 1 target replaced by a blank one of the same geometry (\`--block-size B/2 --block-count\` of the data 2 image); the service labels it and rebuilds every block's data 1 slot in the background (\`--rebuild-rate\` R: at most R MiB/s of blocks checked; $(and_list "$REBUILD_RATES")), while the initiator reads at QD1 (read_throughput_test, stopped once the service logs \"rebuild done\"). Seconds: between the service's \"rebuild of N blocks\" and \"rebuild done\" log lines; MiB/s: blocks checked × B over those seconds; slots rewritten: the service's count over that time, the repairs of the host's reads of blank slots included. The rebuild runs one block at a time in one transaction per worker (one worker here), so its rate is bounded by one block's round trips (its three slots read, then the blank one rewritten), whatever \`--rebuild-rate\` allows."
  echo "- Processes per case (fresh each time; PORTn from the targets' \"listening on port\" lines, NAME a fresh channel name): targets \`zcstore_target_rdma -d $DEV --cpu $TCPU --listen-port 0 --poll-mode $POLL --binary-content data_1.sbc|data_2.sbc|data_p.sbc\`; service \`zcstore_comch_to_rdma_gga_offload --data-1-storage 127.0.0.1:PORT1 --data-2-storage 127.0.0.1:PORT2 --data-p-storage 127.0.0.1:PORT3 --matrix-type vandermonde --trigger-recovery-read-every-n 0|1 --gga-format v2 -d $DEV -r auto --cpu $SCPU --command-channel-name NAME --poll-mode $POLL\`; initiator \`zcstore_initiator_comch -d $DEV --cpu $CCPU --execution-strategy read_throughput_test|write_throughput_test|read_write_data_validity_test --run-limit-operation-count N --transaction-count QD --command-channel-name NAME --poll-mode $POLL --stats-json FILE --no-progress\`. Zero-copy: one target \`--block-size B --block-count $((STORAGE >> 20))·2^20/B --binary-content PLAIN --poll-mode $ZC_TPOLL\` and \`zcstore_comch_to_rdma_zero_copy --storage-server 127.0.0.1:PORT ...\` with the same flags. A pilot run per case measures its rate; N is then set so that the measured run lasts about ${WARM} + ${SECS} s and more."
  echo "- IOPS = operation_count / duration_seconds of the initiator's stats JSON; latencies its latency_us fields (submitted → response received, whole µs; p50/p99 up to ~3 % high, histogram bucket edges). **Service CPU µs / block** = (utime + stime of the service process from /proc/PID/stat at the end of a window − at its start) / CLK_TCK ($CLK_TCK Hz) / (IOPS × window length × blocks per IO); the window opens ${WARM} s after the initiator starts (past connecting and the control steps) and lasts ${SECS} s; it only counts when the initiator was still running at its end. **Raw codec µs / block**: the cpu time per block of zc_accel_bench's raw rows below (liblz4 \`LZ4_compress_default\` / \`LZ4_decompress_safe\`, ISA-L \`ec_encode_data\` and \`crc32_iscsi\`, memcpy, cycling over 256 blocks of the same text; Google Benchmark, \`--benchmark_min_time=0.2\`, pinned to cpu $SCPU) for what the service does per block (the IO column says which): a read decompresses one image and checks its crc32c; a recovery read (and a degraded read) also rebuilds a half; a write computes the crc32c, compresses and encodes; a raw read copies the block out and checks its crc32c; a raw write tries LZ4 on random data (it runs to the end and does not fit), computes the crc32c and encodes. **Zero-copy CPU + 1.5 × raw**: the aim stated against the zero-copy service: the gga service's CPU per block should stay under the zero-copy service's (its rows of the same block size and depth in this run: read for the reads, write for the writes, their mean for a write + read-back) plus 1.5× the raw codec cost; the zero-copy target busy-polls alone on its core while the gga targets share one in event mode (see Placement)."
  echo
  if [ -n "$NOTE" ]; then
    echo "$NOTE"
    echo
  fi
  cat "$TABLE"
  echo
  cat "$VERDICT"
  echo
  if [ -s "$PROFILE" ]; then
    echo "Where the service's time goes: \`perf record -F 999 --call-graph dwarf -p SERVICE -- sleep $SECS\` on the service during an extra gga read run at QD64 with ${PSIZE}-byte blocks (not one of the measured runs). By library (self time): $(cat "$WORK/perf-dso.txt" 2>/dev/null). Selected frames, inclusive (\`perf report --children\`; they nest, so the shares overlap):"
    echo
    cat "$PROFILE"
    echo
  fi
  analysis
} >"$SECTION"
bench_write_section gga "$SECTION"

echo
cat "$TABLE"
[ -s "$PROFILE" ] && { echo; cat "$PROFILE"; }
echo
echo "(${ELAPSED} s; load average $LOAD_START → $LOAD_END; written to the ## gga section of $DOC)"
exit $FAILED
