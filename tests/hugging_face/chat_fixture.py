"""A tiny transformers LLaMA whose tokenizer has a chat template (with generation markers,
so that transformers can mark the assistant's tokens itself), and chat JSONL for it:
conversations of one to three turns with answers of unequal lengths, and prompt/completion
pairs. Usage: chat_fixture.py MODEL_DIR DATA.jsonl"""
import json
import random
import sys

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "<|assistant|>{% generation %}{{ message['content'] }}</s>{% endgeneration %}"
    "{%- else -%}"
    "<|{{ message['role'] }}|>{{ message['content'] }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}")
SPECIAL = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]


def main(folder, data):
    corpus = "/usr/share/common-licenses/GPL-3"
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train([corpus], trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIAL))
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = TEMPLATE
    fast.save_pretrained(folder)
    torch.manual_seed(3)
    config = transformers.LlamaConfig(
        vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)

    words = open(corpus, encoding="utf-8").read().split()
    rng = random.Random(5)
    say = lambda low, high: " ".join(rng.choice(words) for _ in range(rng.randint(low, high)))
    with open(data, "w", encoding="utf-8") as out:
        for i in range(48):
            if i % 6 == 5:
                example = {"prompt": say(2, 6) + " ", "completion": say(1, 12)}
            else:
                messages = [{"role": "system", "content": say(1, 3)}] if i % 3 == 0 else []
                for _ in range(rng.randint(1, 2)):
                    messages += [{"role": "user", "content": say(1, 4)},
                                 {"role": "assistant", "content": say(1, 6)}]
                example = {"messages": messages}
            out.write(json.dumps(example) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
