# NCCL (PyTorch's own) allreduce on device buffers between processes through its network transport: the peer
# of libcomm's `perf/allreduce_perf -M device -np N -H 1` (device buffers across "hosts", staged through
# pinned host memory). Run by bench/net_device_compare.sh under torch.distributed.run with NCCL_P2P_DISABLE=1
# and NCCL_SHM_DISABLE=1, so NCCL too goes through its socket transport. Prints, on rank 0, one line per
# size: "bytes us busbw" (median of the repetitions; busbw as nccl-tests: 2(n-1)/n x bytes / time).
# usage: torch_nccl_net.py MIN_BYTES MAX_BYTES FACTOR [ITERS] [REPS]
# SPDX-License-Identifier: Apache-2.0
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def main():
    lo, hi, factor = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    iters = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    reps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    size = lo
    while size <= hi:
        x = torch.ones(max(size // 4, 1), dtype=torch.float32, device=dev)
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / iters * 1e6)
        us = statistics.median(times)
        if rank == 0:
            print(f"{x.numel() * 4} {us:.2f} {2 * (world - 1) / world * x.numel() * 4 / us / 1e3:.2f}", flush=True)
        size *= factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
