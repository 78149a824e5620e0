"""bench_rmsnorm.time_events (every side-by-side benchmark's timer) without a
GPU: a stand-in torch.cuda records the stream's order. Each timed call must
be queued behind a GPU sleep longer than the call's host time, so that the
events around it measure its kernels, not the Python that launched them."""

import time
import types

from bench_loader import load

br = load("bench_rmsnorm")


class FakeCuda:
    """The stream as a list of ("sleep", cycles) / ("event", id) / ("call", i)."""

    def __init__(self):
        self.stream = []
        self.clock = 0.0

    def synchronize(self):
        pass

    def _sleep(self, cycles):
        self.stream.append(("sleep", cycles))

    def Event(self, enable_timing=False):
        cuda = self

        class E:
            def record(self):
                cuda.clock += 1.0
                self.t = cuda.clock
                cuda.stream.append(("event", id(self)))

            def elapsed_time(self, other):
                return other.t - self.t
        return E()


def test_every_timed_call_waits_behind_a_sleep_longer_than_its_host_time():
    cuda = FakeCuda()
    torch = types.SimpleNamespace(cuda=cuda)
    host_s = 0.002

    def call():
        time.sleep(host_s)  # the call's Python, 2 ms
        cuda.stream.append(("call", 0))

    ms, n = br.time_events(torch, [call], target_ms=5.0, warmup=1, min_iters=4, max_iters=6)
    assert n == 6 and ms == 1.0  # the stand-in clock: one tick from start to end
    stream = cuda.stream
    sleeps = [c for kind, c in stream if kind == "sleep"]
    assert sleeps and all(c >= 3 * host_s * br.SLEEP_CYCLES_PER_S for c in sleeps)
    # After the warm-up and the host timing: sleep, event, call(s), event.
    first = next(i for i, (kind, _) in enumerate(stream) if kind == "sleep")
    timed = stream[first:]
    for i, (kind, _) in enumerate(timed):
        if kind == "event" and (i == 0 or timed[i - 1][0] != "call"):
            assert timed[i - 1][0] == "sleep", "a start event not queued right behind a sleep"
    assert sum(1 for kind, _ in timed if kind == "sleep") == n + 1  # the estimate, then each call
