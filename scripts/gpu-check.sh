#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU and pip's torch 2.x (the device tool's
# machine), in one command: check the toolchain, build ddptrain with all cores against that
# torch (CUDA and NCCL compiled in), run the CUDA tests, then measure and write
# OUTDIR/gpu_report.json:
#   - first (#27), GPT gpt2-124m, bf16, block 1024, batch 64, AdamW, clip 1.0: a run with
#     --enable_profiling whose kernel trace (3 steps) becomes the table of GPU time by kind of
#     work and the top kernels (scripts/profile_table.py); PyTorch's nanoGPT-style module eager
#     and torch.compile (bench/nanogpt.py: fused AdamW, padded vocabulary) interleaved with two
#     ddptrain runs (medians, ratios); the levers against their "before" (--vocab_multiple 1,
#     --fused_optimizer off, --fused_loss off); two runs with --deterministic (its cost, and
#     whether runs repeat bitwise with it and without); GPU_CHECK_DRY=1 rehearses these stages
#     on a CPU at tiny sizes;
#   - (#31) Llama at GPT-2 124M's sizes on the same flags: its MFU beside GPT's;
#   - MiniResNet width 1.0, batch 256, synthetic 32x32, world 1 over NCCL: samples/s and MFU
#     in fp32, bf16 and fp16 + GradScaler; peak memory with and without recompute (bf16); a
#     profiled bf16 run (the same table, rehearsed at tiny sizes too);
#   - the same configurations with PyTorch's Python DDP (bench/reference_ddp.py), interleaved
#     pair by pair in the same memory format (bf16 channels_last and NCHW; fp32 and fp16 NCHW):
#     samples/s ratios;
#   - GPT gpt2-124m at batch 64 with --zero_stage 1, 2 and 3 (NCCL all_gather and
#     reduce_scatter; the memory each rank holds).
# Every stage runs under `timeout`, clamped to what is left of the whole check's budget
# (GPU_CHECK_BUDGET_S, default 540 s, minus a reserve for the report), so the evidence comes
# back inside the device tool's limit even when a stage hangs; a failed stage is recorded and
# the run goes on with the stages that do not depend on it. A binary carried in .gpudeps/bin
# (scripts/gpu_deps.sh --binary) is used when it was built against this machine's torch and
# starts here; otherwise ddptrain is built here with all cores. At the end: a list of what failed (non-zero exit if
# anything did), OUTDIR/gpu_report.json (also printed) and OUTDIR/gpu_logs.tar.gz with every
# log, and the profiled runs' kernel traces as OUTDIR/gpt_profile_trace.json.gz and
# OUTDIR/resnet_profile_trace.json.gz; nothing else is left in OUTDIR (the device tool brings back at most 8 files). GPU_CHECK_ONLY=gpt stops
# after #27's stages (MiniResNet, Python DDP and ZeRO left out).
# Usage: scripts/gpu-check.sh OUTDIR
#   where the machine lacks nlohmann-json, toml++, GoogleTest, Gloo's headers, zlib or the
#   pinned nccl.h (no apt there), run scripts/gpu_deps.sh here first and carry .gpudeps:
#   device run: carry [".gpudeps"], command "scripts/gpu-check.sh $OUT", timeout_s 600
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/gpu-check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d)
PY=${PYTHON:-python3}
BUILD=${BUILD:-build-gpu}
STEPS=${GPU_CHECK_STEPS:-180} # MiniResNet: ~10 ms a step; 160 timed after 20, inside one epoch (195 batches)
BUDGET=${GPU_CHECK_BUDGET_S:-540}
RESERVE=45 # the report: a measured matmul peak, the tarball
T0=$SECONDS
FAILED=()
export PY LOGS BUILD
export PYTHONUNBUFFERED=1 # a Python stage cut by its timeout leaves what it printed
say() { echo "gpu-check: [$((SECONDS - T0)) s] $*"; }
# The logs so far as OUT/gpu_logs.tar.gz (replaced whole, never half-written): a check the
# device tool kills at its limit still brings back every finished stage's log and metrics
# (scripts/gpu_report.py makes the report from them on any machine).
save_logs() {
  # tar's exit 1: a file changed while read (a stage's leftover still writing): still a tarball.
  tar -czf "$OUT/gpu_logs.tar.gz.tmp" -C "$LOGS" . 2> /dev/null
  [ $? -le 1 ] && mv -f "$OUT/gpu_logs.tar.gz.tmp" "$OUT/gpu_logs.tar.gz"
  rm -f "$OUT/gpu_logs.tar.gz.tmp"
}
# stage NAME LIMIT_S CMD...: runs CMD under timeout with its output in LOGS/NAME.log; a
# failure is recorded (with the log's tail) and returned, never fatal. A stage that cannot
# get STAGE_MIN_S seconds (default 5) of what is left of the budget is skipped, not started:
# a skipped run (the report's skipped_runs, with the seconds left), not a failed stage.
stage() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - RESERVE - (SECONDS - T0)))
  if [ $left -lt "${STAGE_MIN_S:-5}" ]; then
    skip_run "$name" "the budget ran out: ${left} s of the check's ${BUDGET} s left (it needs ${STAGE_MIN_S:-5})"
    return 1
  fi
  [ "$limit" -gt $left ] && limit=$left
  say "$name (limit ${limit} s)"
  if declare -F "$1" > /dev/null; then  # a function of this script: timeout needs a program
    timeout --kill-after=10 "$limit" bash -o pipefail -c "$(declare -f "$1"); $(printf '%q ' "$@")"
  else
    timeout --kill-after=10 "$limit" "$@"
  fi > "$LOGS/$name.log" 2>&1
  local rc=$?
  save_logs
  [ $rc -eq 0 ] && return 0
  [ $rc -eq 124 ] && echo "timed out after ${limit} s" >> "$LOGS/$name.log"
  FAILED+=("$name (exit $rc; log $name.log)")
  tail -15 "$LOGS/$name.log" | sed "s/^/gpu-check: $name: /"
  return 1
}
# skip_run NAME WHY: a run this check does not make, on purpose; the report's skipped_runs says why
# (not a failed stage, not missing).
skip_run() {
  say "skipped $1: $2"
  echo "$1	$2" >> "$LOGS/skipped_runs.tsv"
}
finish() {
  say "report"
  save_logs
  timeout --kill-after=5 60 "$PY" "$(dirname "$0")/gpu_report.py" "$LOGS" "$OUT/gpu_report.json" "$((SECONDS - T0))" \
    "${FAILED[@]}" || FAILED+=("report")
  local short
  short=$(grep -c "the budget ran out" "$LOGS/skipped_runs.tsv" 2> /dev/null)
  save_logs && rm -rf "$LOGS"
  if [ ${#FAILED[@]} -gt 0 ]; then
    echo "gpu-check: FAILED stages (${#FAILED[@]}):"
    printf 'gpu-check:   %s\n' "${FAILED[@]}"
    exit 1
  fi
  if [ "${short:-0}" -gt 0 ]; then
    say "done, but ${short} stage(s) did not fit the budget (the report's skipped_runs); $OUT/gpu_report.json"
  else
    say "done: every stage passed; $OUT/gpu_report.json, logs in $OUT/gpu_logs.tar.gz"
  fi
  exit 0
}

# Preflight: the toolchain, before anything is configured, so a missing piece is named at once.
preflight() {
  local ok=0 h
  for tool in cmake ninja c++ nvcc; do
    if command -v "$tool" > /dev/null; then
      echo "$tool: $("$tool" --version 2>&1 | grep -m1 -iE 'version|release|[0-9]+\.[0-9]+')"
    else
      echo "MISSING: $tool"
      ok=1
    fi
  done
  local cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include
  for h in cuda_runtime.h cublas_v2.h cusparse.h cusolverDn.h; do
    [ -f "$cuda_inc/$h" ] && echo "header $h: $cuda_inc" || { echo "MISSING: $cuda_inc/$h"; ok=1; }
  done
  "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
      "NCCL", ".".join(map(str, torch.cuda.nccl.version())))' || { echo "MISSING: $PY with torch"; ok=1; }
  local nccl
  nccl=$("$PY" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "include"))' 2> /dev/null ||
    echo .gpudeps/include)
  if [ -f "$nccl/nccl.h" ]; then
    echo "nccl.h: $(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$nccl/nccl.h" | paste -sd.) in $nccl"
  else
    echo "MISSING: the pinned nccl.h (pip's nvidia-nccl wheel, or scripts/gpu_deps.sh + carry .gpudeps)"
    ok=1
  fi
  return $ok
}
# The first CUDA call: a GPU must be there, seen by nvidia-smi and by torch.
machine() {
  nvidia-smi -L || { echo "no GPU: nvidia-smi found none (this check needs an NVIDIA GPU machine)"; return 1; }
  "$PY" -c 'import sys, torch; ok = torch.cuda.is_available()
print("torch sees", torch.cuda.get_device_name(0) if ok else "NO CUDA DEVICE"); sys.exit(0 if ok else 1)'
}
configure_and_build() {
  local prefix
  prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  if [ -d .gpudeps ]; then
    prefix="$prefix;$PWD/.gpudeps"
    export CPATH="$PWD/.gpudeps/include${CPATH:+:$CPATH}"
  fi
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DDDPTRAIN_PYTHON="$PY" |
    tee "$LOGS/configure.txt" || return 1
  grep -q "CUDA/NCCL code paths: compiled in" "$LOGS/configure.txt" || { echo "this torch has no CUDA libraries"; return 1; }
  cmake --build "$BUILD" -j "$(nproc)" --target ddptrain ddptrain_cuda_tests
}

