#!/usr/bin/env python3
"""Summarises a kernel trace of --enable_profiling (<checkpoint_dir>/kernels_rank<r>.json, the
Chrome trace LibTorch's profiler writes) as the table #27's levers are measured against: time
by kind of work and the top operations.

usage: profile_table.py TRACE.json [--steps N] [--top K] [--out TABLE.json]

- On a GPU (the trace has kernel events): GPU time of kernels, memory copies and sets, by
  category (gemm, attention, normalisation, elementwise, reductions, softmax_loss, optimizer,
  memcpy, other), the GPU's idle time inside the traced span (the span minus the union of its
  busy intervals), the kernels per step and their mean time, and the top K kernels, each with
  the ATen ops (and their input shapes) that launched it.
- On a CPU (no kernel events): the self time of the ATen ops (cpu_op events, each op's time
  minus the ops it called on the same thread) by the same categories, and the top K ops.
Times are per step when --steps is given (the recorded steps: 3 for --enable_profiling).
Prints the table and writes it as JSON to --out (stdout when absent).
"""
import argparse
import json
import re
import sys

# First match wins; GPU kernel names and ATen op names both.
# ddptrain's own kernels by their namespaces (fused_ln_detail, fused_ce_detail, swiglu, rotary);
# cuDNN's attention backward by its fusion kernels; "conv" but not "convert" or "conversion".
CATEGORIES = [
    ("attention", r"flash|fmha|attention|sdpa|_scaled_dot_product|cudnn::fusion|dot_do_o"),
    ("convolution", r"conv(?!ert|ers)|fprop|dgrad|wgrad|implicit_gemm"),
    ("gemm", r"gemm|cutlass|xmma|nvjet|cublas|aten::(mm|addmm|bmm|matmul|linear|baddbmm)$"),
    ("normalisation", r"layer_?norm|rms_?norm|batch_?norm|group_?norm|fused_ln|fused_norm|GammaBeta"),
    ("softmax_loss", r"softmax|nll|cross_entropy|log_softmax|fused_ce"),
    ("optimizer", r"adam|sgd|multi_tensor_apply|foreach"),
    ("reductions", r"reduce|aten::(sum|mean|norm|linalg_vector_norm|max|min|argmax|all|any)$"),
    ("memcpy", r"memcpy|memset|aten::(copy_|to|_to_copy|contiguous|clone)$"),
    ("elementwise", r"elementwise|vectorized|unrolled|gelu|silu|relu|swiglu|rotate_kernel|rotary|dropout|fill|"
                    r"aten::(add|mul|sub|div|cat|"
                    r"addcmul|addcdiv|lerp|sqrt|rsqrt|pow|exp|neg|where|masked_fill|tanh|sigmoid|zero_|fill_|"
                    r"add_|mul_|div_|sub_|gelu_backward|threshold_backward|embedding.*)"),
]


def category(name, cat):
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "memcpy"
    for label, pattern in CATEGORIES:
        if re.search(pattern, name, re.I):
            return label
    return "other"


def kernel_category(name, cat, launcher=None):
    """A kernel's category by its name, else by the ATen op that launched it ("op [dims]")."""
    c = category(name, cat)
    if c == "other" and launcher:
        c = category(launcher.split(" ")[0], "cpu_op")
    return c


def union_length(intervals):
    total, end = 0.0, None
    start = None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    if end is not None:
        total += end - start
    return total


def cpu_self_times(ops):
    """Each op's duration minus the durations of the ops directly inside it (same thread)."""
    out = []
    by_thread = {}
    for e in ops:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for events in by_thread.values():
        events.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        stack = []  # [event, self_time]
        for e in events:
            start, end = e["ts"], e["ts"] + e.get("dur", 0)
            while stack and stack[-1][0]["ts"] + stack[-1][0].get("dur", 0) <= start:
                out.append(tuple(stack.pop()))
            if stack:
                stack[-1][1] -= e.get("dur", 0)
            stack.append([e, float(e.get("dur", 0))])
        out.extend(tuple(s) for s in stack)
    return [(e, max(self_time, 0.0)) for e, self_time in out]


