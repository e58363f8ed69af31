"""Preference JSONL in TRL's three forms for chat_fixture.py's tokenizer, and the same pairs
as supervised examples (each side a prompt with its answer), which chat_masks.py checks
against transformers. Usage: preference_fixture.py PREFERENCE.jsonl EXPANDED.jsonl"""
import json
import random
import sys


def main(preference, expanded):
    words = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read().split()
    rng = random.Random(9)
    say = lambda low, high: " ".join(rng.choice(words) for _ in range(rng.randint(low, high)))
    pairs, sides = [], []
    for i in range(12):
        chosen, rejected = say(1, 8), say(1, 8)
        if i % 3 == 0:  # standard: text
            prompt = say(2, 6) + " "
            pairs.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
            sides += [{"prompt": prompt, "completion": chosen},
                      {"prompt": prompt, "completion": rejected}]
            continue
        prompt = [{"role": "user", "content": say(1, 5)}]
        if i % 2 == 0:
            prompt = [{"role": "system", "content": say(1, 3)}] + prompt
        answer = lambda text: [{"role": "assistant", "content": text}]
        if i % 3 == 1:  # conversational with an explicit prompt
            pairs.append({"prompt": prompt, "chosen": answer(chosen),
                          "rejected": answer(rejected)})
        else:  # implicit prompt: whole conversations sharing their first messages
            pairs.append({"chosen": prompt + answer(chosen), "rejected": prompt + answer(rejected)})
        sides += [{"messages": prompt + answer(chosen)}, {"messages": prompt + answer(rejected)}]
    with open(preference, "w", encoding="utf-8") as out:
        out.writelines(json.dumps(p) + "\n" for p in pairs)
    with open(expanded, "w", encoding="utf-8") as out:
        out.writelines(json.dumps(s) + "\n" for s in sides)


if __name__ == "__main__":
    main(*sys.argv[1:])
