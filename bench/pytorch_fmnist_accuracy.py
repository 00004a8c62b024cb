"""PyTorch accuracy reference for braid's Fashion-MNIST runs: the same model (models.py),
data, augmentation and recipe as a braid config, so a test accuracy braid reaches can be
set beside PyTorch's on the same recipe rather than beside a number from elsewhere.

The recipe mirrors braid's: SGD with momentum and coupled weight decay on weights only
(no decay on biases and normalisation parameters), linear warm-up over the first steps
then cosine to 0 per step, label smoothing, random horizontal flips, batches of a
shuffled epoch with the last partial batch dropped, inputs (x/255 - 0.2860)/0.3530.

  /usr/bin/python3 bench/pytorch_fmnist_accuracy.py --model cnn-bn --epochs 30 --batch 64 \
      --lr 0.05 --weight-decay 1e-4 --warmup 200 --label-smoothing 0.1 --flip --threads 1
"""
import argparse
import gzip
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_threads import limit_blas_threads

limit_blas_threads()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from models import build_model  # noqa: E402

MEAN, STD = 0.2860, 0.3530


def read_idx(path, magic, dims):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got = int.from_bytes(data[:4], "big")
    if got != magic:
        sys.exit(f"{path}: magic {got:#x}, expected {magic:#x}")
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, split):
    x = read_idx(f"{data_dir}/{split}-images-idx3-ubyte.gz", 0x803, 3)
    y = read_idx(f"{data_dir}/{split}-labels-idx1-ubyte.gz", 0x801, 1)
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD
    return x.unsqueeze(1), torch.from_numpy(y.astype(np.int64))


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            is_norm = isinstance(module, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d,
                                          torch.nn.LayerNorm))
            (no_decay if name == "bias" or is_norm else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def evaluate(model, x, y, batch=1000):
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            logits = model(x[i:i + batch])
            loss += F.cross_entropy(logits, y[i:i + batch], reduction="sum").item()
            correct += (logits.argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return loss / len(x), correct / len(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="cnn-bn")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--flip", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x_train, y_train = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "t10k")
    model = build_model(args.model)
    opt = torch.optim.SGD(param_groups(model, args.weight_decay), lr=args.lr,
                          momentum=args.momentum)
    per_epoch = len(x_train) // args.batch
    total = per_epoch * args.epochs

    def lr_at(step):
        lr = args.lr * (1 + math.cos(math.pi * min(step, total) / total)) / 2
        return lr * (step + 1) / args.warmup if step < args.warmup else lr

    step, start = 0, time.time()
    for epoch in range(args.epochs):
        order = torch.randperm(len(x_train))
        for b in range(per_epoch):
            idx = order[b * args.batch:(b + 1) * args.batch]
            xb, yb = x_train[idx], y_train[idx]
            if args.flip:
                flip = torch.rand(len(idx)) < 0.5
                xb[flip] = xb[flip].flip(-1)
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            loss = F.cross_entropy(model(xb), yb, label_smoothing=args.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
        test_loss, acc = evaluate(model, x_test, y_test)
        print(json.dumps({"epoch": epoch + 1, "step": step, "test_loss": round(test_loss, 5),
                          "accuracy": acc, "seconds": round(time.time() - start, 1)}),
              flush=True)


if __name__ == "__main__":
    main()
