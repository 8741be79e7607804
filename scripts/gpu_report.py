"""gpu_report.json from the logs of scripts/gpu-check.sh (and printed to stdout).

usage: gpu_report.py LOGS_DIR REPORT_JSON TOTAL_S [FAILED_STAGE ...]
Every number comes from a run's metrics file (ddptrain) or log (Python DDP); a run that
failed or left no step records is listed under "missing" instead of stopping the report.
MFU is given against the datasheet peak ddptrain used (its "run" record) and against a
matmul peak measured here, when a GPU is there.
"""
import glob
import json
import os
import re
import sys
import time

from cuda_levers import gtest_results  # the same reading of gtest's JSON as the levers' choice

def records(name):
    """A metrics file's records; a line cut short (a run killed while writing) or not an object
    is left out."""
    path = os.path.join(logs, name + ".jsonl")
    out = []
    for line in open(path, errors="replace") if os.path.exists(path) else []:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def measured_matmul_peaks():
    """Dense matmul FLOP/s on this GPU, bf16 and fp32 with TF32 allowed (ddptrain's fp32 runs: with
    --tf32, and cuDNN's convolutions always)."""
    import torch
    if not torch.cuda.is_available():
        return {}
    peaks = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        torch.backends.cuda.matmul.allow_tf32 = True
        a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
        b = torch.randn(8192, 8192, device="cuda", dtype=dtype)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        t0, n = time.perf_counter(), 10
        for _ in range(n):
            a @ b
        torch.cuda.synchronize()
        peaks[name] = 2 * 8192**3 * n / (time.perf_counter() - t0)
    return peaks


# gpu_report.py --facts FILE: the GPU machine's facts (torch, the GPU, the matmul peaks), written
# by gpu-check.sh's first stage, so a report made elsewhere from the logs of a check that was
# killed before its end still has them.
if len(sys.argv) == 3 and sys.argv[1] == "--facts":
    import torch
    json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available()
               else "none", "matmul_peaks": measured_matmul_peaks()}, open(sys.argv[2], "w"))
    sys.exit(0)

logs, report_path, total_s, failed = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
rep = {"total_s": total_s, "failed_stages": failed, "missing": []}
skipped_tsv = os.path.join(logs, "skipped_runs.tsv")  # runs gpu-check.sh left out on purpose, and why
rep["skipped_runs"] = dict(line.rstrip("\n").split("\t", 1) for line in open(skipped_tsv)
                           if "\t" in line) if os.path.exists(skipped_tsv) else {}
binary_txt = os.path.join(logs, "binary.txt")  # which ddptrain ran: the carried one or one built there
if os.path.exists(binary_txt):
    rep["binary"] = open(binary_txt).read().strip()



def summary(name, measured):
    recs = records(name)
    steps = [r for r in recs if r.get("kind") == "step"][1:]  # the first interval includes start-up
    if not steps:
        if name not in rep["skipped_runs"]:
            rep["missing"].append(name)
        return None
    run = next((r for r in recs if r.get("kind") == "run"), {})
    mean = lambda k: sum(s.get(k, 0.0) for s in steps) / len(steps)  # noqa: E731
    # A rate over the whole window, as PyTorch's side measures it (all its tokens over all its
    # time), not the mean of the intervals' rates: each interval weighed by its time.
    all_steps = [r for r in recs if r.get("kind") == "step"]
    spans = [(b.get("step", 0) - a.get("step", 0)) * b.get("ms_per_step", 0.0) for a, b in zip(all_steps, all_steps[1:])]
    total_ms = sum(spans)
    rate = lambda k: (sum(s.get(k, 0.0) * t for s, t in zip(steps, spans)) / total_ms  # noqa: E731
                      if total_ms > 0 else mean(k))
    out = {"samples_per_s": rate("samples_per_s"), "ms_per_step": mean("ms_per_step"), "mfu_datasheet": rate("mfu"),
           "peak_mem_mib": max((s.get("peak_mem_mib", -1.0) for s in steps), default=-1.0), "precision": run.get("precision")}
    if "tokens_per_s" in steps[0]:
        out["tokens_per_s"] = rate("tokens_per_s")
    # Where a step's time went on the host's clock (waiting for data, forward, backward, the
    # optimizer, the all-reduce): a run that waits on its loader shows it here.
    out["parts_ms"] = {k[:-3]: mean(k) for k in ("data_ms", "fwd_ms", "bwd_ms", "opt_ms", "end_ms", "comm_wait_ms")
                       if k in steps[0]}
    if "data_wait_share" in steps[0]:
        out["data_wait_share"] = mean("data_wait_share")
    out["state_mib"] = {k: steps[-1][k] for k in ("param_mib", "param_peak_mib", "grad_mib", "optim_mib") if k in steps[-1]}
    peak = measured.get("fp32" if run.get("precision") == "fp32" else "bf16")
    if peak and run.get("peak_flops_per_s"):
        out["mfu_measured_matmul"] = out["mfu_datasheet"] * run["peak_flops_per_s"] / peak
    return out


