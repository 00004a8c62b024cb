"""PyTorch 1.13 gloo reference for `braid bench allreduce`: float32 sum allreduce over N local
processes, median time per call (slowest rank) per size, nccl-tests columns, JSON lines.

  /usr/bin/python3 bench/gloo_allreduce_bench.py --ranks 2 [--min 4096 --max 268435456]
"""
import argparse
import json
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, a, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    buf = torch.full((a.max // 4,), float(rank + 1))
    size = a.min
    while size <= a.max:
        x = buf[: size // 4]
        dist.all_reduce(x)
        t0 = time.perf_counter()
        dist.all_reduce(x)
        first = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.broadcast(first, 0)
        iters = max(5, min(1000, int(0.3 / max(first.item(), 1e-7))))
        times = []
        for i in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            e = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(e, op=dist.ReduceOp.MAX)
            times.append(e.item())
            if i % 16 == 15:
                x.fill_(float(rank + 1))
        med = statistics.median(times)
        algbw = size / med / 1e9
        if rank == 0:
            print(json.dumps({"impl": "gloo", "ranks": a.ranks, "bytes": size, "algorithm": "gloo",
                              "time_us": round(med * 1e6, 3), "algbw_GBps": round(algbw, 4),
                              "busbw_GBps": round(algbw * 2 * (a.ranks - 1) / a.ranks, 4),
                              "iters": iters}), flush=True)
        size *= 4
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--min", type=int, default=4096)
    ap.add_argument("--max", type=int, default=256 << 20)
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a, port), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()
