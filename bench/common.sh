# bench/common.sh: what every bench/run_*.sh shares; sourced, never run on its own.
#   . "$(dirname "$0")/common.sh"
#   bench_setup NAME BUILD_DIR   # ROOT BUILD BIN DOC WORK RESULTS PIDS LOAD_START STARTED, UCX env
#   ...                          # the suite's runs, "result k=v ..." lines in $RESULTS
#   bench_finish                 # LOAD_END ELAPSED
#   { echo "## NAME"; ...; } >"$WORK/section.md"; bench_write_section NAME "$WORK/section.md"
# The suite's own knobs stay in its script; ZC_BENCH_DOC (default docs/BENCHMARKS.md) is common.
# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables set here are the sourcing script's

# bench_setup NAME BUILD_DIR: the suite's name (for messages), folders, the UCX settings every
# zcstore process and raw baseline gets, a scratch folder and an EXIT trap that stops the
# background processes in PIDS and removes it.
bench_setup() {
  BENCH_NAME=$1
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  BUILD=$(cd "${2:?usage: bench/run_$1.sh BUILD_DIR}" && pwd)
  BIN=$BUILD/bench
  DOC=${ZC_BENCH_DOC:-$ROOT/docs/BENCHMARKS.md}
  INVOCATION="bench/run_$1.sh ${BUILD#"$ROOT"/}"
  # The same UCX settings for zcstore and the raw baselines; UCX_TLS / UCX_NET_DEVICES per run.
  export UCX_MM_ERROR_HANDLING=y UCX_KEEPALIVE_INTERVAL=1s UCX_WARN_UNUSED_ENV_VARS=n
  unset UCX_TLS UCX_NET_DEVICES
  WORK=$(mktemp -d "/tmp/zc-bench-$1-XXXXXX")
  RESULTS=$WORK/results
  : >"$RESULTS"
  PIDS=()
  trap bench_cleanup EXIT
  LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  SPEED_START=$(bench_calibrate)
  STARTED=$(date +%s)
}

# shellcheck disable=SC2317  # run by the EXIT trap
bench_cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}

bench_finish() {
  LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
  ELAPSED=$(($(date +%s) - STARTED))
  SPEED_END=$(bench_calibrate)
}

# bench_calibrate: how fast this machine is right now, per CPU, so that two runs can be compared
# (on a shared VM the same build measures 25-40% apart from one hour to the next): dd pinned to
# each CPU copying 1 GiB from /dev/zero in 1 MiB blocks (memory bandwidth) and 100,000 one-byte
# blocks (a read and a write each: the cost of a system call, which sets most of the IO path's
# cost in a paravirtualised kernel). About a second per CPU.
bench_calibrate() {
  local cpu copy call line=""
  for ((cpu = 0; cpu < $(nproc); cpu++)); do
    copy=$(LC_ALL=C taskset -c "$cpu" dd if=/dev/zero of=/dev/null bs=1M count=1024 2>&1 |
      awk '/copied/ { for (i = 1; i < NF; i++) if ($(i + 1) == "s,") printf "%.1f GB/s", 1.073741824 / $i }')
    call=$(LC_ALL=C taskset -c "$cpu" dd if=/dev/zero of=/dev/null bs=1 count=100000 2>&1 |
      awk '/copied/ { for (i = 1; i < NF; i++) if ($(i + 1) == "s,") printf "%.2f µs", $i * 1e6 / 200000 }')
    line+="${line:+; }cpu $cpu: copy ${copy:-?}, system call ${call:-?}"
  done
  echo "$line"
}

# bench_die MESSAGE...
bench_die() {
  echo "run_$BENCH_NAME.sh: $*" >&2
  exit 1
}

# bench_require_commands "PACKAGES" COMMAND...: exits naming the packages when one is missing.
bench_require_commands() {
  local packages=$1 c
  shift
  for c in "$@"; do
    command -v "$c" >/dev/null || bench_die "$c not found ($packages)"
  done
}

# bench_free_port: a TCP port nothing on this machine is bound to (racy, like any such check).
bench_free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 40000))
    if ! grep -qi ":$(printf '%04X' "$p") " /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# bench_dev_env DEVICE: extra environment of a zcstore or raw program for that device (its
# device argument picks UCX_TLS itself: tcp -> "tcp", sm -> "sm,self"); TCP stays on loopback.
bench_dev_env() { if [ "$1" = tcp ]; then echo UCX_NET_DEVICES=lo; fi; }

# bench_reap PID: waits for a background process and drops it from PIDS; its exit status.
bench_reap() {
  local rc=0 keep=() p
  wait "$1" 2>/dev/null || rc=$?
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
  return $rc
}

# bench_pair LABEL PROGRAM DEVICE SERVER_CPU CLIENT_CPU TIMEOUT "SERVER ARGS" "CLIENT ARGS" [TAG]:
# one run of a two-process benchmark program (zc_rdma_bench, zc_ucx_raw_bench): its server in
# the background, its client in front, each pinned with taskset and bounded with timeout, in
# $WORK/LABEL. The client's "result" lines (TAG appended) go to $RESULTS and, indented, to stdout.
# False when the client or the server failed (their output is printed).
bench_pair() {
  local label=$1 prog=$2 dev=$3 scpu=$4 ccpu=$5 limit=$6 sargs=$7 cargs=$8 tag=${9:-}
  local dir=$WORK/$label ok=0
  mkdir -p "$dir"
  # shellcheck disable=SC2046,SC2086
  env $(bench_dev_env "$dev") taskset -c "$scpu" timeout "$limit" "$BIN/$prog" server "$dir" "$dev" \
    --cpu "$scpu" $sargs >"$dir/server.log" 2>&1 &
  local spid=$!
  PIDS+=("$spid")
  # shellcheck disable=SC2046,SC2086
  env $(bench_dev_env "$dev") taskset -c "$ccpu" timeout "$limit" "$BIN/$prog" client "$dir" "$dev" \
    --cpu "$ccpu" $cargs >"$dir/client.log" 2>"$dir/client.err" || ok=1
  grep '^result ' "$dir/client.log" | sed "s/\$/${tag:+ $tag}/" | tee -a "$RESULTS" |
    sed 's/^result /  /' || true
  if [ $ok != 0 ]; then
    echo "run_$BENCH_NAME.sh: $label client failed:" >&2
    cat "$dir/client.err" "$dir/server.log" >&2 || true
    kill "$spid" 2>/dev/null || true
    bench_reap "$spid" || true
    return 1
  fi
  if ! bench_reap "$spid"; then
    echo "run_$BENCH_NAME.sh: $label server failed: $(cat "$dir/server.log")" >&2
    return 1
  fi
}

