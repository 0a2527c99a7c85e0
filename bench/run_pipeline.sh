#!/usr/bin/env bash
# bench/run_pipeline.sh BUILD_DIR: the pipeline benchmark (issue item 10).
# 4 KiB reads and writes at queue depth 1 and 64, one worker, IOPS and latency (mean, p50, p99),
# three ways in the same run on the same machine, against the same 64 MiB of RAM:
#   (a) pipeline: zcstore_initiator_comch --comch--> zcstore_comch_to_rdma_zero_copy --TCP
#       control + RDMA (UCX)--> zcstore_target_rdma, three processes;
#   (b) target:   zcstore_target_rdma driven directly by zc_target_bench (bench/target_bench.cpp,
#       this repository's service driver) — the pipeline minus the service;
#   (c) nbdkit:   `nbdkit memory` served over a Unix socket, driven by fio's nbd engine (libnbd):
#       the peer a user would pick instead.
# Every process is pinned with taskset and bounded with timeout. Prints a table and the ratios
# against the aims, and rewrites the "## pipeline" section of docs/BENCHMARKS.md.
#
# Placement on 2 cores (the defaults; the "Why this placement" text below says why):
# Before each round the script waits (up to ZC_BENCH_QUIET_WAIT s, default 30) until the machine
# is at most ZC_BENCH_QUIET_PCT % busy (default 15) over a second, and records what it measured.
#   cpu 1: the server of every case (target, nbdkit); the target busy-polls, alone on its core;
#   cpu 0: the client side: (a) initiator + service, both in event mode (they hand the core to
#          each other); (b) zc_target_bench, busy polling (alone); (c) fio.
# Each of (b), (a), (c) runs ROUNDS times, interleaved (round 1: b a c, round 2: b a c, ...); the
# table shows per case the round with the median IOPS, and the IOPS range over the rounds.
# Knobs: ZC_BENCH_SECONDS (per measurement, whole seconds for fio, default 2), ZC_BENCH_ROUNDS (default 3), ZC_BENCH_DEVICE (default auto),
# ZC_BENCH_CLIENT_CPU / ZC_BENCH_SERVICE_CPU / ZC_BENCH_TARGET_CPU (0 / 0 / 1),
# ZC_BENCH_CLIENT_POLL / ZC_BENCH_SERVICE_POLL / ZC_BENCH_TARGET_POLL (event / event / busy),
# ZC_BENCH_DRIVER_POLL ((b)'s driver, default busy), ZC_BENCH_NBDKIT_THREADS (default 16, nbdkit's own),
# ZC_BENCH_DOC (default docs/BENCHMARKS.md), ZC_BENCH_NO_DOC=1 (print only, for trying placements).
set -euo pipefail
# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
bench_setup pipeline "${1:-}"
TARGET=$BUILD/apps/target_rdma/zcstore_target_rdma
SERVICE=$BUILD/apps/comch_to_rdma_zero_copy/zcstore_comch_to_rdma_zero_copy
INITIATOR=$BUILD/apps/initiator_comch/zcstore_initiator_comch
SECS=${ZC_BENCH_SECONDS:-2}
ROUNDS=${ZC_BENCH_ROUNDS:-3}
QUIET_WAIT=${ZC_BENCH_QUIET_WAIT:-30}
QUIET_PCT=${ZC_BENCH_QUIET_PCT:-15}
DEV=${ZC_BENCH_DEVICE:-auto}
CCPU=${ZC_BENCH_CLIENT_CPU:-0}
SCPU=${ZC_BENCH_SERVICE_CPU:-0}
TCPU=${ZC_BENCH_TARGET_CPU:-1}
CPOLL=${ZC_BENCH_CLIENT_POLL:-event}
SPOLL=${ZC_BENCH_SERVICE_POLL:-event}
TPOLL=${ZC_BENCH_TARGET_POLL:-busy}
DPOLL=${ZC_BENCH_DRIVER_POLL:-busy}
NBD_THREADS=${ZC_BENCH_NBDKIT_THREADS:-16}
BLOCK=4096
BLOCKS=16384 # 64 MiB for every implementation
SIZE_MIB=$((BLOCK * BLOCKS / 1048576))
RUN_TIMEOUT=120

