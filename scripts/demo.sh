#!/usr/bin/env bash
# The local demo: the whole zero-copy pipeline on this machine through zcstore_local (a RAM
# target, the zero-copy service and an initiator), twice: a read throughput test, then a
# read/write data validity test; then the gga offload pipeline (the sbc generator on a
# compressible file zcstore_local makes, three RAM targets, the gga service, an initiator) in a
# read-only data validity test with every 3rd block read rebuilt from the other half and the
# parity. Each run prints every program's output prefixed with its name, including the stats.
# Called by `scripts/dev.sh demo` with the build folder; exits non-zero if any run fails.
set -euo pipefail
build=${1:?usage: demo.sh BUILD_DIR}
local_launcher="$build/apps/local/zcstore_local"
# Event polling: four processes share as few as two cores here. The run limits keep each run to a
# few seconds on such a machine; `timeout` bounds it even if something hangs (zcstore_local stops
# its children on the SIGTERM).
common=(--target-size 16MiB --poll-mode event --control-timeout 10)
runs=(
  "read throughput|--execution-strategy read_throughput_test --run-limit-operation-count 20000"
  "read/write data validity|--execution-strategy read_write_data_validity_test --run-limit-operation-count 4000"
)
for run in "${runs[@]}"; do
  title=${run%%|*}
  read -r -a initiator_flags <<<"${run#*|}"
  echo "== zcstore_local zero-copy: $title"
  status=0
  timeout 120 "$local_launcher" zero-copy "${common[@]}" -- "${initiator_flags[@]}" || status=$?
  if [ "$status" -ne 0 ]; then echo "== demo: $title FAILED (exit status $status)"; exit "$status"; fi
done
echo "== zcstore_local gga: read-only data validity, recovery on every 3rd read"
status=0
timeout 120 "$local_launcher" gga --target-size 16MiB --recovery-every 3 --poll-mode event \
  --control-timeout 10 -- --run-limit-operation-count 20000 || status=$?
if [ "$status" -ne 0 ]; then echo "== demo: gga validity FAILED (exit status $status)"; exit "$status"; fi
echo "== demo finished: all three runs passed (stats above, from the initiator, service and targets)"
