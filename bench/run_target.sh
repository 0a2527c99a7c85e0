#!/usr/bin/env bash
# bench/run_target.sh BUILD_DIR: the target benchmark (issue 4, item 5).
# A real zcstore_target_rdma (pinned to cpu 1, --cpu 1, busy polling) driven directly by
# zc_target_bench (bench/target_bench.cpp: this repository's service driver, pinned to cpu 0, busy
# polling): 4 KiB reads and writes at queue depths 1, 32 and 64, IOPS and latency (median, p99),
# over shared memory ("sm") and TCP on loopback ("tcp"). In the same run, the raw rdma figures of
# bench/run_rdma.sh's programs for the transfer the target makes (zc_rdma_bench: zcstore's rdma
# layer; zc_ucx_raw_bench: UCX alone), memory owner on cpu 0 and initiator on cpu 1 like the
# driver and the target. Every process is bounded with timeout. Prints a table and rewrites the
# "## target" section of docs/BENCHMARKS.md.
# The rdma rows come from the same programs, arguments and helper (bench/common.sh bench_pair) as
# bench/run_rdma.sh's, and, like there, every measurement runs ZC_BENCH_ROUNDS times (default 2)
# and the table keeps each row's best round: interference from other processes only slows a run.
# Knobs: ZC_BENCH_SECONDS (per measurement, default 2), ZC_BENCH_ROUNDS (default 2),
# ZC_BENCH_DEVICES (default "sm tcp"),
# ZC_BENCH_TARGET_CPU / ZC_BENCH_DRIVER_CPU (1 / 0), ZC_BENCH_DOC (default docs/BENCHMARKS.md).
set -euo pipefail
# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
bench_setup target "${1:-}"
TARGET=$BUILD/apps/target_rdma/zcstore_target_rdma
SECS=${ZC_BENCH_SECONDS:-2}
ROUNDS=${ZC_BENCH_ROUNDS:-2}
DEVICES=${ZC_BENCH_DEVICES:-"sm tcp"}
TCPU=${ZC_BENCH_TARGET_CPU:-1}
DCPU=${ZC_BENCH_DRIVER_CPU:-0}
RUN_TIMEOUT=180
DEPTHS="1,32,64"

for f in "$BIN/zc_target_bench" "$TARGET"; do
  [ -x "$f" ] || bench_die "$f is missing (build the apps and bench targets)"
done
bench_require_commands "util-linux, coreutils" taskset timeout
HAVE_RDMA=1
for b in zc_rdma_bench zc_ucx_raw_bench; do [ -x "$BIN/$b" ] || HAVE_RDMA=0; done

FAILED=0

# run_target DEVICE: one target process, one driver session with every case.
run_target() {
  local dev=$1 port
  local log=$WORK/target-$dev.log
  port=$(bench_free_port)
  # shellcheck disable=SC2046
  env $(bench_dev_env "$dev") taskset -c "$TCPU" timeout "$RUN_TIMEOUT" "$TARGET" -d "$dev" --cpu "$TCPU" \
    --listen-port "$port" --poll-mode busy --block-size 4096 --block-count 4096 >"$log" 2>&1 &
  local tpid=$!
  PIDS+=("$tpid")
  local ok=1
  # shellcheck disable=SC2046
  env $(bench_dev_env "$dev") taskset -c "$DCPU" timeout "$RUN_TIMEOUT" "$BIN/zc_target_bench" --port "$port" \
    --device "$dev" --cpu "$DCPU" --poll busy --seconds "$SECS" --qd "$DEPTHS" --size 4096 \
    >"$WORK/driver-$dev.log" 2>"$WORK/driver-$dev.err" || ok=0
  grep '^result ' "$WORK/driver-$dev.log" | tee -a "$RESULTS" | sed 's/^result /  /' || true
  if [ $ok = 0 ]; then
    echo "run_target.sh: $dev driver failed:" >&2
    cat "$WORK/driver-$dev.err" "$log" >&2 || true
    kill "$tpid" 2>/dev/null || true
    FAILED=1
  fi
  local rc=0
  wait "$tpid" 2>/dev/null || rc=$?
  if [ $ok = 1 ] && [ $rc != 0 ]; then
    echo "run_target.sh: $dev target exited $rc:" >&2
    tail -n 20 "$log" >&2
    FAILED=1
  fi
  # The target's own count of transfers, for the record.
  grep -A1 '^| Core' "$log" | sed 's/^/  target: /' || true
}

# run_pair LABEL PROGRAM DEVICE TAG "SERVER ARGS" "CLIENT ARGS": memory owner (server) on the
# driver's cpu, initiator (client) on the target's; TAG (the queue depth of the rate tests, which
# they do not print) is appended to every result line.
run_pair() { bench_pair "$1" "$2" "$3" "$DCPU" "$TCPU" "$RUN_TIMEOUT" "$5" "$6" "$4" || true; }