bench_require_commands "util-linux, coreutils, jq" taskset timeout jq
[ -x "$TARGET" ] || bench_die "$TARGET is missing (build the apps)"
[ -x "$BIN/zc_target_bench" ] || bench_die "$BIN/zc_target_bench is missing (build the bench targets)"
# (a) and (c) are reported as "not run" with the reason when their programs are missing.
PIPE_MISSING=""
for f in "$SERVICE" "$INITIATOR"; do [ -x "$f" ] || PIPE_MISSING="$PIPE_MISSING $(basename "$f")"; done
NBD_MISSING=""
command -v nbdkit >/dev/null || NBD_MISSING="nbdkit"
command -v fio >/dev/null || NBD_MISSING="$NBD_MISSING fio"
if [ -z "$NBD_MISSING" ] && ! fio --enghelp=nbd >/dev/null 2>&1; then NBD_MISSING="fio's nbd engine"; fi

BUSY_START=$(bench_busy_others)
FAILED=0

# ---- (b) the target driven directly: one target process, one driver session with every case.
run_target_direct() {
  local log=$WORK/target-direct.log port tpid ok=1 rc=0
  taskset -c "$TCPU" timeout "$RUN_TIMEOUT" "$TARGET" -d "$DEV" --cpu "$TCPU" --listen-port 0 \
    --poll-mode "$TPOLL" --block-size $BLOCK --block-count $BLOCKS >"$log" 2>&1 &
  tpid=$!
  PIDS+=("$tpid")
  if ! port=$(bench_wait_log "$log" 'listening on port [0-9]+' 10 "$tpid"); then
    echo "run_pipeline.sh: the target did not start:" >&2
    tail -n 20 "$log" >&2
    FAILED=1
    return
  fi
  port=${port##* }
  taskset -c "$CCPU" timeout "$RUN_TIMEOUT" "$BIN/zc_target_bench" --port "$port" --device "$DEV" \
    --cpu "$CCPU" --poll "$DPOLL" --seconds "$SECS" --qd 1,64 --size $BLOCK --tests read,write \
    >"$WORK/driver.log" 2>"$WORK/driver.err" || ok=0
  # -> result impl=target test=T qd=Q iops=I mean_us=M p50_us=P p99_us=P99 n=N
  awk '$1 == "result" {
         delete kv
         for (i = 2; i <= NF; ++i) { split($i, p, "="); kv[p[1]] = p[2] }
         printf "result impl=target test=%s qd=%s iops=%s mean_us=%s p50_us=%s p99_us=%s n=%s errors=%s\n",
           kv["test"], kv["qd"], kv["iops"], kv["mean_us"], kv["median_us"], kv["p99_us"], kv["n"], kv["errors"]
       }' "$WORK/driver.log" | tee -a "$RESULTS" | sed 's/^result /  /'
  if [ $ok = 0 ]; then
    echo "run_pipeline.sh: the target driver failed:" >&2
    cat "$WORK/driver.err" >&2
    tail -n 20 "$log" >&2
    kill "$tpid" 2>/dev/null || true
    FAILED=1
  fi
  wait "$tpid" 2>/dev/null || rc=$?
  if [ $ok = 1 ] && [ $rc != 0 ]; then
    echo "run_pipeline.sh: the target exited $rc:" >&2
    tail -n 20 "$log" >&2
    FAILED=1
  fi
}

