#!/usr/bin/env bash
# Build privfl's two images from this checkout, with no registry pull:
#   1. a Debian 12 base, minbase with python3 and venv only, made by mmdebstrap where it is
#      installed (parallel downloads, no fsyncs: faster, docs/deploy.md §13) or else by
#      debootstrap; its tarball cached, imported locally as localhost/privfl-base:bookworm;
#   2. localhost/privfl:lean  — the vertical parties, the Server, the relay, the tools;
#      localhost/privfl:torch — the same plus CPU torch, for the horizontal roles.
# Usage: deploy/containers/build.sh [base|lean|torch|all]   (default: all)
# Needs root (mmdebstrap or debootstrap), podman, and Debian's and PyPI's mirrors. Rebuilds
# reuse the cached tarball and podman's layer cache: only a changed layer is rebuilt.
# Environment: PRIVFL_CONTAINER_CACHE (default ~/.cache/privfl/containers),
# DEBIAN_MIRROR (default http://deb.debian.org/debian), TORCH_VERSION (default 2.13.0).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
which="${1:-all}"
cache="${PRIVFL_CONTAINER_CACHE:-$HOME/.cache/privfl/containers}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
torch="${TORCH_VERSION:-2.13.0}"
base=localhost/privfl-base:bookworm
# crun refuses some kernels' hybrid cgroups; runc and cgroupfs work on every host we run.
podman=(podman --runtime runc --cgroup-manager=cgroupfs)
case "$which" in base|lean|torch|all) ;; *) echo "build.sh: unknown image '$which' (base, lean, torch or all)" >&2; exit 2 ;; esac
mkdir -p "$cache"

command -v podman >/dev/null || { echo "build.sh: podman is not installed (apt-get install podman runc mmdebstrap)" >&2; exit 2; }
bootstrap="$(command -v mmdebstrap || command -v debootstrap)" \
  || { echo "build.sh: neither mmdebstrap nor debootstrap is installed (apt-get install mmdebstrap)" >&2; exit 2; }

seconds() { date +%s; }
started=$(seconds)

if ! "${podman[@]}" image exists "$base"; then
  tarball="$cache/bookworm-minbase.tar"
  if [ ! -s "$tarball" ]; then
    tool="$(basename "$bootstrap")"
    echo "build.sh: $tool (minbase) into a fresh folder; cached as $tarball" >&2
    rootfs="$(mktemp -d "$cache/rootfs.XXXXXX")"
    trap 'rm -rf "$rootfs"' EXIT
    # The same packages either way (mmdebstrap's merged-usr hook installs usr-is-merged, as
    # debootstrap does, not usrmerge and its perl), the same sources.list for the build
    # stage; dpkg skips its fsyncs (a throwaway folder) and the files removed below.
    opts=()
    [ "$tool" = mmdebstrap ] && opts=(--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
      --dpkgopt=force-unsafe-io --dpkgopt='path-exclude=/usr/share/doc/*'
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
      --dpkgopt='path-exclude=/usr/share/locale/*')
    "$bootstrap" --variant=minbase --include=python3,python3-venv ${opts[@]+"${opts[@]}"} bookworm "$rootfs" "$mirror" >"$cache/$tool.log" 2>&1 \
      || { echo "build.sh: $tool failed; see $cache/$tool.log" >&2; exit 1; }
    # What a container never needs: apt's lists and caches, docs, man pages, locales (and
    # mmdebstrap's dpkg options, which were for this folder only).
    rm -f "$rootfs/etc/dpkg/dpkg.cfg.d/99mmdebstrap"
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
      "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
    tar --numeric-owner -C "$rootfs" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
  fi
  "${podman[@]}" import --change 'CMD ["/bin/bash"]' "$tarball" "$base" >/dev/null
fi
echo "build.sh: base ready after $(( $(seconds) - started )) s" >&2
[ "$which" = base ] && exit 0

# What pip needs from this machine, mounted into the build steps only (never into an
# image): its CA bundle and its find-links folder (where a CPU torch wheel may wait).
mounts=()
ca="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
[ -s "$ca" ] && mounts+=(-v "$ca:/run/build/ca.crt:ro")
for links in ${PIP_FIND_LINKS:-}; do
  [ -d "$links" ] && { mounts+=(-v "$links:/run/build/wheels:ro"); break; }
done

build() {  # name, extra build args...
  local name="$1"; shift
  local t0; t0=$(seconds)
  # The build context: only what pip needs (pyproject.toml, README.md, the package); one
  # per image, so that two builds at once never read each other's half-written copy.
  local context="$cache/context-$name"
  rm -rf "$context" && mkdir -p "$context"
  cp "$root/pyproject.toml" "$root/README.md" "$context/"
  tar -C "$root" --exclude='__pycache__' --exclude='*.pyc' -cf - privfl | tar -C "$context" -xf -
  "${podman[@]}" build --format docker --layers -f "$here/Containerfile" --build-arg "BASE=$base" \
    --build-arg "ROLE_FAMILY=$name" ${mounts[@]+"${mounts[@]}"} "$@" -t "localhost/privfl:$name" "$context" >"$cache/build-$name.log" 2>&1 \
    || { tail -20 "$cache/build-$name.log" >&2; echo "build.sh: building $name failed; see $cache/build-$name.log" >&2; exit 1; }
  local size; size=$("${podman[@]}" image inspect --format '{{.Size}}' "localhost/privfl:$name")
  echo "build.sh: localhost/privfl:$name built in $(( $(seconds) - t0 )) s, $(( size / 1000000 )) MB" >&2
}
case "$which" in
  lean) build lean ;;
  torch) build torch --build-arg "TORCH=$torch" ;;
  all) build lean; build torch --build-arg "TORCH=$torch" ;;
esac
echo "build.sh: done in $(( $(seconds) - started )) s" >&2
