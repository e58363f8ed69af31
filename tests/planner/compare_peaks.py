"""Compares the planner's per-stage peaks with a run's measured ones.

usage: compare_peaks.py METRICS_JSONL PREDICTED_JSON PIPE DATA
Prints one line per stage and "ok" when every stage is within 10%, else
"OFF BY MORE THAN 10%". A stage's measured peak is the largest of its data-parallel
ranks' (the metrics file's last record, ranks in pipe-major order).
"""
import json
import sys

records = [json.loads(line) for line in open(sys.argv[1])]
predicted = json.load(open(sys.argv[2]))[0]["stages"]
pipe, data = int(sys.argv[3]), int(sys.argv[4])
peaks = records[-1]["cpu_peak_memory_bytes"]
worst = 0
for s in range(pipe):
    measured = max(peaks[s * data:(s + 1) * data])
    error = abs(predicted[s]["total"] / measured - 1)
    worst = max(worst, error)
    print(f"stage {s}: predicted {predicted[s]['total']:.0f} measured {measured} ({100 * error:.1f}%)", end="; ")
print("ok" if worst <= 0.10 else "OFF BY MORE THAN 10%")