# The carried binary (scripts/gpu_deps.sh --binary): built against this very torch, and it
# starts here (its libraries resolve, the CUDA tests list).
carried() {
  local want have
  [ -x .gpudeps/bin/ddptrain ] || { echo "no carried binary in .gpudeps/bin"; return 1; }
  want=$(cat .gpudeps/bin/torch_version)
  have=$("$PY" -c 'import torch; print(torch.__version__)')
  [ "$want" = "$have" ] || { echo "the carried binary was built against torch $want; this machine has $have"; return 1; }
  # Built from these very sources (scripts/gpu_deps.sh --binary records them).
  [ -f .gpudeps/bin/sources.sha256 ] || { echo "the carried binary does not say what it was built from"; return 1; }
  local stale
  stale=$(sha256sum -c --quiet .gpudeps/bin/sources.sha256 2>&1 | head -5)
  [ -z "$stale" ] || { echo "the carried binary was built from other sources (rerun scripts/gpu_deps.sh --binary): $stale"; return 1; }
  .gpudeps/bin/ddptrain --help > /dev/null && .gpudeps/bin/ddptrain_cuda_tests --gtest_list_tests > /dev/null &&
    echo "using the carried binary (torch $want)"
}

if [ -n "${GPU_CHECK_DRY:-}" ]; then
  # A rehearsal on a machine without a GPU (tests: Scripts.GpuCheckRehearsesOnCpu): the #27
  # stages below at tiny sizes on the CPU, with the binary of the default build, so the
  # script, the profile table and the report are tested before a GPU's minutes are spent.
  BIN=${GPU_CHECK_BIN:-build}
  echo "$BIN (rehearsal on CPU)" > "$LOGS/binary.txt"
  # The CUDA tests' stand-ins: CPU tests in the same four groups, through the same gtest JSON.
  TESTS=$BIN/ddptrain_tests
  NORM_TESTS=FusedNorm.TheCpuPathIsLayerNormThenTheCast
  LINEAR_TESTS=FusedLinear.TheDescriptionsComputeTheirRowMajorProducts
  OTHER_TESTS=FusedNorm.BadInputsAreNamed
  DETERMINISTIC_TESTS=Config.FlagsParseAllForms
