#!/usr/bin/env python3
"""The built-in GPT's operators against PyTorch eager's, for one training micro-batch.

bench/gpu_eager.py's GPT (PyTorch eager) and pipetrain's (through tests/models/gpt_ops),
the same small shapes in bf16 on the CPU, each phase (forward, loss, backward) listed from
the same RecordFunction events the profiler shows: the outermost ATen operators and the
autograd nodes. Views that copy nothing cost no kernel and are only counted; every other
operator is compared with its input types, per block (two layers less one) and for the
whole model. Fails where pipetrain issues an operator eager does not, or more of one.

    gpt_op_lists.py build/tests/gpt_ops
"""
import collections
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import gpu_eager  # noqa: E402

VOCAB, CONTEXT, D_MODEL, HEADS, BATCH, MICRO_BATCHES = 64, 16, 32, 2, 2, 2  # as gpt_ops.h
VIEWS = {"aten::view", "aten::reshape", "aten::_unsafe_view", "aten::permute", "aten::transpose",
         "aten::t", "aten::select", "aten::unbind", "aten::expand", "aten::as_strided",
         "aten::narrow", "aten::slice", "aten::unsqueeze", "aten::squeeze", "aten::alias",
         "aten::detach", "aten::split", "aten::chunk", "aten::flatten", "aten::contiguous",
         "aten::_reshape_alias", "aten::expand_as", "aten::view_as", "aten::lift_fresh"}
COPIES = {"aten::copy_", "aten::clone", "aten::_to_copy"}
TENSOR_TYPES = {"c10::BFloat16", "c10::Half", "float", "double", "long int", "int", "bool",
                "signed char", "unsigned char", "short int"}


def recorded(events):
    """The outermost ATen operators and autograd nodes, as gpt_ops records them."""
    ops = []
    by_event = {}
    for e in sorted(events, key=lambda e: (e.time_range.start, -e.time_range.end)):
        aten_parent = e.cpu_parent
        while aten_parent is not None and not aten_parent.name.startswith("aten::"):
            aten_parent = aten_parent.cpu_parent
        if e.name.startswith("aten::") and aten_parent is None:
            op = [e.name, [t for t in e.input_dtypes if t in TENSOR_TYPES], e.name in COPIES]
            by_event[id(e)] = op
            ops.append(op)
        elif aten_parent is not None and e.name in COPIES:  # marks the outermost operator
            top = aten_parent
            while _aten_above(top) is not None:
                top = _aten_above(top)
            if id(top) in by_event:
                by_event[id(top)][2] = True
        elif (not e.name.startswith("aten::") and not e.name.startswith("autograd::engine::")
              and e.cpu_parent is not None and e.cpu_parent.name.startswith("autograd::engine::")):
            ops.append([e.name, [], False])  # an autograd node, under its evaluate_function
    return ops


def _aten_above(e):
    p = e.cpu_parent
    while p is not None and not p.name.startswith("aten::"):
        p = p.cpu_parent
    return p


def eager_ops(layers):
    torch.manual_seed(0)
    model = gpu_eager.Gpt(VOCAB, CONTEXT, D_MODEL, HEADS, layers).to(torch.bfloat16)
    ids = torch.randint(VOCAB, (BATCH, CONTEXT))
    labels = torch.randint(VOCAB, (BATCH, CONTEXT))
    phases = {}
    state = {}

    def run(name, work):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
            work()
        phases[name] = recorded(p.events())

    run("forward", lambda: state.update(logits=model(ids)))

    def loss():
        logits = state["logits"].float()
        state["loss"] = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))
    run("loss", loss)
    # The plain loop's scale by a number (aten::div.Scalar); Python's `/` would wrap the
    # number in a tensor first, for the same kernel.
    run("backward", lambda: torch.ops.aten.div.Scalar(state["loss"], MICRO_BATCHES).backward())
    return phases


def pipetrain_ops(program, layers):
    out = subprocess.run([program, str(layers)], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    return json.loads(out.stdout)


def kinds(ops):
    """(work, views, nodes): Counters of operators that do work (name and input types),
    of views that copy nothing, of autograd nodes."""
    work, views, nodes = collections.Counter(), collections.Counter(), collections.Counter()
    for name, dtypes, copies in ops:
        if not name.startswith("aten::"):
            nodes[name] += 1
        elif name in VIEWS and not copies:
            views[name] += 1
        elif name == "aten::linear" and len(dtypes) == 2:
            # Without a bias: ATen's linear is a matmul by the transposed weight.
            work[("aten::matmul", tuple(dtypes))] += 1
        else:
            work[(name, tuple(dtypes))] += 1
    return work, views, nodes


def minus(a, b):
    c = collections.Counter(a)
    c.subtract(b)
    return c


def describe(key):
    return key if isinstance(key, str) else f"{key[0]}({', '.join(key[1])})"


def compare(label, ours, theirs):
    """Prints one phase's comparison; returns the operators pipetrain adds."""
    (work, views, nodes), (e_work, e_views, e_nodes) = kinds(ours), kinds(theirs)
    extra = {k: n for k, n in minus(work, e_work).items() if n > 0}
    fewer = {k: -n for k, n in minus(work, e_work).items() if n < 0}
    print(f"{label}: pipetrain {sum(work.values())} operators with work, {sum(views.values())} "
          f"views, {sum(nodes.values())} autograd nodes; eager {sum(e_work.values())}, "
          f"{sum(e_views.values())}, {sum(e_nodes.values())}")
    for k, n in sorted(extra.items(), key=lambda kv: describe(kv[0])):
        print(f"    pipetrain issues {n} more: {describe(k)}")
    for k, n in sorted(fewer.items(), key=lambda kv: describe(kv[0])):
        print(f"    pipetrain issues {n} fewer: {describe(k)}")
    for k, n in sorted(minus(nodes, e_nodes).items()):
        if n:
            print(f"    autograd nodes {'+' if n > 0 else ''}{n}: {k}")
    return extra


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gpt_op_lists.py GPT_OPS_PROGRAM")
    program = sys.argv[1]
    ours = {layers: pipetrain_ops(program, layers) for layers in (1, 2)}
    theirs = {layers: eager_ops(layers) for layers in (1, 2)}
    added = 0
    for phase in ("forward", "loss", "backward"):
        # One block's operators: the two-layer model's less the one-layer model's.
        block = [collections.Counter(map(json.dumps, x[2][phase])) -
                 collections.Counter(map(json.dumps, x[1][phase])) for x in (ours, theirs)]
        per_block = [[json.loads(k) for k in c.elements()] for c in block]
        added += len(compare(f"{phase}, per block", *per_block))
        added += len(compare(f"{phase}, whole model (2 layers)", ours[2][phase], theirs[2][phase]))
    if added:
        print(f"FAILED: pipetrain's GPT issues operators eager PyTorch does not ({added} kinds)")
        sys.exit(1)
    print("op lists agree: pipetrain issues no operator eager PyTorch does not")


if __name__ == "__main__":
    main()
