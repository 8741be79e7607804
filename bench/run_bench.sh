#!/usr/bin/env bash
# ddptrain benchmarks (make bench). CPU, Gloo on loopback, synthetic data, image 32.
#  1. throughput: ddptrain vs Python PyTorch DDP (python3-torch: the same LibTorch), same
#     model, batch, threads and loader workers, world 1 and 2;
#  2. exposed communication: all-reduce overlapped with backward vs after backward, on
#     loopback and (2b, as root) between two network namespaces over a 1 Gbit/s link;
#  3. gradient accumulation K=4: one all-reduce per step (no_sync) vs one per micro-batch;
#  4. activation recompute: step time and peak memory with and without (width 1.0, batch 128);
#  5. precision on CPU: fp32 vs bf16 autocast;
#  6. the loader alone (ddptrain inspect loader) against the trainer's consumption, and the
#     data-wait share of the step with 1 loader thread;
#  7. GPT (debug preset, byte-level text) tokens/s and MFU, fp32 and bf16, world 2;
#  8. accuracy on Fashion-MNIST, world 2: one epoch (as make run) and, with
#     BENCH_ACCURACY=full, the recommended run (15 epochs with --augment, about 17 min).
# samples/s are global and averaged over the log intervals after the first (warm-up).
# Usage: bench/run_bench.sh [build_dir]; BENCH_STEPS (default 30) sets the run length.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/$BUILD/ddptrain"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
STEPS=${BENCH_STEPS:-30}
# A failed run prints its log and stops the whole bench, also from inside $(...), where a
# plain exit would only leave the subshell and a table row would silently come out empty.
trap 'exit 1' TERM
fail() {
  cat "$@" >&2
  echo "bench: a run failed; its log is above" >&2
  kill -TERM $$
  exit 1
}
INTERVAL=$((STEPS / 3))

# ours WORLD WIDTH BATCH [extra flags] -> "samples/s ms/step wait_ms peak_MiB"
ours() {
  local world=$1 width=$2 batch=$3
  shift 3
  "$BIN" launch --nproc_per_node "$world" --master_port 29544 train --dataset synthetic --image_size 32 \
    --width "$width" --batch_size "$batch" --epochs 1 --max_steps "$STEPS" --log_interval "$INTERVAL" \
    --num_workers 1 --save_every 0 --checkpoint_dir "$TMP/ckpt" "$@" > "$TMP/ours.log" 2>&1 ||
    fail "$TMP/ours.log"
  step_means "$TMP/ours.log"
}

# step_means LOG -> "samples/s ms/step wait_ms peak_MiB", averaged over the step lines after the first
step_means() {
  grep -E 'step [0-9]+/[0-9]+ \|' "$1" | tail -n +2 |
    sed -E 's/.*\| ([0-9,]+) samples\/s \| ([0-9.]+) ms\/step .*comm wait ([0-9.]+) ms\/step.*peak mem ([0-9]+) MiB.*/\1 \2 \3 \4/' |
    tr -d , | awk '{s+=$1; t+=$2; w+=$3; if ($4 > m) m = $4; n++} END {printf "%.1f %.0f %.1f %d", s/n, t/n, w/n, m}'
}

# Two "nodes" (network namespaces, one rank each, 1 thread each) joined by a veth pair whose
# both ends a token bucket (tc tbf) limits to RATE: a real, slower network between the ranks.
NETNS=(ddpbench0 ddpbench1)
slow_link_up() {
  local rate=$1
  slow_link_down
  ip netns add "${NETNS[0]}" && ip netns add "${NETNS[1]}" &&
    ip link add ddpbv0 type veth peer name ddpbv1 &&
    ip link set ddpbv0 netns "${NETNS[0]}" && ip link set ddpbv1 netns "${NETNS[1]}" &&
    ip -n "${NETNS[0]}" addr add 10.214.0.1/24 dev ddpbv0 && ip -n "${NETNS[1]}" addr add 10.214.0.2/24 dev ddpbv1 &&
    ip -n "${NETNS[0]}" link set ddpbv0 up && ip -n "${NETNS[1]}" link set ddpbv1 up &&
    ip -n "${NETNS[0]}" link set lo up && ip -n "${NETNS[1]}" link set lo up &&
    tc -n "${NETNS[0]}" qdisc add dev ddpbv0 root tbf rate "$rate" burst 64kb latency 100ms &&
    tc -n "${NETNS[1]}" qdisc add dev ddpbv1 root tbf rate "$rate" burst 64kb latency 100ms
}
slow_link_down() { for ns in "${NETNS[@]}"; do ip netns del "$ns" 2> /dev/null || true; done; }

