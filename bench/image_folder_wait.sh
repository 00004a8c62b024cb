#!/usr/bin/env bash
# Issue 32's data-wait figure: resnet18 trains from a folder of PNG files (Fashion-MNIST
# written one file per image, a subfolder per class; the model pads them to 32x32, as the
# figure asks) and the step's time waiting for the loader is reported as a share of the
# step. Decoding and augmentation run on the loader's worker threads (data/loader.h); the
# training thread only waits when they fall behind.
#
#   bench/image_folder_wait.sh [IMAGES=12800] [STEPS=40] [BATCH=128]
#   MODEL=FILE.json bench/image_folder_wait.sh ...   another model (a linear one shows the
#                                                    loader's own limit: its step waits)
#
# Prints the steps' median step and data-wait times (the first 5 steps, a warm-up, left
# out) and the wait's share of the step. Needs build/release/braid and python3 (zlib only).
set -euo pipefail
cd "$(dirname "$0")/.."
images=${1:-12800}
steps=${2:-40}
batch=${3:-128}
braid=build/release/braid
model=${MODEL:-resnet18}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# Fashion-MNIST's idx files written as 8-bit grey PNGs by hand (no imaging library).
python3 - "$dir" "$images" <<'PY'
import gzip, os, struct, sys, zlib
out, limit = sys.argv[1], int(sys.argv[2])
src = "/usr/share/datasets/fashion-mnist"

def png(path, pixels, h, w):
    raw = b"".join(b"\0" + pixels[r * w:(r + 1) * w] for r in range(h))
    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

for split, prefix, n in (("train", "train", limit), ("test", "t10k", min(limit, 2000))):
    with gzip.open(f"{src}/{prefix}-images-idx3-ubyte.gz") as f:
        data = f.read()
    with gzip.open(f"{src}/{prefix}-labels-idx1-ubyte.gz") as f:
        labels = f.read()[8:]
    for c in range(10):
        os.makedirs(f"{out}/{split}/{c}", exist_ok=True)
    for i in range(n):
        png(f"{out}/{split}/{labels[i]}/{i}.png", data[16 + i * 784:16 + (i + 1) * 784], 28, 28)
PY

lscpu | sed -n 's/^Model name: *//p'
"$braid" train --model "$model" --dataset image_folder --image-train "$dir/train" \
  --image-test "$dir/test" --image-channels 1 --batch "$batch" --steps "$steps" --threads 1 \
  --log-every 1 --eval-batches 1 --out "$dir/run" > "$dir/train.log" 2>&1 ||
  { cat "$dir/train.log"; exit 1; }

python3 - "$dir/run/metrics.jsonl" "$model" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if r.get("event") == "train" and "step_ms" in r][5:]
step = statistics.median(r["step_ms"] for r in steps)
wait = statistics.median(r["data_wait_ms"] for r in steps)
total_wait = sum(r["data_wait_ms"] for r in steps)
total_step = sum(r["step_ms"] for r in steps)
print(f"{sys.argv[2]} from PNG folders, {len(steps)} steps, "
      f"median step {step:.1f} ms, median data wait {wait:.3f} ms, "
      f"wait / step {100 * total_wait / total_step:.3f} % (summed over the steps)")
PY
