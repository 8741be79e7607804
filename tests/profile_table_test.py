#!/usr/bin/env python3
"""Scripts.ProfileTableNamesTheOpsBehindKernels: scripts/profile_table.py on a GPU kernel trace
(written here in the layout of LibTorch's Kineto traces: cpu_op events with "External id" and
"Input Dims", kernels carrying the External id of the op that launched them) sums GPU time by
category, measures the idle time inside the span, counts the kernels per step, and names for each top kernel the ATen ops
and input shapes behind it, the most frequent first. The CPU tests never see a GPU trace.

usage: profile_table_test.py SOURCE_DIR PYTHON
"""
import json
import os
import subprocess
import sys
import tempfile

src, python = sys.argv[1:3]
events = []


def op(ext, name, dims, ts):
    events.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": 5, "pid": 1, "tid": 1,
                   "args": {"External id": ext, "Input Dims": dims}})


def kernel(ext, name, ts, dur):
    events.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7,
                   "args": {"External id": ext}})


add = "void at::native::elementwise_kernel<128, 4, CUDAFunctor_add<float>>"
# Per step: three adds, two of the residual's shape and one of another, and one GEMM; 10 us idle.
for step in range(2):
    t = 1000 * step
    op(10 * step + 1, "aten::add", [[64, 1024, 768], [64, 1024, 768]], t)
    kernel(10 * step + 1, add, t + 10, 40)
    op(10 * step + 2, "aten::add_", [[64, 1024, 768], [64, 1024, 768], []], t + 1)
    kernel(10 * step + 2, add, t + 50, 40)
    op(10 * step + 3, "aten::add", [[50304, 768], [50304, 768]], t + 2)
    kernel(10 * step + 3, add, t + 90, 20)
    op(10 * step + 4, "aten::mm", [[65536, 768], [768, 2304]], t + 3)
    kernel(10 * step + 4, "nvjet_sm90_tst_256x128", t + 120, 100)
with tempfile.TemporaryDirectory() as d:
    trace, out = os.path.join(d, "kernels.json"), os.path.join(d, "table.json")
    with open(trace, "w") as f:
        json.dump({"traceEvents": events}, f)
    r = subprocess.run([python, os.path.join(src, "scripts/profile_table.py"), trace, "--steps", "2", "--out", out],
                       capture_output=True, text=True, timeout=120)
    print(r.stdout[-3000:], r.stderr[-3000:])
    table = json.load(open(out)) if r.returncode == 0 else {}
failures = []
if r.returncode != 0:
    failures.append(f"profile_table.py exited {r.returncode}")
if table.get("device") != "gpu":
    failures.append(f"device {table.get('device')!r}, expected gpu")
cats = table.get("categories_ms_per_step", {})
if abs(cats.get("elementwise", 0) - 0.1) > 1e-9 or abs(cats.get("gemm", 0) - 0.1) > 1e-9:
    failures.append(f"categories {cats}: expected 0.1 ms per step each of elementwise and gemm")
# The span is 1210 us over 2 steps; busy 400 us: 810 us idle, 0.405 ms per step.
if abs(table.get("gpu_idle_ms_per_step", 0) - 0.405) > 1e-9:
    failures.append(f"idle {table.get('gpu_idle_ms_per_step')!r} ms per step, expected 0.405")
# Four kernels a step, 400 us of kernels over 8 of them.
if table.get("kernels_per_step") != 4 or abs(table.get("mean_kernel_us", 0) - 50.0) > 1e-9:
    failures.append(f"kernels per step {table.get('kernels_per_step')!r}, mean {table.get('mean_kernel_us')!r} us:"
                    " expected 4 and 50")
top = {row["name"]: row for row in table.get("top", [])}
by = [(o["op"], o["calls"]) for o in top.get(add, {}).get("launched_by", [])]
expected = [("aten::add [[64,1024,768],[64,1024,768]]", 2), ("aten::add_ [[64,1024,768],[64,1024,768],[]]", 2),
            ("aten::add [[50304,768],[50304,768]]", 2)]
if sorted(by) != sorted(expected):
    failures.append(f"the add kernel's ops {by}, expected {expected}")
gemm_by = [o["op"] for o in top.get("nvjet_sm90_tst_256x128", {}).get("launched_by", [])]
if gemm_by != ["aten::mm [[65536,768],[768,2304]]"]:
    failures.append(f"the GEMM's ops {gemm_by}")
# Kernel names as run b's profile and the levers since have them: ddptrain's own kernels, cuDNN's
# attention backward, a dtype conversion (not a convolution), and a kernel no pattern knows,
# categorised by the op that launched it.
sys.path.insert(0, os.path.join(src, "scripts"))
import profile_table  # noqa: E402
for name, launcher, want in [
        ("void ddptrain::fused_ln_detail::forward_kernel<c10::BFloat16>", None, "normalisation"),
        ("void ddptrain::fused_ce_detail::backward_kernel<c10::BFloat16>", None, "softmax_loss"),
        ("void at::native::GammaBetaBackwardCUDAKernelTemplate<float>", None, "normalisation"),
        ("cudnn::fusion::compute_dot_do_o_specialized", None, "attention"),
        ("void ddptrain::swiglu_forward_kernel<c10::BFloat16>", None, "elementwise"),
        ("void at::native::vectorized_elementwise_kernel<4, convert_functor>", None, "elementwise"),
        ("sm90_xmma_fprop_implicit_gemm_bf16", None, "convolution"),
        ("void implicit_convolve_sgemm<float, 1024>", None, "convolution"),
        ("void at::native::conv_depthwise2d_forward_kernel<float>", None, "convolution"),
        ("aten::_slow_conv2d_forward", None, "convolution"),
        ("void some_unnamed_kernel<float>", "aten::native_layer_norm [[8,768]]", "normalisation"),
        ("void some_unnamed_kernel<float>", None, "other")]:
    got = profile_table.kernel_category(name, "kernel", launcher)
    if got != want:
        failures.append(f"{name} (launched by {launcher}): {got}, expected {want}")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