# bench_listening PORT: true once something listens on PORT.
bench_listening() { grep -qiE ":$(printf '%04X' "$1") [0-9A-F:]+ 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null; }

# bench_wait_log FILE REGEX SECONDS PID: prints the first match's text once it appears; fails
# when the process dies or the time is up.
bench_wait_log() {
  local file=$1 re=$2 secs=$3 pid=$4 line
  for _ in $(seq $((secs * 50))); do
    line=$(grep -m1 -oE "$re" "$file" 2>/dev/null || true)
    if [ -n "$line" ]; then
      echo "$line"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.02
  done
  return 1
}

# bench_busy_others: other processes that were using a CPU (lifetime average >= 20%): on a shared
# 2-core machine they take turns with the pinned benchmark processes and the figures say less.
bench_busy_others() {
  ps -eo pid=,pcpu=,comm= | awk -v me=$$ '$1 != me && $2 >= 20 && $3 != "ps" { printf "%s%s (%s%%)", sep, $3, $2; sep = ", " }'
}

# bench_notes BUSY_START BUSY_END: the load caution ($BENCH_NOISY) and a sentence naming what
# bench_busy_others found at the start and at the end of the run, as one paragraph (or nothing).
bench_notes() {
  local note
  note=$(bench_load_note "$BENCH_NOISY")
  if [ -n "$1$2" ]; then
    note="${note:+$note }**Other processes using a CPU** (ps lifetime average): at start: ${1:-none}; at end: ${2:-none}."
  fi
  echo "$note"
}

# bench_cpu_busy: percent of all CPUs busy over the next second (from /proc/stat).
bench_cpu_busy() {
  local a b
  a=$(awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat)
  sleep 1
  b=$(awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat)
  echo "$a $b" | awk '{ busy = $3 - $1; idle = $4 - $2; printf "%.0f", ((busy + idle) > 0 ? 100 * busy / (busy + idle) : 0) }'
}

# bench_wait_quiet SECONDS PERCENT: waits up to SECONDS for the machine to be at most PERCENT
# busy over a second; prints what it last measured.
bench_wait_quiet() {
  local busy deadline=$(($(date +%s) + $1))
  while :; do
    busy=$(bench_cpu_busy)
    if [ "$busy" -le "$2" ] || [ "$(date +%s)" -ge "$deadline" ]; then break; fi
  done
  echo "$busy"
}

# bench_machine: the machine line of a section header (no date, no load).
bench_machine() {
  local cpu ucx
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  ucx=$( (ucx_info -v 2>/dev/null || true) | awk '/Version/ { print $NF; exit }')
  echo "nproc=$(nproc), CPU \"$cpu\", kernel $(uname -r), UCX ${ucx:-?}; speed (bench_calibrate: dd pinned per CPU) at start: ${SPEED_START:-?}; at end: ${SPEED_END:-not measured}"
}

# bench_load_note WHAT: a caution paragraph when the 1-minute load average at the start was over
# half the CPUs, WHAT saying what that means (usually $BENCH_NOISY); nothing otherwise.
BENCH_NOISY="other processes shared the pinned CPUs, so absolute numbers are noisy."
bench_load_note() {
  local what=$1
  if awk -v l="${LOAD_START%% *}" -v n="$(nproc)" 'BEGIN { exit !(l > 0.5 * n) }'; then
    echo "**Caution:** the 1-minute load average was ${LOAD_START%% *} on $(nproc) CPUs when this ran: $what"
  fi
}

# bench_poll_why MODE: a poll mode in words.
bench_poll_why() {
  case "$1" in
    busy) echo "busy (never sleeps)" ;;
    event) echo "event (sleeps in epoll whenever there is nothing to do)" ;;
    adaptive) echo "adaptive (spins 200 µs after the last hit, then sleeps)" ;;
    *) echo "$1" ;;
  esac
}

# bench_write_section NAME FILE: replaces the "## NAME" section of $DOC (up to the next "## "
# heading) with FILE, or appends it; the other sections are left as they are.
bench_write_section() {
  local name=$1 section=$2
  mkdir -p "$(dirname "$DOC")"
  [ -f "$DOC" ] || printf '# zcstore benchmarks\n' >"$DOC"
  awk -v sec="$section" -v name="$name" '
    BEGIN { while ((getline l < sec) > 0) body = body l "\n" }
    /^## / {
      if (skip) skip = 0
      h = $0
      sub(/[ \t]+$/, "", h)
      if (h == "## " name) { printf "%s", body; done = 1; skip = 1; next }
    }
    !skip { print }
    END { if (!done) { print ""; printf "%s", body } }
  ' "$DOC" >"$DOC.tmp.$$"
  mv "$DOC.tmp.$$" "$DOC"
}
