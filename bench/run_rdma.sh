#!/usr/bin/env bash
# bench/run_rdma.sh BUILD_DIR: the rdma benchmark (issue 2, item 5).
# zcstore's rdma layer (bench/rdma_bench.cpp) against raw UCX measured in the same invocation:
# ucx_perftest ucp_am_lat / ucp_am_bw at 64 B and a raw-UCP get / put+flush program
# (bench/ucx_raw_bench.cpp) on registered application memory. Every run is two processes pinned
# with taskset (server on cpu 0, client on cpu 1), busy polling, bounded with timeout, over shared
# memory ("sm") and TCP on loopback ("tcp"). Prints a side-by-side table and rewrites the
# "## rdma" section of docs/BENCHMARKS.md.
# Every measurement runs in ZC_BENCH_ROUNDS rounds (default 2) of ZC_BENCH_SECONDS (default 1) and
# the table keeps the best round per row: on these shared machines interference only slows a run.
# Knobs: ZC_BENCH_SECONDS, ZC_BENCH_ROUNDS, ZC_BENCH_DEVICES (default "sm tcp"),
# ZC_BENCH_SERVER_CPU / ZC_BENCH_CLIENT_CPU (0 / 1), ZC_BENCH_DOC (default docs/BENCHMARKS.md).
set -euo pipefail
# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
bench_setup rdma "${1:-}"
SECS=${ZC_BENCH_SECONDS:-1}
ROUNDS=${ZC_BENCH_ROUNDS:-2}
DEVICES=${ZC_BENCH_DEVICES:-"sm tcp"}
SCPU=${ZC_BENCH_SERVER_CPU:-0}
CCPU=${ZC_BENCH_CLIENT_CPU:-1}
PAIR_TIMEOUT=120
BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)

for b in zc_rdma_bench zc_ucx_raw_bench; do
  [ -x "$BIN/$b" ] || bench_die "$BIN/$b is missing (build the bench targets)"
done
bench_require_commands "ucx-utils, util-linux, coreutils" ucx_perftest taskset timeout

# ucx_perftest: UCX_TLS=tcp for tcp, UCX's default (shared memory on one host) for sm.
perftest_env() { if [ "$1" = tcp ]; then echo UCX_TLS=tcp UCX_NET_DEVICES=lo; fi; }

# run_pair LABEL PROGRAM DEVICE "SERVER ARGS" "CLIENT ARGS": server on SCPU, client on CCPU.
run_pair() { bench_pair "$1" "$2" "$3" "$SCPU" "$CCPU" "$PAIR_TIMEOUT" "$4" "$5" || true; }

# perftest DEVICE TEST ITERATIONS WARMUP [extra client args]: prints the final numbers line.
perftest() {
  local dev=$1 test=$2 n=$3 w=$4
  shift 4
  local port
  port=$(bench_free_port)
  # shellcheck disable=SC2046
  env $(perftest_env "$dev") taskset -c "$SCPU" timeout 60 ucx_perftest -p "$port" \
    >"$WORK/perftest-server.log" 2>&1 &
  local spid=$!
  PIDS+=("$spid")
  for _ in $(seq 500); do bench_listening "$port" && break; sleep 0.01; done
  local out
  # shellcheck disable=SC2046
  out=$(env $(perftest_env "$dev") taskset -c "$CCPU" timeout 60 ucx_perftest 127.0.0.1 -p "$port" \
    -t "$test" -s 64 -n "$n" -w "$w" -f "$@" 2>&1) || {
    echo "run_rdma.sh: ucx_perftest $test failed: $out" >&2
    kill "$spid" 2>/dev/null || true
  }
  bench_reap "$spid" || true
  # Final line: iterations, latency (percentile, average, overall), MB/s (avg, overall),
  # msg/s (avg, overall).
  echo "$out" | awk '/^ *[0-9]+ +[0-9.]+ +[0-9.]+/ { line = $0 } END { print line }'
}

