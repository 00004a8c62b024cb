"""PyTorch DDP (gloo) with PyTorch's gradient-compression hooks: the reference for
`braid bench train --strategy ddp --codec ...` across hosts (bench/compression_figures.sh).

One process per rank, started separately (one in each network namespace, or by hand):
the rank comes from the environment as torch.distributed's env:// wants it (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), gloo's interface from GLOO_SOCKET_IFNAME (eth0 in
scripts/netns-cluster.sh's namespaces, lo on one machine; unset, gloo takes the hostname's
address, which may not be the link under test).

  --hook none       plain DDP allreduce (fp32)
  --hook fp16       torch.distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook
  --hook powersgd   powerSGD_hook with PowerSGDState(process_group=None,
                    matrix_approximation_rank=--powersgd-rank, start_powerSGD_iter=--start-iter,
                    min_compression_rate=--min-compression-rate (2, as braid's),
                    use_error_feedback=True, warm_start=True)

Models, batches, optimizers and step contents are those of pytorch_ddp_bench.py (models.py;
SGD(0.01, momentum 0.9) for image models, AdamW(1e-3) for the GPTs, as braid's bench train),
and the timing is braid's bench train's: --warmup untimed steps (PowerSGD's --start-iter
uncompressed steps fall inside them), then --repeats rounds of --steps steps; a round's time
is its slowest rank's (all_reduce MAX) and the figures are the median round's.

--single-bucket makes DDP put every gradient into one bucket (bucket_cap_mb above the
model's size, and DDP's 1 MB first bucket after the rebuild raised to the same): torch
1.13's powerSGD_hook over gloo is known to abort with several buckets in flight here.

  RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 GLOO_SOCKET_IFNAME=eth0 \\
    /usr/bin/python3 bench/pytorch_compression_bench.py --model mlp --hook fp16
  -> rank 0 prints one JSON line: {"impl": "pytorch-ddp", "model", "hook", "samples_per_s",
     "step_ms", "buckets", "compression_ratio", ...}
"""
import argparse
import datetime
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_threads import limit_blas_threads

limit_blas_threads()  # before torch loads
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from models import MODELS, build_model, is_language_model  # noqa: E402
from pytorch_ddp_bench import timed_rounds  # noqa: E402
from pytorch_train_bench import make_batch, make_optimizer  # noqa: E402

CONTEXT = 128  # the GPTs' sequence length (make_batch)


def default_batch(name):
    return {"gpt-tiny": 32, "gpt-small": 4}.get(name, 128)


class BucketCounter:
    """Counts the buckets a hook sees in one step (the last step's: the rebuilt layout)."""

    def __init__(self, hook):
        self.seen, self.per_step = 0, None

        def counted(state, bucket):  # a plain function: DDP checks the hook's __name__
            self.seen += 1
            if bucket.is_last():
                self.per_step, self.seen = self.seen, 0
            return hook(state, bucket)

        counted.__name__ = f"counted_{hook.__name__}"
        self.hook = counted


def register_hook(model, a, counter_box):
    """Returns (hook state or None, the codec's nominal ratio or None)."""
    if a.hook == "none":
        return None, 1.0
    if a.hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        counter_box.append(BucketCounter(default_hooks.fp16_compress_hook))
        model.register_comm_hook(None, counter_box[-1].hook)
        return None, 2.0
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
    state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=a.powersgd_rank,
                             start_powerSGD_iter=a.start_iter,
                             min_compression_rate=a.min_compression_rate,
                             use_error_feedback=True, warm_start=True)
    counter_box.append(BucketCounter(ps.powerSGD_hook))
    model.register_comm_hook(state, counter_box[-1].hook)
    return state, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, choices=MODELS)
    ap.add_argument("--batch", type=int, default=None,
                    help="batch per rank (default 128; gpt-tiny 32, gpt-small 4)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per round")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before the first round")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds; the median is reported")
    ap.add_argument("--hook", choices=["none", "fp16", "powersgd"], default="none")
    ap.add_argument("--powersgd-rank", type=int, default=4, help="braid's default, 4")
    ap.add_argument("--start-iter", type=int, default=2,
                    help="powersgd: vanilla allreduce steps first (braid's default, 2)")
    ap.add_argument("--min-compression-rate", type=float, default=2.0)
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ap.add_argument("--single-bucket", action="store_true",
                    help="one DDP bucket for all gradients (overrides --bucket-cap-mb)")
    ap.add_argument("--threads", type=int, default=1, help="threads per rank")
    ap.add_argument("--timeout-s", type=float, default=600, help="gloo's collective timeout")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.repeats < 1 or a.threads < 1:
        ap.error("--steps, --repeats and --threads must be >= 1 and --warmup >= 0")
    if a.hook == "powersgd" and a.warmup < a.start_iter:
        ap.error("--warmup must cover --start-iter (the uncompressed steps are not timed)")
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if k not in os.environ:
            ap.error(f"{k} must be set (env://): one process per rank")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    batch = a.batch or default_batch(a.model)

    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=a.timeout_s))
    torch.manual_seed(a.seed)  # same initial model everywhere (DDP broadcasts rank 0's anyway)
    model = build_model(a.model)
    model.train()
    # gloo cannot broadcast the GPTs' bool causal-mask buffers; they are constants.
    masks = [n for n, b in model.named_buffers() if b.dtype == torch.bool]
    DDP._set_params_and_buffers_to_ignore_for_model(model, masks)
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bucket_cap_mb = a.bucket_cap_mb
    if a.single_bucket:
        bucket_cap_mb = gradient_bytes / 2**20 + 1
        # After the first step DDP rebuilds its buckets with a 1 MB first one; raise it too.
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(bucket_cap_mb * 2**20)
    model = DDP(model, bucket_cap_mb=bucket_cap_mb)
    counter = []  # the hook's bucket counter, when there is a hook
    state, ratio = register_hook(model, a, counter)
    opt = make_optimizer(a.model, model)
    x, y = make_batch(a.model, batch, torch.Generator().manual_seed(a.seed + 1 + rank))

    rounds = timed_rounds(a.model, model, opt, x, y, a, world)
    if state is not None:  # PowerSGD: elements before / after compression since it began
        before, after = state.total_numel_before_compression, state.total_numel_after_compression
        ratio = before / after if after else None
    buckets = counter[0].per_step if counter else None  # without a hook: not counted

    if rank == 0:
        sec = statistics.median(rounds)
        samples = world * batch * a.steps / sec
        row = {"impl": "pytorch-ddp", "model": a.model, "hook": a.hook, "ranks": world,
               "batch_per_rank": batch, "samples_per_s": round(samples, 2),
               "step_ms": round(sec / a.steps * 1e3, 3)}
        if is_language_model(a.model):
            row["tokens_per_s"] = round(samples * CONTEXT, 1)
        row.update({"compression_ratio": ratio, "gradient_bytes": gradient_bytes,
                    "bucket_cap_mb": round(bucket_cap_mb, 3), "single_bucket": a.single_bucket,
                    "buckets": buckets, "threads_per_rank": a.threads, "steps": a.steps,
                    "warmup": a.warmup, "repeats": a.repeats,
                    "round_samples_per_s": [round(world * batch * a.steps / r, 2)
                                            for r in rounds],
                    "torch": torch.__version__})
        if a.hook == "powersgd":
            row.update({"powersgd_rank": a.powersgd_rank, "start_iter": a.start_iter,
                        "min_compression_rate": a.min_compression_rate})
        print(json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
