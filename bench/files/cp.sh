#!/usr/bin/env bash
# sidecar cp against forward -L (+ netprobe bulk: a TCP source/sink) and scp,
# BYTES (default 1 GiB) each way, over wss://…/ahp on loopback. Up to two
# sidecar builds are measured in one run: NEW (default bin/sidecar) and OLD
# (optional, e.g. main built to /tmp/old), each with its own daemon; forward -L
# uses NEW. scp runs against a private sshd (../shared/bench/sshd_up.sh, port
# 22022, aes128-gcm) when openssh-server is installed. Every case runs RUNS
# times (default 3), the cases interleaved round by round so that a burst of
# load elsewhere hits them alike; printed: the median MiB/s (wall clock of the
# whole command, so cp's connect and final check count) and the median CPU
# seconds per GiB of the client and of the daemon (sshd for scp), from
# /proc/PID/stat (children included for the client), which load on the shared
# machine disturbs far less than MiB/s. Each copy is compared with the source.
# With nginx installed, "forward-L+curl" is the issue's own reference: curl
# through a second forward -L to an nginx on the workload side that serves
# the file (GET, sendfile) and takes uploads (WebDAV PUT), so that it reads
# and writes files as cp does, without cp's SHA-256 on both ends.
# Env: NEW, OLD, RUNS, BYTES, DIR (work directory, default a new one under
#      /tmp, removed at the end), NETPROBE (default /tmp/netprobe, built from
#      ../shared/bench/netprobe when missing), PORT_BASE (default 47600),
#      PROFILE_DIR (CPU profiles of NEW's daemon and client per case:
#      SIDECAR_CPUPROFILE; go tool pprof NEW FILE), NO_SCP=1.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
NEW=${NEW:-$here/bin/sidecar}
OLD=${OLD:-}
RUNS=${RUNS:-3}
BYTES=${BYTES:-1073741824}
NETPROBE=${NETPROBE:-/tmp/netprobe}
base=${PORT_BASE:-47600}
HZ=$(getconf CLK_TCK)
if [ ! -x "$NETPROBE" ]; then
  (cd "$here/../shared/bench/netprobe" && go build -o "$NETPROBE" .) || exit 1
fi
D=${DIR:-$(mktemp -d /tmp/bench-cp.XXXXXX)}
mkdir -p "$D"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${sshd_dir:-}" ] && SSH_DIR=$sshd_dir bash "$here/../shared/bench/sshd_down.sh" >/dev/null 2>&1
  [ -z "${DIR:-}" ] && rm -rf "$D"
}
trap cleanup EXIT
F=$D/src.bin
[ -f "$F" ] && [ "$(stat -c %s "$F")" = "$BYTES" ] || head -c "$BYTES" /dev/urandom >"$F"
T=tok$RANDOM$RANDOM
export SIDECAR_TOKEN=$T
# cpu PID: user+system seconds of PID and its waited-for children.
cpu() { awk -v hz="$HZ" '{printf "%.3f", ($14+$15+$16+$17)/hz}' "/proc/$1/stat"; }
declare -A SPID URL HASH
serve() { # name binary port
  local n=$1 bin=$2 port=$3 h=
  printf 'listener {\n  address = "127.0.0.1:%d"\n}\nlog {\n  level = "warn"\n}\n' "$port" >"$D/$n.hcl"
  SIDECAR_CPUPROFILE=${PROFILE_DIR:+$PROFILE_DIR/serve-$n.pprof} "$bin" serve --config "$D/$n.hcl" --token "$T" --state-dir "$D/state-$n" >"$D/serve-$n.out" 2>"$D/serve-$n.err" &
  SPID[$n]=$!
  pids+=($!)
  for _ in $(seq 1 100); do
    h=$(grep -o 'cert-hash [0-9a-f]*' "$D/serve-$n.out" 2>/dev/null | cut -d' ' -f2) || true
    [ -n "$h" ] && break
    sleep 0.1
  done
  [ -n "$h" ] || { echo "$n: sidecar serve did not start" >&2; cat "$D/serve-$n.err" >&2; exit 1; }
  URL[$n]=wss://127.0.0.1:$port/ahp
  HASH[$n]=$h
}
names=(new)
serve new "$NEW" $((base + 1))
if [ -n "$OLD" ]; then
  names=(old new)
  serve old "$OLD" $((base + 2))
