#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU and pip's torch 2.x (the device tool's
# machine), in one command: build ddptrain with all cores against that torch (CUDA and NCCL
# compiled in), run the CUDA tests, then measure and write OUTDIR/gpu_report.json:
#   - MiniResNet width 1.0, batch 256, synthetic 32x32, world 1 over NCCL: samples/s and MFU
#     in fp32, bf16 and fp16 + GradScaler; peak memory with and without recompute (bf16);
#   - the same configurations with PyTorch's Python DDP (bench/reference_ddp.py): the
#     samples/s ratio ddptrain / Python;
#   - GPT gpt2-124m, bf16, block 1024, the largest batch of 64, 32, 16, 8 that fits:
#     tokens/s and MFU.
# Anything that does not work stops the script with a non-zero exit and a message saying
# what; nothing is skipped. Logs of every run are in OUTDIR.
# Usage: scripts/gpu-check.sh OUTDIR
#   where the machine lacks nlohmann-json, toml++, GoogleTest, Gloo's headers or zlib (no
#   apt there), run scripts/gpu_deps.sh here first and carry .gpudeps:
#   device run: carry [".gpudeps"], command "scripts/gpu-check.sh $OUT"
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/gpu-check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
BUILD=${BUILD:-build-gpu}
STEPS=${GPU_CHECK_STEPS:-60}
T0=$SECONDS
die() { echo "gpu-check: FAILED: $*" >&2; exit 1; }
stage() { echo "gpu-check: [$((SECONDS - T0)) s] $*"; }

stage "machine"
nvidia-smi -L || die "nvidia-smi found no GPU"
$PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda,
  torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO CUDA"); sys.exit(0 if torch.cuda.is_available() else 1)' ||
  die "$PY's torch sees no CUDA device"

stage "build (all $(nproc) cores)"
prefix=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
if [ -d .gpudeps ]; then
  prefix="$prefix;$PWD/.gpudeps"
  export CPATH="$PWD/.gpudeps/include${CPATH:+:$CPATH}"
fi
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DDDPTRAIN_PYTHON="$PY" \
  >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; die "cmake configure (log: $OUT/configure.log)"; }
grep -q "CUDA/NCCL code paths: compiled in" "$OUT/configure.log" || die "this torch has no CUDA libraries (configure.log)"
cmake --build "$BUILD" -j "$(nproc)" --target ddptrain ddptrain_cuda_tests >"$OUT/build.log" 2>&1 ||
  { grep -m 20 -A 5 "error" "$OUT/build.log"; die "build (log: $OUT/build.log)"; }
BUILD_S=$((SECONDS - T0))

stage "CUDA tests"
"$BUILD/ddptrain_cuda_tests" 2>&1 | tee "$OUT/cuda_tests.log" | grep -E "^\[ +(OK|FAILED) |CUDA peak|PASSED|FAILED" ||
  true
grep -q "\[  PASSED  \]" "$OUT/cuda_tests.log" && ! grep -q "\[  FAILED  \]" "$OUT/cuda_tests.log" ||
  die "CUDA tests (log: $OUT/cuda_tests.log)"

port=29600
# ddptrain NAME ARGS...: one training run under the launcher (world 1, NCCL), its metrics in
# OUT/NAME.jsonl; non-zero exit is fatal unless ALLOW_FAIL=1 (then returns 1).
ddptrain_run() {
  local name=$1; shift
  port=$((port + 1))
  rm -f "$OUT/$name.jsonl"
  if "$BUILD/ddptrain" launch --nproc_per_node 1 --master_port $port train --backend nccl --eval_every 0 \
      --save_every 0 --checkpoint_dir "/tmp/gpu-check-$name" --metrics_file "$OUT/$name.jsonl" "$@" \
      >"$OUT/$name.log" 2>&1; then
    return 0
  fi
  [ "${ALLOW_FAIL:-0}" = 1 ] && return 1
  tail -20 "$OUT/$name.log"
  die "ddptrain run $name (log: $OUT/$name.log)"
}
resnet=(--dataset synthetic --width 1.0 --image_size 32 --batch_size 256 --num_workers 8 --max_steps "$STEPS"
        --log_interval 20)
