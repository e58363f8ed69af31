"""Checks prepare-data --chat's output against transformers: each conversation's ids are
apply_chat_template's, and its mask is return_assistant_tokens_mask's (the template's own
generation markers); prompt/completion pairs train on the completion's tokens and the end
token. Usage: chat_masks.py MODEL_DIR DATA.jsonl PREFIX"""
import array
import json
import struct
import sys

import transformers


def read_examples(prefix):
    index = open(prefix + ".idx", "rb").read()
    count = struct.unpack("<Q", index[18:26])[0]
    lengths = array.array("i", index[34:34 + 4 * count])
    tokens = array.array("H", open(prefix + ".bin", "rb").read())
    masks = open(prefix + ".mask", "rb").read()
    assert masks[:8] == b"PTMASK01", "the mask names the .bin it was made with"
    masks = masks[24:]
    at = 0
    for length in lengths:
        yield list(tokens[at:at + length]), list(masks[at:at + length])
        at += length


def main(folder, data, prefix):
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    records = [json.loads(line) for line in open(data, encoding="utf-8")]
    prepared = list(read_examples(prefix))
    assert len(prepared) == len(records), (len(prepared), len(records))
    checked = trained = 0
    for record, (ids, mask) in zip(records, prepared):
        if "messages" in record:
            expected = tokenizer.apply_chat_template(
                record["messages"], tokenize=True, return_dict=True,
                return_assistant_tokens_mask=True)
            want_ids, want_mask = expected["input_ids"], expected["assistant_masks"]
        else:
            prompt = tokenizer(record["prompt"])["input_ids"]
            whole = tokenizer(record["prompt"] + record["completion"])["input_ids"]
            want_ids = whole + [tokenizer.eos_token_id]
            want_mask = [0] * len(prompt) + [1] * (len(want_ids) - len(prompt))
        assert ids == list(want_ids), f"example {checked}: ids differ"
        assert mask == list(want_mask), f"example {checked}: masks differ\n{mask}\n{want_mask}"
        checked += 1
        trained += sum(mask)
    print(f"{checked} examples: ids and masks as transformers gives them, {trained} trained tokens")


if __name__ == "__main__":
    main(*sys.argv[1:])
