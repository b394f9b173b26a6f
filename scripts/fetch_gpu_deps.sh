#!/usr/bin/env bash
# Brings the build dependencies along for scripts/gpu_check.sh: downloads the
# Debian packages (apt-get download, no installation, no root needed beyond
# apt's package lists) of nlohmann-json, spdlog + fmt, CLI11, GoogleTest and
# PCRE2 with the shared libraries they link to, and unpacks them with
# `dpkg -x` into third_party/deb/ (git-ignored); and NVIDIA's header-only
# cudnn-frontend into third_party/cudnn_frontend/ (scripts/fetch_cudnn_frontend.sh;
# optional: only a warning when it fails). Run it on a Debian machine
# with network access; the folders then travel to the GPU machine (see
# docs/gpu.md), which needs neither network nor these packages.
#
# usage: scripts/fetch_gpu_deps.sh [OUT_DIR]      (default third_party/deb)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-third_party/deb}

command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
  { echo "error: fetch_gpu_deps.sh needs apt-get and dpkg (a Debian or Ubuntu machine)" >&2; exit 1; }

dev=(nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev libgtest-dev libpcre2-dev)
# The shared libraries behind the -dev packages (their names carry the
# release's soname, e.g. libspdlog1.10, libfmt9, libpcre2-8-0).
runtime=()
for p in libspdlog-dev libfmt-dev libpcre2-dev; do
  while read -r dep; do
    case "$dep" in libspdlog1*|libfmt[0-9]*|libpcre2-8-[0-9]*) runtime+=("$dep") ;; esac
  done < <(apt-cache depends "$p" | awk '$1 == "Depends:" {print $2}')
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "downloading: ${dev[*]} ${runtime[*]}"
if ! (cd "$tmp" && apt-get download "${dev[@]}" "${runtime[@]}"); then
  echo "apt-get download failed; refreshing the package lists (apt-get update) and retrying" >&2
  apt-get update -qq
  (cd "$tmp" && apt-get download "${dev[@]}" "${runtime[@]}")
fi

rm -rf "$out"
mkdir -p "$out"
for f in "$tmp"/*.deb; do dpkg -x "$f" "$out"; done
# Only headers, libraries and CMake/pkg-config files are needed.
rm -rf "${out:?}/usr/share/doc" "${out:?}/usr/share/man" "${out:?}/usr/share/lintian" "${out:?}/usr/bin"
(cd "$tmp" && for f in *.deb; do dpkg-deb -f "$f" Package Version | paste -sd' '; done) > "$out/PACKAGES"
echo "unpacked into $out ($(du -sh "$out" | cut -f1)):"
sed 's/^/  /' "$out/PACKAGES"
# cuDNN's fused attention as the reference of gpt bench (optional).
scripts/fetch_cudnn_frontend.sh ||
  echo "warning: cudnn-frontend not fetched; the GPU build will leave the cuDNN comparison out" >&2
