#!/usr/bin/env bash
# Pin the base image of docker/Dockerfile: resolve the digest of its tag in the registry and rewrite the
# `ARG BASE_IMAGE=NAME:TAG@sha256:…` line.
#
# RUN BY A MAINTAINER, on a machine that reaches the image registry (Docker Hub for nvidia/cuda). The project's
# development machines and CI reach only package registries (PyPI, Debian): there the digest cannot be looked up,
# and tests/docker checks only that the pin is there and well formed. Run it when moving to another tag, and now
# and then to pick up NVIDIA's rebuilds of the same tag (security fixes); then rebuild, test the image, commit.
#
# usage: docker/pin-base.sh [--tag NAME:TAG] [--digest sha256:HEX] [--check] [--dockerfile PATH]
#   --tag NAME:TAG     pin another tag (default: the tag pinned now)
#   --digest DIGEST    use this digest instead of asking the registry (e.g. one read off a trusted mirror)
#   --check            change nothing; exit 1 when the registry's digest differs from the pin
#   --dockerfile PATH  the Dockerfile to rewrite (default: docker/Dockerfile beside this script)
#
# The digest is that of the tag's manifest as the registry serves it: for a multi-platform tag the image index, so
# one pin covers linux/amd64 and linux/arm64. It is asked with the first of these found: crane, `docker buildx
# imagetools`, skopeo, or curl (Docker Hub's registry API, anonymous token).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dockerfile="$here/Dockerfile"
tag=""
digest=""
check=no

die() { echo "pin-base: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --tag) tag="${2:?--tag needs NAME:TAG}"; shift 2 ;;
        --digest) digest="${2:?--digest needs sha256:HEX}"; shift 2 ;;
        --check) check=yes; shift ;;
        --dockerfile) dockerfile="${2:?--dockerfile needs a path}"; shift 2 ;;
        -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done

[[ -f "$dockerfile" ]] || die "no Dockerfile at $dockerfile"
current="$(sed -n 's/^ARG BASE_IMAGE=\(.*\)$/\1/p' "$dockerfile")"
[[ -n "$current" && "$(printf '%s\n' "$current" | wc -l)" -eq 1 ]] \
    || die "$dockerfile has no single 'ARG BASE_IMAGE=…' line"
current_tag="${current%%@*}"
current_digest=""
[[ "$current" == *@* ]] && current_digest="${current#*@}"
tag="${tag:-$current_tag}"
[[ "$tag" =~ ^[a-z0-9./_-]+:[A-Za-z0-9_.-]+$ ]] || die "not a NAME:TAG reference: $tag"
name="${tag%:*}"
version="${tag##*:}"

resolve_digest() {
    local ref="$1" out
    if command -v crane > /dev/null 2>&1; then
        crane digest "$ref" && return 0
    fi
    if command -v docker > /dev/null 2>&1 && docker buildx version > /dev/null 2>&1; then
        out="$(docker buildx imagetools inspect "$ref" 2> /dev/null | awk '$1 == "Digest:" {print $2; exit}')" || true
        [[ -n "$out" ]] && { echo "$out"; return 0; }
    fi
    if command -v skopeo > /dev/null 2>&1; then
        out="$(skopeo inspect --raw "docker://$ref" | sha256sum | awk '{print $1}')" || true
        [[ -n "$out" ]] && { echo "sha256:$out"; return 0; }
    fi
    if command -v curl > /dev/null 2>&1 && [[ "$name" != *.*/* ]]; then
        local repo="$name" token
        [[ "$repo" == */* ]] || repo="library/$repo"
        token="$(curl -fsSL --max-time 30 \
            "https://auth.docker.io/token?service=registry.docker.io&scope=repository:${repo}:pull" \
            | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')" || true
        if [[ -n "$token" ]]; then
            out="$(curl -fsSI --max-time 30 -H "Authorization: Bearer $token" \
                -H 'Accept: application/vnd.oci.image.index.v1+json' \
                -H 'Accept: application/vnd.docker.distribution.manifest.list.v2+json' \
                -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
                -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
                "https://registry-1.docker.io/v2/${repo}/manifests/${version}" \
                | tr -d '\r' | awk 'tolower($1) == "docker-content-digest:" {print $2; exit}')" || true
            [[ -n "$out" ]] && { echo "$out"; return 0; }
        fi
    fi
    return 1
}

if [[ -z "$digest" ]]; then
    digest="$(resolve_digest "$tag")" \
        || die "could not resolve the digest of $tag: no registry reachable, or none of crane, docker buildx," \
               "skopeo, curl worked. Run this where the registry is reachable, or pass --digest."
fi
[[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "not a sha256 digest: $digest"

if [[ "$check" == yes ]]; then
    if [[ "$tag" == "$current_tag" && "$digest" == "$current_digest" ]]; then
        echo "pin-base: $current is current"
        exit 0
    fi
    echo "pin-base: pinned $current, the registry has $tag@$digest" >&2
    exit 1
fi

new="$tag@$digest"
tmp="$(mktemp "${dockerfile}.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
awk -v new="$new" '/^ARG BASE_IMAGE=/ { print "ARG BASE_IMAGE=" new; next } { print }' "$dockerfile" > "$tmp"
cat "$tmp" > "$dockerfile"
echo "pin-base: $current"
echo "       -> $new"
if [[ "$tag" != "$current_tag" ]]; then
    echo "pin-base: the tag changed: check that torch's CUDA matches it (python docker/checks.py) and update the" \
         "comments of docker/Dockerfile and docker/requirements.txt" >&2
fi