for round in $(seq "$ROUNDS"); do
  for dev in $DEVICES; do
    echo "-- round $round/$ROUNDS, $dev: target (driver on cpu $DCPU, target on cpu $TCPU, busy polling)"
    run_target "$dev"
    if [ $HAVE_RDMA = 1 ]; then
      echo "-- round $round/$ROUNDS, $dev: rdma layer (zc_rdma_bench), 4 KiB"
      run_pair "zc-$dev-$round" zc_rdma_bench "$dev" "qd=32" "--poll busy" \
        "--poll busy --seconds $SECS --tests pingpong,read_lat,write_lat,read_bw,write_bw --sizes 4096 --qd 32"
      run_pair "zc64-$dev-$round" zc_rdma_bench "$dev" "qd=64" "--poll busy" \
        "--poll busy --seconds $SECS --tests read_bw,write_bw --sizes 4096 --qd 64"
      echo "-- round $round/$ROUNDS, $dev: raw UCP get / put+flush (zc_ucx_raw_bench), 4 KiB"
      run_pair "raw-$dev-$round" zc_ucx_raw_bench "$dev" "qd=32" "--max-seconds $RUN_TIMEOUT" \
        "--seconds $SECS --sizes 4096 --qd 32"
    fi
  done
done

bench_finish

# ---- the table: one row per (transport, operation, depth), the raw transfer beside it.
TABLE=$WORK/table.md
awk -v devices="$DEVICES" -v table="$TABLE" '
  # One line per measurement and round; keep the best round (lowest median where there is one
  # (QD1), else highest rate), as bench/run_rdma.sh does.
  $1 == "result" {
    delete kv
    for (i = 2; i <= NF; ++i) { split($i, p, "="); kv[p[1]] = p[2] }
    k = kv["impl"] "|" kv["dev"] "|" kv["test"] "|" kv["qd"]
    lower = ("median_us" in kv) && (kv["qd"] == 1 || !("ops_s" in kv) && !("iops" in kv))
    m = lower ? kv["median_us"] + 0 : ("iops" in kv ? kv["iops"] : kv["ops_s"]) + 0
    if (!(k in have) || (lower ? m < best[k] : m > best[k])) {
      best[k] = m
      for (f in kv) val[k "|" f] = kv[f]
    }
    have[k] = 1
  }
  function get(impl, dev, test, qd, f,   k) {
    k = impl "|" dev "|" test "|" qd
    return (k in have) && ((k "|" f) in val) ? val[k "|" f] : ""
  }
  function si(x) {
    if (x == "") return "n/a"
    if (x >= 1e6) return sprintf("%.2fM", x / 1e6)
    if (x >= 1e3) return sprintf("%.0fk", x / 1e3)
    return sprintf("%.0f", x)
  }
  function lat(impl, dev, test, qd,   m, p) {
    m = get(impl, dev, test, qd, "median_us"); p = get(impl, dev, test, qd, "p99_us")
    return m == "" ? "n/a" : sprintf("%.1f / %.1f µs", m, p)
  }
  # The raw cell: latency at QD1, op/s at QD32/64.
  function raw(impl, dev, lat_test, bw_test, qd) {
    if (qd == 1) return lat(impl, dev, lat_test, "32")
    return get(impl, dev, bw_test, qd, "ops_s") == "" ? "n/a" : si(get(impl, dev, bw_test, qd, "ops_s")) " op/s"
  }
  END {
    print "| transport | IO (4 KiB) | QD | target IOPS | target latency median / p99 (mean) | rdma transfer the target makes | zcstore rdma layer (same transfer) | raw UCX (same transfer) |" > table
    print "|---|---|---|---|---|---|---|---|" >> table
    n = split(devices, devs, " ")
    split("1 32 64", depths, " ")
    for (i = 1; i <= n; ++i) {
      d = devs[i]
      for (j = 1; j <= 2; ++j) {
        io = j == 1 ? "read" : "write"
        # A target read is an rdma write into the requester; a target write an rdma read.
        zl = j == 1 ? "write_lat" : "read_lat"; zb = j == 1 ? "write_bw" : "read_bw"
        rl = j == 1 ? "put_lat" : "get_lat"; rb = j == 1 ? "put_bw" : "get_bw"
        xfer = j == 1 ? "write (put + flush)" : "read (get)"
        for (q = 1; q <= 3; ++q) {
          qd = depths[q]
          errs = get("target", d, io, qd, "errors")
          cell = si(get("target", d, io, qd, "iops"))
          if (errs != "" && errs != 0) cell = cell " (**" errs " errors**)"
          tl = lat("target", d, io, qd)
          mean = get("target", d, io, qd, "mean_us")
          if (mean != "") tl = tl sprintf(" (mean %.1f)", mean)
          printf "| %s | %s | %s | %s | %s | %s QD%s | %s | %s |\n", d, io, qd, cell,
            tl, xfer, qd, raw("zc", d, zl, zb, qd),
            (qd == 64 ? "—" : raw("raw", d, rl, rb, qd)) >> table
        }
      }
    }
    # The two IO messages of every IO, alone: the rdma layer 64-byte send/recv ping-pong.
    print "" >> table
    print "| transport | 64 B send/recv one-way (RTT/2), zcstore rdma layer: median / p99 |" >> table
    print "|---|---|" >> table
    for (i = 1; i <= n; ++i)
      printf "| %s | %s |\n", devs[i], lat("zc", devs[i], "pingpong", "32") >> table
  }