stage "ddptrain MiniResNet fp32 / bf16 / fp16 + GradScaler / bf16 + recompute"
ddptrain_run resnet_fp32 "${resnet[@]}" --no-use_amp
ddptrain_run resnet_bf16 "${resnet[@]}" --amp_dtype bf16
ddptrain_run resnet_fp16 "${resnet[@]}" --amp_dtype fp16
grep -q "loss scale" "$OUT/resnet_fp16.log" || die "fp16 ran without the GradScaler (resnet_fp16.log)"
ddptrain_run resnet_bf16_recompute "${resnet[@]}" --amp_dtype bf16 --activation_checkpointing blocks

stage "Python DDP, the same configurations"
py_run() {
  local name=$1; shift
  port=$((port + 1))
  $PY -m torch.distributed.run --nproc_per_node 1 --master_port $port bench/reference_ddp.py --device cuda \
      --width 1.0 --image_size 32 --batch_size 256 --num_workers 8 --steps "$STEPS" --warmup 20 "$@" \
      >"$OUT/$name.log" 2>&1 || { tail -20 "$OUT/$name.log"; die "Python DDP run $name (log: $OUT/$name.log)"; }
  grep -q "reference samples/s" "$OUT/$name.log" || die "Python DDP run $name printed no samples/s"
}
py_run python_fp32 --amp none
py_run python_bf16 --amp bf16
py_run python_fp16 --amp fp16

stage "GPT gpt2-124m bf16, block 1024: the largest batch that fits"
GPT_BATCH=0
for b in 64 32 16 8; do
  if ALLOW_FAIL=1 ddptrain_run "gpt_b$b" --model gpt --gpt_preset gpt2-124m --dataset tokens --dataset_size 100000 \
      --batch_size $b --amp_dtype bf16 --optimizer adamw --lr 6e-4 --warmup_steps 10 --max_steps 40 \
      --log_interval 10 --num_workers 4; then
    GPT_BATCH=$b
    break
  fi
  grep -qi "out of memory" "$OUT/gpt_b$b.log" || { tail -20 "$OUT/gpt_b$b.log"; die "GPT batch $b failed, not by running out of memory"; }
  echo "gpu-check: GPT batch $b does not fit; trying a smaller one"
done
[ "$GPT_BATCH" -gt 0 ] || die "GPT gpt2-124m does not fit even at batch 8"

stage "report"
$PY - "$OUT" "$GPT_BATCH" "$BUILD_S" "$((SECONDS - T0))" <<'PYEOF'
import json, re, sys, torch
out, gpt_batch, build_s, total_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def steps(name):
    recs = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if l.strip()]
    s = [r for r in recs if r.get("kind", r.get("type")) == "step" or "samples_per_s" in r]
    if len(s) < 2:
        raise SystemExit(f"gpu-check: FAILED: {name}.jsonl has {len(s)} step records")
    return s[1:]  # the first interval includes start-up

def mean(xs):
    return sum(xs) / len(xs)

def summary(name):
    s = steps(name)
    r = {"samples_per_s": mean([x["samples_per_s"] for x in s]), "mfu": mean([x["mfu"] for x in s]),
         "peak_mem_mib": max(x["peak_mem_mib"] for x in s), "ms_per_step": mean([x["ms_per_step"] for x in s])}
    if "tokens_per_s" in s[0]:
        r["tokens_per_s"] = mean([x["tokens_per_s"] for x in s])
    return r

def python_sps(name):
    m = re.search(r"reference samples/s: ([0-9.]+)", open(f"{out}/{name}.log").read())
    return float(m.group(1))

rep = {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none", "torch": torch.__version__, "build_s": build_s, "cuda_tests": "passed"}
rep["mini_resnet_w1_b256"] = {p: summary(f"resnet_{p}") for p in ["fp32", "bf16", "fp16", "bf16_recompute"]}
rep["python_ddp_samples_per_s"] = {p: python_sps(f"python_{p}") for p in ["fp32", "bf16", "fp16"]}
rep["ratio_ddptrain_over_python"] = {p: rep["mini_resnet_w1_b256"][p]["samples_per_s"] / rep["python_ddp_samples_per_s"][p]
                                     for p in ["fp32", "bf16", "fp16"]}
rep["gpt2_124m_bf16_block1024"] = dict(summary(f"gpt_b{gpt_batch}"), batch=gpt_batch)
rep["total_s"] = total_s
json.dump(rep, open(f"{out}/gpu_report.json", "w"), indent=2)
print(json.dumps(rep, indent=2))
PYEOF
stage "done: $OUT/gpu_report.json"
