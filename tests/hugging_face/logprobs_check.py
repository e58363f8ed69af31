"""Helpers of logprobs_test.sh.

  logprobs_check.py make ARCH MODEL_DIR [DATA_PREFIX]
                                                  a tiny random transformers model of families.py
                                                  (qwen3, qwen3-moe, ...) and prepared examples for
                                                  it (random ids, random masks)
  logprobs_check.py long DATA_PREFIX             one example of 40 tokens (past the Qwen3's 33)
  logprobs_check.py compare MODEL_DIR DATA_PREFIX FILE
                                                  FILE (pipetrain logprobs) against transformers'
                                                  log-probabilities of the same examples (1e-5)
"""
import array
import pathlib
import random
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "scripts"))


def make(arch, folder, prefix=None):
    import families
    from prepare_data import write_indexed
    families.tiny_model(arch, positions=32).save_pretrained(folder)
    if prefix is None:
        return
    rng = random.Random(5)
    sequences, masks = [], bytearray()
    for i in range(7):  # unequal lengths, up to the context + 1
        length = rng.randint(3, 33) if i else 33
        sequences.append([rng.randrange(families.VOCAB) for _ in range(length)])
        prompt = rng.randint(1, length - 1)
        masks += bytes([0] * prompt + [1] * (length - prompt))
    write_indexed(prefix, sequences, families.VOCAB, bytes(masks))


def make_long(prefix):
    from prepare_data import write_indexed
    write_indexed(prefix, [list(range(40))], 260, bytes([0] * 20 + [1] * 20))


def examples(prefix):
    """Each example's ids and mask, read back from PREFIX.idx/.bin/.mask."""
    idx = pathlib.Path(prefix + ".idx").read_bytes()
    count = int.from_bytes(idx[18:26], "little")
    lengths = array.array("i", idx[34:34 + 4 * count])
    dtype = {8: "H", 4: "i"}[idx[17]]
    tokens = array.array(dtype, pathlib.Path(prefix + ".bin").read_bytes())
    mask = pathlib.Path(prefix + ".mask").read_bytes()
    mask = mask[len(mask) - len(tokens):]  # past its header
    start = 0
    for length in lengths:
        yield list(tokens[start:start + length]), list(mask[start:start + length])
        start += length


def compare(folder, prefix, file):
    import transformers
    from safetensors.torch import load_file
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    ours = load_file(file)
    offsets = ours["offsets"].tolist()
    worst, count = 0.0, 0
    for i, (ids, mask) in enumerate(examples(prefix)):
        assert offsets[i + 1] - offsets[i] == len(ids), f"example {i}: length"
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float()
        want = logits.log_softmax(-1)[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        got = ours["logprobs"][offsets[i]:offsets[i + 1]]
        assert got[0] == 0 and ours["mask"][offsets[i]] == 0, f"example {i}: first token"
        assert ours["mask"][offsets[i] + 1:offsets[i + 1]].tolist() == mask[1:], f"example {i}"
        difference = ((got[1:] - want).abs() / want.abs().clamp(min=1)).max().item()
        worst = max(worst, difference)
        total = sum(w for w, m in zip(want.double().tolist(), mask[1:]) if m)
        assert abs(ours["sequence_logprobs"][i].item() - total) <= 1e-5 * max(1, abs(total)), i
        count += len(ids)
    assert worst <= 1e-5, f"largest relative difference {worst:.2e}"
    print(f"{len(offsets) - 1} examples, {count} tokens: largest relative difference "
          f"{worst:.1e}")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(*sys.argv[2:])
    elif sys.argv[1] == "long":
        make_long(*sys.argv[2:])
    else:
        compare(*sys.argv[2:])
