#!/usr/bin/env bash
# Forwarder adapter for ../shared/bench: quicrelay server + quicrelay client,
# a plain TCP-over-QUIC forwarder on quic-go (bench/quicrelay), the same-run
# ceiling of quic-go for the sidecar's WebTransport row.
# One client (one QUIC connection) carries every mapping, each as
# -L 127.0.0.1:A:127.0.0.1:B, one QUIC stream per TCP connection.
# Env: MAPS="A1:B1 A2:B2 ..." (from the harness)
#      QUICRELAY (binary, default /tmp/quicrelay; built from this repository
#        with `go build` when missing or older than bench/quicrelay, go.mod, go.sum)
#      QUICRELAY_PORT (server UDP port, default 47450)
#      QUICRELAY_FLAGS (extra flags for both ends, e.g. "-stream-window 16777216")
#      PROFILE_DIR: write CPU profiles server.pprof and client.pprof there
#      CPU_LOG: append "NAME PID CPU_SECONDS" of both processes there when
#        stopped (NAME: $CPU_NAME-serve/-forward or -server/-client)
#      FWD_ERR, SERVE_ERR: files for the client's and server's stderr (default:
#        discarded with the run)
#      LINK_RATE (bytes/s) [LINK_DELAY e.g. 10ms] [SHAPE_PORT]: put an emulated
#        UDP link (bench/udpshape) between the client and the server.
# Runs in the foreground until SIGTERM; both processes are its children,
# so the harness's RSS of this process tree is client + server.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
QUICRELAY=${QUICRELAY:-/tmp/quicrelay}
QUICRELAY_PORT=${QUICRELAY_PORT:-47450}
dir=$(mktemp -d /tmp/bench-quicrelay.XXXXXX)
spid=; cpid=; shp=
cleanup() {
  cpu_log "${CPU_NAME:-quicrelay}-server" "$spid"
  cpu_log "${CPU_NAME:-quicrelay}-client" "$cpid"
  [ -n "$cpid" ] && kill "$cpid" 2>/dev/null
  [ -n "$shp" ] && kill "$shp" 2>/dev/null
  [ -n "$spid" ] && kill "$spid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$dir"
  exit "${1:-0}"
}
trap 'cleanup 0' TERM INT
trap 'cleanup $?' EXIT
if [ ! -x "$QUICRELAY" ] || [ -n "$(find "$here/bench/quicrelay" "$here/go.mod" "$here/go.sum" \
    -newer "$QUICRELAY" \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) 2>/dev/null)" ]; then
  (cd "$here" && go build -o "$QUICRELAY.$$" ./bench/quicrelay && mv -f "$QUICRELAY.$$" "$QUICRELAY") \
    || { echo "quicrelay: go build failed" >&2; rm -f "$QUICRELAY.$$"; exit 1; }
fi
# shellcheck disable=SC2086 # QUICRELAY_FLAGS is a list of flags
[ -n "${PROFILE_DIR:-}" ] && mkdir -p "$PROFILE_DIR"
QUICRELAY_CPUPROFILE=${PROFILE_DIR:+$PROFILE_DIR/server.pprof} "$QUICRELAY" server -listen "127.0.0.1:$QUICRELAY_PORT" ${QUICRELAY_FLAGS:-} \
  >"$dir/server.out" 2>"${SERVE_ERR:-$dir/server.err}" &
spid=$!
up=
for i in $(seq 1 100); do
  grep -q '^listening' "$dir/server.out" 2>/dev/null && { up=1; break; }
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$up" ] || { echo "quicrelay server did not start:" >&2; cat "${SERVE_ERR:-$dir/server.err}" >&2; exit 1; }
connect=$QUICRELAY_PORT
if [ -n "${LINK_RATE:-}" ]; then
  udpshape_start "$QUICRELAY_PORT" "$dir" || exit 1
fi
args=()
for m in $MAPS; do
  args+=(-L "127.0.0.1:${m%%:*}:127.0.0.1:${m##*:}")
done
# shellcheck disable=SC2086
QUICRELAY_CPUPROFILE=${PROFILE_DIR:+$PROFILE_DIR/client.pprof} "$QUICRELAY" client -server "127.0.0.1:$connect" ${QUICRELAY_FLAGS:-} "${args[@]}" \
  2>"${FWD_ERR:-$dir/client.err}" &
cpid=$!
wait "$cpid"
