#!/usr/bin/env bash
# bench/run_nbd.sh BUILD_DIR: the NBD benchmark (issue 10, item 5; aims of issue 20, item 6).
# fio's nbd engine (libnbd), 4 KiB randread and randwrite at QD1 and QD64 over 1 and 4
# connections, against three NBD servers in the same run on the same machine, 64 MiB of RAM each:
#   zc:     `zcstore_local zero-copy --nbd SOCK`: zcstore_nbd → comch → the zero-copy service →
#           TCP control + RDMA (UCX) → a RAM target, four processes (zcstore_local supervises);
#   nbdkit: `nbdkit memory` over a Unix socket (nbdkit's own worker threads);
#   qemu:   `qemu-nbd` serving a raw file on tmpfs over a Unix socket (the other peer users pick).
# "4 connections" = fio --numjobs=4 (each job opens its own NBD connection) with --group_reporting;
# the queue depth is per connection (each job's --iodepth), so 4 connections at QD64 keep 256
# requests in flight. The servers run for the whole suite; each case runs against each server in
# turn (the order rotates per round), ZC_BENCH_ROUNDS times; the table takes per server and case
# the round with the better IOPS (its latencies with it).
# During every measurement: the CPU time of each server process (utime + stime from
# /proc/PID/stat) and how busy each core was (/proc/stat), so a missed aim comes with where the
# time went; with ZC_BENCH_PERF=1 also a perf profile of zcstore_nbd in one extra run.
# Prints a table and the aims, and rewrites the "## nbd" section of docs/BENCHMARKS.md.
#
# Placement on 2 cores: fio on cpu 0 (the client core); every server process on cpu 1 (the
# server core): nbdkit, qemu-nbd, and zcstore_local with all it starts (target, service, zcstore_nbd, which
# zcstore_local gives --cpu 1 because that is the one core it may use), the zcstore programs in
# event mode (three processes on one core: a busy poller would hold the core for whole scheduler
# slices while the next step of the IO waits, see the pipeline section). Every process is pinned
# with taskset and bounded with timeout.
# Knobs: ZC_BENCH_SECONDS (per measurement, whole seconds, default 3), ZC_BENCH_RAMP (fio's
# --ramp_time, default 0.5), ZC_BENCH_ROUNDS (default 2), ZC_BENCH_DEPTHS ("1 64"),
# ZC_BENCH_CONNECTIONS ("1 4"), ZC_BENCH_CLIENT_CPU / ZC_BENCH_SERVER_CPU (0 / 1),
# ZC_BENCH_POLL (the zcstore programs', default adaptive: their own default), ZC_BENCH_TRANSACTIONS (zcstore_nbd's
# --transaction-count, default 256), ZC_BENCH_NBDKIT_THREADS (default 16, nbdkit's own),
# ZC_BENCH_DEVICE (auto), ZC_BENCH_PERF (1: profile zcstore_nbd; 0: no), ZC_BENCH_QUIET_WAIT /
# ZC_BENCH_QUIET_PCT (30 s / 15 %), ZC_BENCH_DOC, ZC_BENCH_NO_DOC=1 (print only).
set -euo pipefail
# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
bench_setup nbd "${1:-}"
SECS=${ZC_BENCH_SECONDS:-3}
RAMP=${ZC_BENCH_RAMP:-0.5}
ROUNDS=${ZC_BENCH_ROUNDS:-2}
DEPTHS=${ZC_BENCH_DEPTHS:-"1 64"}
CONNS=${ZC_BENCH_CONNECTIONS:-"1 4"}
CCPU=${ZC_BENCH_CLIENT_CPU:-0}
SCPU=${ZC_BENCH_SERVER_CPU:-1}
POLL=${ZC_BENCH_POLL:-adaptive}
# poll_note MODE: why that mode with three processes on one core, for the Placement line.
poll_note() {
  case "$1" in
    adaptive) echo ", the programs' default: three processes share the server core, and a process inside its spin window hands the core on with sched_yield at every empty pass, so a hop to a process that is still spinning costs no sleep and no wake-up (each a few system calls and a context switch, expensive in this VM); the spinning is counted in their CPU figures" ;;
    event) echo ": three processes share the server core, and each sleeps in epoll as soon as it has nothing to do, so every hop of an IO wakes the next process" ;;
    *) echo ": three processes share the server core, and a busy poller holds it for whole scheduler slices while the next step of the IO waits (see the pipeline section)" ;;
  esac
}
TRANSACTIONS=${ZC_BENCH_TRANSACTIONS:-256}
NBD_THREADS=${ZC_BENCH_NBDKIT_THREADS:-16}
DEV=${ZC_BENCH_DEVICE:-auto}
PERF=${ZC_BENCH_PERF:-1}
QUIET_WAIT=${ZC_BENCH_QUIET_WAIT:-30}
QUIET_PCT=${ZC_BENCH_QUIET_PCT:-15}
SIZE_MIB=64
SERVER_TIMEOUT=900 # the servers live for the whole suite
FIO_TIMEOUT=60
# In milliseconds: fio 3.33 reads --ramp_time=0.5 as no ramp at all. A run is RAMP + SECS long
# and measures SECS.
RAMP_MS=$(awk -v r="$RAMP" 'BEGIN { printf "%d", r * 1000 }')
RUNTIME_MS=$(awk -v s="$SECS" 'BEGIN { printf "%d", s * 1000 }')
# The CPU window of each run: from WIN_START s after fio starts (its start-up, 0.3-0.5 s on this
# machine, and the ramp are behind), WIN_LEN s long (ending well before the connections close).
WIN_START=$(awk -v r="$RAMP" 'BEGIN { print r + 0.5 }')
WIN_LEN=$(awk -v s="$SECS" 'BEGIN { print (s > 1.6 ? s - 0.8 : s / 2) }')
LOCAL=$BUILD/apps/local/zcstore_local
CLK_TCK=$(getconf CLK_TCK)

