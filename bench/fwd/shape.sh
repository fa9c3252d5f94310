#!/usr/bin/env bash
# Forwarder adapter: the emulated link alone, no forwarder. One `netprobe shape`
# per MAPS pair (LINK_RATE bytes/s, LINK_DELAY one-way), so a row of it is the
# link's own payload rate, measured in the same run as the forwarders over it.
set -euo pipefail
NETPROBE=${NETPROBE:-/tmp/netprobe}
: "${LINK_RATE:?LINK_RATE (bytes/s) is required}"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null' EXIT INT TERM
for m in $MAPS; do
  "$NETPROBE" shape -listen "127.0.0.1:${m%%:*}" -to "127.0.0.1:${m##*:}" \
    -rate "$LINK_RATE" -delay "${LINK_DELAY:-0s}" &
  pids+=($!)
done
wait
