#!/usr/bin/env bash
# Rebuild .whl/ (git-ignored) with the peer packages that bench/PEERS.md
# lists, for the GPU machine (CPython 3.12, manylinux x86_64). Run here, from
# the repository root, with network access to PyPI:
#     bash bench/fetch_peers.sh
# Takes ~15 minutes on 2 cores: most of it is recompressing the CuTe DSL
# cu13 libraries (92 MB wheel, 237 MB unpacked) into a 51 MiB .tar.xz so that
# the carried tree stays under the device's 64 MiB.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || grep -qx '/.whl/' .gitignore \
    || echo '/.whl/' >> .git/info/exclude

# Pinned: what was tested together (bench/PEERS.md says why each is here).
PLAIN="liger-kernel==0.8.5 quack-kernels==0.6.5 nvidia-cutlass-dsl==4.8.1
nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1
apache-tvm-ffi==0.1.15.post2"
REPACK="nvidia-cutlass-dsl-libs-cu13==4.8.1"
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
--platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
--platform manylinux2014_x86_64 --platform manylinux1_x86_64"

mkdir -p .whl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp $PLATFORMS -d .whl $PLAIN
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp $PLATFORMS -d "$tmp" $REPACK

for wheel in "$tmp"/*.whl; do
    name=$(basename "$wheel" .whl)
    out=.whl/$name.tar.xz
    if [ -e "$out" ]; then
        echo "keeping existing $out"
        continue
    fi
    mkdir "$tmp/$name"
    # unzip keeps the file modes the wheel records (python's zipfile does not).
    unzip -q "$wheel" -d "$tmp/$name"
    # Check the unpacked files against the wheel's own RECORD hashes.
    python3 - "$tmp/$name" <<'PY'
import base64, csv, glob, hashlib, os, sys
root = sys.argv[1]
record, = glob.glob(os.path.join(root, "*.dist-info", "RECORD"))
checked = 0
for path, digest, _ in csv.reader(open(record)):
    if not digest:
        continue
    algo, want = digest.split("=", 1)
    got = base64.urlsafe_b64encode(
        hashlib.new(algo, open(os.path.join(root, path), "rb").read()).digest()).rstrip(b"=").decode()
    if got != want:
        sys.exit(f"RECORD mismatch: {path}")
    checked += 1
print(f"{os.path.basename(root)}: {checked} files match RECORD")
PY
    # One solid stream with a dictionary larger than the 193 MB extension
    # module: xz -9e with its default 64 MiB dictionary gives 60.6 MiB, this 51.
    (cd "$tmp/$name" && tar -cf - . | xz -T1 --lzma2=preset=9e,dict=256MiB > "$OLDPWD/$out.part")
    mv "$out.part" "$out"
done

ls -l .whl
total=$(du -cb .whl/* | tail -1 | cut -f1)
tree=$( (git ls-files; git ls-files --others --exclude-standard) | sort -u \
        | xargs -d '\n' du -cb 2>/dev/null | tail -1 | cut -f1)
echo "peers: $total bytes; repository files: $tree bytes; device limit: $((64 << 20)) bytes"
records=$(git ls-files bench/results | xargs -d '\n' du -cb 2>/dev/null | tail -1 | cut -f1)
if [ $((total + tree)) -ge $((64 << 20)) ]; then
  echo "over the 64 MiB that a run can carry" >&2
  # No benchmark reads bench/results (bench/PEERS.md): out of the tree for
  # the peer call, back afterwards.
  if [ $((total + tree - records)) -lt $((64 << 20)) ]; then
    echo "fits without bench/results ($records bytes): mv bench/results /tmp/r for the call, then mv /tmp/r bench/results" >&2
  fi
  exit 1
fi