bench_require_commands "util-linux, coreutils, jq, fio, nbdkit, qemu-utils" taskset timeout jq fio nbdkit qemu-nbd
[ -x "$LOCAL" ] || bench_die "$LOCAL is missing (build the apps)"
[ -x "$BUILD/apps/nbd/zcstore_nbd" ] || bench_die "$BUILD/apps/nbd/zcstore_nbd is missing (build the apps)"
fio --enghelp=nbd >/dev/null 2>&1 || bench_die "fio has no nbd engine"

FAILED=0
BUSY_START=$(bench_busy_others)

# proc_ticks PID: utime + stime of the whole process in clock ticks (fields 14 and 15; the
# command name is cut off first, it may hold spaces); 0 when it is gone.
proc_ticks() {
  local s
  # read, not cat: no fork, so the readings sit close to the window's timestamps.
  read -r s <"/proc/$1/stat" 2>/dev/null || { echo 0; return 0; }
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  echo $((${12} + ${13}))
}

# proc_switches PID...: "TID SWITCHES" for every thread of the processes (voluntary + involuntary
# context switches); switch_delta FILE0 FILE1: the sum over the threads present in both (nbdkit
# starts and ends threads with its connections).
proc_switches() {
  local p files=()
  for p in "$@"; do files+=(/proc/"$p"/task/*/status); done
  # grep goes on past a thread that ended after the glob (awk would stop there).
  grep -sH -E '^(voluntary|nonvoluntary)_ctxt_switches:' "${files[@]}" |
    awk '{ split($1, f, "/"); n[f[5]] += $2 } END { for (t in n) print t, n[t] }' || true
}
switch_delta() {
  awk 'NR == FNR { a[$1] = $2; next } ($1 in a) { n += $2 - a[$1] } END { print n + 0 }' "$1" "$2"
}

# cpu_times: "busy idle" jiffies of cpu CCPU, then of cpu SCPU, from /proc/stat.
cpu_times() {
  awk -v a="cpu$CCPU" -v b="cpu$SCPU" '$1 == a { x = $2 + $3 + $4 + $7 + $8 + $9 " " $5 + $6 }
    $1 == b { y = $2 + $3 + $4 + $7 + $8 + $9 " " $5 + $6 } END { print x, y }' /proc/stat
}

# children_of PID: the pids of PID's children.
children_of() { cat /proc/"$1"/task/*/children 2>/dev/null || true; }

# comm_of PID: its command name.
comm_of() { cat "/proc/$1/comm" 2>/dev/null || echo "?"; }

# wait_socket SOCK PID SECONDS: true once SOCK exists; false when PID dies or time is up.
wait_socket() {
  for _ in $(seq $(($3 * 50))); do
    [ -S "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.02
  done
  return 1
}

# ---- the servers, all three up for the whole suite.
NBDKIT_SOCK=$WORK/nbdkit.sock
ZC_SOCK=$WORK/zc.sock
QEMU_SOCK=$WORK/qemu.sock
taskset -c "$SCPU" timeout "$SERVER_TIMEOUT" nbdkit -U "$NBDKIT_SOCK" --foreground -t "$NBD_THREADS" \
  memory "${SIZE_MIB}M" allocator=malloc >"$WORK/nbdkit.log" 2>&1 &
NBDKIT_TIMEOUT_PID=$!
PIDS+=("$NBDKIT_TIMEOUT_PID")
wait_socket "$NBDKIT_SOCK" "$NBDKIT_TIMEOUT_PID" 10 || { cat "$WORK/nbdkit.log" >&2; bench_die "nbdkit did not start"; }
NBDKIT_PID=$(children_of "$NBDKIT_TIMEOUT_PID")
NBDKIT_PID=${NBDKIT_PID%% *}

# qemu-nbd serves a raw file in RAM: on tmpfs ($WORK when /tmp is one, /dev/shm otherwise).
# --cache=writeback: the page cache is tmpfs itself (no O_DIRECT there, so no cache=none and no
# --aio=native); --aio=threads: qemu's portable default (io_uring is not in every build);
# --discard=unmap: trims free memory; --shared=16: fio's four connections (and the fill) at once;
# --persistent: it outlives each connection.
if [ "$(stat -f -c %T "$WORK")" = tmpfs ]; then
  QEMU_DIR=$WORK
else
  QEMU_DIR=$(mktemp -d /dev/shm/zc-bench-nbd-XXXXXX)
  trap 'bench_cleanup; rm -rf "$QEMU_DIR"' EXIT
fi
QEMU_FILE=$QEMU_DIR/qemu.img
truncate -s "${SIZE_MIB}M" "$QEMU_FILE"
QEMU_ARGS=(--format=raw --persistent --shared=16 --cache=writeback --aio=threads --discard=unmap)
taskset -c "$SCPU" timeout "$SERVER_TIMEOUT" qemu-nbd --socket="$QEMU_SOCK" "${QEMU_ARGS[@]}" \
  "$QEMU_FILE" >"$WORK/qemu.log" 2>&1 &
QEMU_TIMEOUT_PID=$!
PIDS+=("$QEMU_TIMEOUT_PID")
wait_socket "$QEMU_SOCK" "$QEMU_TIMEOUT_PID" 10 || { cat "$WORK/qemu.log" >&2; bench_die "qemu-nbd did not start"; }
QEMU_PID=$(children_of "$QEMU_TIMEOUT_PID")
QEMU_PID=${QEMU_PID%% *}
[ "$(comm_of "$QEMU_PID")" = qemu-nbd ] || bench_die "no qemu-nbd under timeout $QEMU_TIMEOUT_PID"

# zcstore_local sees one usable core (its affinity) and gives every program --cpu SCPU.
ZC_CMD=("$LOCAL" zero-copy --nbd "$ZC_SOCK" --target-size "${SIZE_MIB}MiB" --block-size 4096
  --poll-mode "$POLL" -d "$DEV" -- --transaction-count "$TRANSACTIONS")
taskset -c "$SCPU" timeout "$SERVER_TIMEOUT" "${ZC_CMD[@]}" >"$WORK/zc.log" 2>&1 &
ZC_TIMEOUT_PID=$!
PIDS+=("$ZC_TIMEOUT_PID")
if ! bench_wait_log "$WORK/zc.log" "serving NBD on $ZC_SOCK" 30 "$ZC_TIMEOUT_PID" >/dev/null ||
  ! wait_socket "$ZC_SOCK" "$ZC_TIMEOUT_PID" 5; then
  tail -n 30 "$WORK/zc.log" >&2
  bench_die "zcstore_local --nbd did not start"
fi
LOCAL_PID=$(children_of "$ZC_TIMEOUT_PID")
LOCAL_PID=${LOCAL_PID%% *}
# zc_pid NAME: the pid of zcstore_local's child with that command name (comm is cut at 15 bytes).
zc_pid() {
  local p
  for p in $(children_of "$LOCAL_PID"); do
    case "$(comm_of "$p")" in "$1"*) echo "$p"; return 0 ;; esac
  done
  return 1
}
NBD_PID=$(zc_pid zcstore_nbd) || bench_die "no zcstore_nbd under zcstore_local $LOCAL_PID"
SVC_PID=$(zc_pid zcstore_comch) || bench_die "no service under zcstore_local $LOCAL_PID"
TGT_PID=$(zc_pid zcstore_target) || bench_die "no target under zcstore_local $LOCAL_PID"
ZC_NBD_ARGV=$(grep -m1 -oE 'zcstore_nbd --command-channel-name [^"]*' "$WORK/zc.log" || true)
ZC_NBD_ARGV=${ZC_NBD_ARGV:-not in the log}
ZC_NBD_ARGV=${ZC_NBD_ARGV//$ZC_SOCK/SOCK}
ZC_NBD_ARGV=$(echo "$ZC_NBD_ARGV" | sed -E 's/--command-channel-name [^ ]+/--command-channel-name NAME/')

uri_of() { echo "nbd+unix:///?socket=$1"; }

# Fill each disk once, so that reads return written memory.
for sock in "$NBDKIT_SOCK" "$ZC_SOCK" "$QEMU_SOCK"; do
  taskset -c "$CCPU" timeout "$FIO_TIMEOUT" fio --name=fill --ioengine=nbd --uri="$(uri_of "$sock")" \
    --rw=write --bs=1m --iodepth=4 --size="${SIZE_MIB}M" --output="$WORK/fill.json" \
    --output-format=json >/dev/null 2>"$WORK/fill.err" || { cat "$WORK/fill.err" >&2; FAILED=1; }
done

# measure SERVER RW QD CONNS ROUND: one fio run; appends a result line.
measure() {
  local server=$1 rw=$2 qd=$3 conns=$4 round=$5 sock pids p
  local tag="$server-$rw-$qd-$conns-$round" t0 t1 c0 c1 fpid ok=1
  case $server in
    zc)
      sock=$ZC_SOCK
      pids=("$NBD_PID" "$SVC_PID" "$TGT_PID" "$LOCAL_PID")
      ;;
    qemu)
      sock=$QEMU_SOCK
      pids=("$QEMU_PID")
      ;;
    *)
      sock=$NBDKIT_SOCK
      pids=("$NBDKIT_PID")
      ;;
  esac
  taskset -c "$CCPU" timeout "$FIO_TIMEOUT" fio --name="$rw" --ioengine=nbd --uri="$(uri_of "$sock")" \
    --rw="rand$rw" --bs=4k --iodepth="$qd" --numjobs="$conns" --group_reporting \
    --size="${SIZE_MIB}M" --time_based --ramp_time="${RAMP_MS}ms" --runtime="${RUNTIME_MS}ms" --lat_percentiles=1 \
    --output-format=json --output="$WORK/fio-$tag.json" >/dev/null 2>"$WORK/fio-$tag.err" &
  fpid=$!
  # The CPU window: inside fio's measured time (past its start and ramp, before its end), while
  # every connection and every nbdkit thread is up.
  local before=() after=()
  # The readings that fork (switches, core times) outside, the process ticks next to the stamps.
  sleep "$WIN_START"
  proc_switches "${pids[@]}" >"$WORK/sw0"
  c0=$(cpu_times)
  for p in "${pids[@]}"; do before+=("$(proc_ticks "$p")"); done
  t0=$EPOCHREALTIME
  sleep "$WIN_LEN"
  t1=$EPOCHREALTIME
  for p in "${pids[@]}"; do after+=("$(proc_ticks "$p")"); done
  c1=$(cpu_times)
  proc_switches "${pids[@]}" >"$WORK/sw1"
  wait "$fpid" || ok=0 # bounded: fio runs under timeout $FIO_TIMEOUT
  if [ $ok = 0 ]; then
    echo "run_nbd.sh: fio $tag failed:" >&2
    cat "$WORK/fio-$tag.err" >&2
    FAILED=1
    return 0
  fi
  # Per server process: the share of a core it used over the window.
  local cpu="" i
  for i in "${!pids[@]}"; do
    cpu="$cpu $(awk -v a="${before[$i]}" -v b="${after[$i]}" -v t0="$t0" -v t1="$t1" -v hz="$CLK_TCK" \
      'BEGIN { printf "%.3f", (b - a) / hz / (t1 - t0) }')"
  done
  local line
  line=$(jq -r --arg rw "$rw" '.jobs[0][$rw] as $j |
    "iops=\($j.iops) mean_us=\($j.lat_ns.mean / 1000) p50_us=\($j.lat_ns.percentile["50.000000"] / 1000) p99_us=\($j.lat_ns.percentile["99.000000"] / 1000) n=\($j.total_ios) errors=\(.jobs[0].error)"' \
    "$WORK/fio-$tag.json") || { FAILED=1; return 0; }
  # shellcheck disable=SC2086
  set -- $cpu
  local procs
  case $server in
    zc) procs="nbd_cpu=$1 svc_cpu=$2 tgt_cpu=$3 local_cpu=$4" ;;
    qemu) procs="qemu_cpu=$1" ;;
    *) procs="nbdkit_cpu=$1" ;;
  esac
  local busy
  busy=$(echo "$c0 $c1" | awk '{ cb = $5 - $1; ci = $6 - $2; sb = $7 - $3; si = $8 - $4
    printf "ccore=%.2f score=%.2f", ((cb + ci) > 0 ? cb / (cb + ci) : 0), ((sb + si) > 0 ? sb / (sb + si) : 0) }')
  echo "result server=$server rw=$rw qd=$qd conns=$conns round=$round $line $procs $busy switches=$(switch_delta "$WORK/sw0" "$WORK/sw1") secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" |
    tee -a "$RESULTS" | sed 's/^result /  /'
}

