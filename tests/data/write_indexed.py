"""Writes a Megatron-LM indexed dataset (MMIDIDX, version 1) with the standard library only,
following the layout of megatron/core/datasets/indexed_dataset.py's _IndexWriter: header,
version, dtype code, sequence count, document-index length, sequence lengths (int32),
sequence byte offsets (int64), document index (int64, starting at 0).

Usage: write_indexed.py PREFIX DTYPE DOCUMENTS [DAMAGE]
  DTYPE      uint16 or int32
  DOCUMENTS  number of documents; document d holds tokens (7 d + j) % 1000 for
             j < 5 + d % 11, then the end-of-document token 999 (one sequence each)
  DAMAGE     magic, version, float, truncated-bin, pointer, document-index, count
"""
import array
import struct
import sys

CODES = {"uint16": (8, "H"), "int32": (4, "i"), "float64": (6, "d")}


def documents(n):
    return [[(7 * d + j) % 1000 for j in range(5 + d % 11)] + [999] for d in range(n)]


def write(prefix, dtype, n, damage=None):
    code, typecode = CODES["float64" if damage == "float" else dtype]
    item = array.array(CODES[dtype][1]).itemsize
    docs = documents(n)
    tokens = array.array(CODES[dtype][1], [t for doc in docs for t in doc])
    data = tokens.tobytes()
    if damage == "truncated-bin":
        data = data[:-item * 3]
    with open(prefix + ".bin", "wb") as out:
        out.write(data)
    lengths = [len(doc) for doc in docs]
    pointers, offset = [], 0
    for length in lengths:
        pointers.append(offset)
        offset += length * item
    if damage == "pointer":
        pointers[len(pointers) // 2] += 10**9
    doc_index = list(range(n + 1))
    if damage == "document-index":
        doc_index[2] = n + 5
    with open(prefix + ".idx", "wb") as out:
        out.write(b"MMIDIDX\x00\x00" if damage != "magic" else b"NOTMEGA\x00\x00")
        out.write(struct.pack("<Q", 2 if damage == "version" else 1))
        out.write(struct.pack("<B", code))
        out.write(struct.pack("<Q", len(lengths) * (1000 if damage == "count" else 1)))
        out.write(struct.pack("<Q", len(doc_index)))
        out.write(array.array("i", lengths).tobytes())
        out.write(array.array("q", pointers).tobytes())
        out.write(array.array("q", doc_index).tobytes())


if __name__ == "__main__":
    write(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)
