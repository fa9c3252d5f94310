#!/usr/bin/env bash
# Forwarder adapter for ../shared/bench: sidecar serve + sidecar forward.
# One `sidecar forward` (one WebSocket connection) carries every mapping,
# each as -L 127.0.0.1:A:127.0.0.1:B, one TCP channel per connection.
# Env: MAPS="A1:B1 A2:B2 ..." (from the harness)
#      SIDECAR (binary, default bin/sidecar of this repository)
#      SIDECAR_PORT (server port, default 47400)
#      SIDECAR_CONFIG (extra config.hcl text, e.g. a delivery block)
#      SIDECAR_TRANSPORT (URL scheme/path: wss-ahp (default) wss://HOST/ahp,
#        wss-tio the transport-io WebSocket mapping, wt WebTransport)
#      PROFILE_DIR: write CPU profiles serve.pprof and forward.pprof there, and
#        allocation profiles serve.mem.pprof and forward.mem.pprof
#      SIDECAR_FORWARD_FLAGS: more flags for sidecar forward, e.g. --compress
#      CPU_LOG: append "NAME PID CPU_SECONDS" of both processes there when
#        stopped (NAME: $CPU_NAME-serve/-forward or -server/-client)
#      FWD_ERR, SERVE_ERR: files for sidecar forward's and serve's stderr (default:
#        discarded with the run)
#      LINK_RATE (bytes/s) [LINK_DELAY e.g. 10ms] [SHAPE_PORT]: put an
#      emulated link (netprobe shape; for wt, UDP, bench/udpshape) between the
#      client and the server.
# Runs in the foreground until SIGTERM; both processes are its children,
# so the harness's RSS of this process tree is client + server.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
SIDECAR=${SIDECAR:-$here/bin/sidecar}
SIDECAR_PORT=${SIDECAR_PORT:-47400}
NETPROBE=${NETPROBE:-/tmp/netprobe}
dir=$(mktemp -d /tmp/bench-sidecar.XXXXXX)
spid=; cpid=; shp=; tcpshp=
cleanup() {
  trap - EXIT
  cpu_log "${CPU_NAME:-sidecar}-serve" "$spid"
  cpu_log "${CPU_NAME:-sidecar}-forward" "$cpid"
  [ -n "$cpid" ] && kill "$cpid" 2>/dev/null
  [ -n "$shp" ] && kill "$shp" 2>/dev/null
  [ -n "$tcpshp" ] && kill "$tcpshp" 2>/dev/null
  [ -n "$spid" ] && kill "$spid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$dir"
  exit "$1"
}
# Stopped by the harness: success. Otherwise (a start failure) keep the status.
trap 'cleanup 0' TERM INT
trap 'cleanup $?' EXIT
cat >"$dir/config.hcl" <<CFG
listener {
  address = "127.0.0.1:$SIDECAR_PORT"
}
log {
  level = "warn"
}
${SIDECAR_CONFIG:-}
CFG
[ -n "${PROFILE_DIR:-}" ] && mkdir -p "$PROFILE_DIR"
SIDECAR_CPUPROFILE=${PROFILE_DIR:+$PROFILE_DIR/serve.pprof} SIDECAR_MEMPROFILE=${PROFILE_DIR:+$PROFILE_DIR/serve.mem.pprof} "$SIDECAR" serve --config "$dir/config.hcl" --token bench-token --state-dir "$dir/state" \
  >"$dir/serve.out" 2>"${SERVE_ERR:-$dir/serve.err}" &
spid=$!
hash=
for i in $(seq 1 100); do
  hash=$(grep -o 'cert-hash [0-9a-f]*' "$dir/serve.out" 2>/dev/null | cut -d' ' -f2)
  [ -n "$hash" ] && break
  sleep 0.1
done
[ -n "$hash" ] || { echo "sidecar serve did not start:" >&2; cat "${SERVE_ERR:-$dir/serve.err}" >&2; exit 1; }
connect=$SIDECAR_PORT
if [ -n "${LINK_RATE:-}" ] && [ "${SIDECAR_TRANSPORT:-}" = wt ]; then
  # WebTransport is UDP: bench/udpshape, netprobe shape's counterpart.
  udpshape_start "$SIDECAR_PORT" "$dir" || exit 1
  # The client also dials the port over TCP while it sets up WebTransport
  # (a refusal there means no daemon: client/dial_transportio.go
  # probeRefused), as the daemon serves both on one port: relay that too.
  "$NETPROBE" shape -listen "127.0.0.1:$SHAPE_PORT" -to "127.0.0.1:$SIDECAR_PORT" \
    -rate "$LINK_RATE" -delay "${LINK_DELAY:-0s}" &
  tcpshp=$!
elif [ -n "${LINK_RATE:-}" ]; then
  SHAPE_PORT=${SHAPE_PORT:-47300}
  "$NETPROBE" shape -listen "127.0.0.1:$SHAPE_PORT" -to "127.0.0.1:$SIDECAR_PORT" \
    -rate "$LINK_RATE" -delay "${LINK_DELAY:-0s}" &
  shp=$!
  for i in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/$SHAPE_PORT) 2>/dev/null && break; sleep 0.1; done
  connect=$SHAPE_PORT
fi
args=()
for m in $MAPS; do
  args+=(-L "127.0.0.1:${m%%:*}:127.0.0.1:${m##*:}")
done
case ${SIDECAR_TRANSPORT:-wss-ahp} in
  wss-ahp) url="wss://127.0.0.1:$connect/ahp"; targs=() ;;
  wss-tio) url="https://127.0.0.1:$connect"; targs=(--transport websocket) ;;
  wt) url="https://127.0.0.1:$connect"; targs=(--transport webtransport) ;;
  *) echo "SIDECAR_TRANSPORT: wss-ahp, wss-tio or wt" >&2; exit 2 ;;
esac
SIDECAR_CPUPROFILE=${PROFILE_DIR:+$PROFILE_DIR/forward.pprof} SIDECAR_MEMPROFILE=${PROFILE_DIR:+$PROFILE_DIR/forward.mem.pprof} "$SIDECAR" forward "$url" "${targs[@]}" ${SIDECAR_FORWARD_FLAGS:-} --token bench-token --cert-hash "$hash" "${args[@]}" \
  2>"${FWD_ERR:-$dir/forward.err}" &
cpid=$!
wait "$cpid"
