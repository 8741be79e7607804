#!/usr/bin/env bash
# Whether CPU runs repeat bitwise under load (Note [The first parallel call of a vector math
# function]): ROUNDS x AT_ONCE runs of the GPU check rehearsal's GPT (debug preset, bf16,
# AdamW, clip 1.0, 2 steps, 2 intra-op threads each), AT_ONCE at a time on this machine's
# cores; prints how many distinct (loss, grad_norm) sequences they gave (1: all repeated) and
# where the first other one parts. Exit 1 where they did not all repeat.
#   bench/repeats_under_load.sh [BIN] [ROUNDS] [AT_ONCE] [extra train flags...]
# Measured (Intel Xeon with AMX, 2 cores): 75 rounds x 4 with pip's torch 2.11 and 2.15
# before the note's first calls, 4 to 11 of 300 runs parted; with them, none of 300.
set -euo pipefail
BIN=${1:-build/ddptrain}
ROUNDS=${2:-75}
AT_ONCE=${3:-4}
shift $(($# < 3 ? $# : 3))
OUT=$(mktemp -d /tmp/repeats.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  pids=()
  for j in $(seq 1 "$AT_ONCE"); do
    "$BIN" launch --nproc_per_node 1 --master_port $((29750 + j)) train --backend gloo --threads 2 \
      --eval_every 0 --checkpoint_dir '' --metrics_file "$OUT/r${r}_$j.jsonl" --model gpt --gpt_preset debug \
      --dataset tokens --dataset_size 2000 --batch_size 4 --amp_dtype bf16 --optimizer adamw --lr 6e-4 \
      --warmup_steps 2 --clip_grad_norm 1.0 --num_workers 1 --max_steps 2 --log_interval 1 \
      --gradient_as_bucket_view --gpt_activation gelu_tanh --vocab_multiple 64 "$@" > "$OUT/r${r}_$j.log" 2>&1 &
    pids+=($!)
  done
  for j in "${!pids[@]}"; do
    wait "${pids[$j]}" || { echo "a run failed:"; cat "$OUT/r${r}_$((j + 1)).log"; exit 2; }
  done
done
python3 - "$OUT" <<'PY'
import collections, glob, json, sys
runs = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    steps = tuple((r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, open(f)) if r.get("kind") == "step")
    runs[steps].append(f)
common = max(runs, key=lambda s: len(runs[s]))
print(f"{sum(map(len, runs.values()))} runs, {len(runs)} distinct step sequence(s); the common one: {len(runs[common])} runs")
for steps, files in runs.items():
    if steps != common:
        first = next((a, b) for a, b in zip(common, steps) if a != b)
        print(f"  {len(files)} run(s) part at (step, loss, grad_norm) {first[1]} instead of {first[0]}")
sys.exit(0 if len(runs) == 1 else 1)
PY
