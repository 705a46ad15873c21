#!/usr/bin/env bash
# Makes this Debian 12 machine run docker/compose.yaml without a Docker engine or a registry
# (docs/operations.md, "Containers"): podman with runc, podman-compose, three container settings,
# and the base image localhost/debian:bookworm made by debootstrap from the machine's own apt
# mirror, so that the Dockerfile's `FROM debian:bookworm` resolves without a pull.
# Idempotent (each step is skipped when done); needs root. ~60 s the first time (debootstrap).
# Usage: bash t/deploy/podman-setup.sh
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "podman-setup: needs root (installs packages, writes /etc/containers/containers.conf)" >&2
  exit 77
fi
# iptables: netavark's firewall driver, only recommended by its package (without it every
# container with a network fails: "netavark: No such file or directory").
pkgs=(podman runc netavark aardvark-dns iptables debootstrap podman-compose)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "podman-setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # other apt-get runs may hold the lock for a while: wait for it
  apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}"
fi

# crun fails on these machines ("cgroups in hybrid mode not supported"), podman's default
# ulimits (nofile 1048576) exceed what root may set here, and podman 4.3 chooses the CNI
# network backend, whose networks resolve no service names without the dnsname plugin:
# runc, limits that fit, and netavark with aardvark-dns (compose's service-name DNS).
conf=/etc/containers/containers.conf
mark='# Written by grl t/deploy/podman-setup.sh'
want='[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
[network]
network_backend = "netavark"'
if [ ! -f "$conf" ] || { head -1 "$conf" | grep -qxF "$mark" && [ "$(tail -n +2 "$conf")" != "$want" ]; }; then
  mkdir -p /etc/containers
  printf '%s\n%s\n' "$mark" "$want" >"$conf"
  echo "podman-setup: wrote $conf"
elif ! grep -q '^runtime = "runc"' "$conf" || ! grep -q '^default_ulimits' "$conf" ||
     ! grep -q '^network_backend = "netavark"' "$conf"; then
  echo "podman-setup: $conf (not written by this script) lacks some of these settings; add:" >&2
  echo "$want" >&2
  exit 1
fi

# A bridge the CNI backend left holds the default network's address (10.88.0.1/16) and its
# route, so that under netavark the default network's containers (and `RUN` in builds) reach
# nothing. Under netavark no container uses it.
if ip link show cni-podman0 >/dev/null 2>&1 &&
   [ "$(podman info --format '{{.Host.NetworkBackend}}')" = netavark ]; then
  ip link delete cni-podman0
  echo "podman-setup: removed the CNI backend's bridge cni-podman0 (netavark is in use)"
fi

image=localhost/debian:bookworm
if podman image exists "$image"; then
  echo "podman-setup: $image present"
else
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list)
  rootfs=$(mktemp -d /tmp/grl-rootfs-XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  echo "podman-setup: debootstrap bookworm from $mirror (~60 s)"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 ||
    { tail -20 "$rootfs.log" >&2; rm -f "$rootfs.log"; exit 1; }
  rm -f "$rootfs.log"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | podman import -q --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
  echo "podman-setup: imported $image"
fi
podman --version