QEMU_VERSION=$(qemu-nbd --version | awk 'NR == 1 { print $2 }')
echo "-- servers on cpu $SCPU: nbdkit $(nbdkit --version | awk '{ print $2 }') memory (-t $NBD_THREADS, pid $NBDKIT_PID); qemu-nbd $QEMU_VERSION on $QEMU_FILE (pid $QEMU_PID); zcstore_local (pid $LOCAL_PID): zcstore_nbd $NBD_PID, service $SVC_PID, target $TGT_PID ($POLL); fio $(fio --version) on cpu $CCPU"
QUIET_ROUNDS=""
for ROUND in $(seq "$ROUNDS"); do
  busy=$(bench_wait_quiet "$QUIET_WAIT" "$QUIET_PCT")
  QUIET_ROUNDS="$QUIET_ROUNDS${QUIET_ROUNDS:+, }$busy% (load $(cut -d' ' -f1 /proc/loadavg))"
  echo "== round $ROUND of $ROUNDS (machine $busy% busy over the second before)"
  # The order rotates: nbdkit zc qemu, then zc qemu nbdkit, then qemu nbdkit zc, ...
  case $(((ROUND - 1) % 3)) in
    0) order="nbdkit zc qemu" ;;
    1) order="zc qemu nbdkit" ;;
    *) order="qemu nbdkit zc" ;;
  esac
  for rw in read write; do
    for qd in $DEPTHS; do
      for conns in $CONNS; do
        for server in $order; do measure "$server" "$rw" "$qd" "$conns" "$ROUND"; done
      done
    done
  done