# two_nodes WIDTH BATCH [extra flags] -> "samples/s ms/step wait_ms peak_MiB" (node 0's rank)
two_nodes() {
  local width=$1 batch=$2
  shift 2
  local node pids=() rc=0
  for node in 1 0; do
    ip netns exec "${NETNS[$node]}" env GLOO_SOCKET_IFNAME=ddpbv$node "$BIN" launch --nnodes 2 --node_rank $node \
      --nproc_per_node 1 --master_addr 10.214.0.1 --master_port 29546 train --dataset synthetic --image_size 32 \
      --width "$width" --batch_size "$batch" --epochs 1 --max_steps "$STEPS" --log_interval "$INTERVAL" \
      --num_workers 1 --threads 1 --save_every 0 --checkpoint_dir "$TMP/ckpt$node" "$@" > "$TMP/node$node.log" 2>&1 &
    pids+=($!)
  done
  for node in "${pids[@]}"; do wait "$node" || rc=1; done
  [ $rc -eq 0 ] || fail "$TMP/node0.log" "$TMP/node1.log"
  step_means "$TMP/node0.log"
}

# python WORLD WIDTH BATCH [--channels_last] -> samples/s
python_ddp() {
  /usr/bin/python3 "$ROOT/tests/python/torchrun_wrapper.py" --nproc_per_node "$1" --master_port 29545 \
    "$ROOT/bench/reference_ddp.py" --width "$2" --image_size 32 --batch_size "$3" --steps "$STEPS" \
    --warmup "$INTERVAL" --num_workers 1 ${4:-} > "$TMP/ref.log" 2>&1 || fail "$TMP/ref.log"
  grep -oE 'reference samples/s: [0-9.]+' "$TMP/ref.log" | awk '{print $3}'
}

