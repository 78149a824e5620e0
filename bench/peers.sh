# shellcheck shell=bash
# Source this on the GPU machine, from the repository root:
#     . bench/peers.sh
# It installs the peer wheels carried in .whl/ (see bench/PEERS.md) into
# /tmp/site and puts them on PYTHONPATH. It never stops the caller: when
# something is missing, the benchmark still runs and reports the peer as n/a.
#
# Only packages that the GPU machine lacks are carried; torch, triton and
# numpy are never among them (--upgrade --target would shadow the machine's).
_peers_site=${PEERS_SITE:-/tmp/site}
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$_peers_site" .whl/*.whl \
        || echo "peers.sh: pip install of .whl/*.whl FAILED" >&2
    # Wheels too large to carry as they are travel as .tar.xz of their
    # unpacked contents. Extract after pip: pip --upgrade --target replaces
    # whole top-level folders (nvidia_cutlass_dsl/) and would drop them.
    for _peers_tar in .whl/*.tar.xz; do
        [ -e "$_peers_tar" ] || continue
        python3 - "$_peers_tar" "$_peers_site" <<'PY' || echo "peers.sh: extracting $_peers_tar FAILED" >&2
import sys, tarfile
with tarfile.open(sys.argv[1]) as archive:
    archive.extractall(sys.argv[2], filter="tar")
PY
    done
    # PYTHONPATH folders are not site folders: their .pth files are not read,
    # so nvidia_cutlass_dsl_packages.pth's folder (where `cutlass` lives) is
    # added here by hand.
    export PYTHONPATH="$_peers_site:$_peers_site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
    echo "peers.sh: installed the peers in .whl/ into $_peers_site" >&2
else
    echo "peers.sh: no .whl/*.whl here (the run must carry .whl); Liger and QuACK will be n/a" >&2
fi
unset _peers_site _peers_tar
