#!/usr/bin/env bash
# SASS of our kernels on a machine without the CUDA toolkit's cuobjdump and
# nvdisasm (this project's CPU machines have nvcc and ptxas only):
#
#   bash scripts/sass.sh OBJ [KERNEL_REGEX]           the SASS of OBJ's kernels
#   bash scripts/sass.sh --count OBJ [KERNEL_REGEX]   a line a kernel: instructions,
#                                                      MUFU, FFMA, FMUL, FADD, LDS, LDG, STG
#
# OBJ: an object file or library built for sm_90a (e.g. build/CMakeFiles/quack.dir/
# src/ops/softmax_bf16.cu.o, or one compiled by hand: nvcc -std=c++17 -arch=sm_90a
# -Iinclude --expt-relaxed-constexpr -c src/ops/softmax_bf16.cu -o /tmp/s.o).
# KERNEL_REGEX matches the mangled or demangled kernel name.
# The first call downloads NVIDIA's cuobjdump and nvdisasm wheels from PyPI
# (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm; release 13.2, which reads
# nvcc 13.0's sm_90a cubins) and unpacks them into .tools/ (git-ignored);
# nothing is installed into any Python environment.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=${QUACK_SASS_TOOLS:-$root/.tools/cuda-binutils}
version=13.2.86
count=0
if [ "${1:-}" = "--count" ]; then
  count=1
  shift
fi
obj=${1:?usage: scripts/sass.sh [--count] OBJ [KERNEL_REGEX]}
regex=${2:-.}
if [ ! -x "$tools/nvidia/cu13/bin/cuobjdump" ] || [ ! -x "$tools/nvidia/cu13/bin/nvdisasm" ]; then
  mkdir -p "$tools"
  dl=$(mktemp -d)
  trap 'rm -rf "$dl"' EXIT
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$dl" \
    "nvidia-cuda-cuobjdump==$version" "nvidia-cuda-nvdisasm==$version" >&2
  for w in "$dl"/*.whl; do python3 -m zipfile -e "$w" "$tools"; done
  chmod +x "$tools/nvidia/cu13/bin/cuobjdump" "$tools/nvidia/cu13/bin/nvdisasm"
fi
export PATH="$tools/nvidia/cu13/bin:$PATH"
sass=$(mktemp)
cuobjdump --dump-sass "$obj" > "$sass"
python3 - "$sass" "$regex" "$count" <<'PY'
import collections, re, subprocess, sys
path, regex, count = sys.argv[1], re.compile(sys.argv[2]), sys.argv[3] == "1"
kernels, cur = {}, None
for line in open(path):
    m = re.match(r"\s+Function : (\S+)", line)
    if m:
        cur = m.group(1)
        kernels[cur] = []
    elif cur is not None:
        kernels[cur].append(line.rstrip("\n"))
names = list(kernels)
demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
ops = ("MUFU", "FFMA", "FMUL", "FADD", "LDS", "LDG", "STG")
if count:
    print("instrs " + " ".join(f"{o:>5}" for o in ops) + "  kernel")
for name, pretty in zip(names, demangled):
    if not (regex.search(name) or regex.search(pretty)):
        continue
    body = kernels[name]
    if not count:
        print(f"        Function : {pretty}")
        print("\n".join(body))
        continue
    c = collections.Counter()
    n = 0
    for line in body:
        m = re.match(r"\s+/\*[0-9a-f]{4,5}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            n += 1
            c[m.group(1)] += 1
    print(f"{n:6d} " + " ".join(f"{c[o]:5d}" for o in ops) + f"  {pretty}")
PY
rm -f "$sass"
