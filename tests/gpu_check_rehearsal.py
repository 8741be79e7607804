#!/usr/bin/env python3
"""Scripts.GpuCheckRehearsesOnCpu: scripts/gpu-check.sh with GPU_CHECK_DRY=1 runs #27's stages
(a profiled ddptrain GPT run, the profile table, PyTorch's nanoGPT-style module eager and
torch.compile, ddptrain interleaved, the levers' "before" runs, #31's Llama, a profiled MiniResNet
run) on the CPU at tiny sizes, and
its report has every number the GPU run is read for. A GPU's minutes are too few to find a
broken script there.

usage: gpu_check_rehearsal.py SOURCE_DIR BUILD_DIR PYTHON
Exit 77 (ctest: skipped) where PYTHON's torch has no torch.compile (Debian's 1.13).
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

src, build, python = sys.argv[1:4]
version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                         text=True).stdout.strip()
if not version or int(version.split(".")[0]) < 2:
    print(f"skipped: {python} has torch {version or 'none'}; bench/nanogpt.py needs torch 2 (SDPA, compile)")
    sys.exit(77)
out = tempfile.mkdtemp(prefix="gpu_check_rehearsal_")
env = dict(os.environ, GPU_CHECK_DRY="1", GPU_CHECK_BIN=build, PYTHON=python)
r = subprocess.run([os.path.join(src, "scripts/gpu-check.sh"), out], cwd=src, env=env, capture_output=True,
                   text=True, timeout=600)
print(r.stdout[-4000:], r.stderr[-4000:])
failures = []
if r.returncode != 0:
    failures.append(f"gpu-check.sh exited {r.returncode}")
report = json.load(open(os.path.join(out, "gpu_report.json")))
if report["failed_stages"]:
    failures.append(f"failed stages: {report['failed_stages']}")
tests = report.get("cuda_tests") or {}
if len(tests.get("passed", [])) != 4 or tests.get("failed") or tests.get("skipped"):
    failures.append(f"report: cuda_tests (four CPU tests standing in, one per group) is {tests!r}")
# Runs that are not profiled save nothing (--checkpoint_dir ''); the profiled ones keep their traces.
if os.path.exists("/tmp/gpu-check-gpt_padded_1") or not os.path.isdir("/tmp/gpu-check-gpt_profile"):
    failures.append("gpt_padded_1 saved a checkpoint folder, or gpt_profile none")
# The logs come back as the check goes (a check killed at the device tool's limit keeps them).
if not os.path.exists(os.path.join(out, "gpu_logs.tar.gz")) or glob.glob(os.path.join(out, "*.tmp")):
    failures.append(f"no gpu_logs.tar.gz, or a half-written one, in {os.listdir(out)}")
# Both levers' stand-in groups passed, so the runs took both (Note [Levers the CUDA tests vouch for]).
levers = report.get("levers_used") or {}
if {k: (v or {}).get("value") for k, v in levers.items()} != {"fused_norm": "auto", "fused_linear": "auto"}:
    failures.append(f"report: levers_used is {levers!r}")
gpt = report.get("gpt2_124m_bf16_b64_block1024", {})
for key in ("ddptrain_tokens_per_s_median", "pytorch_eager_tokens_per_s_median", "ratio_over_pytorch_eager",
            "ratio_over_pytorch_compile", "lever_vocab_multiple_64_over_1", "lever_fused_optimizer_over_loop",
            "lever_fused_loss_over_eager", "lever_fused_norm_over_aten",
            "lever_fused_linear_over_aten", "deterministic_cost"):
    if not isinstance(gpt.get(key), (int, float)) or gpt[key] <= 0:
        failures.append(f"report: {key} is {gpt.get(key)!r}")
# A CPU run repeats bitwise, with --deterministic and without (Note [Deterministic GPU runs]; the
# pairs that parted, at stops 46 and 55, met Note [The first parallel call of a vector math
# function]). The pair with the flag must repeat; the default's answer must be there (a bool, with
# the first step line that differs where it is False), and is said where it is False.
repeated = gpt.get("repeats_bitwise") or {}
differences = gpt.get("repeats_first_difference") or {}
parted = {pair: differences.get(pair) for pair in ("default", "deterministic")}
if repeated.get("deterministic") is not True or not isinstance(repeated.get("default"), bool) \
        or (repeated["default"] is False) != isinstance(parted["default"], dict):
    failures.append(f"report: repeats_bitwise is {repeated!r}, the first differences {parted!r}")
elif repeated["default"] is False:
    print(f"note: the default runs did not repeat bitwise on this CPU: {parted['default']!r}")
# What this CPU said, for CI's log (.ci/run prints it at the end; ctest shows a passing test's
# output to nobody): which CPU, whether runs repeated, and where they parted.
cpu = {}
for line in open("/proc/cpuinfo"):
    key, _, value = line.partition(":")
    if key.strip() in ("model name", "flags") and key.strip() not in cpu:
        cpu[key.strip()] = value.strip()
json.dump({"cpu": cpu.get("model name"),
           "cpu_flags": sorted(f for f in cpu.get("flags", "").split() if f.startswith(("amx", "avx512_bf16"))),
           "repeats_bitwise": repeated, "first_difference": parted},
          open(os.path.join(build, "rehearsal_repeats.json"), "w"))
llama = report.get("llama_124m_bf16_b64_block1024", {})
if not ((llama.get("ddptrain") or {}).get("tokens_per_s") or 0) > 0:
    failures.append(f"report: the Llama run is {llama.get('ddptrain')!r}")
if not isinstance(llama.get("mfu_points_below_gpt"), (int, float)):
    failures.append(f"report: mfu_points_below_gpt is {llama.get('mfu_points_below_gpt')!r}")
compiled = (gpt.get("pytorch") or {}).get("py_compile") or {}
if compiled.get("impl") != "pytorch compile":
    failures.append(f"report: the compiled PyTorch run is {compiled!r}")
profile = report.get("gpt2_124m_profile", {})
cats = profile.get("categories_ms_per_step", {})
for c in ("gemm", "attention", "normalisation"):
    if not cats.get(c, 0) > 0:
        failures.append(f"profile table: no {c} time ({cats})")
if len(profile.get("top", [])) != 15:
    failures.append(f"profile table: {len(profile.get('top', []))} top operations, not 15")
# MiniResNet's profile (#27 item 4), and where its steps' time went.
resnet_cats = (report.get("mini_resnet_profile") or {}).get("categories_ms_per_step", {})
for c in ("convolution", "normalisation"):
    if not resnet_cats.get(c, 0) > 0:
        failures.append(f"MiniResNet's profile table: no {c} time ({resnet_cats})")
parts = (gpt.get("ddptrain") or {}).get("gpt_padded_1", {}).get("parts_ms", {})
if set(parts) != {"data", "fwd", "bwd", "opt", "end", "comm_wait"} or not parts["fwd"] > 0 or not parts["bwd"] > 0:
    failures.append(f"report: gpt_padded_1's parts_ms is {parts!r}")


# scripts/cuda_levers.py alone: a group vouches for its lever only when its JSON is there, a test
# passed and none failed.
def gtest_json(results):
    return {"testsuites": [{"name": "Cuda", "testsuite": [dict({"name": n}, **r) for n, r in results.items()]}]}


ok, bad, skipped = {"result": "COMPLETED"}, {"result": "COMPLETED", "failures": [{"failure": "x"}]}, \
    {"result": "SKIPPED"}
for groups, want in [({"norm": {"A": ok}, "linear": {"B": ok, "C": ok}}, "auto auto"),
                     ({"norm": {"A": ok, "D": bad}, "linear": {"B": ok}}, "off auto"),
                     ({"norm": {"A": ok}}, "auto off"),  # linear's binary crashed: no JSON
                     ({"norm": {"A": skipped}, "linear": {}}, "off off")]:
    logs = tempfile.mkdtemp(prefix="cuda_levers_")
    for group, results in groups.items():
        json.dump(gtest_json(results), open(os.path.join(logs, f"cuda_tests_{group}.json"), "w"))
    got = subprocess.run([python, os.path.join(src, "scripts/cuda_levers.py"), logs], capture_output=True,
                         text=True).stdout.strip()
    why = json.load(open(os.path.join(logs, "levers.json")))
    if got != want or any(not v.get("why") for v in why.values()):
        failures.append(f"cuda_levers.py on {groups!r}: {got!r} (want {want!r}), {why!r}")

# A group the budget left out (skip_run) is said as such, not as a crash of its binary.
logs = tempfile.mkdtemp(prefix="cuda_levers_skipped_")
json.dump(gtest_json({"A": ok}), open(os.path.join(logs, "cuda_tests_norm.json"), "w"))
open(os.path.join(logs, "skipped_runs.tsv"), "w").write(
    "cuda_tests_linear\tthe budget ran out: 3 s of the check's 400 s left (it needs 5)\n")
got = subprocess.run([python, os.path.join(src, "scripts/cuda_levers.py"), logs], capture_output=True,
                     text=True).stdout.strip()
why = json.load(open(os.path.join(logs, "levers.json"))).get("fused_linear", {}).get("why", "")
if got != "auto off" or not why.startswith("its tests did not run: the budget ran out"):
    failures.append(f"cuda_levers.py with the linear group budget-skipped: {got!r}, {why!r}")

# A run gpu-check.sh skips on purpose (a lever off: its "before" would be gpt_padded's again) is
# under skipped_runs with its reason, not missing, and its ratio is None, not ~1.0.
logs = tempfile.mkdtemp(prefix="skipped_runs_")
open(os.path.join(logs, "skipped_runs.tsv"), "w").write("gpt_aten_norm\t--fused_norm runs off here\n")
skip_report = os.path.join(logs, "report.json")
subprocess.run([python, os.path.join(src, "scripts/gpu_report.py"), logs, skip_report, "1"], capture_output=True)
skip_rep = json.load(open(skip_report)) if os.path.exists(skip_report) else {}
if skip_rep.get("skipped_runs") != {"gpt_aten_norm": "--fused_norm runs off here"} \
        or "gpt_aten_norm" in skip_rep.get("missing", ["gpt_aten_norm"]) \
        or (skip_rep.get("gpt2_124m_bf16_b64_block1024") or {}).get("lever_fused_norm_over_aten", 0) is not None:
    failures.append(f"gpu_report.py with a skipped run: {skip_rep!r}")

# The GPU machine's facts, written by the check's first stage (gpu_report.py --facts), are the
# report's wherever it is made (a check killed before its end: the report made here from its
# logs named this machine's torch and no GPU); the facts file itself is what --facts writes.
logs = tempfile.mkdtemp(prefix="machine_facts_")
facts = os.path.join(logs, "machine_facts.json")
subprocess.run([python, os.path.join(src, "scripts/gpu_report.py"), "--facts", facts], capture_output=True)
wrote = json.load(open(facts)) if os.path.exists(facts) else {}
if set(wrote) != {"torch", "gpu", "matmul_peaks"}:
    failures.append(f"gpu_report.py --facts wrote {wrote!r}")
json.dump({"torch": "2.11.0+cu130", "gpu": "NVIDIA H200", "matmul_peaks": {"bf16": 8.0e14}}, open(facts, "w"))
facts_report = os.path.join(logs, "report.json")
subprocess.run([python, os.path.join(src, "scripts/gpu_report.py"), logs, facts_report, "1"], capture_output=True)
facts_rep = json.load(open(facts_report)) if os.path.exists(facts_report) else {}
if (facts_rep.get("torch"), facts_rep.get("gpu"), facts_rep.get("measured_matmul_tflops")) != \
        ("2.11.0+cu130", "NVIDIA H200", {"bf16": 800.0}):
    failures.append(f"gpu_report.py with the machine's facts: {facts_rep!r}")

# A budget that fits no run: every run is a skipped run (with why), not a failed stage, and a
# profile of a skipped run is skipped too, not missing; the check ends 0 and says so.
short_out = tempfile.mkdtemp(prefix="gpu_check_short_")
r = subprocess.run([os.path.join(src, "scripts/gpu-check.sh"), short_out], cwd=src,
                   env=dict(env, GPU_CHECK_BUDGET_S="60"), capture_output=True, text=True, timeout=300)
short = json.load(open(os.path.join(short_out, "gpu_report.json"))) \
    if os.path.exists(os.path.join(short_out, "gpu_report.json")) else {}
skipped = short.get("skipped_runs", {})
if r.returncode != 0 or short.get("failed_stages") or "the budget ran out" not in skipped.get("gpt_profile", "") \
        or "profile_table" not in skipped or "profile_table" in short.get("missing", []) \
        or "did not fit the budget" not in r.stdout:
    failures.append(f"a check out of budget: exit {r.returncode}, {short!r}, {r.stdout[-1000:]}")

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