def python_sps(name):
    path = os.path.join(logs, name + ".log")
    m = re.search(r"reference samples/s: ([0-9.]+)", open(path, errors="replace").read()) if os.path.exists(path) else None
    if not m and name not in rep["skipped_runs"]:
        rep["missing"].append(name)
    return float(m.group(1)) if m else None


facts_json = os.path.join(logs, "machine_facts.json")  # the GPU machine's, from the check's first stage
facts = None
if os.path.exists(facts_json):
    try:
        facts = json.load(open(facts_json))
        rep["torch"], rep["gpu"], measured = facts["torch"], facts["gpu"], facts["matmul_peaks"] or {}
    except (ValueError, KeyError, TypeError) as e:  # cut short: measured here, as without it
        rep["facts_error"] = str(e)
        facts = None
if facts is None:
    try:
        import torch
        rep["torch"] = torch.__version__
        rep["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
        measured = measured_matmul_peaks()
    except Exception as e:  # a report without the GPU facts beats no report
        rep["torch_error"] = str(e)
        measured = {}


def cuda_tests():
    """Each CUDA test's result, from gtest's JSON of each group (Note [Levers the CUDA tests
    vouch for]; gtest_results): which passed, which failed (with the first failure's message),
    which were skipped; a group whose JSON is missing (its binary crashed or timed out) is
    named in `missing`."""
    out, found = {"passed": [], "failed": {}, "skipped": []}, False
    for group in ("norm", "linear", "other", "deterministic"):
        path = os.path.join(logs, f"cuda_tests_{group}.json")
        try:
            results = gtest_results(path)
        except (OSError, ValueError):  # cut short by a crash: as missing
            results = None
        if results is None:
            if f"cuda_tests_{group}" not in rep["skipped_runs"]:
                rep["missing"].append(os.path.basename(path))
            continue
        found = True
        out["passed"] += results["passed"]
        out["failed"].update(results["failed"])
        out["skipped"] += results["skipped"]
    return out if found else None


def tests_and_resnet_sections():
    """The CUDA tests, the levers they vouch for and MiniResNet against Python DDP."""
    rep["cuda_tests"] = cuda_tests()
    # The levers the GPT and Llama runs took (auto where their CUDA tests passed), and why.
    levers_path = os.path.join(logs, "levers.json")
    rep["levers_used"] = json.load(open(levers_path)) if os.path.exists(levers_path) else None
    rep["measured_matmul_tflops"] = {k: v / 1e12 for k, v in measured.items()}
    resnet = {p: summary("resnet_" + p, measured) for p in ("fp32", "bf16", "fp16", "bf16_contiguous", "bf16_recompute")}
    rep["mini_resnet_w1_b256"] = resnet
    python = {p: python_sps("python_" + p) for p in ("fp32", "bf16", "fp16", "bf16_channels_last")}
    rep["python_ddp_samples_per_s"] = python
    # Like for like: the same memory format on both sides (ddptrain's resnet_bf16 is its default,
    # channels_last; its fp32 and fp16 runs are NCHW, as Python's without --channels_last).
    ratios = {}
    for key, ours, theirs in (("bf16_channels_last", "bf16", "bf16_channels_last"),
                              ("bf16_nchw", "bf16_contiguous", "bf16"),
                              ("fp32_nchw", "fp32", "fp32"), ("fp16_nchw", "fp16", "fp16")):
        if resnet.get(ours) and python.get(theirs):
            ratios[key] = resnet[ours]["samples_per_s"] / python[theirs]
    rep["ratio_ddptrain_over_python"] = ratios


def gpt_sections():
    """#27's GPT-2 124M against PyTorch, the levers, the deterministic runs, and #31's Llama."""

    def pytorch_run(name):
        """bench/nanogpt.py's JSON line (the last line of its log that parses)."""
        path = os.path.join(logs, name + ".log")
        for line in reversed(open(path, errors="replace").read().splitlines() if os.path.exists(path) else []):
            try:
                return json.loads(line)
            except ValueError:
                continue
        if name not in rep["skipped_runs"]:
            rep["missing"].append(name)
        return None


    def median(values):
        v = sorted(x for x in values if x is not None)
        return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2 if v else None


    # #27: GPT-2 124M, ddptrain (padded vocabulary, fused AdamW) against PyTorch eager and compile
    # in the same check, interleaved; the levers against their "before"; the profile table.
    gpt = {n: summary(n, measured) for n in ("gpt_profile", "gpt_padded_1", "gpt_padded_2", "gpt_vocab1",
                                             "gpt_loop_optimizer", "gpt_eager_loss", "gpt_aten_norm",
                                             "gpt_aten_linear", "gpt_deterministic_1", "gpt_deterministic_2")}
    py = {n: pytorch_run(n) for n in ("py_eager_1", "py_eager_2", "py_compile")}
    tps = lambda r: r and r.get("tokens_per_s")  # noqa: E731
    ours = median([tps(gpt["gpt_padded_1"]), tps(gpt["gpt_padded_2"])])
    eager = median([tps(py["py_eager_1"]), tps(py["py_eager_2"])])
    compiled = tps(py["py_compile"])
    rep["gpt2_124m_bf16_b64_block1024"] = {
        "ddptrain": gpt, "pytorch": py,
        "ddptrain_tokens_per_s_median": ours,
        "ddptrain_mfu_datasheet_median": median([(gpt[n] or {}).get("mfu_datasheet") for n in ("gpt_padded_1",
                                                                                               "gpt_padded_2")]),
        "pytorch_eager_tokens_per_s_median": eager,
        "ratio_over_pytorch_eager": ours / eager if ours and eager else None,
        "ratio_over_pytorch_compile": ours / compiled if ours and compiled else None,
        "lever_vocab_multiple_64_over_1": ours / tps(gpt["gpt_vocab1"]) if ours and tps(gpt["gpt_vocab1"]) else None,
        "lever_fused_loss_over_eager":
            ours / tps(gpt["gpt_eager_loss"]) if ours and tps(gpt["gpt_eager_loss"]) else None,
        "lever_fused_norm_over_aten":
            ours / tps(gpt["gpt_aten_norm"]) if ours and tps(gpt["gpt_aten_norm"]) else None,
        "lever_fused_linear_over_aten":
            ours / tps(gpt["gpt_aten_linear"]) if ours and tps(gpt["gpt_aten_linear"]) else None,
        "lever_fused_optimizer_over_loop":
            ours / tps(gpt["gpt_loop_optimizer"]) if ours and tps(gpt["gpt_loop_optimizer"]) else None,
    }


    def losses(name):
        """A run's (loss, grad_norm) at every step line: two runs of one configuration repeat bitwise
        when these are equal (the metrics file writes doubles exactly)."""
        return [(r.get("loss"), r.get("grad_norm")) for r in records(name) if r.get("kind") == "step"]


    def repeats(a, b):
        """None where it cannot say: a run missing or cut short (fewer step lines), a value absent."""
        la, lb = losses(a), losses(b)
        if not la or len(la) != len(lb) or any(v is None for pair in la + lb for v in pair):
            return None
        return la == lb


    def first_difference(a, b):
        """Where two runs that do not repeat part: the first step line whose (loss, grad_norm) differ."""
        la, lb = losses(a), losses(b)
        for i, (x, y) in enumerate(zip(la, lb)):
            if x != y:
                return {"step_line": i, a: x, b: y}
        return None


    # Note [Deterministic GPU runs]: what --deterministic costs (default tokens/s over its), and
    # whether two runs of one configuration repeat bitwise with it and without it.
    deterministic = median([tps(gpt["gpt_deterministic_1"]), tps(gpt["gpt_deterministic_2"])])
    rep["gpt2_124m_bf16_b64_block1024"].update({
        "deterministic_tokens_per_s_median": deterministic,
        "deterministic_cost": ours / deterministic if ours and deterministic else None,
        "repeats_bitwise": {"default": repeats("gpt_padded_1", "gpt_padded_2"),
                            "deterministic": repeats("gpt_deterministic_1", "gpt_deterministic_2")},
        "repeats_first_difference": {"default": first_difference("gpt_padded_1", "gpt_padded_2"),
                                     "deterministic": first_difference("gpt_deterministic_1", "gpt_deterministic_2")},
    })
    # #31: Llama at GPT-2 124M's sizes on the same flags; the goal is an MFU within 5 points of GPT's.
    llama = summary("llama_124m", measured)
    gpt_mfu = rep["gpt2_124m_bf16_b64_block1024"]["ddptrain_mfu_datasheet_median"]
    rep["llama_124m_bf16_b64_block1024"] = {
        "ddptrain": llama,
        "mfu_points_below_gpt": 100 * (gpt_mfu - llama["mfu_datasheet"]) if llama and gpt_mfu else None,
    }


def profile_sections():
    """The profiled runs' tables and the ZeRO runs."""


    def profile_table(name):
        """A profiled run's table (scripts/profile_table.py), or None and its name in `missing`."""
        path = os.path.join(logs, name + ".json")
        if os.path.exists(path):
            return json.load(open(path))
        if name not in rep["skipped_runs"]:
            rep["missing"].append(name)
        return None


    table = profile_table("profile_table")
    if table:
        names = " ".join(r["name"] for r in table.get("top", []) if r.get("category") == "attention").lower()
        table["sdpa_backend_from_kernels"] = ("cudnn" if "cudnn" in names else "flash" if "flash" in names else
                                              "mem_efficient" if "fmha" in names or "efficient" in names else
                                              "math or unknown" if names else "no attention kernel in the top")
        rep["gpt2_124m_profile"] = table
    rep["mini_resnet_profile"] = profile_table("resnet_profile_table")
    if any(os.path.exists(os.path.join(logs, f"gpt_zero{z}.jsonl")) for z in (1, 2, 3)):
        rep["gpt2_124m_zero"] = {f"stage{z}": summary(f"gpt_zero{z}", measured) for z in (1, 2, 3)}


# Each part on its own: a bug or an odd log in one costs its own sections (report_error says
# which and where), not the report's others.
for part in (tests_and_resnet_sections, gpt_sections, profile_sections):
    try:
        part()
    except Exception:  # noqa: BLE001 - a partial report beats none
        import traceback
        rep.setdefault("report_error", {})[part.__name__] = traceback.format_exc()[-2000:]


def torch_warnings():
    """The distinct warnings LibTorch printed in the runs' logs ([W...] lines), with their count."""
    seen = {}
    for path in sorted(glob.glob(os.path.join(logs, "*.log"))):
        for line in open(path, errors="replace"):
            m = re.search(r"\[W\d{4} [0-9:.]+ ([^\]]+)\] (.*)", line)
            if m:
                key = (m.group(1).split(":")[0] + ": " + m.group(2))[:200]
                seen[key] = seen.get(key, 0) + 1
    return seen


rep["torch_warnings"] = torch_warnings()
json.dump(rep, open(report_path, "w"), indent=2)
print(json.dumps(rep, indent=2))
