"""A PyTorch DDP worker as torchrun's elastic agent runs it (the reference for braid's
elastic recovery, bench/elastic_recovery.py): gloo, one thread, the cnn of models.py on
Fashion-MNIST at --batch per rank with SGD. Rank 0 checkpoints every step (model, optimizer,
step; written to a temporary file and renamed), and every worker starts from the checkpoint
when one exists: on any failure torchrun stops every worker and starts them all again
(TORCHELASTIC_RESTART_COUNT counts it), which is PyTorch's recovery. Rank 0 appends one JSON
line per step to --log: {"step", "time" (Unix seconds), "restart"}.

  torchrun --nnodes 1:1 --nproc-per-node 4 --max-restarts 10 bench/pytorch_elastic_worker.py \\
      --checkpoint /tmp/ck.pt --log /tmp/steps.jsonl
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_threads import limit_blas_threads

limit_blas_threads()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from models import build_model  # noqa: E402
from pytorch_fmnist_accuracy import load  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=10 ** 9)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--log", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    x, y = load(a.data_dir, "train")
    torch.manual_seed(0)
    model = DDP(build_model(a.model))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    step = 0
    if os.path.exists(a.checkpoint):
        state = torch.load(a.checkpoint)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
    g = torch.Generator().manual_seed(1)
    order = torch.randperm(len(x), generator=g)
    per_step = a.batch * world
    log = open(a.log, "a") if rank == 0 else None
    while step < a.steps:
        start = (step * per_step) % (len(x) - per_step)
        idx = order[start + rank * a.batch: start + (rank + 1) * a.batch]
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
        step += 1
        if rank == 0:
            tmp = a.checkpoint + ".tmp"
            torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, a.checkpoint)
            log.write(json.dumps({"step": step, "time": time.time(), "restart": restart}) + "\n")
            log.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