fi
"$NETPROBE" serve -bulk "127.0.0.1:$((base + 3))" -max 3600s 2>"$D/netprobe.err" &
pids+=($!)
SIDECAR_CPUPROFILE=${PROFILE_DIR:+$PROFILE_DIR/forward.pprof} "$NEW" forward "${URL[new]}" --cert-hash "${HASH[new]}" \
  -L "127.0.0.1:$((base + 4)):127.0.0.1:$((base + 3))" 2>"$D/forward.err" &
fpid=$!
pids+=($fpid)
for _ in $(seq 1 100); do grep -q "^sidecar: forwarding" "$D/forward.err" 2>/dev/null && break; sleep 0.1; done
grep -q "^sidecar: forwarding" "$D/forward.err" || { echo "sidecar forward did not start:" >&2; cat "$D/forward.err" >&2; exit 1; }
CURL=()
if [ -z "${NO_CURL:-}" ] && command -v nginx >/dev/null && command -v curl >/dev/null; then
  mkdir -p "$D/www" "$D/nginx-tmp"
  ln -sf "$F" "$D/www/src.bin"
  cat >"$D/nginx.conf" <<NGX
daemon off;
user $(id -un);
worker_processes 1;
pid $D/nginx.pid;
error_log $D/nginx.err;
events {}
http {
  access_log off;
  sendfile on;
  client_body_temp_path $D/nginx-tmp;
  client_max_body_size 0;
  server {
    listen 127.0.0.1:$((base + 5));
    root $D/www;
    location / { dav_methods PUT; create_full_put_path on; }
  }
}
NGX
  nginx -c "$D/nginx.conf" -e "$D/nginx.err" &
  ngx=$!
  pids+=($ngx)
  SIDECAR_CPUPROFILE= "$NEW" forward "${URL[new]}" --cert-hash "${HASH[new]}" \
    -L "127.0.0.1:$((base + 6)):127.0.0.1:$((base + 5))" 2>"$D/forward2.err" &
  f2pid=$!
  pids+=($f2pid)
  for _ in $(seq 1 100); do grep -q "^sidecar: forwarding" "$D/forward2.err" 2>/dev/null && break; sleep 0.1; done
  for _ in $(seq 1 50); do nw=$(pgrep -P "$ngx" | head -1); [ -n "$nw" ] && break; sleep 0.1; done
  [ -n "${nw:-}" ] && CURL=(curl -sS --fail --noproxy '*')
fi
SCP=()
if [ -z "${NO_SCP:-}" ] && command -v sshd >/dev/null && [ -f "$here/../shared/bench/sshd_up.sh" ]; then
  sshd_dir=$D/sshd
  if SSH_DIR=$sshd_dir SSH_PORT=22022 bash "$here/../shared/bench/sshd_up.sh" >/dev/null 2>&1; then
    sleep 0.3
    SCP=(scp -q -i "$sshd_dir/client_ed25519" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
      -c aes128-gcm@openssh.com -P 22022)
  else
    sshd_dir=
  fi