done

# ---- a profile of zcstore_nbd (and the service) in one extra read run at QD64 over 4
# connections, the case where zcstore_nbd itself takes most of the server core.
PROFILE=$WORK/profile.txt
: >"$PROFILE"
if [ "$PERF" = 1 ] && command -v perf >/dev/null; then
  echo "-- perf: zcstore_nbd and the service during an extra randread QD64 run over 4 connections"
  taskset -c "$CCPU" timeout "$FIO_TIMEOUT" fio --name=perf --ioengine=nbd --uri="$(uri_of "$ZC_SOCK")" \
    --rw=randread --bs=4k --iodepth=64 --numjobs=4 --group_reporting --size="${SIZE_MIB}M" --time_based --runtime=5 \
    --output-format=json --output="$WORK/fio-perf.json" >/dev/null 2>&1 &
  fpid=$!
  PIDS+=("$fpid")
  sleep 0.5
  for who in nbd svc; do
    pid=$NBD_PID
    [ $who = svc ] && pid=$SVC_PID
    timeout 20 perf record -F 999 -g -p "$pid" -o "$WORK/perf-$who.data" -- sleep 1 >"$WORK/perf-$who.log" 2>&1 || true
  done
  wait "$fpid" 2>/dev/null || true
  for who in nbd svc; do
    [ -s "$WORK/perf-$who.data" ] || continue
    timeout 60 perf report -i "$WORK/perf-$who.data" --no-children --sort dso,sym --stdio 2>/dev/null |
      awk '/^ +[0-9.]+%/ && n < 12 { sub(/^ +/, ""); print; ++n }' >"$WORK/perf-$who.txt" || true
    timeout 60 perf report -i "$WORK/perf-$who.data" --no-children --sort dso --stdio 2>/dev/null |
      awk '/^ +[0-9.]+%/ && n < 5 { sub(/^ +/, ""); printf "%s%s", (n ? ", " : ""), $0; ++n }' >"$WORK/perf-$who-dso.txt" || true
  done
  if [ -s "$WORK/perf-nbd.txt" ]; then
    {
      echo "zcstore_nbd, by library: $(cat "$WORK/perf-nbd-dso.txt")."
      echo
      echo '```'
      cat "$WORK/perf-nbd.txt"
      echo '```'
      if [ -s "$WORK/perf-svc.txt" ]; then
        echo
        echo "The service, by library: $(cat "$WORK/perf-svc-dso.txt")."
        echo
        echo '```'
        cat "$WORK/perf-svc.txt"
        echo '```'
      fi
    } >"$PROFILE"
  fi
