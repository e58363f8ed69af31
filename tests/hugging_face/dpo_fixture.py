"""Preference pairs for DPO against TRL, for chat_fixture.py's tokenizer: nine conversational
pairs (a prompt of messages, a chosen and a rejected assistant answer), and a second tiny
LLaMA of the model's architecture with other, sharper weights, the reference of the full fine-tunes.
Usage: dpo_fixture.py MODEL_DIR PAIRS.jsonl REFERENCE_DIR"""
import json
import random
import sys

import torch
import transformers


def main(model, pairs, reference):
    words = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read().split()
    rng = random.Random(11)
    say = lambda low, high: " ".join(rng.choice(words) for _ in range(rng.randint(low, high)))
    answer = lambda text: [{"role": "assistant", "content": text}]
    with open(pairs, "w", encoding="utf-8") as out:
        for i in range(9):
            prompt = [{"role": "user", "content": say(1, 5)}]
            if i % 2 == 0:
                prompt = [{"role": "system", "content": say(1, 3)}] + prompt
            out.write(json.dumps({"prompt": prompt, "chosen": answer(say(1, 8)),
                                  "rejected": answer(say(1, 8))}) + "\n")
    config = transformers.AutoConfig.from_pretrained(model)
    torch.manual_seed(7)
    other = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # sharper than the policy: log-ratios of whole nats, not of rounding
        other.lm_head.weight.mul_(8)
    other.save_pretrained(reference)
    transformers.AutoTokenizer.from_pretrained(model).save_pretrained(reference)


if __name__ == "__main__":
    main(*sys.argv[1:])
