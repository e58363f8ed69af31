"""pipetrain's compute orders against PyTorch's own, rank by rank.

For every schedule pipetrain takes from torch.distributed.pipelining (zbv, dualpipev,
interleaved-zb, looped-bfs) and every pipe size, chunk count and micro-batch count in a
grid that PyTorch accepts, PyTorch's schedule class computes its `pipeline_order` (its
own `_calculate_single_rank_operations`, on an instance with only the fields it reads,
since building one needs a process group per rank) and `pipetrain schedule --format csv`
prints pipetrain's plan; with the idle slots dropped, each rank's actions must be equal.
DualPipeV's overlapped F&B pairs must be pairs on both sides, `(0F3;3B1)OVERLAP_F_B`.
PyTorch's own CSVs of some of them (its _dump_csv) are read back with --kind file.

Usage: torch_orders_test.py PIPETRAIN
"""
import os
import subprocess
import tempfile
import sys
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.distributed.pipelining import schedules as S

PIPETRAIN = sys.argv[1]


LETTERS = {S._ComputationType.FORWARD: "F", S._ComputationType.FULL_BACKWARD: "B",
           S._ComputationType.BACKWARD_INPUT: "I", S._ComputationType.BACKWARD_WEIGHT: "W"}


def torch_schedule(cls, p, chunks, m):
    """An instance of PyTorch's class with its pipeline_order computed."""
    s = cls.__new__(cls)
    s.pp_group_size = p
    s.n_local_stages = chunks
    s._n_microbatches = m
    s.num_stages = s._num_stages = p * chunks
    s.number_of_rounds = max(1, m // p)
    s.microbatches_per_round = m // s.number_of_rounds
    s._stages = [None] * chunks
    orders = {}
    for rank in range(p):
        s.rank = rank
        orders[rank] = s._calculate_single_rank_operations(rank)
    s.pipeline_order = orders
    if cls is S.ScheduleInterleavedZeroBubble:  # inserts idle slots only
        s.pipeline_order = s._add_bubbles_to_actions(p * chunks)
    return s


def torch_order(cls, p, chunks, m):
    """Each rank's compute actions as `{stage}{F|B|I|W}{mb}`, idle slots dropped."""
    orders = torch_schedule(cls, p, chunks, m).pipeline_order
    result = []
    for rank in range(p):
        actions = []
        for a in orders[rank]:
            if a is None:
                continue
            cells = [f"{one.stage_index}{LETTERS[one.computation_type]}{one.microbatch_index}"
                     for one in (a.sub_actions or [a])]
            actions.append(cells[0] if len(cells) == 1 else f"({cells[0]};{cells[1]})OVERLAP_F_B")
        result.append(actions)
    return result


def accepted(kind, p, chunks, m):
    """PyTorch's constructor conditions for these classes."""
    if kind in ("zbv", "dualpipev") and chunks != 2:
        return False
    if kind == "dualpipev" and m < 2 * p:
        return False
    if kind == "interleaved-zb":
        rounds = max(1, m // p)
        if m % rounds:
            return False
    return True


def pipetrain_order(kind, p, chunks, m, file=None):
    shape = ["--file", file] if file else ["-m", str(m), "-p", str(p), "--chunks", str(chunks)]
    out = subprocess.run([PIPETRAIN, "schedule", "--kind", kind, *shape, "--format", "csv"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip()
    rows = out.stdout.strip("\n").split("\n")
    return [[c for c in row.split(",") if c] for row in rows], None


CLASSES = {
    "zbv": S.ScheduleZBVZeroBubble,
    "dualpipev": S.ScheduleDualPipeV,
    "interleaved-zb": S.ScheduleInterleavedZeroBubble,
    "looped-bfs": S.ScheduleLoopedBFS,
}

def shapes():
    """(kind, p, chunks, m) over pipe sizes 2, 3, 4, 8, chunks 1-3 where the kind takes
    them, and micro-batch counts around each threshold (1..3, p, 2p-1..2p+1, 3p)."""
    for kind in CLASSES:
        for p in (2, 3, 4, 8):
            for chunks in (1, 2, 3):
                if chunks != 2 and kind in ("zbv", "dualpipev"):
                    continue
                if p == 8 and chunks == 3:
                    continue
                for m in sorted({1, 2, 3, p, p + 1, 2 * p - 1, 2 * p, 2 * p + 1, 3 * p}):
                    if accepted(kind, p, chunks, m):
                        yield kind, p, chunks, m


def check(shape):
    kind, p, chunks, m = shape
    got, error = pipetrain_order(kind, p, chunks, m)
    return shape, got, error


def check_file(shape):
    """PyTorch's own CSV of the schedule (its _dump_csv: idle cells, F&B pairs as
    `(0F3;3B1)OVERLAP_F_B`), read by `pipetrain schedule --kind file`."""
    kind, p, chunks, m = shape
    path = os.path.join(WORK, f"{kind}-{p}-{chunks}-{m}.csv")
    S.PipelineScheduleMulti._dump_csv(torch_schedule(CLASSES[kind], p, chunks, m), path)
    got, error = pipetrain_order("file", p, chunks, m, file=path)
    return shape, got, error


WORK = tempfile.mkdtemp()
FILE_SHAPES = [(kind, p, 2, m) for kind in ("zbv", "dualpipev", "interleaved-zb", "looped-bfs")
               for p in (2, 4) for m in (2 * p, 3 * p)]


print(f"torch {torch.__version__}")
checked = failures = 0
with ThreadPoolExecutor(max_workers=2) as pool:
    results = list(pool.map(check, list(shapes())))
    results += list(pool.map(check_file, FILE_SHAPES))
    for (kind, p, chunks, m), got, error in results:
        expected = torch_order(CLASSES[kind], p, chunks, m)
        checked += 1
        if got == expected:
            continue
        failures += 1
        if failures <= 5:
            print(f"MISMATCH {kind} p={p} chunks={chunks} m={m}: {error or ''}")
            for r in range(p):
                if got is None or got[r] != expected[r]:
                    print(f"  rank {r} torch:     {' '.join(expected[r])}")
                    print(f"  rank {r} pipetrain: {' '.join(got[r]) if got else '-'}")
                    break
print(f"{checked} shapes checked, {failures} differ")
sys.exit(1 if failures or checked == 0 else 0)
