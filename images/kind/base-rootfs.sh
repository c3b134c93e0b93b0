#!/usr/bin/env bash
# The Debian half of kind's base image (kind v0.33.0 images/base/Dockerfile, `clean-install` line), made by debootstrap
# because no registry (debian:trixie-slim) is reachable here: bookworm minbase plus kind's package list, minus what
# this test environment does not use (nfs-common, open-iscsi, fuse-overlayfs, curl), plus Debian's runc and CNI plugins
# in place of the ones kind's Dockerfile builds from git. Writes <cache>/kind/base-rootfs-<key>.tar (a plain tarball
# for `docker import`) and prints its path. Keyed by this file, so a warm machine does nothing.
set -euo pipefail
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
SUITE=bookworm MIRROR=http://deb.debian.org/debian
PACKAGES=systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,jq,procps,runc,containernetworking-plugins,socat,ebtables
key=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)
out=$cache/kind/base-rootfs-$key.tar
if [ ! -f "$out" ]; then
  tmp=$cache/kind/work/base-rootfs-$key
  rm -rf "$tmp"; mkdir -p "$tmp"
  start=$SECONDS
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp" "$MIRROR" >/dev/null
  chroot "$tmp" apt-get clean
  rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/dev/* "$tmp"/proc/* "$tmp"/sys/* "$tmp"/run/* "$tmp"/tmp/*
  tar --numeric-owner --xattrs -C "$tmp" -cf "$out.tmp" .
  mv "$out.tmp" "$out"; rm -rf "$tmp"
  echo "built kind base rootfs in $((SECONDS - start)) s ($(du -m "$out" | cut -f1) MB)" \
    | tee -a "$cache/logs/build-times.log" >&2
fi
echo "$out"
