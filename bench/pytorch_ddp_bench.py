"""PyTorch DistributedDataParallel throughput reference for `braid bench train --strategy ddp`.

Starts --ranks local processes (torch.multiprocessing spawn), joins them over gloo on
127.0.0.1 and a free port, and times full DDP training steps of each models.py model:
zero_grad, forward, cross-entropy, backward (DDP's bucketed allreduce overlapping it,
bucket_cap_mb 25 as PyTorch's default), optimizer.step. One thread per rank: torch's
intra- and inter-op pools and OpenBLAS's pool (set before torch loads, blas_threads.py).
Data, optimizers and step contents are those of pytorch_train_bench.py: a fixed random
batch per rank (a different one on each rank), SGD(0.01, momentum 0.9) for image models,
AdamW for gpt-tiny. `--ranks 1` runs the plain model without DDP: the scaling baseline.

Each of --repeats rounds times --steps steps after --warmup untimed ones (warm-up once,
before the first round); a round's time is the slowest rank's (all_reduce MAX), and the
reported figures are the median round's. samples_per_s is global: ranks x batch_per_rank
x steps / time (sequences for gpt-tiny; tokens_per_s = samples_per_s x 128 beside it).

  /usr/bin/python3 bench/pytorch_ddp_bench.py --ranks 2 --models mlp,cnn,gpt-tiny
  /usr/bin/python3 bench/pytorch_ddp_bench.py --ranks 1 --models cnn --batch 128
  -> one JSON line per model: {"impl": "pytorch-ddp", "model", "ranks", "batch_per_rank",
     "samples_per_s", "step_ms", ...}
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_threads import limit_blas_threads

limit_blas_threads()  # before torch loads; spawned ranks inherit the environment
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from models import MODELS, build_model, is_language_model  # noqa: E402
from pytorch_train_bench import make_batch, make_optimizer  # noqa: E402

CONTEXT = 128  # gpt-tiny's sequence length (make_batch)


def free_port():
    """A port nothing listens on now (the OS picks it); the ranks bind it moments later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_threads_set = False


def set_threads(threads):
    global _threads_set
    if _threads_set:  # a second set_num_interop_threads aborts the process (torch 1.13)
        return
    _threads_set = True
    torch.set_num_threads(threads)
    try:  # only possible before any parallel work has started
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def timed_rounds(name, model, opt, x, y, a, world):
    """Per round, the slowest rank's seconds for a.steps steps."""
    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        loss = step()
    rounds = []
    for _ in range(a.repeats):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        if world > 1:
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        rounds.append(elapsed.item())
    if not torch.isfinite(loss):
        raise RuntimeError(f"{name}: loss became {loss.item()}")
    return rounds


def worker(rank, world, port, name, batch, a, results):
    set_threads(a.threads)
    if world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(a.seed)  # same initial model everywhere (DDP broadcasts rank 0's anyway)
    model = build_model(name)
    model.train()
    if world > 1:
        # gloo cannot broadcast gpt-tiny's bool causal-mask buffers ("Invalid scalar type");
        # they are constants, equal on every rank, so DDP may leave them alone.
        masks = [n for n, b in model.named_buffers() if b.dtype == torch.bool]
        DDP._set_params_and_buffers_to_ignore_for_model(model, masks)
        model = DDP(model, bucket_cap_mb=a.bucket_cap_mb)
    opt = make_optimizer(name, model)
    x, y = make_batch(name, batch, torch.Generator().manual_seed(a.seed + 1 + rank))
    rounds = timed_rounds(name, model, opt, x, y, a, world)
    if rank == 0:
        results.put(rounds)
    if world > 1:
        dist.destroy_process_group()


def run_model(name, a):
    batch = a.batch or (32 if is_language_model(name) else 128)
    if a.ranks == 1:  # no process group, no DDP: the plain one-process step
        import queue
        results = queue.Queue()
        worker(0, 1, 0, name, batch, a, results)
    else:
        ctx = mp.get_context("spawn")
        results = ctx.SimpleQueue()
        mp.start_processes(worker, args=(a.ranks, free_port(), name, batch, a, results),
                           nprocs=a.ranks, join=True, start_method="spawn")
    rounds = results.get()
    sec = statistics.median(rounds)
    samples = a.ranks * batch * a.steps / sec
    row = {"impl": "pytorch-ddp", "model": name, "ranks": a.ranks, "batch_per_rank": batch,
           "samples_per_s": round(samples, 1), "step_ms": round(sec / a.steps * 1e3, 3)}
    if is_language_model(name):
        row["tokens_per_s"] = round(samples * CONTEXT, 1)
    row.update({"ddp": a.ranks > 1, "bucket_cap_mb": a.bucket_cap_mb,
                "threads_per_rank": a.threads, "steps": a.steps, "warmup": a.warmup,
                "repeats": a.repeats,
                "round_samples_per_s": [round(a.ranks * batch * a.steps / r, 1) for r in rounds],
                "torch": torch.__version__})
    print(json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="mlp,cnn,gpt-tiny",
                    help=f"comma-separated, from {', '.join(MODELS)}")
    ap.add_argument("--ranks", type=int, default=2, help="local processes; 1 = no DDP")
    ap.add_argument("--batch", type=int, default=None,
                    help="batch per rank (default 128; gpt-tiny 32)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per round")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before the first round")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds; the median is reported")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ap.add_argument("--threads", type=int, default=1, help="threads per rank")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    bad = [m for m in models if m not in MODELS]
    if bad or not models:
        ap.error(f"unknown model(s) {bad}; choose from {', '.join(MODELS)}")
    if a.ranks < 1 or a.steps < 1 or a.warmup < 0 or a.repeats < 1 or a.threads < 1:
        ap.error("--ranks, --steps, --repeats and --threads must be >= 1 and --warmup >= 0")
    if a.batch is not None and a.batch < 1:
        ap.error("--batch must be >= 1")
    # gloo picks its interface from the hostname, which may not resolve to loopback here.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    for name in models:
        run_model(name, a)


if __name__ == "__main__":
    main()
