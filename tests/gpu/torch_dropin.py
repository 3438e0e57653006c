# torch.distributed with the "nccl" backend on libcomm's NCCL drop-in (compat/nccl/libnccl.so.2, preloaded by
# tests/gpu/torch_dropin.sh): every collective PyTorch offers, checked, then DistributedDataParallel for
# 50 steps against one process training on the combined batch. Both ranks may share one GPU (the drop-in
# allows it; NCCL does not). Prints PASS/FAIL lines; exit status 0 when everything passed.
# SPDX-License-Identifier: Apache-2.0
import ctypes
import os
import sys

import torch
import torch.distributed as dist

STEPS = 50


def check(ok, what, failures):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def collectives(rank, world, dev, failures):
    n = 1001
    x = torch.arange(n, dtype=torch.float32, device=dev) + rank
    base = torch.arange(n, dtype=torch.float32, device=dev)
    ranks = sum(range(world))
    y = x.clone()
    dist.all_reduce(y, op=dist.ReduceOp.SUM)
    check(torch.equal(y, base * world + ranks), "all_reduce sum", failures)
    y = x.clone()
    dist.all_reduce(y, op=dist.ReduceOp.AVG)
    check(torch.allclose(y, base + ranks / world), "all_reduce avg", failures)
    y = x.clone()
    dist.broadcast(y, src=world - 1)
    check(torch.equal(y, base + world - 1), "broadcast", failures)
    out = torch.empty(world * n, device=dev)
    dist.all_gather_into_tensor(out, x)
    check(all(torch.equal(out[r * n:(r + 1) * n], base + r) for r in range(world)), "all_gather", failures)
    big = torch.arange(world * n, dtype=torch.float32, device=dev) + rank
    rs = torch.empty(n, device=dev)
    dist.reduce_scatter_tensor(rs, big, op=dist.ReduceOp.SUM)
    expect = (torch.arange(n, dtype=torch.float32, device=dev) + rank * n) * world + ranks
    check(torch.equal(rs, expect), "reduce_scatter", failures)
    a2a = torch.empty(world * n, device=dev)
    dist.all_to_all_single(a2a, big)
    check(all(torch.equal(a2a[r * n:(r + 1) * n], torch.arange(n, dtype=torch.float32, device=dev) + rank * n + r)
              for r in range(world)), "all_to_all", failures)
    recv = torch.empty(n, device=dev)
    ops = [dist.P2POp(dist.isend, x, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    check(torch.equal(recv, base + (rank - 1) % world), "send/recv", failures)
    dist.barrier()
    check(True, "barrier", failures)


def model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))


def batches(seed, world, per_rank):
    g = torch.Generator().manual_seed(seed)
    for _ in range(STEPS):
        xs = torch.randn(world * per_rank, 32, generator=g)
        yield xs, xs.sum(dim=1, keepdim=True).sin()


def train_ddp(rank, world, dev):
    net = torch.nn.parallel.DistributedDataParallel(model(7).to(dev), device_ids=[dev.index])
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    per = 16
    loss = None
    for xs, ys in batches(11, world, per):
        xs, ys = xs[rank * per:(rank + 1) * per].to(dev), ys[rank * per:(rank + 1) * per].to(dev)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(xs), ys)
        loss.backward()
        opt.step()
    final = loss.detach().clone()
    dist.all_reduce(final, op=dist.ReduceOp.AVG)
    return final.item(), [p.detach().cpu() for p in net.parameters()]


def train_single(world, dev):
    """One process on the combined batch: the loss of the last step (the mean over both ranks' halves, as the
    DDP run averages it) and the parameters."""
    net = model(7).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    loss = None
    for xs, ys in batches(11, world, 16):
        xs, ys = xs.to(dev), ys.to(dev)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(xs), ys)
        loss.backward()
        opt.step()
    return loss.item(), [p.detach().cpu() for p in net.parameters()]


def nccl_resolved_from():
    """The file that ncclCommInitRank resolves to in this process's global scope, the one PyTorch's calls
    bind to (torch may also map its own libnccl by path: its symbols then lose to the preloaded drop-in)."""
    addr = ctypes.cast(ctypes.CDLL(None).ncclCommInitRank, ctypes.c_void_p).value
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= addr < hi and len(fields) >= 6:
                return fields[5]
    return "?"


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ngpu = torch.cuda.device_count()
    dev = torch.device("cuda", rank % ngpu)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    failures = []
    print(f"rank {rank}: NCCL version as torch sees it: {torch.cuda.nccl.version()}", flush=True)
    lib = nccl_resolved_from()
    want = os.environ.get("LIBCOMM_DROPIN", "")
    check(os.path.realpath(lib) == os.path.realpath(want), f"rank {rank}: ncclCommInitRank resolves to the "
          f"drop-in {want} (found in {lib})", failures)
    collectives(rank, world, dev, failures)
    loss, params = train_ddp(rank, world, dev)
    if rank == 0:
        ref_loss, ref = train_single(world, dev)
        same = all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(params, ref))
        check(same and abs(loss - ref_loss) <= 1e-4 * max(1.0, abs(ref_loss)),
              f"DDP {STEPS} steps on {world} ranks: loss {loss:.6f}, one process on the combined batch "
              f"{ref_loss:.6f}, parameters {'equal' if same else 'DIFFER'}", failures)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
