"""PyTorch DDP time-to-accuracy reference: the cnn of models.py trained on Fashion-MNIST by
--ranks local processes (gloo, one thread each), for braid's "time to 0.90 test accuracy
on 2 ranks" figure.

PyTorch's own recipe, not braid's: the time a PyTorch user would take. Default: Adam
(lr 3e-3, betas 0.9/0.999, no weight decay) with cosine decay to 0 over the epoch budget.
Chosen by measurement among the usual recipes for a small CNN, as the best test accuracy
after 2 epochs (cosine over those 2) of 2 ranks x 128 (2026-11-25): Adam 3e-3 0.8685/0.8895 (epochs 1/2),
SGD nesterov 0.05 0.8602/0.8738, Adam 1e-3 0.8404/0.8614 (Adam's 1e-3 default suits
smaller batches than this global 256). --optimizer sgd gives SGD (momentum 0.9, nesterov,
lr 0.05, weight decay 5e-4 on weights only, 100 warm-up steps, cosine). Batch --batch per
rank (128), so the global batch is ranks x 128; DDP averages the gradients. Inputs
(x/255 - 0.2860)/0.3530, no augmentation. Each epoch is torch's DistributedSampler
(seeded per-epoch shuffle, disjoint shards) cut into full batches (the last partial batch
of each rank's shard dropped, so every rank takes the same number of steps).

After each epoch the test set is evaluated sharded (rank r takes a contiguous
1/ranks of it, and the correct counts are summed with all_reduce, so every sample counts once).
Clock: from the barrier after data loading and model set-up to the end of each epoch's
evaluation (evaluation included, as a user waits for it); train_seconds leaves it out.
Rank 0 prints one JSON line per epoch and a summary line with the first epoch whose test
accuracy reached --target and the seconds at which it did.

  /usr/bin/python3 bench/pytorch_ddp_accuracy.py --ranks 2 --epochs 10
"""
import argparse
import json
import math
import os
import socket
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
from torch.utils.data import DistributedSampler  # noqa: E402

from models import build_model  # noqa: E402
from pytorch_fmnist_accuracy import load, param_groups  # noqa: E402


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_optimizer(model, a):
    if a.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=a.lr or 3e-3)
    return torch.optim.SGD(param_groups(model, 5e-4), lr=a.lr or 0.05, momentum=0.9,
                           nesterov=True)


def evaluate(model, x, y, rank, world, batch=1000):
    """Accuracy and mean loss over the whole test set, each rank taking a contiguous shard."""
    lo, hi = len(x) * rank // world, len(x) * (rank + 1) // world
    sums = torch.zeros(2, dtype=torch.float64)  # correct, loss sum
    model.eval()
    with torch.no_grad():
        for i in range(lo, hi, batch):
            j = min(i + batch, hi)
            logits = model(x[i:j])
            sums[0] += (logits.argmax(1) == y[i:j]).sum().item()
            sums[1] += F.cross_entropy(logits, y[i:j], reduction="sum").item()
    model.train()
    dist.all_reduce(sums)
    return sums[0].item() / len(x), sums[1].item() / len(x)


def worker(rank, world, port, a):
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x_train, y_train = load(a.data_dir, "train")
    x_test, y_test = load(a.data_dir, "t10k")
    torch.manual_seed(a.seed)
    net = build_model("cnn")
    model = DDP(net, bucket_cap_mb=25)
    opt = make_optimizer(net, a)
    sampler = DistributedSampler(range(len(x_train)), num_replicas=world, rank=rank,
                                 shuffle=True, seed=a.seed)
    per_epoch = len(sampler) // a.batch
    total = per_epoch * a.epochs
    warmup = 0 if a.optimizer == "adam" else 100
    base_lr = opt.param_groups[0]["lr"]

    def lr_at(step):
        lr = base_lr * (1 + math.cos(math.pi * min(step, total) / total)) / 2
        return lr * (step + 1) / warmup if step < warmup else lr

    dist.barrier()
    start = time.perf_counter()
    step, train_seconds, reached = 0, 0.0, None
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler))
        for b in range(per_epoch):
            idx = order[b * a.batch:(b + 1) * a.batch]
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
        train_seconds += time.perf_counter() - t0
        acc, test_loss = evaluate(net, x_test, y_test, rank, world)
        seconds = time.perf_counter() - start
        if reached is None and acc >= a.target:
            reached = {"epoch": epoch + 1, "seconds": round(seconds, 2)}
        if rank == 0:
            print(json.dumps({"epoch": epoch + 1, "step": step, "accuracy": acc,
                              "test_loss": round(test_loss, 5),
                              "epoch_seconds": round(time.perf_counter() - t0, 2),
                              "seconds": round(seconds, 2),
                              "train_seconds": round(train_seconds, 2)}), flush=True)
    if rank == 0:
        print(json.dumps({"impl": "pytorch-ddp", "model": "cnn", "ranks": world,
                          "batch_per_rank": a.batch, "optimizer": a.optimizer,
                          "lr": base_lr, "epochs": a.epochs, "target": a.target,
                          "reached_target": reached, "seconds": round(seconds, 2),
                          "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=128, help="batch per rank")
    ap.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    ap.add_argument("--lr", type=float, default=None, help="default: adam 3e-3, sgd 0.05")
    ap.add_argument("--target", type=float, default=0.90, help="test accuracy to time")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--threads", type=int, default=1, help="threads per rank")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.ranks < 1 or a.epochs < 1 or a.batch < 1 or a.threads < 1:
        ap.error("--ranks, --epochs, --batch and --threads must be >= 1")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.start_processes(worker, args=(a.ranks, free_port(), a), nprocs=a.ranks, join=True,
                       start_method="spawn")


if __name__ == "__main__":
    main()