# ---- (a) the pipeline: three fresh processes per run (the service serves one session).
# pipeline_once TEST QD OPS TAG: prints the stats JSON file on success.
pipeline_once() {
  local test=$1 qd=$2 ops=$3 tag=$4
  local dir=$WORK/pipe-$tag
  mkdir -p "$dir"
  local chan="zc-bench-$$-$tag" port tpid spid ok=1
  taskset -c "$TCPU" timeout "$RUN_TIMEOUT" "$TARGET" -d "$DEV" --cpu "$TCPU" --listen-port 0 \
    --poll-mode "$TPOLL" --block-size $BLOCK --block-count $BLOCKS >"$dir/target.log" 2>&1 &
  tpid=$!
  PIDS+=("$tpid")
  if ! port=$(bench_wait_log "$dir/target.log" 'listening on port [0-9]+' 10 "$tpid"); then
    echo "run_pipeline.sh: $tag: the target did not start:" >&2
    tail -n 20 "$dir/target.log" >&2
    kill "$tpid" 2>/dev/null || true
    return 1
  fi
  port=${port##* }
  taskset -c "$SCPU" timeout "$RUN_TIMEOUT" "$SERVICE" -d "$DEV" -r auto --cpu "$SCPU" \
    --storage-server "127.0.0.1:$port" --command-channel-name "$chan" --poll-mode "$SPOLL" \
    >"$dir/service.log" 2>&1 &
  spid=$!
  PIDS+=("$spid")
  if ! bench_wait_log "$dir/service.log" "listening on channel" 10 "$spid" >/dev/null; then
    echo "run_pipeline.sh: $tag: the service did not start:" >&2
    tail -n 20 "$dir/service.log" "$dir/target.log" >&2
    kill "$spid" "$tpid" 2>/dev/null || true
    return 1
  fi
  taskset -c "$CCPU" timeout "$RUN_TIMEOUT" "$INITIATOR" -d "$DEV" --cpu "$CCPU" \
    --execution-strategy "${test}_throughput_test" --run-limit-operation-count "$ops" \
    --transaction-count "$qd" --command-channel-name "$chan" --poll-mode "$CPOLL" \
    --stats-json "$dir/stats.json" --no-progress >"$dir/initiator.log" 2>&1 || ok=0
  local rc=0
  # The service ends with its session and stops the target; give both a moment, then make sure.
  for _ in $(seq 250); do
    kill -0 "$spid" 2>/dev/null || kill -0 "$tpid" 2>/dev/null || break
    sleep 0.02
  done
  kill "$spid" "$tpid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || rc=$?
  wait "$tpid" 2>/dev/null || true
  if [ $ok = 0 ] || [ ! -s "$dir/stats.json" ]; then
    echo "run_pipeline.sh: $tag: the initiator failed:" >&2
    tail -n 20 "$dir/initiator.log" "$dir/service.log" "$dir/target.log" >&2
    return 1
  fi
  echo "$dir/stats.json"
}

# last_iops IMPL TEST QD: the IOPS of the latest result of that case, or nothing.
last_iops() {
  awk -v i="impl=$1" -v t="test=$2" -v q="qd=$3" '$2 == i && $3 == t && $4 == q {
    split($5, p, "="); v = p[2] } END { if (v != "") print v }' "$RESULTS"
}

