#!/usr/bin/env bash
# The CMake generator of a new build tree: Ninja where it is installed
# (scripts/setup.sh installs it), else Unix Makefiles. Ninja compiles a
# target's sources without waiting for the libraries the target links, so
# both cores stay busy while nvcc compiles the attention kernels. A tree
# keeps the generator it was configured with.
if command -v ninja >/dev/null 2>&1; then echo Ninja; else echo "Unix Makefiles"; fi