run_perftest() {
  local dev=$1 lat_n am_n
  if [ "$dev" = tcp ]; then lat_n=200000 am_n=600000; else lat_n=1000000 am_n=5000000; fi
  local p50 p99 bw
  p50=$(perftest "$dev" ucp_am_lat "$lat_n" 10000 -R 50)
  p99=$(perftest "$dev" ucp_am_lat "$lat_n" 10000 -R 99)
  bw=$(perftest "$dev" ucp_am_bw "$am_n" 50000)
  if [ -n "$p50" ] && [ -n "$p99" ]; then
    echo "result impl=perftest dev=$dev mode=busy test=am_lat size=64 n=$(echo "$p50" | awk '{print $1}') median_us=$(echo "$p50" | awk '{print $2}') p99_us=$(echo "$p99" | awk '{print $2}')" |
      tee -a "$RESULTS" | sed 's/^result /  /'
  fi
  if [ -n "$bw" ]; then
    echo "result impl=perftest dev=$dev mode=busy test=am_bw size=64 n=$(echo "$bw" | awk '{print $1}') ops_s=$(echo "$bw" | awk '{print $8}') mb_s=$(echo "$bw" | awk '{print $6}')" |
      tee -a "$RESULTS" | sed 's/^result /  /'
  fi
}

for round in $(seq "$ROUNDS"); do
  for dev in $DEVICES; do
    echo "-- round $round/$ROUNDS, $dev: zcstore (busy polling)"
    run_pair "zc-$dev-$round" zc_rdma_bench "$dev" "--poll busy" "--poll busy --seconds $SECS"
    echo "-- round $round/$ROUNDS, $dev: raw UCP"
    run_pair "raw-$dev-$round" zc_ucx_raw_bench "$dev" "--max-seconds $PAIR_TIMEOUT" \
      "--seconds $SECS --tests am_lat,am_rate,get_lat,put_lat,get_bw,put_bw"
    echo "-- round $round/$ROUNDS, $dev: ucx_perftest"
    run_perftest "$dev"
    echo "-- round $round/$ROUNDS, $dev: zcstore (event mode, for information)"
    run_pair "zc-event-$dev-$round" zc_rdma_bench "$dev" "--poll event" \
      "--poll event --seconds $SECS --tests read_lat --sizes 4096"
  done
done

bench_finish

