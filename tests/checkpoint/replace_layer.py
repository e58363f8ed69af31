"""Puts a well-formed layer file of another model into a checkpoint: qkv.weight with
half the columns, manifest size and CRC-32 updated, as a checkpoint of a narrower model
would have (or TENSOR, e.g. an optimizer file's "qkv.weight/exp_avg").
Usage: replace_layer.py TAG_FOLDER FILE [TENSOR]"""
import json
import sys
import zlib

import numpy as np
from safetensors.numpy import load_file, save_file

folder, name = sys.argv[1], sys.argv[2]
tensor = sys.argv[3] if len(sys.argv) > 3 else "qkv.weight"
tensors = load_file(f"{folder}/{name}")
tensors[tensor] = np.zeros((48, 8), dtype=np.float32)
save_file(tensors, f"{folder}/{name}")
data = open(f"{folder}/{name}", "rb").read()
manifest = json.load(open(f"{folder}/manifest.json"))
manifest["files"][name] = {"bytes": len(data), "crc32": zlib.crc32(data)}
json.dump(manifest, open(f"{folder}/manifest.json", "w"))
