# Sourced by the adapters: udpshape_bin prints the path of bench/udpshape's
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
