"""Where the RMSNorm backward's time goes at the powers of two where QuACK
leads (bf16 2048 / 4096 / 8192: 86-88% of copy against QuACK's 91-95% in
bench_rmsnorm_bwd at 79bacc8, while rmsnorm_bwd_sweep's +dw column ran the
same kernels at 91-93%: bench/results/2026-12-05-rmsnorm-bwd-model-widths-
79bacc8-h100.md and logs/2026-12-05-norm-bwd-ab-scrub256-79bacc8-*).

    python3 bench/probe_norm_bwd_gap.py [N ...]

For each N (M = 2^28 / N, bf16 x, dy and weight; dx and dweight asked for):
  isolated   the median device time of one call queued behind a GPU sleep
             (bench_rmsnorm.time_events, bench_rmsnorm_bwd's method)
  b2b        20 calls back to back between two events, over 20
  kernels    torch.profiler of 5 isolated calls: each CUDA kernel's mean
             device time, and the call's span (first kernel start to last
             kernel end) against the sum of its kernels (the gaps)
for quack_cpp's op and, where it imports, QuACK's autograd backward (peers
carried in .whl/, bench/PEERS.md). Prints a table; nothing is written.

    python3 bench/probe_norm_bwd_gap.py --calls NAME N

only calls NAME's backward (quack_cpp or QuACK) 8 times at N, for ncu
(scripts/gpu_session.sh, part norm_bwd_gap_ncu).

    python3 bench/probe_norm_bwd_gap.py --l2 [N ...]

times each call (median of 30, CUDA events, queued behind a GPU sleep
longer than the call's host time)
from three L2 states left by what ran just before it: `itself` (its own
previous call: the isolated time above), `read` (a 256 MB sum: the L2 full
of clean lines, what rmsnorm_bwd_sweep's QUACK_SWEEP_SCRUB_MB=256 leaves)
and `written` (a 256 MB fill: the L2 full of dirty lines to write back),
and after each other call measured (`after quack_cpp`, `after QuACK`,
...): whether a slow `itself` is what a call leaves or how the next call
takes it. "quack_cpp dx" is ours without the weight gradient (no partial
rows, no reduce kernel).
The fifty-second session's question: under ncu (caches flushed) and in the
scrubbed sweep our kernel ran 547-560 us at bf16 4096 on an H100, after
its own call 588 us, while QuACK's ran 536-540 us either way
(scripts/gpu_session.sh, part norm_bwd_l2).
The fifty-fourth session's answer (logs/2026-12-06-norm-bwd-l2-baaf0ac-
h100.log): ours is slow after either of our calls (dx alone 590.4 us
after itself, 590.3 after ours with dweight) and fast after QuACK's
(549.7) or a read (544.3); QuACK's is 552-556 after anything. Ours issues
2.5x QuACK's instructions, so the suspect is no longer the L2 but the SM
clock or power state that our own call leaves. Two more states tell
them apart: `after gemm` (a bf16 matmul of about the call's length: heat
without our L2 lines -- slow here says power or clock) and `itself, 5 ms
idle` (its own call, then a 5 ms sleep: an L2 state persists through
idle time, a clock or power dip recovers). Each state's line ends with
the SM clock measured over the sleep before the timed calls (`clock`:
the sleep's cycles over its event time, MHz, median).
The fifty-fifth session's run of them (logs/2026-12-06-norm-bwd-l2-clock-
dd5bc91-h100.log): not the clock (1953-1976 MHz before every state); ours
stays slow after itself and 5 ms idle (609.3 us) and is fast after the
GEMM (574.3), so the state survives idle time and a GEMM clears it.
"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_rmsnorm import time_events  # noqa: E402

EPS = 1e-6
TOTAL = 1 << 28


def makers(x, w, dy, names=("quack_cpp", "QuACK"), dx_only=False):
    """The backward calls of `names` (--calls builds only the one it times:
    QuACK's JIT compile and first call stay out of ours under ncu);
    `dx_only` adds ours without the weight gradient ("quack_cpp dx": no
    partial rows written, no reduce kernel)."""
    out = {}
    if "quack_cpp" in names:
        import quack_cpp  # noqa: F401  (registers torch.ops.quack_cpp)
        _, _, rstd = torch.ops.quack_cpp.rmsnorm_fwd(x, w, None, None, None, None, EPS, 0.0, False, True)

        def ours():
            return torch.ops.quack_cpp.rmsnorm_bwd(dy, x, rstd, w, None, 0.0, x.dtype, None, True, None)
        out["quack_cpp"] = ours
        if dx_only:
            def ours_dx():
                return torch.ops.quack_cpp.rmsnorm_bwd(dy, x, rstd, w, None, 0.0, x.dtype, None, False, None)
            out["quack_cpp dx"] = ours_dx
    if "QuACK" not in names:
        return out
    try:
        import importlib
        qrms = importlib.import_module("quack.rmsnorm")
        xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
        y = qrms.rmsnorm(xg, wg, eps=EPS)

        def quack():
            return torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)
        quack()
        out["QuACK"] = quack
    except Exception as exc:  # noqa: BLE001  (a peer that does not import is reported, not fatal)
        print(f"QuACK not measured: {type(exc).__name__}: {exc}")
    return out


def b2b_ms(fn, calls=20):
    fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(calls):
        fn()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / calls


def kernels(fn, calls=5):
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            torch.cuda._sleep(int(2e6))
            fn()
        torch.cuda.synchronize()
    evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "sleep" not in e.name]
    by_name = {}
    for e in evs:
        by_name.setdefault(e.name, []).append(e.time_range.end - e.time_range.start)
    # Spans: kernels grouped into calls by the sleeps between them.
    evs.sort(key=lambda e: e.time_range.start)
    spans, busy, cur = [], [], []
    for e in evs:
        if cur and e.time_range.start - cur[-1].time_range.end > 500:  # us: a sleep between calls
            spans.append(cur[-1].time_range.end - cur[0].time_range.start)
            busy.append(sum(k.time_range.end - k.time_range.start for k in cur))
            cur = []
        cur.append(e)
    if cur:
        spans.append(cur[-1].time_range.end - cur[0].time_range.start)
        busy.append(sum(k.time_range.end - k.time_range.start for k in cur))
    return by_name, statistics.median(spans), statistics.median(busy)


def calls_only(name, n):
    m = TOTAL // n
    torch.manual_seed(0)
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    w = (1 + 0.5 * torch.randn(n, device="cuda")).to(torch.bfloat16)
    dy = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    fn = makers(x, w, dy, (name,))[name]
    for _ in range(8):
        fn()
    torch.cuda.synchronize()
    return 0


def l2_states(ns):
    from bench_rmsnorm import SLEEP_CYCLES_PER_S
    buf = torch.empty(64 << 20, dtype=torch.float32, device="cuda")  # 256 MB
    buf.fill_(1.0)
    base_preps = {"itself": None, "read": lambda: buf.sum(), "written": lambda: buf.fill_(2.0)}
    # ~0.55 TFLOP: about 0.6-0.8 ms on an H100 or H200 (tensor cores).
    ga = torch.randn(4096, 8192, device="cuda", dtype=torch.bfloat16)
    gb = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    base_preps["after gemm"] = lambda: ga @ gb
    base_preps["itself, 5 ms idle"] = None
    print(f"# {torch.cuda.get_device_name()}, bf16, M*N = 2^28, dx + dweight; median us of 30 calls by the L2 "
          "state before each")
    for n in ns:
        m = TOTAL // n
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        w = (1 + 0.5 * torch.randn(n, device="cuda")).to(torch.bfloat16)
        dy = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        fns = makers(x, w, dy, dx_only=True)
        for name, fn in fns.items():
            preps = dict(base_preps)
            preps.update({f"after {o}": g for o, g in fns.items() if o != name})
            # The sleep outlasts the call's host time (time_events' rule: a
            # fixed 100 us left QuACK's autograd call host-bound, 627-817 us).
            host = []
            for _ in range(3):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                host.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
            sleep_cycles = int((20e-6 + 3 * max(host)) * SLEEP_CYCLES_PER_S)
            cells, clocks = [], []
            for state, prep in preps.items():
                times, mhz = [], []
                cycles = sleep_cycles + (int(5e-3 * SLEEP_CYCLES_PER_S) if state.endswith("idle") else 0)
                for _ in range(31):
                    if prep is not None:
                        prep()
                    es, e0, e1 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                    es.record()
                    torch.cuda._sleep(cycles)
                    e0.record()
                    fn()
                    e1.record()
                    torch.cuda.synchronize()
                    times.append(e0.elapsed_time(e1) * 1e3)
                    mhz.append(cycles / (es.elapsed_time(e0) * 1e3))
                cells.append(f"{state} {statistics.median(times[1:]):.1f}")
                clocks.append(f"{state} {statistics.median(mhz[1:]):.0f}")
            print(f"N={n} {name}: " + ", ".join(cells))
            print(f"N={n} {name} clock MHz: " + ", ".join(clocks))
        del x, w, dy
        torch.cuda.empty_cache()
    return 0


def main(argv):
    if len(argv) == 4 and argv[1] == "--calls":
        return calls_only(argv[2], int(argv[3]))
    if len(argv) >= 2 and argv[1] == "--l2":
        return l2_states([int(a) for a in argv[2:]] or [2048, 4096, 8192])
    ns = [int(a) for a in argv[1:]] or [2048, 4096, 8192, 5120]
    torch.manual_seed(0)
    print(f"# {torch.cuda.get_device_name()}, bf16, M*N = 2^28, dx + dweight")
    for n in ns:
        m = TOTAL // n
        x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        w = (1 + 0.5 * torch.randn(n, device="cuda")).to(torch.bfloat16)
        dy = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        for name, fn in makers(x, w, dy).items():
            iso, _ = time_events(torch, [fn], 200.0)
            b2b = b2b_ms(fn)
            by_name, span, busy = kernels(fn)
            gb = 3 * m * n * 2 / 1e9
            print(f"N={n} {name}: isolated {iso * 1e3:.1f} us ({gb / iso * 1e3:.0f} GB/s), back to back "
                  f"{b2b * 1e3:.1f} us; profiled call span {span:.1f} us, kernels busy {busy:.1f} us")
            for k, ts in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
                print(f"    {statistics.mean(ts):8.1f} us x{len(ts) // 5}  {k[:150]}")
        del x, w, dy
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