def launching_ops(events):
    """External id -> "op [input dims]" of the CPU op with that id: a kernel's External id is
    the ATen op that launched it (the profiler records the shapes)."""
    out = {}
    for e in (e for e in events if e.get("cat") == "cpu_op"):
        args = e.get("args", {})
        ext = args.get("External id")
        if ext is not None:
            dims = args.get("Input Dims")
            out[ext] = f"{e['name']} {json.dumps(dims, separators=(',', ':'))}" if dims else e["name"]
    return out


def summarise(trace, steps, top):
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if gpu:
        timed = [(e, float(e["dur"])) for e in gpu]
        span = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)
        busy = union_length([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
        device = "gpu"
    else:
        ops = [e for e in events if e.get("cat") == "cpu_op"]
        if not ops:
            raise SystemExit("the trace has neither GPU kernels nor CPU ops: was it written by --enable_profiling?")
        timed = cpu_self_times(ops)
        span = max(e["ts"] + e["dur"] for e in ops) - min(e["ts"] for e in ops)
        busy = None
        device = "cpu"
    per = 1000.0 * max(steps, 1)  # microseconds -> milliseconds per step
    launchers = launching_ops(events) if device == "gpu" else {}
    by_cat, by_name, ops_of = {}, {}, {}
    for e, t in timed:
        op = launchers.get(e.get("args", {}).get("External id"))
        c = kernel_category(e["name"], e.get("cat"), op)
        by_cat[c] = by_cat.get(c, 0.0) + t
        n = by_name.setdefault(e["name"], [0.0, 0, c])
        n[0] += t
        n[1] += 1
        if op:
            counts = ops_of.setdefault(e["name"], {})
            counts[op] = counts.get(op, 0) + 1
    total = sum(by_cat.values())
    table = {
        "device": device,
        "steps": steps,
        "total_ms_per_step": total / per,
        "span_ms_per_step": span / per,
        "categories_ms_per_step": {c: t / per for c, t in sorted(by_cat.items(), key=lambda kv: -kv[1])},
        "shares": {c: t / total for c, t in sorted(by_cat.items(), key=lambda kv: -kv[1])} if total else {},
        "top": [{"name": name, "ms_per_step": t / per, "calls": n, "category": c}
                for name, (t, n, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]],
    }
    for row in table["top"]:
        counts = ops_of.get(row["name"])
        if counts:  # which ATen ops (and input shapes) launched it, the most frequent first
            row["launched_by"] = [{"op": op, "calls": n} for op, n in sorted(counts.items(), key=lambda kv: -kv[1])[:3]]
    if busy is not None:
        table["gpu_idle_ms_per_step"] = (span - busy) / per
        table["gpu_idle_share"] = (span - busy) / span if span else 0.0
        # Many short kernels and an idle GPU: the step waits on the host launching them.
        table["kernels_per_step"] = len(timed) / max(steps, 1)
        table["mean_kernel_us"] = total / len(timed)
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--out")
    a = ap.parse_args()
    with open(a.trace) as f:
        table = summarise(json.load(f), a.steps, a.top)
    unit = "ms/step" if a.steps > 1 else "ms"
    print(f"{table['device']} time by category ({table['total_ms_per_step']:.2f} {unit} in all, "
          f"span {table['span_ms_per_step']:.2f}):", file=sys.stderr)
    for c, t in table["categories_ms_per_step"].items():
        print(f"  {c:<14} {t:9.3f} {unit}  {100 * table['shares'][c]:5.1f}%", file=sys.stderr)
    if "gpu_idle_ms_per_step" in table:
        print(f"  {'gpu idle':<14} {table['gpu_idle_ms_per_step']:9.3f} {unit}  "
              f"{100 * table['gpu_idle_share']:5.1f}% of the span; {table['kernels_per_step']:.0f} kernels, "
              f"{table['mean_kernel_us']:.1f} us each on average", file=sys.stderr)
    for row in table["top"]:
        print(f"  {row['ms_per_step']:9.3f} {unit} {row['calls']:6d}x  {row['category']:<13} {row['name'][:90]}",
              file=sys.stderr)
        for op in row.get("launched_by", []):
            print(f"  {'':>30} by {op['calls']}x {op['op'][:110]}", file=sys.stderr)
    text = json.dumps(table, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
