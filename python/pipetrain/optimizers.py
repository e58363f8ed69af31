"""A torch.optim optimizer given to initialize(), read into the engine's config: its type,
its hyper-parameters and its parameter groups' weight decay. The engine's fused optimizer
then steps (the script's object is not stepped)."""
import re

import torch

_KINDS = {torch.optim.Adam: "Adam", torch.optim.AdamW: "AdamW", torch.optim.SGD: "SGD"}
_FIELDS = {"Adam": ("lr", "betas", "eps"), "AdamW": ("lr", "betas", "eps"),
           "SGD": ("lr", "momentum")}
# Settings the engine's optimizers do not have: only their defaults are accepted.
_DEFAULTS = {"amsgrad": False, "maximize": False, "nesterov": False, "dampening": 0,
             "capturable": False, "differentiable": False, "decoupled_weight_decay": False}


def _refuse(text):
    raise ValueError(f"pipetrain: the optimizer given to initialize(): {text}")


def optimizer_config(optimizer, parameter_names):
    """(the config's optimizer section, weight_decay_exempt) for `optimizer`, whose groups hold
    this stage's parameters; `parameter_names` maps id(parameter) to (layer type, name)."""
    kind = _KINDS.get(type(optimizer))
    if kind is None:
        _refuse(f"{type(optimizer).__name__} is not one of torch.optim.Adam, AdamW, SGD (or give "
                "the config's optimizer section)")
    groups = optimizer.param_groups
    first = groups[0]
    for group in groups:
        for key, default in _DEFAULTS.items():
            if key in group and group[key] != default and not (
                    key == "decoupled_weight_decay" and kind == "AdamW"):
                _refuse(f"{key}={group[key]!r}, which the engine's {kind} does not have")
        for key in _FIELDS[kind]:
            if group[key] != first[key]:
                _refuse(f"parameter groups with different {key} ({first[key]!r}, "
                        f"{group[key]!r}): groups may differ in weight_decay only")
    params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in first.items()
              if k in _FIELDS[kind]}
    decays = sorted({float(group["weight_decay"]) for group in groups if group["params"]})
    if len(decays) > 2 or (len(decays) == 2 and decays[0] != 0.0):
        _refuse(f"weight decays {decays}: the groups may use one weight_decay and 0")
    params["weight_decay"] = decays[-1] if decays else 0.0
    exempt, decayed = set(), set()
    for group in groups:
        for p in group["params"]:
            if id(p) not in parameter_names:
                _refuse("it holds a tensor that is not a parameter of this stage's layers")
            full = ".".join(parameter_names[id(p)])
            (exempt if float(group["weight_decay"]) == 0.0 and decays[-1] != 0.0
             else decayed).add(full)
    both = exempt & decayed
    if both:
        _refuse(f"{sorted(both)[0]} is in a group with weight decay in one layer and without in "
                "another: groups are told apart by layer type and parameter name")
    # Regexes over "TYPE.NAME" (the engine's weight_decay_exempt); none: decay every one.
    patterns = ["^" + re.escape(name) + "$" for name in sorted(exempt)] or ["^$"]
    return {"type": kind, "params": params}, patterns
