#!/usr/bin/env bash
# bench/run_nbd.sh BUILD_DIR: the NBD benchmark (issue 10, item 5).
# fio's nbd engine (libnbd), 4 KiB randread and randwrite at QD1 and QD64 over 1 and 4
# connections, against two NBD servers in the same run on the same machine, 64 MiB of RAM each:
#   zc:     `zcstore_local zero-copy --nbd SOCK`: zcstore_nbd → comch → the zero-copy service →
#           TCP control + RDMA (UCX) → a RAM target, four processes (zcstore_local supervises);
#   nbdkit: `nbdkit memory` over a Unix socket (nbdkit's own worker threads).
# "4 connections" = fio --numjobs=4 (each job opens its own NBD connection) with --group_reporting;
# the queue depth is per connection (each job's --iodepth), so 4 connections at QD64 keep 256
# requests in flight. Both servers run for the whole suite; each case runs against one, then the
# other (the order alternates per round), ZC_BENCH_ROUNDS times; the table takes per server and
# case the round with the better IOPS (its latencies with it).
# During every measurement: the CPU time of each server process (utime + stime from
# /proc/PID/stat) and how busy each core was (/proc/stat), so a missed aim comes with where the
# time went; with ZC_BENCH_PERF=1 also a perf profile of zcstore_nbd in one extra run.
# Prints a table and the aims, and rewrites the "## nbd" section of docs/BENCHMARKS.md.
#
# Placement on 2 cores: fio on cpu 0 (the client core); every server process on cpu 1 (the
# server core): nbdkit, and zcstore_local with all it starts (target, service, zcstore_nbd, which
# zcstore_local gives --cpu 1 because that is the one core it may use), the zcstore programs in
# event mode (three processes on one core: a busy poller would hold the core for whole scheduler
# slices while the next step of the IO waits, see the pipeline section). Every process is pinned
# with taskset and bounded with timeout.
# Knobs: ZC_BENCH_SECONDS (per measurement, whole seconds, default 3), ZC_BENCH_RAMP (fio's
# --ramp_time, default 0.5), ZC_BENCH_ROUNDS (default 2), ZC_BENCH_DEPTHS ("1 64"),
# ZC_BENCH_CONNECTIONS ("1 4"), ZC_BENCH_CLIENT_CPU / ZC_BENCH_SERVER_CPU (0 / 1),
# ZC_BENCH_POLL (the zcstore programs', default event), ZC_BENCH_TRANSACTIONS (zcstore_nbd's
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
POLL=${ZC_BENCH_POLL:-event}
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

bench_require_commands "util-linux, coreutils, jq, fio, nbdkit" taskset timeout jq fio nbdkit
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

# ---- the servers, both up for the whole suite.
NBDKIT_SOCK=$WORK/nbdkit.sock
ZC_SOCK=$WORK/zc.sock
taskset -c "$SCPU" timeout "$SERVER_TIMEOUT" nbdkit -U "$NBDKIT_SOCK" --foreground -t "$NBD_THREADS" \
  memory "${SIZE_MIB}M" allocator=malloc >"$WORK/nbdkit.log" 2>&1 &
NBDKIT_TIMEOUT_PID=$!
PIDS+=("$NBDKIT_TIMEOUT_PID")
wait_socket "$NBDKIT_SOCK" "$NBDKIT_TIMEOUT_PID" 10 || { cat "$WORK/nbdkit.log" >&2; bench_die "nbdkit did not start"; }
NBDKIT_PID=$(children_of "$NBDKIT_TIMEOUT_PID")
NBDKIT_PID=${NBDKIT_PID%% *}

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
for sock in "$NBDKIT_SOCK" "$ZC_SOCK"; do
  taskset -c "$CCPU" timeout "$FIO_TIMEOUT" fio --name=fill --ioengine=nbd --uri="$(uri_of "$sock")" \
    --rw=write --bs=1m --iodepth=4 --size="${SIZE_MIB}M" --output="$WORK/fill.json" \
    --output-format=json >/dev/null 2>"$WORK/fill.err" || { cat "$WORK/fill.err" >&2; FAILED=1; }