run_pipeline() {
  local test qd ref pilot ops stats
  for test in read write; do
    for qd in 1 64; do
      # Runs are bounded by an operation count, sized to last ~SECS from the rate of this case's
      # previous round; in the first round a pilot of ~0.5 s (sized from the target-direct rate)
      # measures it.
      ref=$(last_iops pipeline "$test" "$qd")
      if [ -z "$ref" ]; then
        ref=$(last_iops target "$test" "$qd")
        pilot=$(awk -v r="${ref:-20000}" 'BEGIN { n = int(r / 2); if (n < 5000) n = 5000; print n }')
        if ! stats=$(pipeline_once "$test" "$qd" "$pilot" "$test-$qd-$ROUND-pilot"); then FAILED=1; continue; fi
        ref=$(jq -r '.operation_count / .duration_seconds' "$stats" 2>/dev/null || echo 0)
      fi
      ops=$(awk -v r="$ref" -v s="$SECS" 'BEGIN { printf "%d", r * s }')
      ops=$(awk -v n="$ops" 'BEGIN { if (n < 10000) n = 10000; if (n > 50000000) n = 50000000; print n }')
      if ! stats=$(pipeline_once "$test" "$qd" "$ops" "$test-$qd-$ROUND"); then FAILED=1; continue; fi
      jq -r --arg t "$test" --arg q "$qd" '"result impl=pipeline test=\($t) qd=\($q) iops=\(.operation_count / .duration_seconds) mean_us=\(.latency_us.mean) p50_us=\(.latency_us.p50) p99_us=\(.latency_us.p99) n=\(.operation_count) seconds=\(.duration_seconds)"' \
        "$stats" | tee -a "$RESULTS" | sed 's/^result /  /' || FAILED=1
    done
  done
}

# ---- (c) nbdkit memory over a Unix socket, fio's nbd engine; one server for every case.
run_nbdkit() {
  local sock=$WORK/nbd-$ROUND.sock npid log=$WORK/nbdkit-$ROUND.log uri test qd rw
  taskset -c "$TCPU" timeout "$RUN_TIMEOUT" nbdkit -U "$sock" --foreground -t "$NBD_THREADS" \
    memory "${SIZE_MIB}M" allocator=malloc >"$log" 2>&1 &
  npid=$!
  PIDS+=("$npid")
  for _ in $(seq 500); do [ -S "$sock" ] && break; sleep 0.02; done
  if [ ! -S "$sock" ]; then
    echo "run_pipeline.sh: nbdkit did not start:" >&2
    cat "$log" >&2
    FAILED=1
    return
  fi
  uri="nbd+unix:///?socket=$sock"
  # Fill the disk once, so that reads return written memory like the targets' do.
  taskset -c "$CCPU" timeout "$RUN_TIMEOUT" fio --name=fill --ioengine=nbd --uri="$uri" --rw=write \
    --bs=1m --iodepth=4 --size="${SIZE_MIB}M" --output="$WORK/fill.json" --output-format=json \
    >/dev/null 2>"$WORK/fill.err" || { cat "$WORK/fill.err" >&2; FAILED=1; }
  for test in read write; do
    for qd in 1 64; do
      rw="rand$test"
      if ! taskset -c "$CCPU" timeout "$RUN_TIMEOUT" fio --name="$rw-$qd" --ioengine=nbd --uri="$uri" \
        --rw="$rw" --bs=4k --iodepth="$qd" --size="${SIZE_MIB}M" --time_based --ramp_time=500ms \
        --runtime="$SECS" --lat_percentiles=1 --output-format=json --output="$WORK/fio-$rw-$qd-$ROUND.json" \
        >/dev/null 2>"$WORK/fio-$rw-$qd-$ROUND.err"; then
        echo "run_pipeline.sh: fio $rw qd $qd failed:" >&2
        cat "$WORK/fio-$rw-$qd-$ROUND.err" >&2
        FAILED=1
        continue
      fi
      # lat = slat + clat: submission to completion, like the other two columns.
      jq -r --arg t "$test" --arg q "$qd" '.jobs[0][$t] as $j |
        "result impl=nbdkit test=\($t) qd=\($q) iops=\($j.iops) mean_us=\($j.lat_ns.mean / 1000) p50_us=\($j.lat_ns.percentile["50.000000"] / 1000) p99_us=\($j.lat_ns.percentile["99.000000"] / 1000) n=\($j.total_ios) errors=\(.jobs[0].error)"' \
        "$WORK/fio-$rw-$qd-$ROUND.json" | tee -a "$RESULTS" | sed 's/^result /  /' || FAILED=1
    done
  done
  kill "$npid" 2>/dev/null || true
  wait "$npid" 2>/dev/null || true
}

