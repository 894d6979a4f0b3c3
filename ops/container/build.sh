#!/usr/bin/env bash
# Build the dome worker image with podman, without pulling any base image from a registry:
#   1. a Debian bookworm root filesystem made with mmdebstrap (apt), imported with `podman import`;
#   2. the pinned wheels of the variant, downloaded with pip before the build;
#   3. `podman build --network none` from ops/container/Containerfile.
# Usage: ops/container/build.sh [--variant ci|litho|ray] [--name NAME]
# Prints one line on stdout: the image pinned by digest, NAME@sha256:<image id>, ready for a
# work queue's `containers` or `dome run --executor container --image`.
# Everything is cached under $DOME_IMAGE_CACHE (default ~/.cache/dome/image): the root filesystem
# and wheels by the digest of what they are made from, the image by the digest of all its inputs,
# so a second call with nothing changed only prints the ref.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
variant=ci
name=localhost/dome-worker
while [ $# -gt 0 ]; do
  case "$1" in
    --variant) variant=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$variant" in ci|litho|ray) ;; *) echo "build.sh: --variant must be ci, litho or ray" >&2; exit 2 ;; esac
for tool in podman mmdebstrap python3; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is not installed (apt-get install -y podman mmdebstrap)" >&2; exit 3; }
done
cache=${DOME_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dome/image}
mkdir -p "$cache"
mirror=${DOME_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# bubblewrap: every attempt's sandbox is built inside the image (the container executor's nested
# mode, the Ray task)
packages=python3,python3-venv,git,ca-certificates,passwd,bubblewrap
h() { sha256sum | cut -c1-16; }

# 1. root filesystem (cached by suite + packages)
rootkey=$(printf 'bookworm %s' "$packages" | h)
rootfs="$cache/rootfs-$rootkey.tar"
base="localhost/dome-rootfs:$rootkey"
if ! podman image exists "$base"; then
  if [ ! -s "$rootfs" ]; then
    echo "build.sh: mmdebstrap bookworm ($packages)" >&2
    mmdebstrap --quiet --format=tar --variant=minbase --include="$packages" bookworm "$rootfs.part" "$mirror" >&2
    mv "$rootfs.part" "$rootfs"
  fi
  podman import --quiet "$rootfs" "$base" >/dev/null
fi

# The OCI runtime: $DOME_OCI_RUNTIME, else podman's default when it can start a container here,
# else runc (crun refuses hosts whose cgroups are in hybrid v1/v2 mode).
runtime=${DOME_OCI_RUNTIME:-}
if [ -z "$runtime" ] && ! podman run --rm --network none "$base" true >/dev/null 2>&1; then
  command -v runc >/dev/null || { echo "build.sh: podman cannot start a container and runc is not installed" >&2; exit 3; }
  runtime=runc
fi
rt=(); [ -n "$runtime" ] && rt=(--runtime "$runtime")

# 2. wheels (cached by the requirement files)
wheelkey=$(cat "$here/requirements-ci.txt" "$here/requirements-$variant.txt" | h)
wheels="$cache/wheels-$variant-$wheelkey"
if [ ! -d "$wheels" ]; then
  echo "build.sh: downloading the $variant wheels" >&2
  rm -rf "$wheels.part"
  python3 -m pip download --quiet --only-binary=:all: --dest "$wheels.part" -r "$here/requirements-$variant.txt" >&2
  mv "$wheels.part" "$wheels"
fi

# 3. the image (cached by the digest of every input: base, wheels, Containerfile, dome's packages)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/src"
cp "$here/Containerfile" "$here"/requirements-*.txt "$ctx/"
cp -r "$wheels" "$ctx/wheels"
# the worker's packages: registry and worker_sdk; the ray variant adds coordinator (its Ray task
# code). Never ops/, never the coordinator's keys or ledger.
pkgs=(registry worker_sdk); [ "$variant" = ray ] && pkgs+=(coordinator)
(cd "$repo" && git ls-files -z "${pkgs[@]}" | xargs -0 cp --parents -t "$ctx/src")
inkey=$( (echo "$base $variant"; cd "$ctx" && find . -type f ! -path './wheels/*' -print0 | sort -z | xargs -0 sha256sum; ls "$ctx/wheels") | h)
tag="$name:$variant-$inkey"
if ! podman image exists "$tag"; then
  echo "build.sh: building $tag" >&2
  podman build "${rt[@]}" --quiet --network none --build-arg BASE="$base" --build-arg VARIANT="$variant" \
    -t "$tag" -f "$ctx/Containerfile" "$ctx" >/dev/null
fi
podman tag "$tag" "$name:$variant"
# earlier builds of this variant (other sources) are untagged; an image a container still uses stays
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep "^$name:$variant-" | grep -vx "$tag"); do
  podman rmi "$old" >/dev/null 2>&1 || echo "build.sh: kept $old (in use)" >&2
done
id=$(podman image inspect --format '{{.Id}}' "$tag")
echo "$name:$variant@sha256:$id"