# ---- the table
TABLE=$WORK/table.md
VERDICTS=$WORK/verdicts.md
awk -v devices="$DEVICES" -v table="$TABLE" -v verdicts="$VERDICTS" '
  # One line per measurement and round; keep the best round (lowest median, highest rate) and the
  # spread of that metric over the rounds.
  $1 == "result" {
    delete kv
    for (i = 2; i <= NF; ++i) { split($i, p, "="); kv[p[1]] = p[2] }
    k = kv["impl"] "|" kv["dev"] "|" kv["mode"] "|" kv["test"] "|" kv["size"]
    lower = ("median_us" in kv)
    m = (lower ? kv["median_us"] : kv["ops_s"]) + 0
    if (!(k in have)) { lo[k] = m; hi[k] = m }
    if (m < lo[k]) lo[k] = m
    if (m > hi[k]) hi[k] = m
    if (!(k in have) || (lower ? m < best[k] : m > best[k])) {
      best[k] = m
      for (f in kv) val[k "|" f] = kv[f]
    }
    have[k] = 1
  }
  function noisy(impl, dev, mode, test, size,   k) {
    k = impl "|" dev "|" mode "|" test "|" size
    return (k in have) && lo[k] > 0 && hi[k] / lo[k] > 1.3
  }
  function get(impl, dev, mode, test, size, f,   k) {
    k = impl "|" dev "|" mode "|" test "|" size
    return (k in have) && ((k "|" f) in val) ? val[k "|" f] : ""
  }
  function si(x) {
    if (x >= 1e6) return sprintf("%.2fM", x / 1e6)
    if (x >= 1e5) return sprintf("%.0fk", x / 1e3)
    if (x >= 1e3) return sprintf("%.1fk", x / 1e3)
    return sprintf("%.0f", x)
  }
  function kib(s) { return s >= 1024 ? (s / 1024) " KiB" : s " B" }
  function verdict(ok, text) {
    if (ok) met = met "\n- met: " text
    else unmet = unmet "\n- **not met**: " text
  }
  # A latency row: cells "median / p99 us", ratio on the median (p99 ratio in brackets).
  function lat_row(dev, op, size, zt, zmode, rimpl, rt, base,   zm, zp, rm, rp, r, cell, mark) {
    zm = get("zc", dev, zmode, zt, size, "median_us"); zp = get("zc", dev, zmode, zt, size, "p99_us")
    rm = rimpl == "" ? "" : get(rimpl, dev, "busy", rt, size, "median_us")
    rp = rimpl == "" ? "" : get(rimpl, dev, "busy", rt, size, "p99_us")
    cell = zm == "" ? "n/a" : sprintf("%.2f / %.1f µs", zm, zp)
    if (rimpl == "") {
      printf "| %s | %s | %s | %s | — | — | — | information |\n", dev, op, kib(size), cell >> table
      return
    }
    if (zm == "" || rm == "") {
      printf "| %s | %s | %s | %s | %s | %s | n/a | n/a |\n", dev, op, kib(size), cell, \
        rm == "" ? "n/a" : sprintf("%.2f / %.1f µs", rm, rp), base >> table
      return
    }
    r = zm / rm
    mark = noisy("zc", dev, zmode, zt, size) || noisy(rimpl, dev, "busy", rt, size) ? " †" : ""
    printf "| %s | %s | %s | %s | %.2f / %.1f µs | %s | **%.2f×**%s (p99 %.2f×) | %s |\n", dev, op,
      kib(size), cell, rm, rp, base, r, mark, (rp > 0 ? zp / rp : 0), (r <= 1.5 ? "≤1.5× met" : "≤1.5× **not met**") >> table
    verdict(r <= 1.5, sprintf("%s, %s, %s: latency %.2f× %s (median %.2f vs %.2f µs)", dev, op, kib(size), r, base, zm, rm))
  }
  # A rate row: MB/s and op/s (msg/s for messages); ratio on op/s.
  function rate_row(dev, op, size, zt, rimpl, rt, base, msgs,   zo, zb, ro, rb, r, zc, rc, ze, mark) {
    zo = get("zc", dev, "busy", zt, size, "ops_s"); zb = get("zc", dev, "busy", zt, size, "mb_s")
    ro = get(rimpl, dev, "busy", rt, size, "ops_s"); rb = get(rimpl, dev, "busy", rt, size, "mb_s")
    zc = zo == "" ? "n/a" : (msgs ? si(zo) " msg/s" : sprintf("%.0f MB/s (%s op/s)", zb, si(zo)))
    ze = get("zc", dev, "busy", zt, size, "errors")
    if (ze != "" && ze > 0) zc = zc " (" ze " failed)"
    rc = ro == "" ? "n/a" : (msgs ? si(ro) " msg/s" : sprintf("%.0f MB/s (%s op/s)", rb, si(ro)))
    if (zo == "" || ro == "" || ro == 0) {
      printf "| %s | %s | %s | %s | %s | %s | n/a | n/a |\n", dev, op, kib(size), zc, rc, base >> table
      return
    }
    r = zo / ro
    mark = noisy("zc", dev, "busy", zt, size) || noisy(rimpl, dev, "busy", rt, size) ? " †" : ""
    printf "| %s | %s | %s | %s | %s | %s | **%.2f×**%s | %s |\n", dev, op, kib(size), zc, rc, base, r, mark,
      (r >= 0.7 ? "≥0.70× met" : "≥0.70× **not met**") >> table
    verdict(r >= 0.7, sprintf("%s, %s, %s: rate %.2f× %s (%s vs %s op/s)", dev, op, kib(size), r, base, si(zo), si(ro)))
  }
  END {
    print "| transport | operation | size | zcstore | raw UCX | raw baseline | zcstore / raw | aim |" > table
    print "|---|---|---|---|---|---|---|---|" >> table
    n = split(devices, devs, " ")
    for (i = 1; i <= n; ++i) {
      d = devs[i]
      lat_row(d, "send/recv ping-pong, one-way (RTT/2)", 64, "pingpong", "busy", "perftest", "am_lat", "perftest ucp_am_lat")
      lat_row(d, "send/recv ping-pong, one-way (RTT/2)", 64, "pingpong", "busy", "raw", "am_lat", "raw UCP AM ping-pong")
      rate_row(d, "send message rate, window 64", 64, "msgrate", "perftest", "am_bw", "perftest ucp_am_bw", 1)
      rate_row(d, "send message rate, window 64", 64, "msgrate", "raw", "am_rate", "raw UCP AM, ≤64 uncredited, a credit per pass", 1)
      for (s = 4096; s <= 65536; s *= 16) {
        lat_row(d, "read QD1", s, "read_lat", "busy", "raw", "get_lat", "raw get QD1")
        lat_row(d, "write QD1", s, "write_lat", "busy", "raw", "put_lat", "raw put+flush QD1")
      }
      for (s = 4096; s <= 65536; s *= 16) {
        rate_row(d, "read QD32", s, "read_bw", "raw", "get_bw", "raw get ×32 + flush", 0)
        rate_row(d, "write QD32", s, "write_bw", "raw", "put_bw", "raw put ×32 + flush", 0)
      }
      lat_row(d, "read QD1, **event mode** both sides", 4096, "read_lat", "event", "", "", "")
    }
    printf "%s%s\n", met, unmet > verdicts
  }