done

# measure SERVER RW QD CONNS ROUND: one fio run; appends a result line.
measure() {
  local server=$1 rw=$2 qd=$3 conns=$4 round=$5 sock pids p
  local tag="$server-$rw-$qd-$conns-$round" t0 t1 c0 c1 fpid ok=1
  if [ "$server" = zc ]; then
    sock=$ZC_SOCK
    pids=("$NBD_PID" "$SVC_PID" "$TGT_PID" "$LOCAL_PID")
  else
    sock=$NBDKIT_SOCK
    pids=("$NBDKIT_PID")
  fi
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
  if [ "$server" = zc ]; then
    procs="nbd_cpu=$1 svc_cpu=$2 tgt_cpu=$3 local_cpu=$4"
  else
    procs="nbdkit_cpu=$1"
  fi
  local busy
  busy=$(echo "$c0 $c1" | awk '{ cb = $5 - $1; ci = $6 - $2; sb = $7 - $3; si = $8 - $4
    printf "ccore=%.2f score=%.2f", ((cb + ci) > 0 ? cb / (cb + ci) : 0), ((sb + si) > 0 ? sb / (sb + si) : 0) }')
  echo "result server=$server rw=$rw qd=$qd conns=$conns round=$round $line $procs $busy switches=$(switch_delta "$WORK/sw0" "$WORK/sw1") secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" |
    tee -a "$RESULTS" | sed 's/^result /  /'
}

echo "-- servers on cpu $SCPU: nbdkit $(nbdkit --version | awk '{ print $2 }') memory (-t $NBD_THREADS, pid $NBDKIT_PID); zcstore_local (pid $LOCAL_PID): zcstore_nbd $NBD_PID, service $SVC_PID, target $TGT_PID ($POLL); fio $(fio --version) on cpu $CCPU"
QUIET_ROUNDS=""
for ROUND in $(seq "$ROUNDS"); do
  busy=$(bench_wait_quiet "$QUIET_WAIT" "$QUIET_PCT")
  QUIET_ROUNDS="$QUIET_ROUNDS${QUIET_ROUNDS:+, }$busy% (load $(cut -d' ' -f1 /proc/loadavg))"
  echo "== round $ROUND of $ROUNDS (machine $busy% busy over the second before)"
  if [ $((ROUND % 2)) = 1 ]; then order="nbdkit zc"; else order="zc nbdkit"; fi
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
# finishes what is in flight and prints its counters) and to nbdkit; each has STOP_WAIT seconds.
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
kill "$LOCAL_PID" "$NBDKIT_PID" 2>/dev/null || true
zc_rc=0
if wait_gone "$ZC_TIMEOUT_PID" "$STOP_WAIT"; then
  wait "$ZC_TIMEOUT_PID" 2>/dev/null || zc_rc=$?
else
  zc_rc="none: still running after $STOP_WAIT s"
  FAILED=1
