#!/usr/bin/env bash
# Throughput benchmark: ddptrain vs Python PyTorch DDP (same LibTorch, same model and data).
# Synthetic data, image 32, MiniResNet width 1.0, batch 32 per rank, world 1 and 2, CPU/Gloo.
# Each run: 30 optimizer steps; samples/s (global) over steps 11-30, after warm-up.
# Usage: bench/run_bench.sh [build_dir]   (make bench)
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/$BUILD/ddptrain"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
STEPS=${BENCH_STEPS:-30}
FLAGS=(--dataset synthetic --image_size 32 --width 1.0 --batch_size 32 --epochs 1 --max_steps "$STEPS"
       --log_interval 10 --num_workers 1 --save_every 0 --checkpoint_dir "$TMP/ckpt")

# Mean of the step lines' samples/s after the first interval (the warm-up).
ours() {
  grep -E 'step [0-9]+/[0-9]+ \|' "$1" | tail -n +2 | sed -E 's/.*\| ([0-9,]+) samples\/s.*/\1/' | tr -d , |
    awk '{s+=$1; n++} END {if (n) printf "%.1f", s/n; else print "n/a"}'
}

printf '%-8s %-14s %-14s %s\n' world ddptrain python-ddp ratio
for world in 1 2; do
  "$BIN" launch --nproc_per_node "$world" --master_port 29544 train "${FLAGS[@]}" > "$TMP/ours.log" 2>&1
  o=$(ours "$TMP/ours.log")
  /usr/bin/python3 "$ROOT/tests/python/torchrun_wrapper.py" --nproc_per_node "$world" --master_port 29545 \
    "$ROOT/bench/reference_ddp.py" --width 1.0 --image_size 32 --batch_size 32 --steps "$STEPS" \
    > "$TMP/ref.log" 2>&1 || { cat "$TMP/ref.log"; exit 1; }
  r=$(grep -oE 'reference samples/s: [0-9.]+' "$TMP/ref.log" | awk '{print $3}')
  printf '%-8s %-14s %-14s %s\n' "$world" "$o" "$r" "$(awk -v a="$o" -v b="$r" 'BEGIN{printf "%.2f", a/b}')"
done