' "$RESULTS"

NOTE=$(bench_load_note "$BENCH_NOISY")

SECTION=$WORK/section.md
{
  echo "## target"
  echo
  echo "zcstore_target_rdma driven directly by the service driver of the integration tests, beside the raw rdma figures measured in the same run. Generated by \`bench/run_target.sh\`; do not edit by hand."
  echo
  echo "- Command: \`scripts/dev.sh bench target\` (builds build/release, then \`bench/run.sh build/release target\` → \`$INVOCATION\`), ${ELAPSED} s in total"
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(bench_machine); load average $LOAD_START at start, $LOAD_END at end"
  echo "- $ROUNDS rounds, each running the target and the rdma programs below once per transport; the table keeps each row's best round (lowest median at QD1 and for the rdma latencies, highest rate otherwise), as \`bench rdma\` does, because interference from other processes only slows a run down. The rdma columns come from the same programs, arguments and helper (\`bench_pair\` in bench/common.sh) as \`bench rdma\`'s rows."
  echo "- Processes (DEV = sm | tcp; tcp runs UCX_NET_DEVICES=lo; UCX_MM_ERROR_HANDLING=y, UCX_KEEPALIVE_INTERVAL=1s everywhere):"
  echo "  - target: \`taskset -c $TCPU timeout $RUN_TIMEOUT zcstore_target_rdma -d DEV --cpu $TCPU --listen-port PORT --poll-mode busy --block-size 4096 --block-count 4096\`"
  echo "  - driver: \`taskset -c $DCPU timeout $RUN_TIMEOUT zc_target_bench --port PORT --device DEV --cpu $DCPU --poll busy --seconds $SECS --qd $DEPTHS --size 4096\`: one session (query, init with 2 × 64 transactions, both rdma connections, start), then per IO type and depth a closed loop (each response resubmits its slot at the next block), 0.2 s warm-up, ${SECS} s measured; stop, shutdown"
  if [ $HAVE_RDMA = 1 ]; then
    echo "  - rdma layer: \`taskset -c $DCPU zc_rdma_bench server DIR DEV --cpu $DCPU --poll busy &\` then \`taskset -c $TCPU zc_rdma_bench client DIR DEV --cpu $TCPU --poll busy --seconds $SECS --tests pingpong,read_lat,write_lat,read_bw,write_bw --sizes 4096 --qd 32\` (and \`--tests read_bw,write_bw --qd 64\`)"
    echo "  - raw UCX: \`taskset -c $DCPU zc_ucx_raw_bench server DIR DEV --cpu $DCPU --max-seconds $RUN_TIMEOUT &\` then \`taskset -c $TCPU zc_ucx_raw_bench client DIR DEV --cpu $TCPU --seconds $SECS --sizes 4096 --qd 32\`"
  fi
  echo
  echo "What is measured: an IO is the driver's 64-byte request send → the target's checks and its rdma transfer against the driver's exported memory (a read is an rdma **write** into the requester, a write an rdma **read** from it) → the target's response send → the driver's receive. Latency = request submitted → response received, median / p99 (and mean, which with IOPS obeys Little's law: QD = IOPS × mean) over every IO of the measured window; IOPS = responses / window. The rdma columns show the transfer alone, with the memory owner on the driver's cpu and the initiator on the target's: at QD1 its latency (median / p99), at QD32/64 its rate (zc_rdma_bench: each completion resubmits its slot; raw: 32 ops + one flush, repeated; raw has no QD64 run). At QD1 a target IO costs about two one-way messages (second table) plus the transfer; what is left is the target's bookkeeping. Tails in the milliseconds that also show in the rdma layer's own rows (its ping-pong in particular) come from below the target: UCX's transport and the scheduling of two busy-polling processes on a shared machine."
  echo
  if [ $HAVE_RDMA = 0 ]; then
    echo "**The rdma programs (bench/rdma_bench.cpp → zc_rdma_bench, bench/ucx_raw_bench.cpp → zc_ucx_raw_bench) were not built in $BUILD, so the raw columns are empty.**"
    echo
  fi
  if [ -n "$NOTE" ]; then echo "$NOTE"; echo; fi
  cat "$TABLE"
} >"$SECTION"

bench_write_section target "$SECTION"

echo
cat "$TABLE"
echo
echo "(${ELAPSED} s; load average $LOAD_START → $LOAD_END; written to the ## target section of $DOC)"
exit $FAILED
