#!/usr/bin/python3
"""Loads a braid checkpoint into the matching PyTorch model and evaluates it.

Proves the interchange promise: a run's model.safetensors goes through
load_state_dict(strict=True) unchanged. CHECKPOINT is what `braid eval --checkpoint` takes:
a run directory (runs/cnn), its checkpoint directory (runs/cnn/checkpoint) or a
.safetensors file. Image models are evaluated on the
Fashion-MNIST test set ((x/255 - 0.2860)/0.3530, NCHW [N,1,28,28]); gpt-tiny on the
fortunes validation split (see pytorch_gpt_convergence.py). --compare-logits FILE.npy
compares with logits braid wrote for the first K samples ([K,10] for images, [K,128,256]
or [K*128,256] for gpt-tiny windows), in the same order.

  /usr/bin/python3 bench/load_braid_checkpoint.py runs/cnn --model cnn [--compare-logits l.npy]

--spec FILE.json instead of --model NAME takes the run's JSON model spec (what
`braid train --model FILE.json` took) and builds its twin with spec_twin.build_from_spec;
such a model is evaluated on the Fashion-MNIST test set (input [28, 28, 1]), or, a
byte-level language model (input [128], input_dtype i32, logits [128, 256]), on the fortunes
validation split as gpt-tiny is.

  /usr/bin/python3 bench/load_braid_checkpoint.py runs/mine --spec mine.json
"""
import argparse
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_threads import limit_blas_threads

limit_blas_threads()
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from models import MODELS, build_model, is_language_model  # noqa: E402
from safetensors_lite import load_file  # noqa: E402
from spec_twin import build_from_spec  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    """Reads a gzip'd IDX file (magic 0x0000 08 <ndim>, big-endian dims, uint8 data)."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not a uint8 IDX file")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {data.size} bytes of data for dims {dims}")
    return data.reshape(dims)


def fashion_test(directory=FASHION):
    x = read_idx(os.path.join(directory, "t10k-images-idx3-ubyte.gz")).astype(np.float32)
    y = read_idx(os.path.join(directory, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    x = (x / 255.0 - MEAN) / STD
    return torch.from_numpy(x).reshape(-1, 1, 28, 28), torch.from_numpy(y)


@torch.no_grad()
def image_logits(model, x, batch=1000):
    return torch.cat([model(x[i:i + batch]) for i in range(0, len(x), batch)])


def load_checkpoint(path, model):
    if os.path.isdir(os.path.join(path, "checkpoint")):  # a run directory
        path = os.path.join(path, "checkpoint")
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    tensors, meta = load_file(path, with_metadata=True)
    # Cast to the module's dtypes (a bf16 checkpoint still loads into the fp32 twin).
    want = model.state_dict()
    for k, t in tensors.items():
        if k in want and t.dtype != want[k].dtype:
            tensors[k] = t.to(want[k].dtype)
    model.load_state_dict(tensors, strict=True)
    return path, meta


def compare(ours, path):
    ref = torch.from_numpy(np.load(path)).float()
    k = ref.shape[0]
    mine = ours.reshape(-1, ours.shape[-1])[: ref.numel() // ref.shape[-1]].reshape(ref.shape)
    diff = (mine - ref).abs()
    agree = (mine.argmax(-1) == ref.argmax(-1)).float().mean().item()
    print(f"logits vs {path} ({k} rows, shape {list(ref.shape)}): max |diff| "
          f"{diff.max().item():.3e}, mean |diff| {diff.mean().item():.3e}, "
          f"argmax agreement {agree * 100:.2f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint",
                    help="run directory, checkpoint directory (holding model.safetensors) or file")
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", choices=MODELS, help="a built-in model's name")
    which.add_argument("--spec", metavar="FILE.json",
                       help="a JSON model spec (braid train --model FILE.json): its twin from "
                            "spec_twin.build_from_spec")
    ap.add_argument("--compare-logits", metavar="FILE.npy")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    if a.spec:
        try:
            with open(a.spec) as f:
                spec = json.load(f)
            model = build_from_spec(spec)
        except (OSError, ValueError) as e:
            sys.exit(f"cannot build a twin of --spec {a.spec}: {e}")
        fmnist = list(model.braid_input) == [28, 28, 1] and model.braid_input_dtype == "f32"
        fortunes = (list(model.braid_input) == [128] and model.braid_input_dtype == "i32"
                    and list(model.braid_output) == [128, 256])
        if not (fmnist or fortunes):
            sys.exit(f"--spec {a.spec}: input {list(model.braid_input)} "
                     f"({model.braid_input_dtype}) -> {list(model.braid_output)}; evaluated "
                     f"here are Fashion-MNIST models ([28, 28, 1], f32) and byte-level "
                     f"language models on the fortunes ([128], i32 -> [128, 256])")
        name, how = a.spec, f"--spec {a.spec}"
        layout = f"python3 bench/spec_twin.py {a.spec} prints the twin's layout"
    else:
        model = build_model(a.model)
        name, how = a.model, f"--model {a.model}"
        layout = "python3 bench/models.py prints every model's layout"
    try:
        path, meta = load_checkpoint(a.checkpoint, model)
    except (OSError, ValueError, RuntimeError) as e:
        sys.exit(f"cannot load {a.checkpoint} as {how}: {e}\n(expected names: {layout})")
    n_params = sum(p.numel() for p in model.parameters())
    print(f"loaded {path} into {name} ({n_params} parameters, strict=True)"
          + (f"; metadata {meta}" if meta else ""))
    model.eval()
    # A spec's twin is checked to 1e-3 relative (bench/check_twins.sh): more digits.
    digits = 6 if a.spec else 4

    language_model = (is_language_model(a.model) if a.model
                      else model.braid_input_dtype == "i32")
    if language_model:
        from pytorch_gpt_convergence import evaluate, load_corpus, val_windows
        _, val = load_corpus()
        windows = val_windows(val)
        loss = evaluate(model, windows)
        print(f"fortunes val: loss {loss:.{digits}f} over {len(windows)} windows")
        if a.compare_logits:
            k = np.load(a.compare_logits, mmap_mode="r").shape[0]
            k = k if np.load(a.compare_logits, mmap_mode="r").ndim == 3 else -(-k // 128)
            with torch.no_grad():
                compare(model(windows[:k, :-1]), a.compare_logits)
        return

    x, y = fashion_test()
    logits = image_logits(model, x)
    loss = F.cross_entropy(logits, y).item()
    correct = int((logits.argmax(1) == y).sum().item())
    print(f"fashion-mnist test: accuracy {100.0 * correct / len(y):.2f}% ({correct}/{len(y)}), "
          f"loss {loss:.{digits}f}")
    if a.compare_logits:
        compare(logits, a.compare_logits)


if __name__ == "__main__":
    main()