fi

# ---- stop the servers: SIGTERM to zcstore_local itself (it stops its programs: zcstore_nbd
# finishes what is in flight and prints its counters) and to nbdkit and qemu-nbd; each has STOP_WAIT seconds.
# wait_gone PID SECONDS: true once PID has ended.
wait_gone() {
  for _ in $(seq $(($2 * 10))); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}
STOP_WAIT=30
stop_t0=$EPOCHREALTIME
kill "$LOCAL_PID" "$NBDKIT_PID" "$QEMU_PID" 2>/dev/null || true
zc_rc=0
if wait_gone "$ZC_TIMEOUT_PID" "$STOP_WAIT"; then
  wait "$ZC_TIMEOUT_PID" 2>/dev/null || zc_rc=$?
else
  zc_rc="none: still running after $STOP_WAIT s"
  FAILED=1
fi
STOP_SECS=$(awk -v a="$stop_t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
wait_gone "$NBDKIT_TIMEOUT_PID" "$STOP_WAIT" || true
wait_gone "$QEMU_TIMEOUT_PID" "$STOP_WAIT" || true
[ -n "${ZC_BENCH_KEEP_LOG:-}" ] && cp "$WORK/zc.log" "$ZC_BENCH_KEEP_LOG"
SERVED=$(grep -m1 -oE 'served [0-9]+ connections, [0-9]+ requests, [0-9]+ IO errors' "$WORK/zc.log" || true)
echo "-- zcstore_local exit status $zc_rc after SIGTERM (128 + 15 is its documented answer), ended after $STOP_SECS s; zcstore_nbd: ${SERVED:-no counters line}"
if [ -z "$SERVED" ] || [ "$zc_rc" != 143 ]; then
  echo "run_nbd.sh: zcstore_local did not end as expected; the end of its log:" >&2
  tail -n 40 "$WORK/zc.log" >&2
fi

bench_finish
BUSY_END=$(bench_busy_others)

# ---- the tables and the aims.
TABLE=$WORK/table.md
VERDICT=$WORK/verdict.md
awk -v table="$TABLE" -v verdict="$VERDICT" -v depths="$DEPTHS" -v conns="$CONNS" '
  $1 == "result" {
    delete kv
    for (i = 2; i <= NF; ++i) { split($i, p, "="); kv[p[1]] = p[2] }
    k = kv["server"] "|" kv["rw"] "|" kv["qd"] "|" kv["conns"]
    n = ++rounds[k]
    for (f in kv) val[k "|" n "|" f] = kv[f]
    all[k] = all[k] (all[k] == "" ? "" : ", ") iops(kv["iops"])
    if (!(k in best) || kv["iops"] + 0 > val[k "|" best[k] "|iops"] + 0) best[k] = n
  }
  function get(k, f) { return (k in best) ? val[k "|" best[k] "|" f] : "" }
  function num(x, fmt) { return x == "" ? "n/a" : sprintf(fmt, x) }
  function pct(x) { return x == "" ? "n/a" : sprintf("%.0f%%", 100 * x) }
  function iops(x) {
    if (x == "") return "n/a"
    if (x >= 1e6) return sprintf("%.2fM", x / 1e6)
    return sprintf("%.1fk", x / 1e3)
  }
  # cpu_io(K): the server CPU µs per IO (zcstore: every process summed, zcstore_local included).
  function cpu_io(k,   s, tot) {
    if (!(k in best) || get(k, "iops") + 0 <= 0) return ""
    s = get(k, "server")
    if (s == "zc") tot = get(k, "nbd_cpu") + get(k, "svc_cpu") + get(k, "tgt_cpu") + get(k, "local_cpu")
    else if (s == "qemu") tot = get(k, "qemu_cpu") + 0
    else tot = get(k, "nbdkit_cpu") + 0
    return tot / get(k, "iops") * 1e6
  }
  # sw_io(K): the server processes context switches over the window / the IOs of the window.
  function sw_io(k) {
    if (!(k in best) || get(k, "iops") + 0 <= 0 || get(k, "secs") + 0 <= 0) return ""
    return get(k, "switches") / (get(k, "iops") * get(k, "secs"))
  }
  function conn_s(c) { return c " connection" (c == 1 ? "" : "s") }
  # check(AIM, OK, TEXT): one verdict line of AIM, counted.
  function check(a, ok, text) {
    ++checks[a]; if (ok) ++met[a]
    lines[a] = lines[a] sprintf("- %s: **%s**.\n", text, ok ? "met" : "not met")
  }
  END {
    nd = split(depths, D, " "); nc = split(conns, C, " ")
    S[1] = "zc"; S[2] = "nbdkit"; S[3] = "qemu"
    NAME["zc"] = "zcstore_nbd (zero-copy)"; NAME["nbdkit"] = "nbdkit memory"; NAME["qemu"] = "qemu-nbd (tmpfs file)"
    print "| IO (4 KiB) | QD per conn | conns | server | IOPS (better round) | all rounds | mean µs | p50 µs | p99 µs | IOPS / nbdkit | server core busy | server processes, share of a core | server CPU µs / IO | server context switches / IO | fio core busy |" > table
    print "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" >> table
    for (t = 1; t <= 2; ++t) {
      rw = t == 1 ? "read" : "write"
      for (d = 1; d <= nd; ++d) for (c = 1; c <= nc; ++c) {
        kz = "zc|" rw "|" D[d] "|" C[c]; kn = "nbdkit|" rw "|" D[d] "|" C[c]; kq = "qemu|" rw "|" D[d] "|" C[c]
        for (s = 1; s <= 3; ++s) {
          k = S[s] "|" rw "|" D[d] "|" C[c]
          name = NAME[S[s]]
          if (!(k in best)) { printf "| rand%s | %s | %s | %s | not run | | | | | | | | | | |\n", rw, D[d], C[c], name >> table; continue }
          ratio = "—"
          if (S[s] != "nbdkit" && (kn in best) && get(kn, "iops") + 0 > 0)
            ratio = sprintf("%.2f× (%s / nbdkit)", get(k, "iops") / get(kn, "iops"), S[s] == "zc" ? "zc" : "qemu-nbd")
          if (S[s] == "zc") procs = sprintf("nbd %s, service %s, target %s", pct(get(k, "nbd_cpu")), pct(get(k, "svc_cpu")), pct(get(k, "tgt_cpu")))
          else if (S[s] == "qemu") procs = "qemu-nbd " pct(get(k, "qemu_cpu"))
          else procs = "nbdkit " pct(get(k, "nbdkit_cpu"))
          cell = iops(get(k, "iops"))
          if (get(k, "errors") != "" && get(k, "errors") != 0) cell = cell " (**fio error " get(k, "errors") "**)"
          printf "| rand%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", rw, D[d], C[c], name,
            cell, all[k], num(get(k, "mean_us"), "%.1f"), num(get(k, "p50_us"), "%.1f"), num(get(k, "p99_us"), "%.1f"),
            ratio, pct(get(k, "score")), procs, num(cpu_io(k), "%.1f"), num(sw_io(k), "%.2f"), pct(get(k, "ccore")) >> table
        }
        what = sprintf("QD%s rand%s, %s", D[d], rw, conn_s(C[c]))
        # A1: QD64, zcstore_nbd IOPS >= 1.0x nbdkit memory.
        if (D[d] == 64 && (kz in best) && (kn in best) && get(kn, "iops") + 0 > 0) {
          r = get(kz, "iops") / get(kn, "iops")
          check("A1", r >= 1, sprintf("%s: zcstore_nbd %s IOPS vs nbdkit %s = %.2f× (≥ 1.0×)", what, iops(get(kz, "iops")), iops(get(kn, "iops")), r))
        }
        # A2: server CPU per IO <= nbdkit at QD64, <= 1.5x nbdkit at QD1.
        if ((D[d] == 64 || D[d] == 1) && cpu_io(kz) != "" && cpu_io(kn) != "" && cpu_io(kn) > 0) {
          lim = D[d] == 64 ? 1 : 1.5
          r = cpu_io(kz) / cpu_io(kn)
          check("A2", r <= lim, sprintf("%s: server CPU per IO zcstore %.1f µs vs nbdkit %.1f µs = %.2f× (≤ %.1f×)", what, cpu_io(kz), cpu_io(kn), r, lim))
        }
        if (D[d] == 1 && (kz in best)) {
          # A3: QD1 mean latency <= 1.5x nbdkit and below qemu-nbd.
          a = get(kz, "mean_us") + 0; b = get(kn, "mean_us"); q = get(kq, "mean_us")
          ok = b != "" && q != "" && a <= 1.5 * b && a < q + 0
          check("A3", ok, sprintf("%s: mean latency zcstore_nbd %.1f µs vs nbdkit %s µs = %s (≤ 1.5×), vs qemu-nbd %s µs (%s)", what, a,
            num(b, "%.1f"), (b + 0 > 0 ? sprintf("%.2f×", a / b) : "n/a"), num(q, "%.1f"), (q == "" ? "not run" : (a < q + 0 ? "below" : "not below"))))
          # A4: <= 6 context switches per IO at QD1, over the server processes.
          x = sw_io(kz)
          if (x != "") check("A4", x <= 6, sprintf("%s: zcstore %.2f context switches per IO (≤ 6)", what, x))
        }
      }
      # A1, per rw: four connections >= one at QD64.
      k1 = "zc|" rw "|64|1"; k4 = "zc|" rw "|64|4"
      if ((k1 in best) && (k4 in best))
        check("A1", get(k4, "iops") + 0 >= get(k1, "iops") + 0, sprintf("QD64 rand%s: zcstore_nbd on 4 connections %s IOPS vs on 1 %s (four ≥ one)", rw, iops(get(k4, "iops")), iops(get(k1, "iops"))))
    }
    A[1] = "A1"; T["A1"] = "QD64, one connection and four: zcstore_nbd IOPS ≥ 1.0× nbdkit memory'"'"'s, and (per IO type) four connections ≥ one connection"
    A[2] = "A2"; T["A2"] = "server CPU per IO, every zcstore process summed (zcstore_nbd, service, target, zcstore_local), ≤ nbdkit'"'"'s at QD64 and ≤ 1.5× nbdkit'"'"'s at QD1"
    A[3] = "A3"; T["A3"] = "QD1 mean latency ≤ 1.5× nbdkit'"'"'s and below qemu-nbd'"'"'s"
    A[4] = "A4"; T["A4"] = "≤ 6 context switches per IO at QD1, summed over the server processes"
    printf "" > verdict
    for (i = 1; i <= 4; ++i) {
      a = A[i]
      if (i > 1) printf "\n" >> verdict
      if (checks[a] + 0 == 0) printf "**%s (%s): not measured in this run.**\n", a, T[a] >> verdict
      else {
        printf "**%s (%s) is %s** (%d of %d checks).\n\n", a, T[a], (met[a] + 0 == checks[a] ? "met" : "not met"), met[a], checks[a] >> verdict
        printf "%s", lines[a] >> verdict
      }
    }
  }
' "$RESULTS"

if [ "${ZC_BENCH_NO_DOC:-0}" = 1 ]; then
  echo
  cat "$TABLE"
  echo
  cat "$VERDICT"
  [ -s "$PROFILE" ] && { echo; cat "$PROFILE"; }
  echo
  echo "(other processes using a CPU: ${BUSY_START:-none} at start, ${BUSY_END:-none} at end)"
  echo "(${ELAPSED} s; load average $LOAD_START → $LOAD_END; ZC_BENCH_NO_DOC=1: $DOC left alone)"
  exit $FAILED
fi

NBD_VERSION=$(nbdkit --version | awk '{ print $2 }')
FIO_VERSION=$(fio --version)
NOTE=$(bench_notes "$BUSY_START" "$BUSY_END")
# The standing analysis (from the tables, profiles, strace counts and an A/B made when this was
# written); the tables above it are regenerated, it is not.
analysis() {
  cat <<'ANALYSIS'
### Where zcstore's time goes (analysis)

Standing notes, measured on 2026-11-27 on this machine with this placement; the tables above are regenerated on every run, these notes are not.

- **Three processes on one server core, in event mode.** zcstore_nbd runs to completion: each `--cpu` worker thread reads a request, sends the IO message over comch to the service, takes the answer and writes the reply, with no handoff between threads (see the zcstore_nbd section of docs/ARCHITECTURE.md). The service then sends the IO over UCX to the target and back. Each hop to a sleeping process is a wake-up and a context switch on the one server core; nbdkit and qemu-nbd are one process each.
- **Most samples are in the kernel.** perf on zcstore_nbd and on the service (above) puts most of their samples in the kernel; `pvm_irq_enable` at the top is the cost of system calls in this VM's paravirtualised kernel, so the number of system calls per IO is what the server CPU per IO follows.
- **System calls per request** (`strace -c` at QD1 randread): zcstore_nbd about 10 (before the change of 2026-11-27, three to five `epoll_wait`; now the engine's sleep twice, one server `epoll_wait`, the comch producer and consumer doorbell drains, `readv`, `sendmsg` and one eventfd doorbell write); the service and the target about 10-15 each, mostly EAGAIN reads and epoll/poll of UCX (over TCP and shared memory) and of the comch doorbells.
- **Run to completion, measured**: an A/B in the same run of the previous zcstore_nbd (server thread, inbox and IO worker) against the run-to-completion one: QD1 randread 3.1k vs 3.3k IOPS and 2.8k vs 3.0k (two rounds); zcstore_nbd's CPU per IO 87-88 µs vs 68-70 µs; QD64 41.0k vs 45.7k IOPS.
- **What is left**: the service's and the target's system calls per IO (the UCX and comch layers, issue 21), and doorbells that are not batched per pass of the engine.
ANALYSIS
}
SECTION=$WORK/section.md
{
  echo "## nbd"
  echo
  echo "zcstore_nbd over the zero-copy pipeline beside \`nbdkit memory\` and \`qemu-nbd\` on a tmpfs file (the two peers users pick instead), all three driven by fio's nbd engine (libnbd) in the same run on the same machine: 4 KiB random reads and writes, queue depth 1 and 64, 1 and 4 connections, 64 MiB of RAM behind each server. The aims are issue 20's item 6 (A1-A4 below). **At QD64 fio's own core is about 100% busy** (the fio core busy column), so IOPS there is bounded by the client on this machine, and the server CPU per IO is what separates the servers. Generated by \`bench/run_nbd.sh\`; do not edit by hand."
  echo
  echo "- Command: \`scripts/dev.sh bench nbd\` (installs nbdkit, qemu-utils, fio and jq if missing, builds build/release, then \`bench/run.sh build/release nbd\` → \`$INVOCATION\`), ${ELAPSED} s in total"
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(bench_machine), nbdkit $NBD_VERSION, qemu-nbd $QEMU_VERSION, $FIO_VERSION; load average $LOAD_START at start, $LOAD_END at end"
  echo "- Placement: **fio on cpu $CCPU; every server process on cpu $SCPU**: nbdkit, qemu-nbd, and \`zcstore_local\` with the three programs it starts (target, zero-copy service, zcstore_nbd; zcstore_local gives each \`--cpu $SCPU\`, the one core its affinity allows), all pinned with \`taskset -c\` and bounded with \`timeout\`. The zcstore programs run in poll mode $(bench_poll_why "$POLL")$(poll_note "$POLL"). nbdkit and qemu-nbd have no poll mode (their threads block in the kernel). So each server gets one core and fio the other."
  echo "- Servers, all three up for the whole run: \`nbdkit -U SOCK --foreground -t $NBD_THREADS memory ${SIZE_MIB}M allocator=malloc\`; \`qemu-nbd --socket=SOCK ${QEMU_ARGS[*]} FILE\` on a ${SIZE_MIB} MiB raw FILE on tmpfs (${QEMU_DIR%%/zc-bench-*}), with the flags a user would pick for speed: \`--cache=writeback\` because the page cache is tmpfs itself (tmpfs has no O_DIRECT, so no \`--cache=none\` nor \`--aio=native\`), \`--aio=threads\` (qemu's default, in every build; io_uring is not), \`--discard=unmap\` so trims free memory, \`--shared=16\` for the four connections at once and \`--persistent\` to outlive each; \`zcstore_local zero-copy --nbd SOCK --target-size ${SIZE_MIB}MiB --block-size 4096 --poll-mode $POLL -d $DEV -- --transaction-count $TRANSACTIONS\` (zcstore_nbd's line: \`$ZC_NBD_ARGV\`). Each of the three disks filled once with \`fio --rw=write --bs=1m\`, so reads return written memory. zcstore_nbd at the end: ${SERVED:-no counters line}; zcstore_local's exit status after SIGTERM: $zc_rc (128 + 15, as documented), $STOP_SECS s after it."
  echo "- Per case: \`fio --name=X --ioengine=nbd --uri='nbd+unix:///?socket=SOCK' --rw=randread|randwrite --bs=4k --iodepth=QD --numjobs=CONNS --group_reporting --size=${SIZE_MIB}M --time_based --ramp_time=${RAMP_MS}ms --runtime=${RUNTIME_MS}ms --lat_percentiles=1 --output-format=json\` (${RAMP} s of ramp, then ${SECS} s measured; in milliseconds because fio 3.33 reads \`--ramp_time=0.5\` as no ramp). **Connections**: every fio job opens its own NBD connection, so 4 connections = \`--numjobs=4\`, and **the queue depth is per connection**: at QD64 with 4 connections 256 requests are in flight. Figures from jobs[0].read|write (all jobs summed by group_reporting): iops, and lat_ns (submission to completion) mean and percentiles."
  echo "- Rounds: $ROUNDS. In each, every case runs against the three servers back to back, in an order that rotates per round (nbdkit, zcstore, qemu-nbd; then zcstore, qemu-nbd, nbdkit; then qemu-nbd, nbdkit, zcstore). Before each round the script waits up to ${QUIET_WAIT} s for the machine to be at most ${QUIET_PCT}% busy over a second; what it last measured, and the 1-minute load: $QUIET_ROUNDS. The table takes per server and case the round with the better IOPS, its latencies and CPU figures with it; \"all rounds\" lists every round's IOPS."
  echo "- CPU columns, over a window inside each measured run (from ${WIN_START} s after fio starts, ${WIN_LEN} s long: past the connects and the ramp, before the end, while every connection and every nbdkit and qemu-nbd thread is up): **server core busy** and **fio core busy** from cpu $SCPU's and cpu $CCPU's lines of /proc/stat (anything running there counts); **server processes** = utime + stime of each (/proc/PID/stat, CLK_TCK $CLK_TCK) / the window; **server CPU µs / IO** = the server processes' CPU seconds per second (for zcstore every process summed: zcstore_nbd, service, target and zcstore_local) / IOPS; **IOPS / nbdkit** = zcstore's (zc) or qemu-nbd's IOPS over nbdkit's in the same case; **server context switches / IO** = voluntary + involuntary switches of the server processes' threads (/proc/PID/task/TID/status; threads alive at both ends of the window) over the window / (IOPS × the window)."
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
    echo "Where zcstore's server-side time goes: \`perf record -F 999 -g -p PID -- sleep 1\` on zcstore_nbd, then on the service, during an extra randread run at QD64 over 4 connections (not one of the measured runs); \`perf report --no-children --sort dso,sym\`, the top entries (self time):"
    echo
    cat "$PROFILE"
    echo
  fi
  analysis
} >"$SECTION"
bench_write_section nbd "$SECTION"

echo
cat "$TABLE"
echo
cat "$VERDICT"
echo
echo "(${ELAPSED} s; load average $LOAD_START → $LOAD_END; written to the ## nbd section of $DOC)"
exit $FAILED
