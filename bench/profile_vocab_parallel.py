"""Where a vocabulary-parallel training step's time goes (torchrun, 2 GPUs):
per V, the step's wall time back to back and its host enqueue time, then
(torch.profiler, rank 0) the step's operations by device time and by host
time.

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=2 bench/profile_vocab_parallel.py
"""
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from quack_cpp.distributed import vocab_parallel_cross_entropy


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    dev = torch.device("cuda")
    rows = 8192
    for dtype, v in ((torch.bfloat16, 32000), (torch.bfloat16, 262144)):
        start, stop = v * rank // world, v * (rank + 1) // world
        local = (torch.randn(rows, stop - start, device=dev) * 2).to(dtype).requires_grad_(True)
        t = torch.randint(0, v, (rows,), device=dev)

        def step():
            local.grad = None
            vocab_parallel_cross_entropy(local, t, vocab_start=start, vocab_size=v).backward()

        for _ in range(5):
            step()
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / 20 * 1e3
        # CPU time to enqueue one step (the GPU still busy with the last).
        t0 = time.perf_counter()
        step()
        cpu = (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        if rank == 0:
            print(f"\n== {dtype} V={v}: wall {wall:.3f} ms/step (20 back to back), enqueue {cpu:.3f} ms")
            print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=14, max_name_column_width=60))
            # The host's side: what the enqueue time is made of.
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=60))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