QUIET=""
for ROUND in $(seq "$ROUNDS"); do
  busy=$(bench_wait_quiet "$QUIET_WAIT" "$QUIET_PCT")
  QUIET="$QUIET${QUIET:+, }$busy%"
  echo "== round $ROUND of $ROUNDS (machine $busy% busy over the second before)"
  echo "-- (b) target direct: zc_target_bench on cpu $CCPU ($DPOLL), target on cpu $TCPU ($TPOLL), device $DEV"
  run_target_direct
  if [ -z "$PIPE_MISSING" ]; then
    echo "-- (a) pipeline: initiator on cpu $CCPU ($CPOLL), service on cpu $SCPU ($SPOLL), target on cpu $TCPU ($TPOLL), device $DEV"
    run_pipeline
  else
    echo "-- (a) pipeline: not run, programs missing:$PIPE_MISSING"
  fi
  if [ -z "$NBD_MISSING" ]; then
    echo "-- (c) nbdkit $(nbdkit --version | awk '{ print $2 }') memory (-t $NBD_THREADS) on cpu $TCPU, $(fio --version) nbd engine on cpu $CCPU"
    run_nbdkit
  else
    echo "-- (c) nbdkit: not run, missing:$NBD_MISSING"
  fi
done

bench_finish
BUSY_END=$(bench_busy_others)

