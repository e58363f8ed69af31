"""Writes a checkpoint tag folder's manifest.crc32 for its manifest.json as it is now, as
a save would have (for tests that edit a manifest to check what lies behind the checksum).
Usage: reseal_manifest.py TAG_FOLDER"""
import sys
import zlib


def reseal(folder):
    data = open(f"{folder}/manifest.json", "rb").read()
    with open(f"{folder}/manifest.crc32", "w") as out:
        out.write("%08x\n" % zlib.crc32(data))


if __name__ == "__main__":
    reseal(sys.argv[1])
