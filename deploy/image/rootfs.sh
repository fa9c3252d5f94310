#!/bin/sh
# rootfs.sh DIR BINARY: lay out the build context of Containerfile in DIR
# (DIR/root becomes the image's /), from Debian's busybox-static and
# ca-certificates and the static sidecar BINARY. Nothing is downloaded.
#
# The image's shell is BusyBox ash; its tools are BusyBox's applets
# (busybox --list: ls, cat, ps, top, vi, wget, nc, tar, ...), one
# symbolic link each in /bin.
set -eu
dir=$1 bin=$2
here=$(cd "$(dirname "$0")" && pwd)
busybox=${BUSYBOX:-/bin/busybox}
certs=${CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}

[ -x "$busybox" ] || { echo "rootfs.sh: $busybox missing: apt-get install busybox-static" >&2; exit 1; }
# A dynamically linked busybox (Debian's busybox package) cannot run in FROM scratch.
if command -v ldd >/dev/null && ldd "$busybox" >/dev/null 2>&1; then
  echo "rootfs.sh: $busybox is not static: apt-get install busybox-static" >&2; exit 1
fi
[ -r "$certs" ] || { echo "rootfs.sh: $certs missing: apt-get install ca-certificates" >&2; exit 1; }

rm -rf "$dir/root" "$dir/owned"
mkdir -p "$dir/owned" # empty: Containerfile copies it over the directories of user sidecar
r=$dir/root
mkdir -p "$r/bin" "$r/usr/local/bin" "$r/etc/ssl/certs" "$r/etc/sidecar" \
  "$r/tmp" "$r/run" "$r/proc" "$r/sys" "$r/dev"
cp "$busybox" "$r/bin/busybox"
for a in $("$busybox" --list); do
  [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"
done
mkdir -p "$r/usr/bin" "$r/sbin" "$r/usr/sbin"
ln -sf /bin/env "$r/usr/bin/env"
cp "$certs" "$r/etc/ssl/certs/ca-certificates.crt"
cp "$bin" "$r/usr/local/bin/sidecar"
chmod 0755 "$r/usr/local/bin/sidecar" "$r/bin/busybox"
cp "$here/config.hcl" "$r/etc/sidecar/config.hcl"
cp "$here/../../Containerfile" "$dir/Containerfile"
printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' \
  'sidecar:x:10001:10001:sidecar:/home/sidecar:/bin/sh' \
  'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >"$r/etc/passwd"
printf '%s\n' 'root:x:0:' 'sidecar:x:10001:' 'nogroup:x:65534:' >"$r/etc/group"
printf '%s\n' 'hosts: files dns' >"$r/etc/nsswitch.conf"
chmod 1777 "$r/tmp"
