#!/usr/bin/env bash
# Compile launcher of the CUDA kernels (CMake's RULE_LAUNCH_COMPILE on
# gpt_kernels_cuda, whose sources compile with -Xptxas=-v): runs the compile
# command it is given, keeps ptxas's resource report of every kernel
# (registers, spills, stack, shared memory) beside the object as OBJECT.ptxas,
# and passes every other line of the compiler's error stream on (ptxas's
# warnings included). tests/kernels/cuda/ptxas_resources_test.cpp reads the
# reports; docs/gpu.md explains them.
set -uo pipefail
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
[ -n "$out" ] || exec "$@"
err=$(mktemp)
"$@" 2>"$err"
rc=$?
grep -E '^ptxas info|^ +[0-9]+ bytes stack frame' "$err" >"$out.ptxas.tmp" && mv "$out.ptxas.tmp" "$out.ptxas" ||
  { rm -f "$out.ptxas.tmp"; : >"$out.ptxas"; }
grep -vE '^ptxas info|^ +[0-9]+ bytes stack frame' "$err" >&2
rm -f "$err"
exit $rc