fi
R=$D/results
: >"$R"
# record CASE DIR SECONDS CLIENT_CPU SERVER_CPU
record() { echo "$1 $2 $3 $4 $5" >>"$R"; }
# run_cmd CASE DIR SERVERPID OUT cmd...: the command's wall time and CPU
# (its own, from time), the server's CPU over it; OUT is compared with F.
run_cmd() {
  local c=$1 d=$2 sp=$3 out=$4
  shift 4
  rm -f "$out"
  local s0 t0 t1
  s0=$(cpu "$sp")
  t0=$(date +%s.%N)
  if ! /usr/bin/time -f "%U %S" -o "$D/time" "$@" >/dev/null 2>"$D/cmd.err"; then
    echo "$c $d FAILED: $(tail -3 "$D/cmd.err")" >&2
    return
  fi
  t1=$(date +%s.%N)
  sleep 0.2 # the daemon's last bookkeeping
  cmp -s "$F" "$out" || echo "$c $d: the copy differs from the source" >&2
  record "$c" "$d" "$(echo "$t1 - $t0" | bc -l)" "$(awk '{print $1+$2}' "$D/time")" "$(echo "$(cpu "$sp") - $s0" | bc -l)"
  rm -f "$out"
}
run_fwd() { # DIR
  local d=$1 s0 f0 t0 t1 out
  s0=$(cpu "${SPID[new]}") f0=$(cpu "$fpid") t0=$(date +%s.%N)
  out=$("$NETPROBE" bulk -addr "127.0.0.1:$((base + 4))" -dir "$d" -bytes "$BYTES" -dur 600s)
  t1=$(date +%s.%N)
  sleep 0.2
  python3 -c 'import json,sys; r=json.loads(sys.argv[1])["result"]; sys.exit(0 if not r.get("err") and r["bytes"] >= int(sys.argv[2]) else 1)' "$out" "$BYTES" ||
    { echo "forward $d FAILED: $out" >&2; return; }
  record forward-L "$d" "$(echo "$t1 - $t0" | bc -l)" "$(echo "$(cpu "$fpid") - $f0" | bc -l)" "$(echo "$(cpu "${SPID[new]}") - $s0" | bc -l)"
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs, $((BYTES >> 20)) MiB a transfer, $RUNS runs"
for r in $(seq 1 "$RUNS"); do
  for n in "${names[@]}"; do
    bin=$NEW
    [ "$n" = old ] && bin=$OLD
    prof() { [ -n "${PROFILE_DIR:-}" ] && [ "$n" = new ] && echo "$PROFILE_DIR/cp-$1-$r.pprof"; }
    SIDECAR_CERT_HASH=${HASH[$n]} SIDECAR_CPUPROFILE=$(prof up) run_cmd "cp-$n" up "${SPID[$n]}" "$D/up.bin" "$bin" cp "$F" "${URL[$n]}:$D/up.bin"
    SIDECAR_CERT_HASH=${HASH[$n]} SIDECAR_CPUPROFILE=$(prof down) run_cmd "cp-$n" down "${SPID[$n]}" "$D/down.bin" "$bin" cp "${URL[$n]}:$F" "$D/down.bin"
  done
  run_fwd up
  run_fwd down
  if [ ${#CURL[@]} -gt 0 ]; then
    # The forward's CPU is counted as the client's (curl's is in time's),
    # nginx's worker's as the daemon's (serve's is counted by run_cmd).
    f0=$(cpu "$f2pid") n0=$(cpu "$nw")
    run_cmd forward-L+curl up "${SPID[new]}" "$D/www/up.bin" "${CURL[@]}" -T "$F" "http://127.0.0.1:$((base + 6))/up.bin"
    f1=$(cpu "$f2pid") n1=$(cpu "$nw")
    run_cmd forward-L+curl down "${SPID[new]}" "$D/down.bin" "${CURL[@]}" -o "$D/down.bin" "http://127.0.0.1:$((base + 6))/src.bin"
    f2=$(cpu "$f2pid") n2=$(cpu "$nw")
    python3 - "$R" "$(echo "$f1 - $f0" | bc -l)" "$(echo "$f2 - $f1" | bc -l)" "$(echo "$n1 - $n0" | bc -l)" "$(echo "$n2 - $n1" | bc -l)" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
client = {"up": float(sys.argv[2]), "down": float(sys.argv[3])}
server = {"up": float(sys.argv[4]), "down": float(sys.argv[5])}
for i in range(len(lines) - 1, -1, -1):
    c, d, s, cc, sc = lines[i].split()
    if c == "forward-L+curl" and d in client:
        lines[i] = "%s %s %s %.3f %.3f" % (c, d, s, float(cc) + client.pop(d), float(sc) + server.pop(d))
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
  fi
  if [ ${#SCP[@]} -gt 0 ]; then
    sp=$(cat "$sshd_dir/sshd.pid")
    run_cmd scp up "$sp" "$D/up.bin" "${SCP[@]}" "$F" "root@127.0.0.1:$D/up.bin"
    run_cmd scp down "$sp" "$D/down.bin" "${SCP[@]}" "root@127.0.0.1:$F" "$D/down.bin"
  fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$R" "$BYTES" <<'PY'
import sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    c, d, s, cc, sc = line.split()
    rows.setdefault((c, d), []).append((float(s), float(cc), float(sc)))
gib = int(sys.argv[2]) / 2**30
def rate(c):
    return {d: st.median(int(sys.argv[2]) / 2**20 / s for s, _, _ in v) for (cc, d), v in rows.items() if cc == c}
fwd, curl = rate("forward-L"), rate("forward-L+curl")
print("| what | dir | runs | MiB/s (median) | of forward -L | of forward -L + curl | client CPU s/GiB | daemon CPU s/GiB |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for (c, d), v in rows.items():
    m = st.median(int(sys.argv[2]) / 2**20 / s for s, _, _ in v)
    rel = "%.0f %%" % (100 * m / fwd[d]) if d in fwd else "-"
    relc = "%.0f %%" % (100 * m / curl[d]) if d in curl else "-"
    print("| %s | %s | %d | %.0f | %s | %s | %.2f | %.2f |" % (c, d, len(v), m, rel, relc,
          st.median(x[1] for x in v) / gib, st.median(x[2] for x in v) / gib))
PY
