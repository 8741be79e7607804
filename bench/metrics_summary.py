"""Summarises a ddptrain metrics file (--metrics_file) for bench/run_bench.sh.

usage: metrics_summary.py METRICS_JSONL [START_UNIX_TIME]
prints one line: samples/s ms/step comm_wait_ms peak_mem_MiB tokens/s mfu_% data_wait_%
first_step_s peak_rss_MiB precision
- the step numbers are means over the step records after the first (the warm-up interval);
- first_step_s: from START_UNIX_TIME (when the bench launched the job) to the end of the
  first logged interval (run with --log_interval 1 for the first step), or nan;
- peak_rss_MiB: the largest peak resident set of any rank (epoch records), or nan;
- precision: what the run trained in (the "run" record).
"""
import json
import math
import sys

records = [json.loads(line) for line in open(sys.argv[1])]
start = float(sys.argv[2]) if len(sys.argv) > 2 else math.nan
steps = [r for r in records if r["kind"] == "step"]
if not steps:
    sys.exit(f"{sys.argv[1]}: no step records")
later = steps[1:] or steps


def mean(key, scale=1.0):
    return sum(r.get(key, 0.0) for r in later) / len(later) * scale


rss = [v for r in records if r["kind"] == "epoch" for v in r.get("peak_rss_mib_per_rank", [])]
run = next((r for r in records if r["kind"] == "run"), {})
print(f"{mean('samples_per_s'):.1f} {mean('ms_per_step'):.0f} {mean('comm_wait_ms'):.1f} "
      f"{max(r.get('peak_mem_mib', 0) for r in steps):.0f} {mean('tokens_per_s'):.0f} {mean('mfu', 100):.1f} "
      f"{mean('data_wait_share', 100):.1f} {steps[0]['unix_time'] - start:.2f} {max(rss) if rss else math.nan:.0f} "
      f"{run.get('precision', '?')}")