' "$RESULTS"

NOTE=$(bench_load_note "other processes shared the pinned CPUs, so absolute numbers and ratios are noisy (in diagnosis runs the same row moved 2-10× with background load); rerun on a quiet machine to judge.")

# The standing analysis of where zcstore loses time against raw UCX (from the protocol and from
# the numbers of the runs recorded when this was written); the table above it is regenerated.
analysis() {
  cat <<'ANALYSIS'
### Why (analysis)

Standing notes from the protocol and from diagnosis runs (`--profile 1`, `perf`, `strace -c`) made when
this benchmark was written (2026-11-22, same machine). The table above is regenerated on every run;
these notes are not. This machine is shared: with other builds running, absolute numbers moved by
2-10x between runs and even between back-to-back runs. That is why the table keeps the best of its
rounds and marks the rows that disagreed. The findings below held in every run; the exact ratios did
not.

- **send/recv ping-pong (about 2.2-2.9x raw on both transports; not met)**: a zcstore send completes
  when the peer acknowledges delivery, so a ping-pong round trip is four UCX active messages (ping,
  ack, pong, ack) where the raw tests use two. On tcp, `strace -c` shows 2 `sendmsg` per round trip on
  each side instead of 1.
  - Two of those extra sends sit on the measured path. The responder's worker sends the ack for the
    ping at the end of its `poll()`, which is before the engine runs the receive callback that submits
    the pong. On the requester, the ack for the pong likewise goes out in the same progress pass,
    before the pong's receive callback runs.
  - On tcp each send is a loopback syscall of several us, which is about the gap (for example 14.3 vs
    5.7 us one-way in a quiet run).
  - On shm the whole round trip is a fraction of a microsecond (0.39 vs 0.14 us one-way against the raw
    AM ping-pong), so every extra message and every progress pass shows.
  - On shm a 64 B zcstore send also misses UCX's short path. The 32 B zcstore header, the 64 B payload
    and UCP's own header exceed the 100 B `am_short` limit of sysv/posix, so the send goes through
    bcopy, while the raw 64 B message goes through the short path.
  - Possible fixes: carry the cumulative ack in the header of the next outgoing message, and send it
    on its own only when nothing else goes out (or after N messages); queue acks after the completion
    callbacks rather than before; shorten the send header.
- **message rate (tcp met, shm not)**:
  - zcstore counts a send when its delivery is acknowledged and keeps at most 64 unacknowledged.
    ucp_am_bw counts local completions and has no window, so it is an upper bound that zcstore's
    semantics cannot match one for one. The raw UCP AM row has zcstore's shape (a window of 64 and one
    credit per receiving pass), so it is the like-for-like baseline.
  - tcp (met): the raw AM with window and credits got the same rate as zcstore in every diagnosis run
    (148k against 153k msg/s in a quiet run, 27-41k against 32-36k under load). So the gap to
    ucp_am_bw comes from the acknowledged-window pattern on this loopback, not from zcstore's code. Neither side is CPU-bound: with `--profile 1` the server
    spends at most 65% of its time in passes that do work, and the client, waiting for acks, spends
    less. The window barely matters (a window of 1 gives 24k, 200 gives 49k).
  - tcp stalls: the time goes to stalls, seen in the p99 of a single send, which reaches milliseconds.
    Loopback TCP receive work is deferred to ksoftirqd on the two pinned, busy-polling CPUs (ksoftirqd
    ran about 120 times per CPU in a 3 s run), and a window that waits for acks stops during each stall.
    ucp_am_bw streams one way and rides over them. perftest's ucp_am_lat shows the stalls too (over
    tcp: median 7.7 us, average 43 us).
  - shm (not met): zcstore reaches 0.35-0.6x the raw windowed AM rate across runs (for example 5.4M
    against 13.2M msg/s). Both sides are CPU-bound, so this is zcstore's work per message:
    - the receiver runs the whole-message AM callback, copies into the posted buffer, queues the
      completion, then runs the `std::function` callback and reposts the receive;
    - the sender allocates a task, fills the 32 B header, reads the clock for the deadline and pushes
      the task to a list;
    - the 96+ B message takes bcopy instead of short.
