"""Issue 7's one Python test that fails only under compute-sanitizer memcheck:
tests/python/test_rmsnorm.py::test_torch_compile_reduce_overhead, where
inductor's CUDA-graph warm-up check finds a 32 KiB block (the size of the
op's bf16 output) live in its pool that is not among the graph's outputs
(twenty-first session; natively it passes).

    python3 scripts/probe_reduce_overhead.py EXPERIMENT

runs that test alone in this process, with one inductor setting changed:
  none          as the suite runs it
  history       triton.cudagraph_trees_history_recording = True (the failure
                then names where the live block was allocated)
  no_autotune   triton.autotune_pointwise = False (the pointwise kernel's
                first-use autotune, which runs with the op's output as an
                argument, is the one sanitizer-sensitive step in the warm-up)
  no_partition  graph_partition = False
Exit status: pytest's. scripts/gpu_session.sh's reduce_overhead_probe part
runs each natively and under memcheck.
"""
import pathlib
import sys

import torch._inductor.config as inductor_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
SETTINGS = {
    "none": [],
    "history": [("triton", "cudagraph_trees_history_recording", True)],
    "no_autotune": [("triton", "autotune_pointwise", False)],
    "no_partition": [(None, "graph_partition", False)],
}


def main(argv):
    if len(argv) != 2 or argv[1] not in SETTINGS:
        print(f"usage: {argv[0]} {{{','.join(SETTINGS)}}}", file=sys.stderr)
        return 2
    for section, name, value in SETTINGS[argv[1]]:
        owner = getattr(inductor_config, section) if section else inductor_config
        if not hasattr(owner, name):
            print(f"this torch has no inductor setting {section or ''}.{name}", file=sys.stderr)
            return 2
        setattr(owner, name, value)
        print(f"inductor: {section + '.' if section else ''}{name} = {value}")
    import pytest  # (after the settings: nothing imported by the test sees the defaults)
    return pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                        str(ROOT / "tests/python/test_rmsnorm.py"), "-k", "test_torch_compile_reduce_overhead"])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
