#!/usr/bin/env python3
"""Note [Levers the CUDA tests vouch for]: the GPU check's GPT and Llama runs take a lever whose
defaults are still off (--fused_norm, --fused_linear: kernels no GPU had run when they landed)
only where that lever's CUDA tests passed in this very check. Each lever's tests run as a group
of their own (scripts/gpu-check.sh: LOGS/cuda_tests_<group>.json, gtest's JSON), so a kernel
that crashes the test binary takes its own lever down, not the other's, and the runs measure
the rest instead of failing one after another. A group vouches for its lever when its JSON is
there (gtest writes it only when the binary finishes), at least one test passed and none
failed; otherwise the runs take `off` and LOGS/levers.json (the report's levers_used) says why.

usage: cuda_levers.py LOGS  -> prints "<fused_norm> <fused_linear>" (auto or off) on one line
"""
import json
import os
import sys

LEVERS = {"fused_norm": "norm", "fused_linear": "linear"}  # flag -> its test group


def gtest_results(path):
    """A gtest JSON's (--gtest_output) tests: which passed, which failed (with the first
    failure's message), which were skipped; None where the file is missing. Raises ValueError
    where it is not JSON."""
    if not os.path.exists(path):
        return None
    out = {"passed": [], "failed": {}, "skipped": []}
    for suite in json.load(open(path)).get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = f"{suite.get('name')}.{t.get('name')}"
            if t.get("failures"):
                out["failed"][name] = t["failures"][0].get("failure", "")[:400]
            elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                out["skipped"].append(name)
            else:
                out["passed"].append(name)
    return out


def skipped_reason(logs, stage):
    """Why gpu-check.sh's skip_run left `stage` out (LOGS/skipped_runs.tsv), or None."""
    try:
        with open(os.path.join(logs, "skipped_runs.tsv")) as f:
            for line in f:
                name, _, why = line.rstrip("\n").partition("\t")
                if name == stage:
                    return why
    except OSError:
        pass
    return None


def verdict(logs, group):
    """(value, why) for the lever whose tests are `group`."""
    path = os.path.join(logs, f"cuda_tests_{group}.json")
    try:
        results = gtest_results(path)
    except (OSError, ValueError) as e:
        return "off", f"{os.path.basename(path)} is unreadable: {e}"
    if results is None:
        skipped = skipped_reason(logs, f"cuda_tests_{group}")
        if skipped is not None:  # the check left the stage out (the budget): nothing crashed
            return "off", f"its tests did not run: {skipped}"
        return "off", f"no {os.path.basename(path)}: its tests did not finish (a crash or a time-out: see its log)"
    if results["failed"]:
        return "off", "failed: " + ", ".join(results["failed"])
    if not results["passed"]:
        return "off", "none of its tests ran (all skipped, or the filter matched none)"
    return "auto", "passed: " + ", ".join(results["passed"])


def main():
    logs = sys.argv[1]
    chosen = {flag: dict(zip(("value", "why"), verdict(logs, group))) for flag, group in LEVERS.items()}
    with open(os.path.join(logs, "levers.json"), "w") as f:
        json.dump(chosen, f, indent=2)
    print(" ".join(chosen[flag]["value"] for flag in LEVERS))


if __name__ == "__main__":
    main()
