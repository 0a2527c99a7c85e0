#!/usr/bin/env bash
# The local demo: two processes talk through the zcstore rdma layer, first over shared memory,
# then over TCP on loopback. Called by `scripts/dev.sh demo` with the build folder.
set -euo pipefail
build=${1:?usage: demo.sh BUILD_DIR}
example="$build/apps/rdma_example/zcstore_rdma_example"
for device in sm tcp; do
  dir=$(mktemp -d)
  echo "== rdma example over $device"
  timeout 30 "$example" responder --dir "$dir" -d "$device" --poll-mode event &
  responder=$!
  status=0
  timeout 30 "$example" requester --dir "$dir" -d "$device" --poll-mode event || status=$?
  wait "$responder" || status=$?
  rm -rf "$dir"
  if [ "$status" -ne 0 ]; then echo "demo over $device FAILED ($status)"; exit "$status"; fi
done
echo "== demo finished: both transports moved the bytes and delivered the message"