else
  stage machine 60 machine || finish
  # The facts the report needs, now: a check killed before its end still brings them back (not
  # fatal: without them the report measures them at its end).
  stage machine_facts 60 "$PY" scripts/gpu_report.py --facts "$LOGS/machine_facts.json" ||
    { [ ${#FAILED[@]} -gt 0 ] && unset 'FAILED[-1]'; }
  # The carried binary's libraries: torch's and its CUDA runtime, then toml++ from .gpudeps.
  torch_lib=$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
  export LD_LIBRARY_PATH="$torch_lib:$torch_lib/../../nvidia/cu13/lib:$PWD/.gpudeps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if stage carried 30 carried; then
    BIN=.gpudeps/bin
    cat .gpudeps/bin/commit 2> /dev/null | sed 's/^/carried binary of commit /' >> "$LOGS/carried.log"
  else
    [ ${#FAILED[@]} -gt 0 ] && unset 'FAILED[-1]' # no usable carried binary: build here instead (carried.log says why)
    BIN=$BUILD
    # The toolchain only where it is needed, before anything is configured, so a missing piece is named at once.
    stage preflight 60 preflight || finish
    stage build 900 configure_and_build || finish
  fi
  echo "$BIN" > "$LOGS/binary.txt"
  TESTS=$BIN/ddptrain_cuda_tests
  NORM_TESTS='Cuda.Fused*Norm*'
  LINEAR_TESTS='Cuda.LinearEpilogues*:Cuda.Fp32Epilogues*:Cuda.GptMlpAndLinearThroughEpilogues*'
  DETERMINISTIC_TESTS='CudaDeterministic.*'
  OTHER_TESTS="-$NORM_TESTS:$LINEAR_TESTS:$DETERMINISTIC_TESTS"
fi
# The CUDA tests in four groups, each lever's own, the deterministic runs' and the rest (Note [Levers the CUDA tests
# vouch for], scripts/cuda_levers.py): a crash takes down one group's JSON, not all of them.
# cuBLAS's reproducible workspace for the whole binary: LibTorch reads it at the first GEMM, and
# CudaDeterministic.* runs under deterministic algorithms (Note [Deterministic GPU runs]).
# Each test's result goes into the report (cuda_tests: passed, failed with the first failure,
# skipped), from gtest's JSON.
cuda_tests() {
  local group=$1 limit=$2 filter=$3
  CUBLAS_WORKSPACE_CONFIG=:4096:8 stage "cuda_tests_$group" "$limit" "$TESTS" --gtest_filter="$filter" \
    --gtest_output="json:$LOGS/cuda_tests_$group.json"
}
cuda_tests norm 60 "$NORM_TESTS"
cuda_tests linear 60 "$LINEAR_TESTS"
cuda_tests other 120 "$OTHER_TESTS"
cuda_tests deterministic 60 "$DETERMINISTIC_TESTS" # its own group: a crash there costs the others nothing
# The levers whose tests passed here; the others run off (LOGS/levers.json says why).
read -r FUSED_NORM FUSED_LINEAR < <("$PY" "$(dirname "$0")/cuda_levers.py" "$LOGS" || echo off off)
FUSED_NORM=${FUSED_NORM:-off} FUSED_LINEAR=${FUSED_LINEAR:-off}
say "levers the CUDA tests vouch for: --fused_norm $FUSED_NORM --fused_linear $FUSED_LINEAR"

port=29600
BACKEND=nccl
[ -n "${GPU_CHECK_DRY:-}" ] && BACKEND=gloo
# train NAME ARGS...: one ddptrain run (world 1, NCCL), its metrics in LOGS/NAME.jsonl; at
# most TRAIN_LIMIT_S seconds (a hang costs that, not the whole budget).
train() {
  local name=$1 limit=${TRAIN_LIMIT_S:-90}
  shift
  port=$((port + 1))
  rm -rf "/tmp/gpu-check-$name" # a fresh run, never a resume of an earlier check's
  # No checkpoint (GPT-2 124M's final save is 1.5 GB written and fsynced), but for a profiled
  # run, whose traces go to its checkpoint folder.
  local ck=""
  case " $* " in *" --enable_profiling "*) ck=/tmp/gpu-check-$name ;; esac
  # Not started with under 30 s left: a run cut short measures nothing and costs its limit.
  STAGE_MIN_S=30 stage "$name" "$limit" "$BIN/ddptrain" launch --nproc_per_node 1 --master_port $port train --backend "$BACKEND" \
    --eval_every 0 --checkpoint_dir "$ck" --metrics_file "$LOGS/$name.jsonl" "$@"
}
# python_ddp NAME ARGS...: Python DDP (bench/reference_ddp.py) on the same configuration.
python_ddp() {
  local name=$1
  shift
  port=$((port + 1))
  STAGE_MIN_S=30 stage "$name" 120 "$PY" -m torch.distributed.run --nproc_per_node 1 --master_port $port bench/reference_ddp.py \
    --device cuda --width 1.0 --image_size 32 --batch_size 256 --num_workers 8 --steps "$STEPS" --warmup 20 "$@"
}
# #27 first: GPT-2 124M (bf16, block 1024, batch 64, AdamW, clip 1.0): a profiled run (LibTorch's
# kernel trace of 3 steps -> the table of GPU time by kind of work), PyTorch's nanoGPT-style
# module eager and torch.compile (bench/nanogpt.py) interleaved with ddptrain's runs, and the
# levers one at a time against their "before" (--vocab_multiple 1, --fused_optimizer off,
# --fused_loss off, --fused_norm off, --fused_linear off; while their defaults are off,
# --fused_norm and --fused_linear are passed as auto where their CUDA tests passed above).
# GELU in GPT-2's own tanh form on both sides
# (cuBLASLt's GELU epilogue is that form: Note [Linear epilogues in cuBLASLt]). The gradients
# are views of DDP's buckets (--gradient_as_bucket_view): PyTorch's side has no DDP, and the
# copies into the buckets (~0.5 GB a step for GPT-2 124M) counted against ddptrain before the
# thirty-fourth session, whose runs are not comparable with the earlier ones in this.
if [ -n "${GPU_CHECK_DRY:-}" ]; then
  gpt=(--model gpt --gpt_preset debug --dataset tokens --dataset_size 2000 --batch_size 4 --amp_dtype bf16
    --optimizer adamw --lr 6e-4 --warmup_steps 2 --clip_grad_norm 1.0 --num_workers 1 --max_steps 12 --log_interval 3
    --gradient_as_bucket_view)
  # PyTorch's side in fp32 on a CPU: torch 2.15's inductor corrupts the heap compiling this GPT
  # in bf16 on an AVX-512 CPU with avx512_bf16 and no AMX (malloc(): unaligned tcache chunk;
  # fp32, or ATEN_CPU_CAPABILITY=avx2, compile it), and the rehearsal tests this script, not
  # PyTorch's CPU bf16. On the GPU both sides run bf16.
  pyargs=(--preset debug --device cpu --block_size 64 --batch_size 4 --steps 3 --warmup 2 --peak_tflops 1 --gelu tanh
    --amp none)
else
  gpt=(--model gpt --gpt_preset gpt2-124m --dataset tokens --dataset_size 100000 --batch_size 64 --amp_dtype bf16
    --optimizer adamw --lr 6e-4 --weight_decay 0.1 --warmup_steps 10 --clip_grad_norm 1.0 --num_workers 4 --max_steps 40
    --log_interval 10 --gradient_as_bucket_view)
  pyargs=(--preset gpt2-124m --device cuda --block_size 1024 --batch_size 64 --steps 20 --warmup 10 --gelu tanh)
fi
# GPT's own flags (Llama takes the shared ones: "${gpt[@]:2}").
gpt_own=(--gpt_activation gelu_tanh --fused_linear "$FUSED_LINEAR")
# pytorch NAME ARGS...: bench/nanogpt.py, its JSON line in LOGS/NAME.log.
pytorch() {
  local name=$1 limit=${PY_LIMIT_S:-90}
  shift
  STAGE_MIN_S=${STAGE_MIN_S:-30} stage "$name" "$limit" "$PY" bench/nanogpt.py "${pyargs[@]}" "$@"
}
# profile RUN TABLE: the profiled run RUN's kernel trace (3 steps) -> LOGS/TABLE.json, the table of
# GPU time by kind of work (scripts/profile_table.py); the trace itself comes back too as
# OUT/RUN_trace.json.gz (for chrome://tracing or Perfetto), where it fits the device tool's 16
# MiB per file.
profile() {
  local run=$1 table=$2 trace=/tmp/gpu-check-$1/kernels_rank0.json
  if grep -q "^$run"$'\t' "$LOGS/skipped_runs.tsv" 2> /dev/null; then
    skip_run "$table" "its run $run was skipped"
    return 0
  fi
  if [ ! -s "$trace" ]; then
    FAILED+=("$table (no kernel trace: see $run.log)")
    return 1
  fi
  stage "$table" 120 "$PY" scripts/profile_table.py "$trace" --steps 3 --out "$LOGS/$table.json"
  gzip -c "$trace" > "$OUT/${run}_trace.json.gz"
  [ "$(stat -c %s "$OUT/${run}_trace.json.gz")" -le $((16 << 20)) ] || rm -f "$OUT/${run}_trace.json.gz"
}
# Steps 8-10 profiled: past the first steps' allocations and autotuning (the default window,
# steps 3-5, counted some of them as GPU idle).
TRAIN_LIMIT_S=120 train gpt_profile "${gpt[@]}" "${gpt_own[@]}" --fused_norm "$FUSED_NORM" --vocab_multiple 64 \
  --enable_profiling --profile_first_step 8
profile gpt_profile profile_table
pytorch py_eager_1
TRAIN_LIMIT_S=90 train gpt_padded_1 "${gpt[@]}" "${gpt_own[@]}" --fused_norm "$FUSED_NORM" --vocab_multiple 64
STAGE_MIN_S=60 PY_LIMIT_S=200 pytorch py_compile --compile --steps 50 # a longer window: one run, not two
pytorch py_eager_2
TRAIN_LIMIT_S=90 train gpt_padded_2 "${gpt[@]}" "${gpt_own[@]}" --fused_norm "$FUSED_NORM" --vocab_multiple 64
# #31's goal: Llama at GPT-2 124M's sizes (untied, its default), MFU within 5 points of GPT's.
TRAIN_LIMIT_S=90 train llama_124m --model llama "${gpt[@]:2}" --fused_norm "$FUSED_NORM" --vocab_multiple 64
# What no run has measured yet comes first, what earlier runs measured (docs/gpu-runs/) last, so a
# budget that runs short cuts the known numbers. A lever that runs off has no "before" of its own
# (that run would be gpt_padded's again, its ratio ~1.0 as if measured): skipped, and said.
if [ "$FUSED_NORM" != off ]; then
  TRAIN_LIMIT_S=90 train gpt_aten_norm "${gpt[@]}" "${gpt_own[@]}" --vocab_multiple 64 --fused_norm off
else skip_run gpt_aten_norm "--fused_norm runs off here (levers_used says why)"; fi
if [ "$FUSED_LINEAR" != off ]; then
  TRAIN_LIMIT_S=90 train gpt_aten_linear "${gpt[@]}" --gpt_activation gelu_tanh --fused_norm "$FUSED_NORM" \
    --vocab_multiple 64 --fused_linear off
else skip_run gpt_aten_linear "--fused_linear runs off here (levers_used says why)"; fi
# Note [Deterministic GPU runs]: what --deterministic costs, and whether a run repeats bitwise
# with it (gpt_deterministic_1 and _2) and without (gpt_padded_1 and _2): the report's
# deterministic_cost and repeats_bitwise. Only where its CUDA tests (CudaDeterministic.*) passed
# here, read as a lever's group is (scripts/cuda_levers.py).
DETERMINISTIC=$(PYTHONPATH="$(dirname "$0")" "$PY" -c \
  'import sys, cuda_levers; print(cuda_levers.verdict(sys.argv[1], "deterministic")[0])' "$LOGS" || echo off)
for i in 1 2; do
  if [ "$DETERMINISTIC" = auto ]; then
    TRAIN_LIMIT_S=90 train gpt_deterministic_$i "${gpt[@]}" "${gpt_own[@]}" --fused_norm "$FUSED_NORM" \
      --vocab_multiple 64 --deterministic
  else skip_run gpt_deterministic_$i "CudaDeterministic.* did not pass here (cuda_tests_deterministic)"; fi
done
TRAIN_LIMIT_S=90 train gpt_vocab1 "${gpt[@]}" "${gpt_own[@]}" --fused_norm "$FUSED_NORM" --vocab_multiple 1
TRAIN_LIMIT_S=90 train gpt_loop_optimizer "${gpt[@]}" "${gpt_own[@]}" --fused_norm "$FUSED_NORM" --vocab_multiple 64 --fused_optimizer off
TRAIN_LIMIT_S=90 train gpt_eager_loss "${gpt[@]}" "${gpt_own[@]}" --fused_norm "$FUSED_NORM" --vocab_multiple 64 --fused_loss off
# MiniResNet's profile (#27 item 4: why bf16 is only 1.16-1.20x Python DDP, and no faster than
# fp32): the same table, with the GPU's idle share and the kernels per step (a step of small
# kernels that leaves the GPU idle waits on the host, the case for a CUDA graph).
if [ -n "${GPU_CHECK_DRY:-}" ]; then
  TRAIN_LIMIT_S=120 train resnet_profile --dataset synthetic --width 0.25 --image_size 16 --batch_size 8 \
    --num_workers 1 --max_steps 12 --log_interval 3 --amp_dtype bf16 --enable_profiling --profile_first_step 6
  profile resnet_profile resnet_profile_table
  finish
fi
# GPU_CHECK_ONLY=gpt: #27's stages and #31's Llama alone, for a lease with minutes left (about 320 s
# in all: give it GPU_CHECK_BUDGET_S=400).
[ "${GPU_CHECK_ONLY:-}" = gpt ] && finish

# MiniResNet against Python DDP, like for like (the same memory format, 25 MiB buckets as
# Python's, fused SGD on both) and interleaved, pair by pair: bf16 channels-last (ddptrain's
# default) and NCHW (#27's goal: >= 1.2x both), then fp32 and fp16 in NCHW.
resnet=(--dataset synthetic --width 1.0 --image_size 32 --batch_size 256 --num_workers 8 --max_steps "$STEPS"
  --log_interval 20 --bucket_cap_mb 25)
train resnet_bf16 "${resnet[@]}" --amp_dtype bf16
python_ddp python_bf16_channels_last --amp bf16 --channels_last
train resnet_bf16_contiguous "${resnet[@]}" --amp_dtype bf16 --memory_format contiguous
python_ddp python_bf16 --amp bf16
train resnet_fp32 "${resnet[@]}" --no-use_amp --memory_format contiguous
python_ddp python_fp32 --amp none
train resnet_fp16 "${resnet[@]}" --amp_dtype fp16 --memory_format contiguous
python_ddp python_fp16 --amp fp16
train resnet_profile "${resnet[@]}" --amp_dtype bf16 --max_steps 20 --enable_profiling --profile_first_step 12
profile resnet_profile resnet_profile_table
train resnet_bf16_recompute "${resnet[@]}" --amp_dtype bf16 --activation_checkpointing blocks

# ZeRO stages 1, 2 and 3 (#15) on the batch that fitted: NCCL's all_gather and reduce_scatter
# on the GPU, and what each rank holds (param/grad/optim MiB in the report).
if [ -s "$LOGS/gpt_padded_1.jsonl" ]; then
  b=64
  for z in 1 2 3; do
    TRAIN_LIMIT_S=90 train "gpt_zero$z" --model gpt --gpt_preset gpt2-124m --dataset tokens --dataset_size 100000 \
      --batch_size "$b" --amp_dtype bf16 --optimizer adamw --lr 6e-4 --warmup_steps 10 --max_steps 20 --log_interval 5 \
      --num_workers 4 --vocab_multiple 64 --zero_stage "$z"
  done
fi
finish
