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
