#!/usr/bin/env bash
# scripts/image-check.sh: builds the redrive image from deploy/Containerfile
# with `make image-oci` (make build's static binary and the host's CA
# bundle, FROM scratch: nothing is pulled) into a throw-away store, and
# checks it:
#
#   - the configuration: a numeric non-root user, ENTRYPOINT ["/redrive"],
#     the labels org.opencontainers.image.version (= VERSION) and
#     org.opencontainers.image.source;
#   - the filesystem: /redrive and /etc/ssl/certs/ca-certificates.crt and
#     nothing else (no base image came in);
#   - `redrive version`, run inside the image, prints VERSION: buildah run
#     with chroot isolation (it works where namespaces for an OCI runtime
#     are not allowed, as in CI sandboxes), on the image's root filesystem
#     and as the image's user (buildah run takes the container's user).
#
# Needs buildah (Debian package buildah; chroot isolation needs no OCI
# runtime such as crun or runc), make, go and a CA bundle
# (ca-certificates). Runs as root, or rootless where user namespaces are allowed.
# Usage: bash scripts/image-check.sh   (or make image-check); VERSION
# defaults to the Makefile's (git describe).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "image-check: FAIL: $*" >&2; exit 1; }
say() { echo "image-check: $*" >&2; }

command -v buildah >/dev/null 2>&1 || die "buildah is not installed (apt-get install buildah)"
VERSION=${VERSION:-$(git describe --always --dirty 2>/dev/null || echo dev)}
IMAGE=localhost/redrive:image-check

store=$(mktemp -d /tmp/redrive-image-check.XXXXXX)
B=(buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs)
ctr=""
cleanup() {
  [[ -n "$ctr" ]] && "${B[@]}" rm "$ctr" >/dev/null 2>&1 || true
  "${B[@]}" rmi -f "$IMAGE" >/dev/null 2>&1 || true
  rm -rf "$store" 2>/dev/null || { chmod -R u+w "$store" 2>/dev/null; rm -rf "$store"; }
}
trap cleanup EXIT

say "building $IMAGE (VERSION=$VERSION) with make image-oci"
make --no-print-directory image-oci VERSION="$VERSION" IMAGE="$IMAGE" OCI_BUILDER=buildah OCI_FLAGS="${B[*]:1}" >&2

fmt() { "${B[@]}" inspect --type image --format "$1" "$IMAGE"; }

user=$(fmt '{{.OCIv1.Config.User}}')
[[ "$user" =~ ^[0-9]+(:[0-9]+)?$ ]] || die "user is \"$user\", want a numeric uid[:gid]"
[[ "${user%%:*}" != 0 ]] || die "user is root ($user)"
[[ "$user" == *:* && "${user##*:}" == 0 ]] && die "group is root ($user)"
say "ok: user $user (non-root)"

# (Go's print of a []string: buildah 1.28's templates have no json.)
entry=$(fmt '{{.OCIv1.Config.Entrypoint}}')
[[ "$entry" == '[/redrive]' ]] || die "entrypoint is $entry, want [/redrive]"
say "ok: entrypoint $entry"

label_version=$(fmt '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}')
[[ "$label_version" == "$VERSION" ]] || die "label org.opencontainers.image.version is \"$label_version\", want \"$VERSION\""
label_source=$(fmt '{{index .OCIv1.Config.Labels "org.opencontainers.image.source"}}')
[[ "$label_source" == https://* ]] || die "label org.opencontainers.image.source is \"$label_source\", want an https URL"
say "ok: labels version=$label_version source=$label_source"

ctr=$("${B[@]}" from --pull-never "$IMAGE")
mnt=$("${B[@]}" mount "$ctr")
files=$(cd "$mnt" && find . -mindepth 1 \( -type f -o -type l \) | sort | tr '\n' ' ')
"${B[@]}" umount "$ctr" >/dev/null
[[ "$files" == "./etc/ssl/certs/ca-certificates.crt ./redrive " ]] || die "the image holds $files, want only ./redrive and ./etc/ssl/certs/ca-certificates.crt"
say "ok: files ${files% }"

out=$("${B[@]}" run --isolation chroot "$ctr" -- /redrive version 2>&1) || die "redrive version inside the image: $out"
[[ "$out" == *"$VERSION"* ]] || die "redrive version inside the image printed \"$out\", want $VERSION"
say "ok: inside the image (buildah run, chroot isolation, the image's user): redrive version -> $out"
say "PASS"
