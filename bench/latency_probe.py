"""Kernels of a decode-sized call, one implementation at a time, for ncu:
why quack_cpp's small batches trail Liger's (2026-12-01-latency-4f21d7c.md:
rmsnorm M = 1, N = 4096 bf16 2.06 against 1.64 us a call, CUDA-graph
replay; softmax 3.11 against 1.87 and torch eager's 2.86).

    python3 bench/latency_probe.py [--ops rmsnorm,layernorm,softmax] [--m 1] [--n 4096]
        [--peers quack_cpp,liger,torch] [--calls 5]

Runs each implementation's forward (bench_latency.py's, so the same calls as
the benchmark) --calls times on one set of inputs, each call between
torch.cuda.synchronize() and an NVTX range "<op>/<impl>", after a warm-up
outside any range. Under `ncu --nvtx` (scripts/gpu_session.sh's ncu_latency
part) each kernel's report then names the range, so the implementation that
launched it. Prints one line an implementation: the fastest call's
CUDA-event time (us) -- or the reason it cannot run.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default="rmsnorm,layernorm,softmax")
    p.add_argument("--m", type=int, default=1)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--peers", default="quack_cpp,liger,torch")
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--device", default="cuda", help="cpu: the loop alone, wall-clock timed (its CPU test)")
    a = p.parse_args(argv)

    import time

    import torch
    import bench_latency as bl

    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dtype = getattr(torch, bl.DTYPES[a.dtype])
    for op in a.ops.split(","):
        inputs = bl.make_inputs(torch, op, a.m, a.n, dtype, seed=a.m * 7 + a.n, device=a.device)
        for key in a.peers.split(","):
            try:
                fwd = bl.make_forward(torch, op, key)
                for _ in range(3):  # warm-up: first-call work stays out of the ranges
                    fwd(*inputs)
                sync()
                times = []
                for _ in range(a.calls):
                    if cuda:
                        torch.cuda.nvtx.range_push(f"{op}/{key}")
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record()
                    else:
                        t0 = time.perf_counter()
                    fwd(*inputs)
                    if cuda:
                        end.record()
                        sync()
                        torch.cuda.nvtx.range_pop()
                        times.append(start.elapsed_time(end) * 1e3)
                    else:
                        times.append((time.perf_counter() - t0) * 1e6)
                print(f"{op:10s} {key:10s} M={a.m} N={a.n}: {'event' if cuda else 'wall'} time a call "
                      f"{min(times):7.2f} us (min of {a.calls})", flush=True)
            except Exception as e:  # a peer that cannot run here
                print(f"{op:10s} {key:10s} n/a: {bl.short_reason(e)}", flush=True)
                sync()


if __name__ == "__main__":
    main()