- **read / write QD1**: each op is one request and one reply, the same message count as UCX's
  emulated get. The owner's checks and bookkeeping cost about 0.1-0.2 us on shm.
  - tcp (met with margin): zcstore beats raw put+flush. An emulated put is acknowledged on its own and
    the flush is one more request/reply pair (`strace`: 2 sends per op on each side, against 1 for a
    zcstore write).
  - tcp at 64 KiB: zcstore's active-message rendezvous moves the data in one piece (about 3 syscalls
    per op on each side). Emulated get/put split it into ≤8 KiB bcopy fragments (9 `sendto` per
    64 KiB get on the target).
  - shm at 64 KiB (read or write, QD1 and QD32; flips between met and not met from run to run):
    zcstore's 64 KiB goes by rendezvous (RTS, then RTR, then the data, then zcstore's ack). With peer
    error handling CMA is not used (`strace` shows no `process_vm_readv`), so the data still goes
    through the shm FIFO, one round trip behind the eager fragments of an emulated get/put.
  - Raw's 64 KiB get and put both have a fast mode that they reach in some runs and not in others:
    about 3.8 us at QD1 and 17-21 GB/s at QD32, against about 6-7 us otherwise. zcstore stayed at
    4.6-8 us and 9-17 GB/s.
  - When raw is in its fast mode, zcstore is up to 1.9x behind at QD1 and down to 0.5-0.6x at QD32,
    on the read rows in one run and on the write rows in the next. The fast mode could not be tied to
    anything the benchmark controls (vCPU placement on the host is a guess).
  - Making the 64 KiB send eager (UCX_RNDV_THRESH=inf) did not help zcstore: write 7.8 us, read
    5.4-8.4 us.
- **QD32**: raw drains its 32 operations and pays a flush round trip per window, so its queue runs as
  a sawtooth. zcstore keeps 32 ops in flight all the time.
  - tcp (met; 2x raw at 64 KiB, where the flush round trip and the fragmenting both count).
  - shm: these are the noisiest rows. Across the recorded runs the ratio ran from 0.5x to 4x,
    because raw's drain-and-flush sawtooth suffers more from interference, and at 64 KiB raw has its
    fast mode (see QD1). Run back to back, the two are about level at 4 KiB: raw put QD32 gave
    1.87-3.15M op/s against 1.83-2.37M op/s for a zcstore write in four alternating runs. So the
    4 KiB rows flip between met and not met too.
  - At 4 KiB on shm both sides are CPU-bound (`--profile 1`: the owner spends about 99% and the
    requester about 92% of its time in passes that do work). Both copy the same bytes: the owner copies
    4 KiB into the shm FIFO and the requester copies it out. So the cost that remains is zcstore's CPU
    work per op:
    - the reply object is queued and sent after the progress loop, with a completion callback;
    - the export table costs two seq_cst atomic read-modify-writes per op. The release comes right
      after the 4 KiB copy into shared memory and waits for that copy's stores to drain: about 10% of
      the owner's samples fall in `claim::reset`;
    - `find_op`, the completion queue and the `std::function` callbacks;
    - `steady_clock::now()` once per submit (the deadline) and once or twice per progress pass (the
      same-host peer liveness check plus the deadline scan). Each call costs about 30 ns of CPU in
      this VM, about 11% of the requester's samples at QD32 and about half of an idle busy-poll loop.
- **event mode (information only)**: the guest kernel halt-polls an idle vCPU for up to 200 us
  (`haltpoll`) before it halts. So a peer that went to sleep a moment ago wakes in about a microsecond
  (shm: 1.5 us against 0.95 us busy). A peer that has been idle longer pays the 70-100 us wake-up that
  UCX_MEASURED.md §6 measured.
ANALYSIS
}