# ---- the table and the ratios against the aims.
TABLE=$WORK/table.md
awk -v table="$TABLE" -v pipe_missing="$PIPE_MISSING" -v nbd_missing="$NBD_MISSING" '
  $1 == "result" {
    delete kv
    for (i = 2; i <= NF; ++i) { split($i, p, "="); kv[p[1]] = p[2] }
    k = kv["impl"] "|" kv["test"] "|" kv["qd"]
    r = ++rounds[k]
    for (f in kv) val[k "|" r "|" f] = kv[f]
    have[k] = 1
  }
  # The round with the median IOPS (the lower middle one of an even count).
  function pick(k,   n, i, j, t, idx) {
    if (k in chosen) return chosen[k]
    n = rounds[k]
    for (i = 1; i <= n; ++i) idx[i] = i
    for (i = 2; i <= n; ++i)
      for (j = i; j > 1 && val[k "|" idx[j - 1] "|iops"] + 0 > val[k "|" idx[j] "|iops"] + 0; --j) {
        t = idx[j]; idx[j] = idx[j - 1]; idx[j - 1] = t
      }
    lo[k] = val[k "|" idx[1] "|iops"]; hi[k] = val[k "|" idx[n] "|iops"]
    chosen[k] = idx[int((n + 1) / 2)]
    return chosen[k]
  }
  function get(impl, test, qd, f,   k, r) {
    k = impl "|" test "|" qd
    if (!(k in have)) return ""
    r = pick(k)
    return ((k "|" r "|" f) in val) ? val[k "|" r "|" f] : ""
  }
  function num(x, fmt) { return x == "" ? "n/a" : sprintf(fmt, x) }
  function iops(x) {
    if (x == "") return "n/a"
    if (x >= 1e6) return sprintf("%.2fM", x / 1e6)
    return sprintf("%.1fk", x / 1e3)
  }
  END {
    split("pipeline target nbdkit", impls, " ")
    name["pipeline"] = "(a) pipeline: initiator → service → target"
    name["target"] = "(b) target driven directly"
    name["nbdkit"] = "(c) nbdkit memory + fio nbd"
    print "| implementation | IO (4 KiB) | QD | IOPS (median round) | IOPS range over the rounds | mean µs | p50 µs | p99 µs |" > table
    print "|---|---|---|---|---|---|---|---|" >> table
    for (t = 1; t <= 2; ++t) {
      test = t == 1 ? "read" : "write"
      for (q = 1; q <= 2; ++q) {
        qd = q == 1 ? 1 : 64
        for (i = 1; i <= 3; ++i) {
          im = impls[i]
          k = im "|" test "|" qd
          if (!(k in have)) {
            why = "not run"
            if (im == "pipeline" && pipe_missing != "") why = "not run: programs missing (" substr(pipe_missing, 2) ")"
            if (im == "nbdkit" && nbd_missing != "") why = "not run: missing " substr(nbd_missing, 2)
            printf "| %s | %s | %s | %s | | | | |\n", name[im], test, qd, why >> table
            continue
          }
          cell = iops(get(im, test, qd, "iops"))
          e = 0
          for (r = 1; r <= rounds[k]; ++r) e += val[k "|" r "|errors"]
          if (e != "" && e != 0) cell = cell " (**" e " errors**)"
          range = iops(lo[k]) "–" iops(hi[k]) " (" rounds[k] ")"
          printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", name[im], test, qd, cell, range,
            num(get(im, test, qd, "mean_us"), "%.1f"), num(get(im, test, qd, "p50_us"), "%.1f"),
            num(get(im, test, qd, "p99_us"), "%.1f") >> table
        }
      }
    }
    print "" >> table
    print "| aim | read | write |" >> table
    print "|---|---|---|" >> table
    # Each cell: the figure from the median rounds, then its extremes over every pairing of
    # rounds; the verdict is "met" or "missed" only when every pairing agrees, else "unclear".
    row = "| QD64 IOPS, pipeline / nbdkit (aim ≥ 3×) |"
    for (t = 1; t <= 2; ++t) {
      test = t == 1 ? "read" : "write"
      a = get("pipeline", test, 64, "iops"); c = get("nbdkit", test, 64, "iops")
      if (a == "" || c == "" || c == 0) { row = row " n/a |"; continue }
      l = ext("pipeline", test, 64, "iops", 0) / ext("nbdkit", test, 64, "iops", 1)
      h = ext("pipeline", test, 64, "iops", 1) / ext("nbdkit", test, 64, "iops", 0)
      row = row sprintf(" %.2f× (rounds %.2f×–%.2f×) %s |", a / c, l, h, verdict(l >= 3, h < 3))
    }
    print row >> table
    row = "| QD1 mean latency, pipeline vs nbdkit (aim: below) |"
    for (t = 1; t <= 2; ++t) {
      test = t == 1 ? "read" : "write"
      a = get("pipeline", test, 1, "mean_us"); c = get("nbdkit", test, 1, "mean_us")
      if (a == "" || c == "") { row = row " n/a |"; continue }
      al = ext("pipeline", test, 1, "mean_us", 0); ah = ext("pipeline", test, 1, "mean_us", 1)
      cl = ext("nbdkit", test, 1, "mean_us", 0); ch = ext("nbdkit", test, 1, "mean_us", 1)
      row = row sprintf(" %.1f vs %.1f µs (rounds %.1f–%.1f vs %.1f–%.1f) %s |", a, c, al, ah, cl, ch,
        verdict(ah < cl, al >= ch))
    }
    print row >> table
    row = "| QD64 service overhead, 1 − pipeline IOPS / target-direct IOPS (aim ≤ 25%) |"
    for (t = 1; t <= 2; ++t) {
      test = t == 1 ? "read" : "write"
      a = get("pipeline", test, 64, "iops"); b = get("target", test, 64, "iops")
      if (a == "" || b == "" || b == 0) { row = row " n/a |"; continue }
      l = 1 - ext("pipeline", test, 64, "iops", 1) / ext("target", test, 64, "iops", 0)
      h = 1 - ext("pipeline", test, 64, "iops", 0) / ext("target", test, 64, "iops", 1)
      row = row sprintf(" %.0f%% (rounds %.0f%%–%.0f%%) %s |", 100 * (1 - a / b), 100 * l, 100 * h,
        verdict(h <= 0.25, l > 0.25))
    }
    print row >> table
  }
  # The smallest (hi = 0) or largest (hi = 1) value of field f over the rounds of a case.
  function ext(impl, test, qd, f, hi,   k, r, v, x) {
    k = impl "|" test "|" qd
    for (r = 1; r <= rounds[k]; ++r) {
      x = val[k "|" r "|" f] + 0
      if (r == 1 || (hi ? x > v : x < v)) v = x
    }
    return v
  }
  function verdict(met, missed) { return met ? "(met)" : missed ? "(**missed**)" : "(unclear: the rounds disagree)" }
