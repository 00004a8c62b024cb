#!/usr/bin/env bash
# Peak resident memory of `braid train` on a .npy dataset larger than it should hold:
#   bench/npy_mmap_rss.sh [SAMPLES] [STEPS]     (default 200000 samples, 300 steps)
# writes u1 features [SAMPLES, 3, 64, 64] (12,288 bytes a sample: 2.46 GB at the default)
# and labels into a temporary folder, out of the page cache, then trains a linear model on them with
# npy_mmap on (rows mapped, converted as batches are filled) and off (the whole file read
# and converted to f32, four times its size), and prints each run's peak RSS (VmHWM, from
# GNU time's "Maximum resident set size") beside the file's size. off is skipped where
# the f32 copy would not fit in MemAvailable. The seconds are the whole run: reading the
# file (off) or mapping it (on, the pages read as the steps touch them), and one test
# batch. The labels are u1 (the script writes them so). Needs build/release/braid, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
samples=${1:-200000}
steps=${2:-300}
braid=build/release/braid
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" "$samples" <<'PY'
import os, struct, sys
d, n = sys.argv[1], int(sys.argv[2])
def header(descr, shape):
    text = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    text += " " * ((64 - (10 + len(text) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()
row = 3 * 64 * 64
block = os.urandom(row * 4096)  # random pixels, repeated: no page is all zeros
with open(f"{d}/x.npy", "wb") as f:
    f.write(header("|u1", "(%d, 3, 64, 64)" % n))
    for start in range(0, n, 4096):
        f.write(block[: row * min(4096, n - start)])
labels = bytes(i % 10 for i in range(n))
with open(f"{d}/y.npy", "wb") as f:
    f.write(header("|u1", "(%d,)" % n) + labels)
# Out of the page cache, as a dataset larger than memory is: else the kernel's fault-around
# maps the cached neighbours of every row read (16 pages) and RSS counts them.
for name in ("x.npy", "y.npy"):
    with open(f"{d}/{name}", "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
with open(f"{d}/test_x.npy", "wb") as f:  # a small test split: the runs measure training
    f.write(header("|u1", "(1000, 3, 64, 64)") + block[: row * 1000])
with open(f"{d}/test_y.npy", "wb") as f:
    f.write(header("|u1", "(1000,)") + labels[:1000])
PY
cat > "$dir/model.json" <<'JSON'
{"input": [64, 64, 3], "layers": [{"type": "avgpool2d", "kernel": 4}, {"type": "flatten"},
 {"type": "linear", "out_features": 10}]}
JSON
bytes=$(stat -c %s "$dir/x.npy")
available=$(($(awk '/MemAvailable/ {print $2}' /proc/meminfo) * 1024))
echo "features file: $bytes bytes ($samples samples); MemAvailable $available bytes"
for mode in on off; do
  if [[ $mode == off ]] && ((bytes * 4 > available)); then
    echo "npy_mmap off: skipped (its f32 copy, $((bytes * 4)) bytes, exceeds MemAvailable)"
    continue
  fi
  /usr/bin/time -f "%M %e" -o "$dir/rss" "$braid" train --model "$dir/model.json" --dataset npy \
    --npy "$dir/x.npy" "$dir/y.npy" "$dir/test_x.npy" "$dir/test_y.npy" --npy-layout nchw --npy-mmap "$mode" \
    --max-steps "$steps" --batch 64 --threads 2 --eval-batches 1 --out "$dir/out-$mode" \
    >"$dir/log-$mode" 2>&1 || { cat "$dir/log-$mode"; exit 1; }
  read -r kib seconds < <(tail -1 "$dir/rss")
  echo "npy_mmap $mode: peak RSS $((kib / 1024)) MiB over $steps steps of 64 ($((kib * 1024 * 100 / bytes))% of the file), $seconds s"
done