fi
STOP_SECS=$(awk -v a="$stop_t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
wait_gone "$NBDKIT_TIMEOUT_PID" "$STOP_WAIT" || true
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
  END {
    nd = split(depths, D, " "); nc = split(conns, C, " ")
    print "| IO (4 KiB) | QD per conn | conns | server | IOPS (better round) | all rounds | mean µs | p50 µs | p99 µs | zc / nbdkit IOPS | server core busy | server processes, share of a core | server CPU µs / IO | server context switches / IO | fio core busy |" > table
    print "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" >> table
    cases = 0; met = 0; lat_cases = 0; lat_met = 0
    for (t = 1; t <= 2; ++t) for (d = 1; d <= nd; ++d) for (c = 1; c <= nc; ++c) {
      rw = t == 1 ? "read" : "write"
      kz = "zc|" rw "|" D[d] "|" C[c]; kn = "nbdkit|" rw "|" D[d] "|" C[c]
      for (s = 1; s <= 2; ++s) {
        k = s == 1 ? kz : kn
        name = s == 1 ? "zcstore_nbd (zero-copy)" : "nbdkit memory"
        if (!(k in best)) { printf "| rand%s | %s | %s | %s | not run | | | | | | | | | | |\n", rw, D[d], C[c], name >> table; continue }
        ratio = "—"
        if (s == 1 && (kn in best) && get(kn, "iops") > 0) ratio = sprintf("%.2f×", get(kz, "iops") / get(kn, "iops"))
        if (s == 1) procs = sprintf("nbd %s, service %s, target %s", pct(get(k, "nbd_cpu")), pct(get(k, "svc_cpu")), pct(get(k, "tgt_cpu")))
        else procs = "nbdkit " pct(get(k, "nbdkit_cpu"))
        tot = s == 1 ? get(k, "nbd_cpu") + get(k, "svc_cpu") + get(k, "tgt_cpu") + get(k, "local_cpu") : get(k, "nbdkit_cpu")
        cpu_io = get(k, "iops") > 0 ? tot / get(k, "iops") * 1e6 : ""
        # switches over the whole fio run (ramp included) / the IOs of that time, at the measured rate
        sw_io = get(k, "iops") > 0 && get(k, "secs") > 0 ? get(k, "switches") / (get(k, "iops") * get(k, "secs")) : ""
        cell = iops(get(k, "iops"))
        if (get(k, "errors") != "" && get(k, "errors") != 0) cell = cell " (**fio error " get(k, "errors") "**)"
        printf "| rand%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", rw, D[d], C[c], name,
          cell, all[k], num(get(k, "mean_us"), "%.1f"), num(get(k, "p50_us"), "%.1f"), num(get(k, "p99_us"), "%.1f"),
          ratio, pct(get(k, "score")), procs, num(cpu_io, "%.1f"), num(sw_io, "%.2f"), pct(get(k, "ccore")) >> table
      }
      if (!(kz in best) || !(kn in best)) continue
      if (D[d] == 64) {
        r = get(kz, "iops") / get(kn, "iops")
        ++cases; if (r >= 2) ++met
        line[++nl] = sprintf("- QD64 rand%s, %s connection%s: zcstore_nbd %s IOPS vs nbdkit %s: **%.2f×, %s**.", rw, C[c], C[c] == 1 ? "" : "s",
          iops(get(kz, "iops")), iops(get(kn, "iops")), r, r >= 2 ? "met" : "not met")
      }
      if (D[d] == 1) {
        a = get(kz, "mean_us"); b = get(kn, "mean_us")
        ++lat_cases; if (a + 0 < b + 0) ++lat_met
        line[++nl] = sprintf("- QD1 rand%s, %s connection%s: mean latency zcstore_nbd %.1f µs vs nbdkit %.1f µs: **%s**.", rw, C[c], C[c] == 1 ? "" : "s",
          a, b, a + 0 < b + 0 ? "lower, met" : "not lower, not met")
      }
    }
    printf "**Aim 1 (≥ 2× nbdkit'"'"'s IOPS at QD64) is %s** (%d of %d cases). **Aim 2 (a lower QD1 mean latency than nbdkit) is %s** (%d of %d cases).\n\n",
      ((cases > 0 && met == cases) ? "met" : "not met"), met, cases, ((lat_cases > 0 && lat_met == lat_cases) ? "met" : "not met"), lat_met, lat_cases > verdict
    for (i = 1; i <= nl; ++i) print line[i] >> verdict
  }
' "$RESULTS"

if [ "${ZC_BENCH_NO_DOC:-0}" = 1 ]; then
  echo
  cat "$TABLE"
  echo
  cat "$VERDICT"
  [ -s "$PROFILE" ] && { echo; cat "$PROFILE"; }
  echo "(other processes using a CPU: ${BUSY_START:-none} at start, ${BUSY_END:-none} at end)"
  echo "(${ELAPSED} s; load average $LOAD_START → $LOAD_END; ZC_BENCH_NO_DOC=1: $DOC left alone)"
  exit $FAILED
