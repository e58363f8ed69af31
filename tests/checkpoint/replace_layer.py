"""Puts a well-formed layer file of another model into a checkpoint: qkv.weight with
half the columns, the manifest's size, CRC-32 and tensor shape updated and the manifest
resealed, as a checkpoint of a narrower model would have (or TENSOR, e.g. an optimizer
file's "qkv.weight/exp_avg").
Usage: replace_layer.py TAG_FOLDER FILE [TENSOR]"""
import json
import os
import sys
import zlib

import numpy as np
from safetensors.numpy import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reseal_manifest import reseal  # noqa: E402

folder, name = sys.argv[1], sys.argv[2]
tensor = sys.argv[3] if len(sys.argv) > 3 else "qkv.weight"
tensors = load_file(f"{folder}/{name}")
tensors[tensor] = np.zeros((48, 8), dtype=np.float32)
save_file(tensors, f"{folder}/{name}")
data = open(f"{folder}/{name}", "rb").read()
manifest = json.load(open(f"{folder}/manifest.json"))
manifest["files"][name] = {"bytes": len(data), "crc32": zlib.crc32(data)}
for layer in manifest["layers"]:
    if layer.get("file") == name and tensor in layer.get("tensors", {}):
        layer["tensors"][tensor]["shape"] = [48, 8]
json.dump(manifest, open(f"{folder}/manifest.json", "w"))
reseal(folder)
