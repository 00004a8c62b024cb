"""PyTorch training-throughput reference for `braid bench train`.

Times full training steps (zero_grad, forward, cross-entropy, backward, optimizer.step)
of one models.py model on a fixed random batch, single-threaded by default so it is
comparable to one braid rank on one core. Reports the median over --steps timed steps
after --warmup untimed ones (the median shrugs off noise from a shared machine).
Image models: inputs N(0,1) [B,1,28,28], labels uniform in 0..9, SGD(lr 0.01, momentum 0.9).
gpt-tiny: random bytes [B,128] -> next byte, AdamW(lr 1e-3, betas (0.9,0.95), wd 0.1);
throughput is tokens/s = B*128 / step time. --precision bf16: forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16) (fp32 weights and optimizer), as braid's.

  /usr/bin/python3 bench/pytorch_train_bench.py --model cnn --batch 64 [--json]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_threads import limit_blas_threads

limit_blas_threads()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from models import MODELS, build_model, is_language_model  # noqa: E402


def make_optimizer(name, model):
    if is_language_model(name):
        return torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95),
                                 eps=1e-8, weight_decay=0.1)
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def make_batch(name, batch, gen):
    if is_language_model(name):
        seq = torch.randint(0, 256, (batch, 129), generator=gen)
        return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    x = torch.randn(batch, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    return x, y


def run(name, batch, steps, warmup, threads, seed=0, precision="fp32"):
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = build_model(name)
    model.train()
    opt = make_optimizer(name, model)
    x, y = make_batch(name, batch, torch.Generator().manual_seed(seed + 1))
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
    if not torch.isfinite(loss):
        raise RuntimeError(f"{name}: loss became {loss.item()}")
    return statistics.median(times), loss.item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, choices=MODELS)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=50, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps before timing")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    a = ap.parse_args()
    if a.batch < 1 or a.steps < 1 or a.warmup < 0 or a.threads < 1:
        ap.error("--batch, --steps and --threads must be >= 1 and --warmup >= 0")
    try:  # only possible before any parallel work has started
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass

    step_s, last_loss = run(a.model, a.batch, a.steps, a.warmup, a.threads, a.seed, a.precision)
    lm = is_language_model(a.model)
    rate = a.batch * (128 if lm else 1) / step_s
    key = "tokens_per_s" if lm else "samples_per_s"
    if a.json:
        print(json.dumps({"model": a.model, "batch": a.batch, "threads": a.threads,
                          key: round(rate, 1), "step_ms_median": round(step_s * 1e3, 3),
                          "steps": a.steps, "torch": torch.__version__,
                          "precision": a.precision}))
    else:
        unit = "tokens/s" if lm else "samples/s"
        print(f"pytorch {torch.__version__} {a.model} batch {a.batch} threads {a.threads}: "
              f"{rate:,.0f} {unit}, median step {step_s * 1e3:.2f} ms "
              f"({a.steps} timed steps after {a.warmup} warm-up; last loss {last_loss:.4f})")


if __name__ == "__main__":
    main()
