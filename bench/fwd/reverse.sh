#!/usr/bin/env bash
# -R against -L in one run: one `sidecar serve` and one `sidecar forward`
# (one connection, wss://…/ahp) carrying both `-L 127.0.0.1:LPORT:127.0.0.1:B` and
# `-R 127.0.0.1:RPORT:127.0.0.1:B` to one `netprobe serve -bulk` on B; `netprobe bulk`
# moves BYTES (default 1 GiB) through each, up (from the dialling side to the
# destination) and down, one transfer at a time. Each row: MiB/s as netprobe measured
# it, and the CPU seconds the daemon and the client spent during it (/proc/PID/stat
# utime+stime before and after). Through -L the dialling side is the client's machine
# and the bytes go client -> daemon -> destination; through -R it is the workload's and
# they go daemon -> client -> destination.
# Env: SIDECAR (binary, default bin/sidecar), NETPROBE (default /tmp/netprobe, built
#      from ../shared/bench/netprobe when missing), BYTES, PORT_BASE (default 47500).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
SIDECAR=${SIDECAR:-$here/bin/sidecar}
NETPROBE=${NETPROBE:-/tmp/netprobe}
BYTES=${BYTES:-1073741824}
base=${PORT_BASE:-47500}
if [ ! -x "$NETPROBE" ]; then
  (cd "$here/../shared/bench/netprobe" && go build -o "$NETPROBE" .)
fi
dir=$(mktemp -d /tmp/bench-reverse.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{printf "%.2f", ($14+$15)/t}' "/proc/$1/stat"; }

"$NETPROBE" serve -bulk "127.0.0.1:$base" 2>"$dir/netprobe.err" &
pids+=($!)
printf 'listener {\n  address = "127.0.0.1:%d"\n}\nlog {\n  level = "warn"\n}\n' $((base + 1)) >"$dir/config.hcl"
"$SIDECAR" serve --config "$dir/config.hcl" --token bench-token --state-dir "$dir/state" >"$dir/serve.out" 2>"$dir/serve.err" &
spid=$!
pids+=($spid)
hash=
for _ in $(seq 1 100); do
  hash=$(grep -o 'cert-hash [0-9a-f]*' "$dir/serve.out" 2>/dev/null | cut -d' ' -f2) || true
  [ -n "$hash" ] && break
  sleep 0.1
done
[ -n "$hash" ] || { echo "sidecar serve did not start:" >&2; cat "$dir/serve.err" >&2; exit 1; }
lport=$((base + 2)) rport=$((base + 3))
SIDECAR_TOKEN=bench-token "$SIDECAR" forward "wss://127.0.0.1:$((base + 1))/ahp" --cert-hash "$hash" \
  -L "127.0.0.1:$lport:127.0.0.1:$base" -R "127.0.0.1:$rport:127.0.0.1:$base" 2>"$dir/forward.err" &
fpid=$!
pids+=($fpid)
for _ in $(seq 1 100); do
  grep -q "on the host" "$dir/forward.err" 2>/dev/null && break
  sleep 0.1
done
grep -q "on the host" "$dir/forward.err" || { echo "sidecar forward did not start:" >&2; cat "$dir/forward.err" >&2; exit 1; }

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs, $((BYTES >> 20)) MiB a transfer"
printf '| forward | direction | MiB/s | daemon CPU s | client CPU s |\n| --- | --- | --- | --- | --- |\n'
for fw in L R; do
  port=$lport
  [ "$fw" = R ] && port=$rport
  for d in up down; do
    s0=$(cpu "$spid") f0=$(cpu "$fpid")
    out=$("$NETPROBE" bulk -addr "127.0.0.1:$port" -dir "$d" -bytes "$BYTES" -dur 600s)
    s1=$(cpu "$spid") f1=$(cpu "$fpid")
    mibps=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1])["result"]; print("%.0f" % r["MiBps"] if not r.get("err") and r["bytes"] >= int(sys.argv[2]) else "FAILED " + r.get("err", "%d bytes" % r["bytes"]))' "$out" "$BYTES")
    printf '| -%s | %s | %s | %.2f | %.2f |\n' "$fw" "$d" "$mibps" "$(echo "$s1 - $s0" | bc)" "$(echo "$f1 - $f0" | bc)"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