' "$RESULTS"

if [ "${ZC_BENCH_NO_DOC:-0}" = 1 ]; then
  echo
  cat "$TABLE"
  echo "(other processes using a CPU: ${BUSY_START:-none} at start, ${BUSY_END:-none} at end)"
  echo "(${ELAPSED} s; load average $LOAD_START → $LOAD_END; ZC_BENCH_NO_DOC=1: $DOC left alone)"
  exit $FAILED
fi

NBD_VERSION=$( (nbdkit --version 2>/dev/null || true) | awk '{ print $2 }')
FIO_VERSION=$( (fio --version 2>/dev/null || true))
NOTE=$(bench_notes "$BUSY_START" "$BUSY_END")
SECTION=$WORK/section.md
{
  echo "## pipeline"
  echo
  echo "The whole pipeline (initiator → comch → zero-copy service → TCP control + RDMA over UCX → RAM target) beside the same target driven directly and beside nbdkit, measured in the same run on the same machine: 4 KiB IOs at queue depth 1 and 64, one worker, 64 MiB of RAM behind each. Generated by \`bench/run_pipeline.sh\`; do not edit by hand."
  echo
  echo "- Command: \`scripts/dev.sh bench pipeline\` (installs nbdkit, fio and jq if missing, builds build/release, then \`bench/run.sh build/release pipeline\` → \`$INVOCATION\`), ${ELAPSED} s in total"
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(bench_machine), nbdkit ${NBD_VERSION:-?}, ${FIO_VERSION:-fio ?}; load average $LOAD_START at start, $LOAD_END at end"
  echo "- Placement and poll modes: target and nbdkit on cpu $TCPU, target $(bench_poll_why "$TPOLL"); (a) initiator on cpu $CCPU, $(bench_poll_why "$CPOLL"), service on cpu $SCPU, $(bench_poll_why "$SPOLL"); (b) driver on cpu $CCPU, $(bench_poll_why "$DPOLL"); (c) fio on cpu $CCPU. UCX device \`$DEV\`; UCX_MM_ERROR_HANDLING=y, UCX_KEEPALIVE_INTERVAL=1s everywhere."
  echo "- Rounds: $ROUNDS, interleaved (each round runs (b), then (a), then (c), every case; before each, up to ${QUIET_WAIT} s of waiting for the machine to be at most ${QUIET_PCT}% busy over a second: it was $QUIET); the table shows per case the round with the median IOPS (its latencies too) and the IOPS range over the rounds: the machine is shared, and a single run can be off by several times."
  echo "- Processes (every one \`taskset -c CPU timeout $RUN_TIMEOUT ...\`; PORT from the target's \"listening on port\" line, NAME a fresh channel name per run):"
  echo "  - (a) target: \`zcstore_target_rdma -d $DEV --cpu $TCPU --listen-port 0 --poll-mode $TPOLL --block-size $BLOCK --block-count $BLOCKS\`; service: \`zcstore_comch_to_rdma_zero_copy -d $DEV -r auto --cpu $SCPU --storage-server 127.0.0.1:PORT --command-channel-name NAME --poll-mode $SPOLL\`; initiator: \`zcstore_initiator_comch -d $DEV --cpu $CCPU --execution-strategy read_throughput_test|write_throughput_test --run-limit-operation-count N --transaction-count QD --command-channel-name NAME --poll-mode $CPOLL --stats-json FILE --no-progress\`. Three fresh processes per run (the service serves one session). N is set so that the run lasts about ${SECS} s at the rate of the case's previous round (first round: a pilot run of about 0.5 s measures it). IOPS = operation_count / duration_seconds of the stats JSON; latencies are its latency_us fields, in whole microseconds: the mean exact, p50 and p99 the upper edge of a log-linear histogram bucket (32 per power of two, so up to ~3 % high). Latency is the initiator's: IO submitted → response received, both comch hops and the service included."
  echo "  - (b) target: as in (a); driver: \`zc_target_bench --port PORT --device $DEV --cpu $CCPU --poll $DPOLL --seconds $SECS --qd 1,64 --size $BLOCK --tests read,write\` (one session; per case a closed loop, 0.2 s warm-up, ${SECS} s measured)."
  echo "  - (c) \`nbdkit -U SOCK --foreground -t $NBD_THREADS memory ${SIZE_MIB}M allocator=malloc\` (a flat malloc'd buffer, nbdkit's fastest allocator; filled once with \`fio --rw=write --bs=1m\` so reads return written memory), then per case \`fio --name=X --ioengine=nbd --uri='nbd+unix:///?socket=SOCK' --rw=randread|randwrite --bs=4k --iodepth=QD --size=${SIZE_MIB}M --time_based --ramp_time=500ms --runtime=$SECS --lat_percentiles=1 --output-format=json\`; figures from jobs[0].read|write: iops and lat_ns (submission to completion, slat + clat), mean and percentiles."
  echo
  echo "Why this placement: three processes share two cores, and two processes that both busy-poll on one core do not take turns per message: each runs for a whole scheduler slice (milliseconds) while the other, which holds the next step of the IO, waits (measured: all three busy, initiator and service sharing cpu 0, 39 IOPS at QD1, 3k at QD64). So at most one process per core may busy-poll, and a core's other process must sleep when idle. The target gets cpu $TCPU to itself and busy-polls, exactly as in (b), so that (a) − (b) is the service and the core sharing it brings. The initiator and the service share cpu $CCPU in event mode: each sleeps in epoll as soon as it has nothing to do and the other runs at once; a wake-up on the same core costs a few µs, against 70–100 µs across cores in these VMs (UCX_MEASURED.md §6). The programs' default, adaptive, keeps spinning for 200 µs after every hit, i.e. all the time under load, which is busy mode's contention again. Placements tried before choosing (read, 5k–50k IOs each, the machine shared with builds): target event + service event on cpu 1, initiator busy on cpu 0: 118 µs mean at QD1, 3.8k IOPS at QD64 (IOs complete in batches on a ~16 ms tick); target busy on cpu 1, service busy + initiator event on cpu 0: 74–108 µs, 19–30k; service event + initiator busy on cpu 0: 135 µs, 9k; service event + initiator adaptive: 128 µs, 39k; service event + initiator event (chosen): 60 µs, 68k. In (b) the driver is alone on cpu $CCPU and busy-polls. nbdkit has no poll mode (its threads block in the kernel; -t $NBD_THREADS worker threads, nbdkit's default: -t 1, 2 and 4 measured no faster at QD64 on one core); it gets the server core, fio (libnbd, which waits in poll(2)) the client core."
  echo
  echo "The zcstore programs walk the storage block by block; fio picks random blocks. Every backend is RAM, so the order changes nothing that is measured."
  echo
  echo "The aims (second table): each cell gives the figure from the cases' median rounds, then its extremes over every pairing of rounds (best IOPS against worst and so on); the verdict is met or missed only when every pairing agrees, else unclear."
  echo
  if [ -n "$NOTE" ]; then echo "$NOTE"; echo; fi
  cat "$TABLE"
} >"$SECTION"

bench_write_section pipeline "$SECTION"

echo
cat "$TABLE"
echo
echo "(${ELAPSED} s; load average $LOAD_START → $LOAD_END; written to the ## pipeline section of $DOC)"
exit $FAILED
