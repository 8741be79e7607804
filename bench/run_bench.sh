#!/usr/bin/env bash
# ddptrain benchmarks (make bench). CPU, Gloo on loopback, synthetic data, image 32.
#  1. throughput: ddptrain vs Python PyTorch DDP on the torch this build links (pip's 2.15
#     for the default build, Debian's 1.13 for build-debian), same model, batch, threads,
#     loader workers and precision (fp32), world 1 and 2, with Python as users run it (NCHW)
#     and with channels_last (ddptrain's layout); BENCH_ROUNDS interleaved rounds, medians;
#  1b. start-up (launch to the end of the first optimizer step) and peak RSS per rank;
#  2. exposed communication: all-reduce overlapped with backward vs after backward, on
#     loopback and (2b, as root) between two network namespaces over a 1 Gbit/s link;
#  3. gradient accumulation K=4: one all-reduce per step (no_sync) vs one per micro-batch;
#  4. activation recompute: step time and peak memory with and without (width 1.0, batch 128);
#  5. precision on CPU: fp32, bf16 autocast, and what --amp_dtype auto chose here;
#  6. the loader alone (ddptrain inspect loader) against the trainer's consumption, and the
#     data-wait share of the step with 1 loader thread;
#  7. GPT (debug preset, byte-level text) tokens/s and MFU, fp32, bf16 and auto, world 2;
#  8. accuracy on Fashion-MNIST, world 2: one epoch (as make run) and, with
#     BENCH_ACCURACY=full, the recommended run (15 epochs with --augment, about 15 min);
#  9. the library: examples/ddp_loop.cpp against the gradient averaging of pytorch/examples'
#     dist-mnist.cpp (bench/dist_mnist_style.cpp), samples/s and whether its gradients are
#     the mean over the ranks;
# 10. a model scripted in Python (--model torchscript): the reference MiniResNet scripted,
#     against the built-in one (both NCHW), and the same file under Python DDP;
# 11. ZeRO: GPT small with AdamW at world 2 and 4, --zero_stage 0 to 3: samples/s and
#     what a rank holds (parameters, gradients, optimizer state, peak), one table;
# 12. the flight recorder's cost: MiniResNet width 0.25, world 2, --flight_recorder 64 vs 0,
#     BENCH_ROUNDS interleaved rounds, medians;
# 13. ZeRO under a memory limit (as root): world 4, every rank in a memory cgroup of
#     BENCH_LIMIT_MIB (default 1536; bench/in_cgroup.sh), GPT n_embd 768: the largest
#     --n_layer that trains 3 steps at --zero_stage 0 and at 3 (an OOM kill ends a size).
# 14. the image folder: 1,024 JPEGs of about 500x375 (quality 90, made from scikit-image's
#     photographs, bench/image_loader.py), RandomResizedCrop 224 + flip: images/s of
#     `ddptrain inspect loader` on the folder and on the same JPEGs as WebDataset shards
#     against torchvision's ImageFolder through PyTorch's DataLoader (PIL), all with 2
#     workers, BENCH_ROUNDS interleaved rounds, and the shards' indexing time; then the data
#     wait of MiniResNet width 1.0 training on it at 64 (world 1, 2 threads, 1 loader thread).
# 15. token shards: the loader alone (tokens/s, one loader thread) on a 256 MiB nanoGPT .bin,
#     and GPT debug (block 256, vocabulary 50,257) training on it against synthetic tokens,
#     BENCH_ROUNDS interleaved rounds.
# 16. Llama against GPT at GPT-2 124M's sizes (block 256, fp32): tokens/s of GPT, Llama tied
#     (GPT-2's parameter count) and untied (+38.6M), and the ratios of FLOP/s (all count nearly
#     the same FLOPs per token), BENCH_ROUNDS interleaved rounds;
# 17. loading a Hugging Face Llama folder of about 1 GiB (made by transformers): ddptrain's
#     read of the weights against `cat file > /dev/null`, both from the page cache.
# 18. the optimizer step on CPU, fused (--fused_optimizer on: ATen's fused kernels) against
#     torch::optim's loop: ms per optimizer phase (clipping included) of GPT at GPT-2 124M's
#     sizes (124M parameters; block 64, batch 1, world 1, fp32), AdamW and SGD, BENCH_ROUNDS
#     interleaved rounds.
# 19. ZeRO-3 loading section 17's folder at world 4 (#31's goal: a rank's peak below 1.5 x its
#     shard plus one layer): the run record's load_peak_mem_mib (tensors) and
#     load_peak_rss_mib, beside an empty process's resident set (a tiny model, same flags).
# ddptrain's numbers come from its metrics file (bench/metrics_summary.py): samples/s are
# global and averaged over the log intervals after the first (warm-up).
# Usage: bench/run_bench.sh [build_dir]; BENCH_STEPS (default 30) sets the run length,
# BENCH_ROUNDS (default 3) the interleaved rounds of sections 1 and 1b.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/$BUILD/ddptrain"
# The Python whose torch this build links (CMake's DDPTRAIN_PYTHON), for the reference runs.
PY=$(sed -n 's/^DDPTRAIN_PYTHON:FILEPATH=//p' "$ROOT/$BUILD/CMakeCache.txt")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
STEPS=${BENCH_STEPS:-30}
ROUNDS=${BENCH_ROUNDS:-3}
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
now() { date +%s.%N; }
summary() { python3 "$ROOT/bench/metrics_summary.py" "$@"; }

