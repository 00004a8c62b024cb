"""PyTorch reference run for braid's gpt-tiny convergence check on the fortunes corpus.

Corpus: every regular file (not a symlink, name without '.') directly in
/usr/share/games/fortunes, sorted by name, bytes concatenated; train = first
floor(0.9*N) bytes, val = the rest. Each step trains on --batch random 129-byte windows
(start uniform in [0, len(train)-129]; inputs the first 128 bytes, targets shifted by one)
with AdamW(lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on 2-D weights only),
constant lr, no clipping, one thread. Validation loss = mean cross-entropy over all
consecutive non-overlapping windows of the val split (start 0, stride 128, 129 bytes each,
a last partial window dropped), in eval mode. Braid's run should land near this val loss.

  /usr/bin/python3 bench/pytorch_gpt_convergence.py [--steps 600 --batch 32 --seed 0 --json]
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_threads import limit_blas_threads

limit_blas_threads()
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from models import GPT  # noqa: E402

FORTUNES = "/usr/share/games/fortunes"
CONTEXT = 128


def load_corpus(directory=FORTUNES):
    """Returns (train, val) as uint8 numpy arrays, split 90/10 by bytes."""
    names = sorted(n for n in os.listdir(directory)
                   if "." not in n and not os.path.islink(os.path.join(directory, n))
                   and os.path.isfile(os.path.join(directory, n)))
    if not names:
        raise FileNotFoundError(f"no corpus files in {directory} (install fortunes-min/fortunes)")
    data = b"".join(open(os.path.join(directory, n), "rb").read() for n in names)
    cut = math.floor(0.9 * len(data))
    arr = np.frombuffer(data, dtype=np.uint8)
    return arr[:cut], arr[cut:]


def val_windows(val):
    """All non-overlapping 129-byte windows at stride 128, as int64 [n, 129]."""
    n = (len(val) - 1) // CONTEXT
    idx = np.arange(n)[:, None] * CONTEXT + np.arange(CONTEXT + 1)[None, :]
    return torch.from_numpy(val[idx].astype(np.int64))


@torch.no_grad()
def evaluate(model, windows, batch=64):
    """Mean cross-entropy per target byte (every window has 128 targets, so it is also
    the mean over windows)."""
    was_training = model.training
    model.eval()
    total = 0.0
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch]
        logits = model(w[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, 256), w[:, 1:].reshape(-1),
                                 reduction="sum").item()
    model.train(was_training)
    return total / (len(windows) * CONTEXT)


def make_optimizer(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]  # wte, wpe, Linear weights
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # biases, LayerNorm
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=1e-3, betas=(0.9, 0.95), eps=1e-8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="end with one JSON line")
    a = ap.parse_args()
    if a.steps < 0 or a.batch < 1 or a.eval_every < 1:
        ap.error("--steps >= 0, --batch >= 1 and --eval-every >= 1 please")
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(a.seed)

    train, val = load_corpus()
    windows = val_windows(val)
    train_t = torch.from_numpy(train.astype(np.int64))
    print(f"corpus {len(train) + len(val)} bytes: train {len(train)}, val {len(val)} "
          f"({len(windows)} windows of {CONTEXT}); torch {torch.__version__}, "
          f"{a.threads} thread(s)", flush=True)

    model = GPT()
    opt = make_optimizer(model)
    gen = torch.Generator().manual_seed(a.seed)
    offs = torch.arange(CONTEXT + 1)
    t_start = time.perf_counter()
    train_s = eval_s = 0.0
    n_evals = 0
    val_loss, loss = float("nan"), float("nan")
    for step in range(a.steps + 1):
        if step % a.eval_every == 0 or step == a.steps:
            t0 = time.perf_counter()
            val_loss = evaluate(model, windows)
            eval_s += time.perf_counter() - t0
            n_evals += 1
            per_step = train_s / step if step else float("nan")
            evals_left = (a.steps - step) // a.eval_every + (a.steps % a.eval_every != 0)
            eta = (a.steps - step) * per_step + evals_left * eval_s / n_evals if step else 0
            print(f"step {step:5d}  val_loss {val_loss:.4f}  train_loss {loss:.4f}  "
                  f"train {per_step * 1e3:.0f} ms/step  elapsed "
                  f"{time.perf_counter() - t_start:.1f} s  eta {eta:.0f} s", flush=True)
        if step == a.steps:
            break
        t0 = time.perf_counter()
        starts = torch.randint(0, len(train) - CONTEXT, (a.batch,), generator=gen)  # <= len-129
        seq = train_t[starts[:, None] + offs]
        opt.zero_grad(set_to_none=True)
        logits = model(seq[:, :-1])
        out = F.cross_entropy(logits.reshape(-1, 256), seq[:, 1:].reshape(-1))
        out.backward()
        opt.step()
        loss = out.item()
        train_s += time.perf_counter() - t0

    total = time.perf_counter() - t_start
    print(f"final val_loss {val_loss:.4f} after {a.steps} steps; {total:.1f} s total "
          f"({train_s:.1f} s training, {eval_s:.1f} s evaluating)", flush=True)
    if a.json:
        print(json.dumps({"val_loss": round(val_loss, 5), "steps": a.steps,
                          "seconds": round(total, 2), "train_seconds": round(train_s, 2),
                          "eval_seconds": round(eval_s, 2), "batch": a.batch, "seed": a.seed,
                          "torch": torch.__version__}))


if __name__ == "__main__":
    main()
