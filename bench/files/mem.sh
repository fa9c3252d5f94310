#!/usr/bin/env bash
# The daemon's memory during N (default 8) concurrent `sidecar cp` of BYTES
# (default 1 GiB) each, over wss://…/ahp on loopback: MODE=mix (half up,
# half down; default), up or down. One daemon (bin/sidecar serve, or BIN);
# its RSS is sampled every 0.2 s while the copies run. Prints the idle RSS
# before the copies, the largest sample and VmHWM (KiB), the wall time, and
# checks every copy against its source (cmp). Needs N x BYTES x 2 of free
# disk under /tmp; everything is removed at the end.
# Env: BIN, N, BYTES, MODE, PORT (default 47690).
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$here/bin/sidecar}
N=${N:-8}
BYTES=${BYTES:-1073741824}
MODE=${MODE:-mix}
port=${PORT:-47690}
D=$(mktemp -d /tmp/bench-mem.XXXXXX)
T=tok$RANDOM$RANDOM
export SIDECAR_TOKEN=$T
printf 'listener {\n  address = "127.0.0.1:%d"\n}\nlog {\n  level = "warn"\n}\n' "$port" >"$D/c.hcl"
"$BIN" serve --config "$D/c.hcl" --token "$T" --state-dir "$D/state" >"$D/serve.out" 2>"$D/serve.err" &
spid=$!
sampler=
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
  kill "$spid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT
h=
for _ in $(seq 1 100); do
  h=$(grep -o 'cert-hash [0-9a-f]*' "$D/serve.out" 2>/dev/null | cut -d' ' -f2) || true
  [ -n "$h" ] && break
  sleep 0.1
done
[ -n "$h" ] || { echo "sidecar serve did not start" >&2; cat "$D/serve.err" >&2; exit 1; }
mkdir -p "$D/host" "$D/local"
for i in $(seq 1 "$N"); do head -c "$BYTES" /dev/urandom >"$D/src$i.bin"; done
sync
up() { [ "$MODE" = up ] || { [ "$MODE" = mix ] && [ $(($1 % 2)) = 0 ]; }; }
for i in $(seq 1 "$N"); do up "$i" || ln "$D/src$i.bin" "$D/host/h$i.bin"; done
idle=$(awk '/VmRSS/{print $2}' "/proc/$spid/status")
(while kill -0 "$spid" 2>/dev/null; do awk '/VmRSS/{print $2}' "/proc/$spid/status"; sleep 0.2; done) >"$D/rss.txt" &
sampler=$!
url=wss://127.0.0.1:$port/ahp
start=$(date +%s.%N)
cps=()
for i in $(seq 1 "$N"); do
  if up "$i"; then
    "$BIN" cp --cert-hash "$h" "$D/src$i.bin" "$url:$D/host/up$i.bin" 2>"$D/cp$i.err" &
  else
    "$BIN" cp --cert-hash "$h" "$url:$D/host/h$i.bin" "$D/local/down$i.bin" 2>"$D/cp$i.err" &
  fi
  cps+=($!)
done
failed=0
for p in "${cps[@]}"; do wait "$p" || failed=$((failed + 1)); done
end=$(date +%s.%N)
hwm=$(awk '/VmHWM/{print $2}' "/proc/$spid/status")
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
sampler=
peak=$(sort -n "$D/rss.txt" | tail -1)
echo "mode=$MODE copies=$N failed=$failed idle_rss=${idle}KiB peak_rss=${peak}KiB VmHWM=${hwm}KiB seconds=$(echo "$end - $start" | bc) load=$(cut -d' ' -f1 /proc/loadavg)"
for i in $(seq 1 "$N"); do
  f=$D/local/down$i.bin
  up "$i" && f=$D/host/up$i.bin
  cmp -s "$D/src$i.bin" "$f" || { echo "copy $i differs from its source" >&2; failed=$((failed + 1)); }
done
[ "$failed" = 0 ] || { cat "$D"/cp*.err >&2; exit 1; }