# ours WORLD WIDTH BATCH [extra flags] -> the metrics summary (bench/metrics_summary.py):
# "samples/s ms/step wait_ms peak_MiB tokens/s mfu% data_wait% first_step_s peak_rss_MiB precision"
ours() {
  local world=$1 width=$2 batch=$3
  shift 3
  rm -f "$TMP/m.jsonl"
  rm -rf "$TMP"/ckpt*  # each run fresh: another run's checkpoints would stop it (Note [Run identity])
  local t0
  t0=$(now)
  "$BIN" launch --nproc_per_node "$world" --master_port 29544 train --dataset synthetic --image_size 32 \
    --width "$width" --batch_size "$batch" --epochs 1 --max_steps "$STEPS" --log_interval "$INTERVAL" \
    --num_workers 1 --save_every 0 --eval_every 0 --checkpoint_dir "$TMP/ckpt" --metrics_file "$TMP/m.jsonl" "$@" \
    > "$TMP/ours.log" 2>&1 || fail "$TMP/ours.log"
  summary "$TMP/m.jsonl" "$t0"
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

# two_nodes WIDTH BATCH [extra flags] -> node 0's metrics summary (as ours)
two_nodes() {
  local width=$1 batch=$2
  shift 2
  local node pids=() rc=0
  rm -f "$TMP/m.jsonl"
  rm -rf "$TMP"/ckpt*  # each run fresh: another run's checkpoints would stop it (Note [Run identity])
  for node in 1 0; do
    ip netns exec "${NETNS[$node]}" env GLOO_SOCKET_IFNAME=ddpbv$node "$BIN" launch --nnodes 2 --node_rank $node \
      --nproc_per_node 1 --master_addr 10.214.0.1 --master_port 29546 train --dataset synthetic --image_size 32 \
      --width "$width" --batch_size "$batch" --epochs 1 --max_steps "$STEPS" --log_interval "$INTERVAL" \
      --num_workers 1 --threads 1 --save_every 0 --eval_every 0 --checkpoint_dir "$TMP/ckpt$node" \
      --metrics_file "$TMP/m.jsonl" "$@" > "$TMP/node$node.log" 2>&1 &
    pids+=($!)
  done
  for node in "${pids[@]}"; do wait "$node" || rc=1; done
  [ $rc -eq 0 ] || fail "$TMP/node0.log" "$TMP/node1.log"
  summary "$TMP/m.jsonl"
}

# python_ddp WORLD WIDTH BATCH STEPS WARMUP [--channels_last] -> its log in $TMP/ref.log
python_ddp() {
  "$PY" "$ROOT/tests/python/torchrun_wrapper.py" --nproc_per_node "$1" --master_port 29545 \
    "$ROOT/bench/reference_ddp.py" --width "$2" --image_size 32 --batch_size "$3" --steps "$4" \
    --warmup "$5" --num_workers 1 ${6:-} > "$TMP/ref.log" 2>&1 || fail "$TMP/ref.log"
}
# python_sps WORLD WIDTH BATCH [--channels_last] -> samples/s
python_sps() {
  python_ddp "$1" "$2" "$3" "$STEPS" "$INTERVAL" ${4:-}
  grep -oE 'reference samples/s: [0-9.]+' "$TMP/ref.log" | awk '{print $3}'
}

# comm_row LABEL SAMPLES_S MS_STEP WAIT_MS [...]: a row of the exposed-communication tables, with
# the wait's share of the step (the header when MS_STEP is not a number).
comm_row() {
  local share=${5:-}
  [[ $3 =~ ^[0-9.]+$ ]] && share="$(awk -v w="$4" -v t="$3" 'BEGIN {printf "%.1f", 100 * w / t}')%"
  printf '%-28s %-10s %-9s %-14s %s\n' "$1" "$2" "$3" "$4" "$share"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "ddptrain $BUILD: LibTorch $("$PY" -c 'import torch; print(torch.__version__)') ($PY);" \
  "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
echo
echo "== 1. throughput: ddptrain vs Python DDP (samples/s, global, fp32, median of $ROUNDS interleaved rounds) =="
echo "ddptrain runs channels-last by default (Note [Channels last]); Python DDP as users run it"
echo "(NCHW), and with model.to(memory_format=torch.channels_last) for a like-for-like ratio"
printf '%-7s %-6s %-6s %-10s %-10s %-7s %-12s %s\n' world width batch ddptrain python ratio python-NHWC ratio
for cfg in "1 1.0 32" "2 1.0 32" "2 0.25 64"; do
  set -- $cfg
  os=() ps=() pcs=()
  for _ in $(seq "$ROUNDS"); do
    read -r o _ <<< "$(ours "$1" "$2" "$3" --no-use_amp)"
    os+=("$o") ps+=("$(python_sps "$1" "$2" "$3")") pcs+=("$(python_sps "$1" "$2" "$3" --channels_last)")
  done
  o=$(median "${os[@]}") p=$(median "${ps[@]}") pc=$(median "${pcs[@]}")
  printf '%-7s %-6s %-6s %-10s %-10s %-7s %-12s %s\n' "$1" "$2" "$3" "$o" "$p" "$(ratio "$o" "$p")" "$pc" "$(ratio "$o" "$pc")"
done

echo
echo "== 1b. start-up and memory (world 2, width 1.0, batch 32, fp32; median of $ROUNDS interleaved rounds) =="
echo "start-up: from launching the job to the end of rank 0's first optimizer step; peak RSS:"
echo "the largest VmHWM of the ranks (Python's loader worker processes not counted)"
o_up=() o_rss=() p_up=() p_rss=()
for _ in $(seq "$ROUNDS"); do
  read -r _ _ _ _ _ _ _ up rss _ <<< "$(STEPS=3 INTERVAL=1 ours 2 1.0 32 --no-use_amp)"
  o_up+=("$up") o_rss+=("$rss")
  t0=$(now)
  python_ddp 2 1.0 32 3 1
  p_up+=("$(grep -oE 'first_step_unix_time: [0-9.]+' "$TMP/ref.log" | awk -v t0="$t0" '{printf "%.2f", $2 - t0}')")
  p_rss+=("$(grep -oE 'peak_rss_mib: [0-9]+' "$TMP/ref.log" | awk '$2 > m {m = $2} END {print m}')")
done
printf '%-22s %-12s %-12s %s\n' "" ddptrain python ratio
printf '%-22s %-12s %-12s %s\n' "start-up to step 1 (s)" "$(median "${o_up[@]}")" "$(median "${p_up[@]}")" \
  "$(ratio "$(median "${o_up[@]}")" "$(median "${p_up[@]}")")"
printf '%-22s %-12s %-12s %s\n' "peak RSS per rank (MiB)" "$(median "${o_rss[@]}")" "$(median "${p_rss[@]}")" \
  "$(ratio "$(median "${o_rss[@]}")" "$(median "${p_rss[@]}")")"

echo
echo "== 2. exposed communication (world 2, width 1.0, batch 32, fp32) =="
comm_row mode samples/s ms/step "comm wait ms" "wait share"
for mode in "overlap --ddp_overlap" "after-backward --no-ddp_overlap"; do
  set -- $mode
  read -r s t w _ <<< "$(ours 2 1.0 32 --no-use_amp "$2")"
  comm_row "$1" "$s" "$t" "$w"
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
  # fp32 rows first (as earlier benches), then all defaults (auto precision and buckets).
  for mode in "after-backward,fp32 --no-ddp_overlap --no-use_amp" "overlap,25MiB,fp32 --bucket_cap_mb=25 --no-use_amp" \
    "overlap,1MiB,fp32 --bucket_cap_mb=1 --no-use_amp" "overlap,auto-buckets,fp32 --bucket_cap_mb=auto --no-use_amp" \
    "defaults(auto,auto) --amp_dtype=auto"; do
    set -- $mode
    label=$1
    shift
    read -r s t w _ <<< "$(two_nodes 1.0 32 "$@")"
    comm_row "$label" "$s" "$t" "$w"
  done
  grep -oE -- '--bucket_cap_mb auto: .*' "$TMP/node0.log" | head -1
  slow_link_down
  echo "(moving the bytes costs CPU here: Gloo's thread and the kernel's softirq take ~10% of the"
  echo " 2 cores while it runs, so the wait hidden under backward reappears as slower compute)"
fi

echo
echo "== 3. gradient accumulation K=4 (world 2, width 0.25, batch 64, fp32) =="
printf '%-28s %s\n' mode samples/s
for mode in "no_sync --accum_no_sync" "every-micro-batch --no-accum_no_sync"; do
  set -- $mode
  read -r s _ <<< "$(ours 2 0.25 64 --no-use_amp --grad_accum_steps 4 "$2")"
  printf '%-28s %s\n' "$1" "$s"
done

echo
echo "== 4. activation recompute (world 1, width 1.0, batch 128, fp32) =="
printf '%-10s %-10s %-9s %s\n' recompute samples/s ms/step "peak MiB (weights, grads, optimizer and activations)"
for mode in none blocks; do
  read -r s t _ m _ <<< "$(ours 1 1.0 128 --no-use_amp --activation_checkpointing "$mode")"
  printf '%-10s %-10s %-9s %s\n' "$mode" "$s" "$t" "$m"
done

echo
echo "== 5. precision on CPU (world 1, width 1.0, batch 32) =="
printf '%-22s %-10s %-9s %s\n' precision samples/s ms/step "trained in"
for mode in "fp32 --no-use_amp" "bf16-autocast --amp_dtype=bf16" "auto(default) --amp_dtype=auto"; do
  set -- $mode
  read -r s t _ _ _ _ _ _ _ prec <<< "$(ours 1 1.0 32 "$2")"
  printf '%-22s %-10s %-9s %s\n' "$1" "$s" "$t" "$prec"
done
grep -o 'precision: .*' "$TMP/ours.log" | head -1

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
  read -r s _ _ _ _ _ dw _ <<< "$(ours 2 0.25 64 --dataset "$ds")"
  awk -v ds="$ds" -v s="$s" -v w="$dw" 'BEGIN {printf "trainer on %s: %.0f samples/s global (%.0f per rank), data wait %.1f%% of the step (1 loader thread)\n", ds, s, s/2, w}'
done

echo
echo "== 7. GPT debug preset on text (world 2, batch 8, block 64) =="
printf '%-16s %-12s %-10s %-8s %s\n' precision tokens/s ms/step MFU "trained in"
for mode in "fp32 --no-use_amp" "bf16 --amp_dtype=bf16" "auto(default) --amp_dtype=auto"; do
  set -- $mode
  rm -f "$TMP/m.jsonl"
  rm -rf "$TMP"/ckpt*  # each run fresh: another run's checkpoints would stop it (Note [Run identity])
  "$BIN" launch --nproc_per_node 2 --master_port 29544 train --model gpt --gpt_preset debug --dataset text \
    --data_path /usr/share/common-licenses/GPL-3 --batch_size 8 --optimizer adamw --lr 3e-3 --epochs 1 \
    --max_steps "$STEPS" --log_interval "$INTERVAL" --num_workers 1 --save_every 0 --eval_every 0 \
    --checkpoint_dir "$TMP/ckpt" --metrics_file "$TMP/m.jsonl" "$2" > "$TMP/gpt.log" 2>&1 || fail "$TMP/gpt.log"
  read -r _ t _ _ tok mfu _ _ _ prec <<< "$(summary "$TMP/m.jsonl")"
  printf '%-16s %-12s %-10s %-8s %s\n' "$1" "$tok" "$t" "$mfu%" "$prec"
done

echo
echo "== 8. accuracy: MiniResNet width 0.25 on Fashion-MNIST, world 2, batch 64 per rank, lr 0.05 =="
accuracy() {
  local name=$1
  shift
  local t0=$SECONDS
  rm -f "$TMP/acc.jsonl"
  rm -rf "$TMP"/ckpt*  # each run fresh: another run's checkpoints would stop it (Note [Run identity])
  "$BIN" launch --nproc_per_node 2 --master_port 29544 train --dataset fashion-mnist --width 0.25 --lr 0.05 \
    --batch_size 64 --num_workers 1 --log_interval 1000 --save_every 0 --checkpoint_dir "$TMP/ckpt" \
    --metrics_file "$TMP/acc.jsonl" "$@" > "$TMP/acc.log" 2>&1 || fail "$TMP/acc.log"
  local acc
  acc=$(python3 -c 'import json, sys
r = [json.loads(line) for line in open(sys.argv[1])]
print([e for e in r if "test_acc" in e][-1]["test_acc"], r[0]["precision"])' "$TMP/acc.jsonl")
  printf '%-34s test acc %s, %d s wall, trained in %s\n' "$name" "${acc% *}" $((SECONDS - t0)) "${acc#* }"
}
accuracy "1 epoch (make run)" --epochs 1
if [ "${BENCH_ACCURACY:-}" = full ]; then
  accuracy "15 epochs --augment (recommended)" --epochs 15 --augment --eval_every 5
else
  echo "(BENCH_ACCURACY=full adds the recommended 15-epoch run with --augment)"
fi

echo
echo "== 9. the library: examples/ddp_loop.cpp (DDP + DistributedSampler) vs dist-mnist.cpp's averaging =="
echo "   (pytorch/examples' approach, bench/dist_mnist_style.cpp; same MLP, data, loader and batch 64/rank;"
echo "    world 2, 500 steps, $ROUNDS interleaved rounds)"
FASHION=/usr/share/datasets/fashion-mnist
lib_sps() {  # lib_sps PROGRAM [args] -> samples/s
  "$BIN" launch --nproc_per_node 2 --master_port 29544 "$@" > "$TMP/lib.log" 2>&1 || fail "$TMP/lib.log"
  grep -o '[0-9]* samples/s' "$TMP/lib.log" | tail -1 | cut -d' ' -f1
}
ddp_runs=() mnist_runs=()
for _ in $(seq "$ROUNDS"); do
  ddp_runs+=("$(lib_sps "$ROOT/$BUILD/bench_ddp_loop" "$FASHION" 500)")
  mnist_runs+=("$(lib_sps "$ROOT/$BUILD/bench_dist_mnist_style" "$FASHION" 500)")
done
printf '%-34s %s samples/s (runs: %s)\n' "ddp_loop (ddptrain DDP)" "$(median "${ddp_runs[@]}")" "${ddp_runs[*]}"
printf '%-34s %s samples/s (runs: %s)\n' "dist-mnist style" "$(median "${mnist_runs[@]}")" "${mnist_runs[*]}"
"$BIN" launch --nproc_per_node 2 --master_port 29544 "$ROOT/$BUILD/bench_dist_mnist_style" "$FASHION" 300 --check \
  > "$TMP/lib.log" 2>&1 || fail "$TMP/lib.log"
echo "dist-mnist style: $(grep -o 'gradients equal.*' "$TMP/lib.log")"

echo
echo "== 10. a model scripted in Python: MiniResNet width 0.25 scripted (--model torchscript) =="
echo "   (world 2, batch 64/rank, 1 thread and 1 loader worker per rank, fp32, NCHW; $ROUNDS interleaved rounds)"
"$PY" "$ROOT/tests/python/script_model.py" save_mini_resnet "$TMP/mini_resnet.pt" 0.25
script_python_sps() {
  "$PY" "$ROOT/tests/python/torchrun_wrapper.py" --nproc_per_node 2 --master_port 29545 \
    "$ROOT/tests/python/script_ddp.py" "$TMP/mini_resnet.pt" "$TMP/python.pt" --steps "$STEPS" \
    --warmup "$INTERVAL" --batch_size 64 --image_size 32 --dataset_size 50000 --threads 1 --num_workers 1 \
    > "$TMP/ref.log" 2>&1 || fail "$TMP/ref.log"
  grep -oE 'python samples/s: [0-9.]+' "$TMP/ref.log" | awk '{print $3}'
}
builtin_runs=() script_runs=() script_py_runs=()
for _ in $(seq "$ROUNDS"); do
  builtin_runs+=("$(ours 2 0.25 64 --no-use_amp --memory_format contiguous | cut -d' ' -f1)")
  script_runs+=("$(ours 2 1.0 64 --no-use_amp --model torchscript --model_path "$TMP/mini_resnet.pt" | cut -d' ' -f1)")
  script_py_runs+=("$(script_python_sps)")
done
b=$(median "${builtin_runs[@]}") s=$(median "${script_runs[@]}") p=$(median "${script_py_runs[@]}")
printf '%-40s %8s samples/s (runs: %s)\n' "ddptrain, built-in MiniResNet (NCHW)" "$b" "${builtin_runs[*]}"
printf '%-40s %8s samples/s (runs: %s) = %sx built-in\n' "ddptrain, scripted MiniResNet" "$s" "${script_runs[*]}" \
  "$(ratio "$s" "$b")"
printf '%-40s %8s samples/s (runs: %s); ddptrain = %sx\n' "Python DDP, the same scripted file" "$p" \
  "${script_py_runs[*]}" "$(ratio "$s" "$p")"

echo
echo "== 11. ZeRO: GPT small, AdamW, --amp_dtype auto, batch 4/rank, 1 thread per rank =="
zero_row() {  # zero_row WORLD STAGE: a row of the table
  rm -f "$TMP/z.jsonl"
  rm -rf "$TMP"/ckpt*
  "$BIN" launch --nproc_per_node "$1" --master_port 29544 train --model gpt --gpt_preset small --dataset tokens \
    --dataset_size 100000 --batch_size 4 --optimizer adamw --lr 3e-4 --max_steps "$STEPS" --log_interval "$INTERVAL" \
    --num_workers 1 --threads 1 --save_every 0 --eval_every 0 --checkpoint_dir "$TMP/ckpt" \
    --metrics_file "$TMP/z.jsonl" --zero_stage "$2" > "$TMP/zero.log" 2>&1 || fail "$TMP/zero.log"
  python3 - "$TMP/z.jsonl" "$1" "$2" << 'PY'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "step"][1:]
last = steps[-1]
sps = sum(s["samples_per_s"] for s in steps) / len(steps)
print(f"{sys.argv[2]:>5} {sys.argv[3]:>5} {sps:>10.1f} {last['param_mib']:>8.1f} {last['grad_mib']:>8.1f} "
      f"{last['optim_mib']:>8.1f} {max(s['peak_mem_mib'] for s in steps):>9.0f}")
PY
}
printf '%5s %5s %10s %8s %8s %8s %9s\n' world stage samples/s params grads optim peak_MiB
for world in 2 4; do
  for stage in 0 1 2 3; do zero_row "$world" "$stage"; done
done

echo
echo "== 12. flight recorder (Note [Flight recorder]): MiniResNet width 0.25, world 2, batch 64/rank, fp32, $ROUNDS interleaved rounds =="
on_runs=() off_runs=()
for _ in $(seq "$ROUNDS"); do
  on_runs+=("$(ours 2 0.25 64 --no-use_amp --threads 1 --flight_recorder 64 | cut -d' ' -f1)")
  off_runs+=("$(ours 2 0.25 64 --no-use_amp --threads 1 --flight_recorder 0 | cut -d' ' -f1)")
done
on=$(median "${on_runs[@]}") off=$(median "${off_runs[@]}")
printf '%-28s %s samples/s (runs: %s)\n' "--flight_recorder 64" "$on" "${on_runs[*]}"
printf '%-28s %s samples/s (runs: %s)\n' "--flight_recorder 0" "$off" "${off_runs[*]}"
python3 -c "import sys; on, off = map(float, sys.argv[1:]); print(f'cost of the recorder: {100 * (off - on) / off:+.1f}% of throughput')" "$on" "$off"

echo
LIMIT=${BENCH_LIMIT_MIB:-1536}
echo "== 13. ZeRO under a memory limit: world 4, each rank in a memory cgroup of $LIMIT MiB; GPT n_embd 768, 12 heads, context 64, AdamW, batch 2/rank, 1 thread per rank: the largest --n_layer that trains 3 steps =="
if [ "$(id -u)" != 0 ] || ! { [ -w /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ]; }; then
  echo "skipped: needs root and a writable cgroup file system (bench/in_cgroup.sh)"
else
  # remove_cgroups -> the largest peak usage of the ranks' cgroups, MiB (what the limit bounds)
  remove_cgroups() {
    local peak=0 v d
    for d in /sys/fs/cgroup/memory/ddptrain_bench_* /sys/fs/cgroup/ddptrain_bench_*; do
      [ -d "$d" ] || continue
      v=$(cat "$d/memory.max_usage_in_bytes" 2> /dev/null || cat "$d/memory.peak" 2> /dev/null || echo 0)
      [ "$v" -gt "$peak" ] && peak=$v
      rmdir "$d" 2> /dev/null || true
    done
    echo $(( peak / 1048576 ))
  }
  limit_row() {  # limit_row STAGE N_LAYER: a row; returns 1 when the size did not train
    rm -f "$TMP/l.jsonl"
    rm -rf "$TMP"/ckpt*
    local rc=0
    "$BIN" launch --nproc_per_node 4 --master_port 29546 --kill_grace_s 2 "$ROOT/bench/in_cgroup.sh" "$LIMIT" "$BIN" train \
      --model gpt --gpt_preset small --n_embd 768 --n_head 12 --block_size 64 --n_layer "$2" --dataset tokens \
      --dataset_size 2000 --batch_size 2 --optimizer adamw --max_steps 3 --log_interval 1 --num_workers 1 --threads 1 \
      --save_every 0 --eval_every 0 --checkpoint_dir "$TMP/ckpt" --metrics_file "$TMP/l.jsonl" --zero_stage "$1" \
      > "$TMP/limit.log" 2>&1 || rc=$?
    local peak
    peak=$(remove_cgroups)
    python3 - "$TMP/l.jsonl" "$1" "$2" "$rc" "$TMP/limit.log" "$peak" << 'PY'
import json, os, sys
path, stage, layers, rc, log, peak = sys.argv[1:]
records = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
steps = [r for r in records if r.get("kind") == "step"]
params = 12 * int(layers) * 768 * 768 / 1e6
if rc != "0" or not steps:
    why = "OOM-killed" if "signal 9" in open(log).read() else f"failed (exit {rc}; see the log)"
    print(f"{stage:>5} {layers:>7} {params:>8.0f}M  {why} (cgroup peak {peak} MiB)")
    sys.exit(1)
last = steps[-1]
print(f"{stage:>5} {layers:>7} {params:>8.0f}M  trains: params {last['param_mib']:.0f} grads {last['grad_mib']:.0f} "
      f"optim {last['optim_mib']:.0f} MiB per rank, cgroup peak {peak} MiB, {last['samples_per_s']:.2f} samples/s")
PY
  }
  printf '%5s %7s %9s  %s\n' stage n_layer ~params result
  for stage in 0 3; do
    for layers in 1 2 4 6 8 12 16 24; do limit_row "$stage" "$layers" || break; done
  done
fi

echo
echo "== 14. image folder: 1,024 JPEGs ~500x375 q90, RandomResizedCrop 224 + flip, batch 64, 2 workers, $ROUNDS interleaved rounds =="
WHEEL_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/ddptrain/bench-photos"
if ! ls "$WHEEL_DIR"/scikit_image-*.whl > /dev/null 2>&1; then
  mkdir -p "$WHEEL_DIR"
  "$PY" -m pip download --quiet --no-deps --disable-pip-version-check scikit-image==0.26.0 -d "$WHEEL_DIR" \
    > "$TMP/wheel.log" 2>&1 || fail "$TMP/wheel.log"
fi
"$PY" "$ROOT/bench/image_loader.py" prepare "$(ls "$WHEEL_DIR"/scikit_image-*.whl | head -1)" "$TMP/images" 1024 \
  > "$TMP/prep.log" 2>&1 || fail "$TMP/prep.log"
# The same JPEGs as WebDataset shards (4 of 256 samples: tests/python/wds.py).
mkdir -p "$TMP/shards"
"$PY" "$ROOT/tests/python/wds.py" from_folder "$TMP/images/train" "$TMP/shards/train" 256 > "$TMP/wds.log" 2>&1 ||
  fail "$TMP/wds.log"
printf '%-6s %-18s %-18s %-24s %s\n' round "folder images/s" "shards images/s" "PyTorch DataLoader+PIL" "ratio (folder)"
for r in $(seq 1 "$ROUNDS"); do
  "$BIN" inspect loader --dataset image_folder --data_dir "$TMP/images" --augment --num_workers 2 --batch_size 64 \
    --batches 16 > "$TMP/il.log" 2>&1 || fail "$TMP/il.log"
  ours_ips=$(grep -oE '[0-9]+ samples/s' "$TMP/il.log" | awk '{print $1}')
  "$BIN" inspect loader --dataset webdataset --data_path "$TMP/shards/train-*.tar" --augment --num_workers 2 \
    --batch_size 64 --batches 16 > "$TMP/wl.log" 2>&1 || fail "$TMP/wl.log"
  shards_ips=$(grep -oE '[0-9]+ samples/s' "$TMP/wl.log" | awk '{print $1}')
  theirs_ips=$("$PY" "$ROOT/bench/image_loader.py" pytorch "$TMP/images" 64 2 15 2> "$TMP/pt.log") || fail "$TMP/pt.log"
  awk -v r="$r" -v a="$ours_ips" -v w="$shards_ips" -v b="$theirs_ips" \
    'BEGIN {printf "%-6s %-18.0f %-18.0f %-24.0f %.2fx\n", r, a, w, b, a / b}'
done
echo "the shards (1,024 samples in 4 tar files) indexed in $(grep -oE 'opened in [0-9.]+ s' "$TMP/wl.log" | awk '{print $3}') s"
# At 64 (MiniResNet has no downsampling stem: 124 GFLOP a sample at 224, 85 s a step here).
read -r s _ _ _ _ _ dw _ <<< "$(ours 1 1.0 32 --dataset image_folder --data_dir "$TMP/images" --image_size 64 \
  --augment --threads 2 --max_steps 12 --log_interval 4)"
awk -v s="$s" -v w="$dw" 'BEGIN {printf "MiniResNet width 1.0 at 64 on the folder: %.1f samples/s, data wait %.1f%% of the step (1 loader thread)\n", s, w}'

echo
echo "== 15. token shards: 128M random tokens (256 MiB, nanoGPT's uint16 .bin, in the page cache), $ROUNDS interleaved rounds =="
"$PY" -c "import numpy as np; np.random.default_rng(0).integers(0, 50257, 128 << 20, dtype=np.uint16).tofile('$TMP/train.bin')" \
  > "$TMP/tok.log" 2>&1 || fail "$TMP/tok.log"
# gpt_sps [data flags]: GPT debug at block 256, vocabulary 50,257, world 1 -> samples/s
gpt_sps() {
  rm -f "$TMP/m.jsonl"
  rm -rf "$TMP"/ckpt*
  "$BIN" train --model gpt --gpt_preset debug --block_size 256 --vocab_size 50257 --batch_size 8 --optimizer adamw \
    --lr 3e-4 --epochs 1 --max_steps "$STEPS" --log_interval "$INTERVAL" --num_workers 1 --save_every 0 \
    --eval_every 0 --checkpoint_dir "$TMP/ckpt" --metrics_file "$TMP/m.jsonl" "$@" > "$TMP/gpt.log" 2>&1 ||
    fail "$TMP/gpt.log"
  summary "$TMP/m.jsonl" | awk '{print $1}'
}
printf '%-6s %-30s %-24s %s\n' round "loader alone, 1 thread" "GPT on the shards" "GPT on synthetic tokens"
for r in $(seq 1 "$ROUNDS"); do
  "$BIN" inspect loader --dataset token_shards --data_path "$TMP/train.bin" --block_size 1024 --vocab_size 50257 \
    --batch_size 16 --num_workers 1 --batches 3000 > "$TMP/tl.log" 2>&1 || fail "$TMP/tl.log"
  mtok=$(grep -oE '[0-9]+ tokens/s' "$TMP/tl.log" | awk '{printf "%.0f", $1 / 1e6}')
  shards=$(gpt_sps --dataset token_shards --data_path "$TMP/train.bin")
  synthetic=$(gpt_sps --dataset tokens)
  printf '%-6s %-30s %-24s %s\n' "$r" "$mtok M tokens/s" "$shards samples/s" "$synthetic samples/s"
done

echo
echo "== 16. Llama against GPT at GPT-2 124M's sizes (block 256, batch 2, world 1, fp32, AdamW), $ROUNDS interleaved rounds =="
# decoder_tps MODEL [flags] -> tokens/s (training, after the first log interval)
decoder_tps() {
  local model=$1
  shift
  rm -f "$TMP/m.jsonl"
  rm -rf "$TMP"/ckpt*
  "$BIN" train --model "$model" --gpt_preset gpt2-124m --block_size 256 --dataset tokens --batch_size 2 \
    --optimizer adamw --lr 3e-4 --epochs 1 --max_steps 9 --log_interval 3 --num_workers 1 --no-use_amp \
    --save_every 0 --eval_every 0 --checkpoint_dir "$TMP/ckpt" --metrics_file "$TMP/m.jsonl" "$@" > "$TMP/dec.log" 2>&1 ||
    fail "$TMP/dec.log"
  summary "$TMP/m.jsonl" | awk '{print $5}'
}
# flops MODEL [flags] -> training FLOPs per token at block 256 (ddptrain inspect model)
flops() {
  "$BIN" inspect model --model "$@" --gpt_preset gpt2-124m --block_size 256 |
    sed -n 's/^training FLOPs per token.*: \([0-9]*\) .*/\1/p'
}
gpt_flops=$(flops gpt)
tied_flops=$(flops llama --tie_embeddings)
untied_flops=$(flops llama)
echo "training FLOPs per token: gpt $gpt_flops, llama tied $tied_flops (123.6M parameters, as GPT-2's 124.4M), llama untied $untied_flops (162.1M)"
printf '%-6s %-14s %-18s %-20s %-22s %s\n' round "gpt tokens/s" "llama tied tok/s" "llama untied tok/s" \
  "tied/gpt FLOP/s" "untied/gpt FLOP/s"
for r in $(seq 1 "$ROUNDS"); do
  g=$(decoder_tps gpt)
  t=$(decoder_tps llama --tie_embeddings)
  u=$(decoder_tps llama)
  awk -v r="$r" -v g="$g" -v t="$t" -v u="$u" -v gf="$gpt_flops" -v tf="$tied_flops" -v uf="$untied_flops" \
    'BEGIN {printf "%-6s %-14.0f %-18.0f %-20.0f %-22.3f %.3f\n", r, g, t, u, (t * tf) / (g * gf), (u * uf) / (g * gf)}'
done

echo
echo "== 17. loading a Hugging Face Llama folder of about 1 GiB (fp32, one model.safetensors, in the page cache) =="
if ! "$PY" -c "import transformers" > /dev/null 2>&1; then
  echo "skipped: $PY has no transformers (scripts/install_deps.sh test installs it for pip's torches)"
else
  "$PY" -c "
import torch, transformers as tf
torch.manual_seed(0)
c = tf.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=16,
                   num_attention_heads=16, max_position_embeddings=256)
tf.LlamaForCausalLM(c).save_pretrained('$TMP/big', max_shard_size='50GB')
" > "$TMP/big.log" 2>&1 || fail "$TMP/big.log"
  file="$TMP/big/model.safetensors"
  cat "$file" > /dev/null
  mib=$(($(stat -c %s "$file") >> 20))
  printf '%-6s %-22s %s\n' round "cat > /dev/null MiB/s" "ddptrain --init_from_hf MiB/s"
  for r in $(seq 1 "$ROUNDS"); do
    t0=$(now)
    cat "$file" > /dev/null
    t1=$(now)
    rm -rf "$TMP"/ckpt*
    "$BIN" train --init_from_hf "$TMP/big" --dataset tokens --block_size 64 --batch_size 1 --max_steps 1 \
      --num_workers 1 --save_every 0 --eval_every 0 --checkpoint_dir "$TMP/ckpt" > "$TMP/load.log" 2>&1 ||
      fail "$TMP/load.log"
    read -r read_mib ms <<< "$(sed -n 's/.*initial weights from .* tensors, \([0-9]*\) MiB of weights read in \([0-9]*\) ms.*/\1 \2/p' "$TMP/load.log")"
    awk -v r="$r" -v m="$mib" -v a="$t0" -v b="$t1" -v rm="$read_mib" -v ms="$ms" \
      'BEGIN {printf "%-6s %-22.0f %.0f (%d MiB in %d ms)\n", r, m / (b - a), rm / (ms / 1000), rm, ms}'
  done
fi

echo
echo "== 18. the optimizer step on CPU: fused against the loop (GPT at GPT-2 124M's sizes, clip 1.0), $ROUNDS interleaved rounds =="
# opt_ms OPTIMIZER FUSED -> ms of the optimizer phase per step (after the first log interval)
opt_ms() {
  rm -f "$TMP/m.jsonl"
  rm -rf "$TMP"/ckpt*
  "$BIN" train --model gpt --gpt_preset gpt2-124m --block_size 64 --dataset tokens --batch_size 1 \
    --optimizer "$1" --fused_optimizer "$2" --clip_grad_norm 1.0 --lr 3e-4 --epochs 1 --max_steps 12 \
    --log_interval 3 --num_workers 1 --no-use_amp --save_every 0 --eval_every 0 --checkpoint_dir "$TMP/ckpt" \
    --metrics_file "$TMP/m.jsonl" > "$TMP/opt.log" 2>&1 || fail "$TMP/opt.log"
  python3 -c "
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r['kind'] == 'step'][1:]
print(sum(r['opt_ms'] for r in steps) / len(steps))" "$TMP/m.jsonl"
}
printf '%-6s %-16s %-16s %-12s %-16s %-16s %s\n' round "adamw loop ms" "adamw fused ms" "loop/fused" \
  "sgd loop ms" "sgd fused ms" "loop/fused"
