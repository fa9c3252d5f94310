# Sourced by the adapters. udpshape_bin prints the path of bench/udpshape's
# binary ($UDPSHAPE, default /tmp/udpshape), built with `go build` when
# missing or older than its source.
udpshape_bin() {
  local bin=${UDPSHAPE:-/tmp/udpshape} root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  if [ ! -x "$bin" ] || [ -n "$(find "$root/bench/udpshape" -newer "$bin" -name '*.go' 2>/dev/null)" ]; then
    (cd "$root" && go build -o "$bin.$$" ./bench/udpshape && mv -f "$bin.$$" "$bin") \
      || { echo "udpshape: go build failed" >&2; rm -f "$bin.$$"; return 1; }
  fi
  echo "$bin"
}

# cpu_log appends to $CPU_LOG (when set) one line per pid given: "NAME PID
# CPU_SECONDS" (user + system time so far, from /proc/PID/stat), for
# CPU-per-byte figures that do not depend on the machine's load.
cpu_log() {
  [ -n "${CPU_LOG:-}" ] || return 0
  local name=$1 p f hz
  hz=$(getconf CLK_TCK)
  shift
  for p in "$@"; do
    [ -n "$p" ] && [ -r "/proc/$p/stat" ] || continue
    f=$(sed 's/^.*) //' "/proc/$p/stat")
    # shellcheck disable=SC2086
    set -- $f
    echo "$name $p $(awk -v u="${12}" -v s="${13}" -v hz="$hz" 'BEGIN{printf "%.2f", (u+s)/hz}')" >>"$CPU_LOG"
  done
}

# udpshape_start TO_PORT DIR starts bench/udpshape on 127.0.0.1:$SHAPE_PORT
# (default 47300) towards 127.0.0.1:TO_PORT (LINK_RATE bytes/s, LINK_DELAY
# one-way), its output in DIR/shape.out, and waits (at most 5 s) until it
# listens; it sets shp (its pid, for the adapter to kill) and connect (the
# port the client then dials). Returns 1 when udpshape cannot be built.
udpshape_start() {
  local to=$1 dir=$2 bin i
  SHAPE_PORT=${SHAPE_PORT:-47300}
  bin=$(udpshape_bin) || return 1
  "$bin" -listen "127.0.0.1:$SHAPE_PORT" -to "127.0.0.1:$to" \
    -rate "$LINK_RATE" -delay "${LINK_DELAY:-0s}" >"$dir/shape.out" &
  shp=$!
  for i in $(seq 1 50); do grep -q '^listening' "$dir/shape.out" 2>/dev/null && break; sleep 0.1; done
  connect=$SHAPE_PORT
}