SECTION=$WORK/section.md
{
  echo "## rdma"
  echo
  echo "zcstore's rdma layer against raw UCX, two processes on one host. Generated by \`bench/run_rdma.sh\`; do not edit by hand."
  echo
  echo "- Command: \`$INVOCATION\` (${BUILD_TYPE:-?} build), ${ELAPSED} s in total. \`scripts/dev.sh bench rdma\` runs the same script on build/release, through \`bench/run.sh build/release rdma\`."
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(bench_machine); load average $LOAD_START at start, $LOAD_END at end"
  echo "- Every pair: server \`taskset -c $SCPU\`, client \`taskset -c $CCPU\`, busy polling (zcstore: \`--poll busy\`); UCX_MM_ERROR_HANDLING=y, UCX_KEEPALIVE_INTERVAL=1s everywhere; tcp runs UCX_NET_DEVICES=lo"
  echo "- $ROUNDS rounds, each running every program below once per transport (zcstore, raw, perftest, event mode, in that order), ${SECS} s per measurement after 0.2 s warm-up; the table shows each row's best round (lowest median, highest rate; the p99 comes from that same round), because interference from other processes only slows a run down. † marks rows whose rounds differed by more than 30% on either side."
  echo "- Transports: zcstore device \`sm\` (UCX_TLS=sm,self) / \`tcp\` (UCX_TLS=tcp); the raw program takes the same device argument and sets UCX_TLS the same way; ucx_perftest runs with UCX_TLS=tcp, or UCX's default (shared memory) for the sm rows"
  echo "- Processes (DIR = a temp dir for the blob files; DEV = sm | tcp):"
  echo "  - \`taskset -c $SCPU timeout $PAIR_TIMEOUT zc_rdma_bench server DIR DEV --cpu $SCPU --poll busy &\` then \`taskset -c $CCPU timeout $PAIR_TIMEOUT zc_rdma_bench client DIR DEV --cpu $CCPU --poll busy --seconds $SECS\`"
  echo "  - event row: the same with \`--poll event\` on both sides and \`--tests read_lat --sizes 4096\`"
  echo "  - \`taskset -c $SCPU timeout $PAIR_TIMEOUT zc_ucx_raw_bench server DIR DEV --cpu $SCPU --max-seconds $PAIR_TIMEOUT &\` then \`taskset -c $CCPU timeout $PAIR_TIMEOUT zc_ucx_raw_bench client DIR DEV --cpu $CCPU --seconds $SECS --tests am_lat,am_rate,get_lat,put_lat,get_bw,put_bw\`"
  echo "  - \`[UCX_TLS=tcp UCX_NET_DEVICES=lo] taskset -c $SCPU timeout 60 ucx_perftest -p PORT &\` then \`[same env] taskset -c $CCPU timeout 60 ucx_perftest 127.0.0.1 -p PORT -t ucp_am_lat -s 64 -n N -w 10000 -f -R 50\` (and \`-R 99\`; N = 200000 tcp, 1000000 sm), \`-t ucp_am_bw -s 64 -n N -w 50000 -f\` (N = 600000 tcp, 5000000 sm); a fresh server on a free port for each"
  echo
  echo "What is measured: latency cells are median / p99 in µs. ping-pong = 64 B send → the peer's receive callback sends 64 B back → our receive completes; one-way = RTT/2 like ucp_am_lat (perftest's percentiles cover only its last 2048 iterations). Message rate = 64 B sends with ≤64 outstanding, the server reposting receives; a zcstore send counts when its delivery is acknowledged; ucp_am_bw counts local send completions with no window. The raw UCP AM rows have zcstore's shape without zcstore: 64 B active messages, the peer answering from its progress loop (a pong per ping; one cumulative credit per pass that received messages, as zcstore acknowledges), p50/p99 over every sample. read/write QD1 = submit, wait for the completion callback; raw get waits for the get, raw put waits for put + ucp_ep_flush_nbx (remote completion, the meaning of a zcstore write completion). QD32 = zcstore keeps 32 tasks in flight, each completion resubmits its slot; raw posts 32 ops to distinct offsets + one flush and waits for all, repeatedly. MB/s = 10^6 B/s; ratios are zcstore / raw (aim: latency ≤ 1.5×, rate ≥ 0.70×). Raw RMA runs on app memory registered with ucp_mem_map (no ALLOCATE), which UCX 1.13 emulates with active messages, so both sides progress."
  echo
  if [ -n "$NOTE" ]; then echo "$NOTE"; echo; fi
  cat "$TABLE"
  echo
  echo "### Where the aim stands (this run)"
  cat "$VERDICTS"
  echo
  analysis
} >"$SECTION"

bench_write_section rdma "$SECTION"

echo
cat "$TABLE"
echo
echo "Where the aim stands:"
cat "$VERDICTS"
echo
echo "(${ELAPSED} s; load average $LOAD_START → $LOAD_END; written to the ## rdma section of $DOC)"