fi

NBD_VERSION=$(nbdkit --version | awk '{ print $2 }')
FIO_VERSION=$(fio --version)
NOTE=$(bench_notes "$BUSY_START" "$BUSY_END")
# The standing analysis (from the tables, profiles and per-thread readings made when this was
# written); the tables above it are regenerated, it is not.
analysis() {
  cat <<'ANALYSIS'
### Why the aims are missed (analysis)

Standing notes from the runs made when this benchmark was written (2026-11-23, same machine, same placement; five runs, two with other engineers' builds busy on both cores, three quieter). The tables above are regenerated on every run; these notes are not.

- **zcstore's server side costs 1.5-3.5× nbdkit's CPU per IO, and that decides both aims.** Server CPU µs / IO (every server process, from /proc/PID/stat): about 105-120 µs against 30-42 µs at QD1; about 10-17 µs against 5.5-8.5 µs at QD64 on one connection; about 14-21 µs against 6-8 µs at QD64 on four. At QD64 the server core is saturated (87-100 % busy), so IOPS is that cost inverted: 0.4-0.9× nbdkit's IOPS, never 2×. At QD1 nothing overlaps, so a request takes at least the server's CPU per IO: zcstore's 105 µs alone exceeds nbdkit's whole 60-65 µs mean latency.
- **The CPU goes into waking threads, not into zcstore's code.** An NBD request crosses four threads in three processes, all on the one server core: zcstore_nbd's server thread (socket, epoll) hands it to zcstore_nbd's IO worker (a queue and a posted job), which sends it over comch to the service, which sends it over UCX to the target; the reply comes back the same way, the last hop through a queue and an eventfd. In event mode every hop to a sleeping thread is a wake-up and a context switch: about 11-13 switches per IO at QD1 on one connection, against nbdkit's 2.5 (one process; a connection thread and a worker thread). perf on zcstore_nbd and on the service (above) puts 70-90 % of their samples in the kernel, most of it the scheduler (`finish_task_switch`, `__schedule`) and wake-ups (`_raw_spin_unlock_irq*`); zcstore_nbd's own code is about 5 % of its samples, the copy of read data into the socket (`_copy_from_iter`) 3 %. At QD64 the requests that arrive together share the wake-ups (0.75-1.7 switches per IO, nbdkit 0.1-0.4), which is why the gap narrows there.
- **More connections cost zcstore_nbd more per IO; nbdkit does not.** At QD64, zcstore_nbd's own CPU per IO went from about 5 µs (reads) and 8-11 µs (writes) on one connection to 12-17 µs on four (it then took three quarters of the server core or more, the service and the target together about a fifth), while nbdkit's CPU per IO stayed near 6-8 µs. So zcstore's QD64 IOPS on four connections stayed at 55-70k whatever the load, while nbdkit's reached 115-155k. A measured lead for zcstore_nbd's owner: with requests from several sockets, the handoff between its server thread and its IO worker batches less.
- **One upside measured**: at QD64 on four connections nbdkit serves the connections unevenly (p99 16-18 ms against a p50 of 0.35-0.6 ms); zcstore_nbd's p99 is about half of nbdkit's or less (6-10 ms, p50 about 4 ms).
- **What would move the ratio** (not measured here): a core per process to busy-poll on, as zcstore is built for (no wake-ups; this VM has two cores for fio and four server processes), fewer threads on a request's path (zcstore_nbd's server thread submitting to the pipeline itself instead of through its IO worker), and real RDMA and comch hardware instead of their emulation over shared memory.
ANALYSIS
}
SECTION=$WORK/section.md
{
  echo "## nbd"
  echo
  echo "zcstore_nbd over the zero-copy pipeline beside \`nbdkit memory\`, both driven by fio's nbd engine (libnbd) in the same run on the same machine: 4 KiB random reads and writes, queue depth 1 and 64, 1 and 4 connections, 64 MiB of RAM behind each server. Generated by \`bench/run_nbd.sh\`; do not edit by hand."
  echo
  echo "- Command: \`scripts/dev.sh bench nbd\` (installs nbdkit, fio and jq if missing, builds build/release, then \`bench/run.sh build/release nbd\` → \`$INVOCATION\`), ${ELAPSED} s in total"
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(bench_machine), nbdkit $NBD_VERSION, $FIO_VERSION; load average $LOAD_START at start, $LOAD_END at end"
  echo "- Placement: **fio on cpu $CCPU; every server process on cpu $SCPU**: nbdkit, and \`zcstore_local\` with the three programs it starts (target, zero-copy service, zcstore_nbd; zcstore_local gives each \`--cpu $SCPU\`, the one core its affinity allows), all pinned with \`taskset -c\` and bounded with \`timeout\`. The zcstore programs run in poll mode $(bench_poll_why "$POLL"): three processes share the server core, and a busy poller would hold it for whole scheduler slices while the next step of the IO waits (see the pipeline section). nbdkit has no poll mode (its threads block in the kernel). So each server gets one core and fio the other."
  echo "- Servers, both up for the whole run: \`nbdkit -U SOCK --foreground -t $NBD_THREADS memory ${SIZE_MIB}M allocator=malloc\`; \`zcstore_local zero-copy --nbd SOCK --target-size ${SIZE_MIB}MiB --block-size 4096 --poll-mode $POLL -d $DEV -- --transaction-count $TRANSACTIONS\` (zcstore_nbd's line: \`$ZC_NBD_ARGV\`). Each disk filled once with \`fio --rw=write --bs=1m\`, so reads return written memory. zcstore_nbd at the end: ${SERVED:-no counters line}; zcstore_local's exit status after SIGTERM: $zc_rc (128 + 15, as documented), $STOP_SECS s after it."
  echo "- Per case: \`fio --name=X --ioengine=nbd --uri='nbd+unix:///?socket=SOCK' --rw=randread|randwrite --bs=4k --iodepth=QD --numjobs=CONNS --group_reporting --size=${SIZE_MIB}M --time_based --ramp_time=${RAMP_MS}ms --runtime=${RUNTIME_MS}ms --lat_percentiles=1 --output-format=json\` (${RAMP} s of ramp, then ${SECS} s measured; in milliseconds because fio 3.33 reads \`--ramp_time=0.5\` as no ramp). **Connections**: every fio job opens its own NBD connection, so 4 connections = \`--numjobs=4\`, and **the queue depth is per connection**: at QD64 with 4 connections 256 requests are in flight. Figures from jobs[0].read|write (all jobs summed by group_reporting): iops, and lat_ns (submission to completion) mean and percentiles."
  echo "- Rounds: $ROUNDS. In each, every case runs against both servers back to back, nbdkit first in odd rounds and zcstore first in even ones. Before each round the script waits up to ${QUIET_WAIT} s for the machine to be at most ${QUIET_PCT}% busy over a second; what it last measured, and the 1-minute load: $QUIET_ROUNDS. The table takes per server and case the round with the better IOPS, its latencies and CPU figures with it; \"all rounds\" lists every round's IOPS."
  echo "- CPU columns, over a window inside each measured run (from ${WIN_START} s after fio starts, ${WIN_LEN} s long: past the connects and the ramp, before the end, while every connection and every nbdkit thread is up): **server core busy** and **fio core busy** from cpu $SCPU's and cpu $CCPU's lines of /proc/stat (anything running there counts); **server processes** = utime + stime of each (/proc/PID/stat, CLK_TCK $CLK_TCK) / the window; **server CPU µs / IO** = the server processes' CPU seconds per second (zcstore_local's own included) / IOPS; **server context switches / IO** = voluntary + involuntary switches of the server processes' threads (/proc/PID/task/TID/status; threads alive at both ends of the window) over the window / (IOPS × the window)."
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
