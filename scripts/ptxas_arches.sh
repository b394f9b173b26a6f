#!/usr/bin/env bash
# ptxas's resource report of the CUDA kernels for other GPU architectures
# than the build's (docs/gpu.md, "Resources at build time"): compiles every
# kernels/cuda/*.cu of an nvcc build tree (its compile commands, with the
# architecture replaced) for each ARCH given, and prints per architecture
# the kernels, their largest register count, how many use 255 (the cap),
# and every kernel that spills to local memory. No GPU needed; about ten
# minutes per architecture on one core (attention.cu takes most of it).
# The build's own architecture (sm_90) is checked by the PtxasResources test
# in every CI run; this script is the manual check of the others.
#
# usage: scripts/ptxas_arches.sh [BUILD_DIR] ARCH...   e.g. scripts/ptxas_arches.sh build 80 100
set -euo pipefail
build=build
if [ $# -gt 0 ] && [ -d "$1" ]; then
  build=$1
  shift
fi
[ $# -gt 0 ] || { echo "usage: $0 [BUILD_DIR] ARCH... (e.g. 80 100)" >&2; exit 2; }
[ -f "$build/compile_commands.json" ] || { echo "$build/compile_commands.json: no nvcc build tree there" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for arch in "$@"; do
  case $arch in *[!0-9a]*) echo "architecture \"$arch\": a number such as 80, 90, 100 (optionally 90a)" >&2; exit 2 ;; esac
  mkdir -p "$work/sm_$arch"
  python3 - "$build" "$arch" "$work/sm_$arch" <<'EOF'
import json, re, shlex, subprocess, sys
build, arch, out = sys.argv[1], sys.argv[2], sys.argv[3]
for c in json.load(open(f"{build}/compile_commands.json")):
    if "/kernels/cuda/" not in c["file"] or not c["file"].endswith(".cu"):
        continue
    cmd = re.sub(r"--generate-code=arch=compute_[0-9a]+,code=\[compute_[0-9a]+,sm_[0-9a]+\]",
                 f"--generate-code=arch=compute_{arch},code=[sm_{arch}]", c["command"])
    name = c["file"].rsplit("/", 1)[1]
    args = shlex.split(cmd)
    args[args.index("-o") + 1] = f"{out}/{name}.o"
    r = subprocess.run(args, cwd=c["directory"], capture_output=True, text=True)
    open(f"{out}/{name}.ptxas", "w").write(r.stderr)
    if r.returncode != 0:
        sys.exit(f"sm_{arch}: {name} failed to compile:\n{r.stderr[-2000:]}")
    print(f"sm_{arch}: {name} compiled", flush=True)
EOF
  python3 - "$work/sm_$arch" "$arch" <<'EOF'
import glob, re, subprocess, sys
d, arch = sys.argv[1], sys.argv[2]
kernels = {}  # mangled -> [regs, spill stores, spill loads, file]
for f in sorted(glob.glob(f"{d}/*.ptxas")):
    cur = props = None  # the entry being compiled; whose properties the next stack line gives
    for line in open(f):
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = m.group(1)
            kernels[cur] = [0, 0, 0, f.rsplit("/", 1)[1].replace(".ptxas", "")]
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            props = m.group(1)
        m = re.search(r"([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads", line)
        if m and props in kernels:
            kernels[props][1], kernels[props][2] = int(m.group(1)), int(m.group(2))
        m = re.search(r"Used ([0-9]+) registers", line)
        if m and cur:
            kernels[cur][0] = int(m.group(1))
names = list(kernels)
dem = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
regs = [k[0] for k in kernels.values()]
print(f"sm_{arch}: {len(kernels)} kernels, at most {max(regs)} registers, {sum(r >= 255 for r in regs)} at 255, "
      f"{sum(r >= 200 for r in regs)} at 200 or more")
spills = [(dem[i] if i < len(dem) else n, k) for i, (n, k) in enumerate(kernels.items()) if k[1] or k[2]]
print(f"sm_{arch}: {len(spills)} spill:")
for name, k in spills:
    print(f"  {k[3]}: {name[:150]}: {k[0]} registers, {k[1]} bytes spill stores, {k[2]} loads")
EOF
done
