"""Where an eager call's host time goes: softmax, rmsnorm, layernorm and cross_entropy
(M = 1, N = 4096, bf16), each whole and in its parts, beside torch's own
call, in one process. A tool for the host-cost work of issue 2 (bench_latency
gives the headline numbers; this splits them).

    python3 bench/host_breakdown.py [--calls 20000] [--out F.md]

Each line is wall us a call of a loop of eager calls, the median of 7
interleaved rounds. The loop synchronises every 256 calls, so that the
launch queue never fills: a full queue times the GPU, not the host (the
first run, 2c93803 on an H100, synchronised only at the end of a round and
timed the bare softmax launch at 4.49 us, the stream's kernel-to-kernel
pace; bench/cpp/host_launch times the same launch's host side at 3.11).
"""
import argparse
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--out", default=None)
    a = p.parse_args()

    import torch
    import torch.nn.functional as F
    import quack_cpp
    from quack_cpp import _C, _common, _softmax

    dev = torch.device("cuda")
    x = torch.randn(1, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4096, device=dev, dtype=torch.bfloat16)
    b = torch.randn(4096, device=dev, dtype=torch.bfloat16)
    t = torch.randint(0, 4096, (1,), device=dev)
    out = torch.empty_like(x)
    xp, op_ = x.data_ptr(), out.data_ptr()
    stream = _common._raw_stream(0)

    def _floor(x):
        o = torch.empty_like(x, memory_format=torch.contiguous_format)
        _C.softmax_fwd(1, 4096, x.data_ptr(), 2, 4096, o.data_ptr(), 4096, False, _common._raw_stream(0))
        return o

    cases = {
        # The floor of any call: an empty Python function, a C call.
        "python: empty function": lambda: None,
        "torch: empty_like(x)": lambda: torch.empty_like(x, memory_format=torch.contiguous_format),
        "torch: x.data_ptr()": lambda: x.data_ptr(),
        "torch: current raw stream": lambda: _common._raw_stream(0),
        "torch: current device": lambda: _common._current_device(),
        "torch: is_compiling": lambda: _common._is_compiling(),
        # softmax
        "softmax: torch.softmax": lambda: torch.softmax(x, -1),
        "softmax: quack_cpp.softmax": lambda: quack_cpp.softmax(x),
        "softmax: the general path (_check, _launch_fwd)":
            lambda: (_softmax._check(x, -1, False), _softmax._launch_fwd(x, False)),
        "softmax: _check": lambda: _softmax._check(x, -1, False),
        "softmax: _launch_fwd": lambda: _softmax._launch_fwd(x, False),
        # The floor of a Python front: allocate, two pointers, the stream, the C call.
        "softmax: floor (empty_like + data_ptr x2 + stream + _C call)": lambda: _floor(x),
        "softmax: _C.softmax_fwd (launch only)":
            lambda: _C.softmax_fwd(1, 4096, xp, 2, 4096, op_, 4096, False, stream),
        "softmax: _C.softmax_fwd_ws mode 2 (plan only, no launch)":
            lambda: _C.softmax_fwd_ws(1, 4096, xp, 2, 4096, op_, 4096, False, stream, 0, 0, 2),
        # rmsnorm
        "rmsnorm: F.rms_norm": lambda: F.rms_norm(x, (4096,), w, 1e-6),
        "rmsnorm: quack_cpp.rmsnorm": lambda: quack_cpp.rmsnorm(x, w),
        # An int eps is valid but not the fast path's float: the general path.
        "rmsnorm: the general path (eps=0, an int)": lambda: quack_cpp.rmsnorm(x, w, eps=0),
        # layernorm
        "layernorm: F.layer_norm": lambda: F.layer_norm(x, (4096,), w, b, 1e-5),
        "layernorm: quack_cpp.layernorm": lambda: quack_cpp.layernorm(x, w, b),
        "layernorm: the general path (eps=0, an int)": lambda: quack_cpp.layernorm(x, w, b, eps=0),
        # cross_entropy
        "cross_entropy: F.cross_entropy": lambda: F.cross_entropy(x, t),
        "cross_entropy: quack_cpp.cross_entropy": lambda: quack_cpp.cross_entropy(x, t),
        # An int label_smoothing is valid but not the fast path's float: the general path.
        "cross_entropy: the general path (label_smoothing=0, an int)":
            lambda: quack_cpp.cross_entropy(x, t, label_smoothing=0),
    }
    live = {}
    for name, fn in cases.items():
        try:
            for _ in range(200):
                fn()
            torch.cuda.synchronize()
            live[name] = fn
        except Exception as e:  # a part that this build does not have
            print(f"{name}: n/a ({type(e).__name__}: {e})", file=sys.stderr)
    rounds = 7
    per = max(1, a.calls // rounds)
    times = {k: [] for k in live}
    for _ in range(rounds):
        for name, fn in live.items():
            t0 = time.perf_counter()
            for i in range(per):
                fn()
                if i & 255 == 255:
                    torch.cuda.synchronize()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) / per * 1e6)
    lines = [f"# Host time by part (M = 1, N = 4096, bf16; {torch.cuda.get_device_name()}, torch {torch.__version__})",
             "", "| part | us a call (median of 7 rounds) | min |", "|---|---:|---:|"]
    for name in live:
        lines.append(f"| {name} | {statistics.median(times[name]):.2f} | {min(times[name]):.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