# comm_row LABEL SAMPLES_S MS_STEP WAIT_MS [...]: a row of the exposed-communication tables, with
# the wait's share of the step (the header when MS_STEP is not a number).
comm_row() {
  local share=$5
  [[ $3 =~ ^[0-9.]+$ ]] && share="$(awk -v w="$4" -v t="$3" 'BEGIN {printf "%.1f", 100 * w / t}')%"
  printf '%-28s %-10s %-9s %-14s %s\n' "$1" "$2" "$3" "$4" "$share"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

echo "== 1. throughput: ddptrain vs Python DDP (samples/s, global) =="
echo "ddptrain runs channels-last by default (Note [Channels last]); Python DDP as users run it"
echo "(NCHW), and with model.to(memory_format=torch.channels_last) for a like-for-like ratio"
printf '%-7s %-6s %-6s %-10s %-10s %-7s %-12s %s\n' world width batch ddptrain python ratio python-NHWC ratio
for cfg in "1 1.0 32" "2 1.0 32" "2 0.25 64"; do
  set -- $cfg
  read -r o _ _ <<< "$(ours "$1" "$2" "$3")"
  p=$(python_ddp "$1" "$2" "$3")
  pc=$(python_ddp "$1" "$2" "$3" --channels_last)
  printf '%-7s %-6s %-6s %-10s %-10s %-7s %-12s %s\n' "$1" "$2" "$3" "$o" "$p" "$(ratio "$o" "$p")" "$pc" "$(ratio "$o" "$pc")"
done

echo
echo "== 2. exposed communication (world 2, width 1.0, batch 32) =="
comm_row mode samples/s ms/step "comm wait ms" "wait share"
for mode in "overlap --ddp_overlap" "after-backward --no-ddp_overlap"; do
  set -- $mode
  comm_row "$1" $(ours 2 1.0 32 "$2")
done

echo
echo "== 2b. exposed communication over a 1 Gbit/s link (2 nodes as network namespaces, 1 rank each) =="
if [ "$(id -u)" -ne 0 ]; then
  echo "not run: needs root (ip netns, tc)"
elif ! slow_link_up 1gbit; then
  slow_link_down
  echo "not run: could not make the namespaces or shape the link (ip/tc failed)"
else
  trap 'slow_link_down; rm -rf "$TMP"' EXIT
  comm_row mode samples/s ms/step "comm wait ms" "wait share"
  # The gradient is 10.6 MiB: with the default 25 MiB cap nearly all of it is one bucket that
  # fills only at the end of backward; 1 MiB buckets start sending while backward runs.
  for mode in "after-backward --no-ddp_overlap" "overlap,25MiB-buckets --bucket_cap_mb=25" \
    "overlap,1MiB-buckets --bucket_cap_mb=1"; do
    set -- $mode
    comm_row "$1" $(two_nodes 1.0 32 "$2")
  done
  slow_link_down
  echo "(moving the bytes costs CPU here: Gloo's thread and the kernel's softirq take ~10% of the"
  echo " 2 cores while it runs, so the wait hidden under backward reappears as slower compute)"
fi

echo
echo "== 3. gradient accumulation K=4 (world 2, width 0.25, batch 64) =="
printf '%-28s %s\n' mode samples/s
for mode in "no_sync --accum_no_sync" "every-micro-batch --no-accum_no_sync"; do
  set -- $mode
  read -r s _ _ <<< "$(ours 2 0.25 64 --grad_accum_steps 4 "$2")"
  printf '%-28s %s\n' "$1" "$s"
done

echo
echo "== 4. activation recompute (world 1, width 1.0, batch 128) =="
printf '%-10s %-10s %-9s %s\n' recompute samples/s ms/step "peak MiB (weights, grads, optimizer and activations)"
for mode in none blocks; do
  read -r s t _ m <<< "$(ours 1 1.0 128 --activation_checkpointing "$mode")"
  printf '%-10s %-10s %-9s %s\n' "$mode" "$s" "$t" "$m"
done

echo
echo "== 5. precision on CPU (world 1, width 1.0, batch 32) =="
printf '%-22s %-10s %s\n' precision samples/s ms/step
for mode in "fp32 --no-use_amp" "bf16-autocast --amp_dtype=bf16"; do
  set -- $mode
  read -r s t _ _ <<< "$(ours 1 1.0 32 "$2")"
  printf '%-22s %-10s %s\n' "$1" "$s" "$t"
done

echo
echo "== 6. loader alone vs the trainer (world 2, width 0.25, batch 64) =="
printf '%-15s %-8s %s\n' dataset workers "loader samples/s (rank 0's share of an epoch)"
for ds in synthetic fashion-mnist; do
  for w in 0 1 2; do
    "$BIN" inspect loader --dataset "$ds" --num_workers "$w" --batch_size 64 --batches 200 --world_size 2 > "$TMP/loader.log"
    printf '%-15s %-8s %s\n' "$ds" "$w" "$(grep -oE '[0-9]+ samples/s' "$TMP/loader.log" | awk '{print $1}')"
  done
done
for ds in synthetic fashion-mnist; do
  "$BIN" launch --nproc_per_node 2 --master_port 29544 train --dataset "$ds" --width 0.25 --batch_size 64 --epochs 1 \
    --max_steps "$STEPS" --log_interval "$INTERVAL" --num_workers 1 --save_every 0 --eval_every 0 \
    --checkpoint_dir "$TMP/ckpt" > "$TMP/cons.log" 2>&1 || fail "$TMP/cons.log"
  grep -E 'step [0-9]+/[0-9]+ \|' "$TMP/cons.log" | tail -n +2 |
    sed -E 's/.*\| ([0-9,]+) samples\/s \|.*data wait ([0-9.]+)%.*/\1 \2/' | tr -d , |
    awk -v ds="$ds" '{s+=$1; w+=$2; n++} END {printf "trainer on %s: %.0f samples/s global (%.0f per rank), data wait %.1f%% of the step (1 loader thread)\n", ds, s/n, s/n/2, w/n}'
done

echo
echo "== 7. GPT debug preset on text (world 2, batch 8, block 64) =="
printf '%-8s %-12s %-10s %s\n' precision tokens/s ms/step MFU
for mode in "fp32 --no-use_amp" "bf16 --amp_dtype=bf16"; do
  set -- $mode
  "$BIN" launch --nproc_per_node 2 --master_port 29544 train --model gpt --gpt_preset debug --dataset text \
    --data_path /usr/share/common-licenses/GPL-3 --batch_size 8 --optimizer adamw --lr 3e-3 --epochs 1 \
    --max_steps "$STEPS" --log_interval "$INTERVAL" --num_workers 1 --save_every 0 --eval_every 0 \
    --checkpoint_dir "$TMP/ckpt" "$2" > "$TMP/gpt.log" 2>&1 || fail "$TMP/gpt.log"
  grep -E 'step [0-9]+/[0-9]+ \|' "$TMP/gpt.log" | tail -n +2 |
    sed -E 's/.*\| ([0-9,]+) tokens\/s \| ([0-9.]+) ms\/step .*MFU ([0-9.]+)%.*/\1 \2 \3/' | tr -d , |
    awk -v p="$1" '{s+=$1; t+=$2; m+=$3; n++} END {printf "%-8s %-12.0f %-10.0f %.1f%%\n", p, s/n, t/n, m/n}'
done

echo
echo "== 8. accuracy: MiniResNet width 0.25 on Fashion-MNIST, world 2, batch 64 per rank, lr 0.05 =="
accuracy() {
  local name=$1; shift
  local t0=$SECONDS
  "$BIN" launch --nproc_per_node 2 --master_port 29544 train --dataset fashion-mnist --width 0.25 --lr 0.05 \
    --batch_size 64 --num_workers 1 --log_interval 1000 --save_every 0 --checkpoint_dir "$TMP/ckpt" "$@" \
    > "$TMP/acc.log" 2>&1 || fail "$TMP/acc.log"
  printf '%-34s test acc %s, %d s wall\n' "$name" \
    "$(grep -oE 'final test accuracy: [0-9.]+' "$TMP/acc.log" | awk '{print $4}')" $((SECONDS - t0))
}
accuracy "1 epoch (make run)" --epochs 1
if [ "${BENCH_ACCURACY:-}" = full ]; then
  accuracy "15 epochs --augment (recommended)" --epochs 15 --augment --eval_every 5
else
  echo "(BENCH_ACCURACY=full adds the recommended 15-epoch run with --augment)"
fi
