"""Reads a ddptrain TensorBoard directory with TensorBoard's own EventAccumulator and checks
it against the run's metrics file (the same numbers, as float32).

usage: read_tensorboard.py TB_DIR METRICS_JSONL   (exit 0 and print TB OK ...)
"""
import json
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


tb_dir, metrics = sys.argv[1], sys.argv[2]
acc = EventAccumulator(tb_dir, size_guidance={"scalars": 0})
acc.Reload()
tags = acc.Tags()["scalars"]
records = [json.loads(line) for line in open(metrics)]
# A resumed run logs again the steps between its checkpoint and the crash: the metrics file
# keeps both records (each with its run), TensorBoard only the resumed run's (its SessionLog
# START drops the rest), so each step is checked against its last record.
last = {}
for rec in records:
    last[(rec["kind"], rec["step"])] = rec
checked = 0
for rec in last.values():
    group = "train" if rec["kind"] == "step" else "epoch"
    for key in ("loss", "lr", "samples_per_s", "mfu", "train_loss", "train_acc", "val_loss"):
        if key not in rec:
            continue
        tag = f"{group}/{key}"
        assert tag in tags, (tag, tags)
        events = [e for e in acc.Scalars(tag) if e.step == rec["step"]]
        assert len(events) == 1, (tag, rec["step"], [e.step for e in acc.Scalars(tag)])
        assert events[0].value == f32(rec[key]), (tag, events[0].value, rec[key])
        checked += 1
assert checked > 0
print(f"TB OK {len(tags)} tags, {checked} values checked")
