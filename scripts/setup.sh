#!/usr/bin/env bash
# Installs the Debian packages the project needs (skipping those present),
# then configures and builds into build/ (BUILD_DIR overrides). Idempotent: a
# second run only rebuilds what changed.
#   scripts/setup.sh            build everything (the gpt binary and the tests)
#   scripts/setup.sh gpt        build only the named targets
#   scripts/setup.sh --packages only install the packages (for other build dirs)
#   GPT_EXTRA_PACKAGES="a b"    install these Debian packages too
set -euo pipefail
cd "$(dirname "$0")/.."

# gnuplot-nox (+ fonts-liberation for its text) draws the plots of `gpt sweep` (scripts/reproduce.sh).
# ninja-build: a new build tree uses Ninja, which compiles a target's sources
# without waiting for the libraries it links (make does; minutes of CI).
PACKAGES=(cmake g++ make ninja-build libgtest-dev nlohmann-json3-dev libspdlog-dev libcli11-dev libpcre2-dev pkg-config bible-kjv libopenmpi-dev openmpi-bin gnuplot-nox fonts-liberation)
# Other scripts add what they alone need (scripts/fuzz.sh: clang, libomp-dev).
read -r -a extra <<<"${GPT_EXTRA_PACKAGES:-}"
PACKAGES+=("${extra[@]}")

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then missing+=("$p"); fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "${1:-}" = "--packages" ]; then exit 0; fi

# nvcc is often installed outside PATH (/usr/local/cuda/bin); CMake finds it
# through CUDACXX.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ] && [ -z "${CUDACXX:-}" ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

# cuDNN's fused attention, the reference of `gpt bench --only cuda-attention`,
# needs NVIDIA's header-only cudnn-frontend (from PyPI, into
# third_party/cudnn_frontend/). Optional: without network the build leaves
# the comparison out.
if command -v nvcc >/dev/null 2>&1 || [ -n "${CUDACXX:-}" ]; then
  scripts/fetch_cudnn_frontend.sh ||
    echo "setup: warning: cudnn-frontend not fetched; gpt bench will not compare with cuDNN's fused attention" >&2
fi

BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -G "$(scripts/generator.sh)" -DCMAKE_BUILD_TYPE=Release
fi
if (($#)); then
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target "$@"
else
  cmake --build "$BUILD_DIR" -j"$(nproc)"
fi
