#!/usr/bin/env bash
# Fetches NVIDIA's header-only cuDNN frontend (C++ graph API, cudnn_frontend.h)
# for `gpt bench --only cuda-attention`, which compares our softmax attention
# kernel with cuDNN's fused attention (src/bench/cudnn_attention.cpp). The
# headers come from the PyPI wheel nvidia-cudnn-frontend (its include/ folder;
# the Python module in it is not used): downloaded with pip, no installation,
# and unpacked into third_party/cudnn_frontend/ (git-ignored), which CMake
# looks at (CUDNN_FRONTEND_INCLUDE_DIR). Optional: without the headers the
# build leaves the cuDNN comparison out.
#
# Idempotent: does nothing when the wanted version is already there.
# Exits non-zero with a clear message when pip or the network is missing
# (scripts/setup.sh only warns then).
#
# usage: scripts/fetch_cudnn_frontend.sh [OUT_DIR]   (default third_party/cudnn_frontend)
# env:   CUDNN_FRONTEND_VERSION=1.32.0
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-third_party/cudnn_frontend}
version=${CUDNN_FRONTEND_VERSION:-1.32.0}

if [ -f "$out/include/cudnn_frontend.h" ] && [ "$(cat "$out/VERSION" 2>/dev/null)" = "$version" ]; then
  echo "cudnn-frontend $version already in $out"
  exit 0
fi
python3 -m pip --version >/dev/null 2>&1 ||
  { echo "error: fetch_cudnn_frontend.sh needs python3 with pip (python3 -m pip)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "downloading nvidia-cudnn-frontend==$version from PyPI (headers only)"
# Any manylinux wheel carries the same headers; the Python version and the
# platform are fixed so that pip picks one whatever the local Python is.
if ! timeout 300 python3 -m pip download --quiet --retries 2 --timeout 20 --no-deps --only-binary=:all: --python-version 3.11 \
       --platform manylinux_2_28_x86_64 "nvidia-cudnn-frontend==$version" -d "$tmp" >"$tmp/pip.log" 2>&1; then
  echo "error: could not download nvidia-cudnn-frontend==$version with pip (no network, no PyPI access or no such version?):" >&2
  tail -n 3 "$tmp/pip.log" | sed 's/^/  /' >&2
  exit 1
fi
wheel=$(ls "$tmp"/nvidia_cudnn_frontend-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || { echo "error: pip downloaded no nvidia_cudnn_frontend wheel into $tmp" >&2; exit 1; }

# A wheel is a zip file; Python's zipfile avoids needing unzip.
python3 - "$wheel" "$tmp/unpacked" <<'EOF'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    members = [n for n in z.namelist() if n.startswith("include/")]
    if not any(n == "include/cudnn_frontend.h" for n in members):
        sys.exit(f"error: {wheel} has no include/cudnn_frontend.h")
    z.extractall(dest, members)
EOF
rm -rf "$out"
mkdir -p "$(dirname "$out")"
mv "$tmp/unpacked" "$out"
echo "$version" >"$out/VERSION"
echo "cudnn-frontend $version: $(find "$out/include" -type f | wc -l) headers in $out/include ($(du -sh "$out" | cut -f1))"