for r in $(seq 1 "$ROUNDS"); do
  al=$(opt_ms adamw off)
  af=$(opt_ms adamw on)
  sl=$(opt_ms sgd off)
  sf=$(opt_ms sgd on)
  awk -v r="$r" -v al="$al" -v af="$af" -v sl="$sl" -v sf="$sf" \
    'BEGIN {printf "%-6s %-16.1f %-16.1f %-12.2f %-16.1f %-16.1f %.2f\n", r, al, af, al / af, sl, sf, sl / sf}'
done

echo
echo "== 19. ZeRO-3 at world 4 loading section 17's folder: a rank's peak while building, reading and sharding =="
if [ ! -f "$TMP/big/model.safetensors" ]; then
  echo "skipped: no folder from section 17"
else
  # load_peak MODEL_FLAGS... -> "tensors_mib rss_mib" of rank 0 (the run record)
  load_peak() {
    rm -rf "$TMP"/ckpt* "$TMP/m.jsonl"
    "$BIN" launch --nproc_per_node 4 --master_port 29571 train "$@" --dataset tokens --block_size 64 \
      --batch_size 1 --max_steps 1 --num_workers 0 --threads 1 --save_every 0 --eval_every 0 --optimizer sgd \
      --zero_stage 3 --checkpoint_dir "$TMP/ckpt" --metrics_file "$TMP/m.jsonl" > "$TMP/z3.log" 2>&1 ||
      fail "$TMP/z3.log"
    python3 -c "
import json, sys
r = next(r for r in map(json.loads, open(sys.argv[1])) if r['kind'] == 'run')
print(round(r['load_peak_mem_mib']), round(r['load_peak_rss_mib']))" "$TMP/m.jsonl"
  }
  read -r t rss <<< "$(load_peak --init_from_hf "$TMP/big")"
  read -r _ empty_rss <<< "$(load_peak --model gpt --gpt_preset debug)"
  read -r shard layer <<< "$(python3 -c "
import json, sys
c = json.load(open(sys.argv[1]))
C, I, L, V = c['hidden_size'], c['intermediate_size'], c['num_hidden_layers'], c['vocab_size']
kv = C // c['num_attention_heads'] * c.get('num_key_value_heads', c['num_attention_heads'])
layer = 2 * C * C + 2 * C * kv + 3 * C * I + 2 * C
total = L * layer + V * C * (1 if c.get('tie_word_embeddings') else 2) + C
print(round(total * 4 / 4 / 2**20), round(layer * 4 / 2**20))" "$TMP/big/config.json")"
  printf '%-24s %-20s %-22s %-18s %s\n' "tensors peak MiB" "resident peak MiB" "empty process MiB" \
    "shard + layer MiB" "goal 1.5 x (shard + layer) MiB"
  awk -v t="$t" -v r="$rss" -v e="$empty_rss" -v s="$shard" -v l="$layer" \
    'BEGIN {printf "%-24d %-20d %-22d %-18s %d\n", t, r, e, s " + " l, 1.5 * (s + l)}'
fi
