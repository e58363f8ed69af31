"""A transformers 5 model folder in LLaMA 3's shape: a tokenizer that adds BOS through a
TemplateProcessing post-processor (after a ByteLevel one), a chat template saved as
chat_template.jinja, and generation_config.json with a list of end-of-sequence ids, the
second chosen as the token the model's greedy continuation of PROMPT reaches after a few
steps, so that generation stops there and would run on otherwise.
Usage: llama3_fixture.py MODEL_DIR  (prints the prompt's greedy ids without a stop, as JSON)"""
import json
import sys

import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

PROMPT = "This License"
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
           "<|eot_id|>"]
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def main(folder):
    tokenizer = Tokenizer(models.BPE(ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train(["/usr/share/common-licenses/GPL-3"], trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    spec = json.loads(tokenizer.to_str())
    bos = tokenizer.token_to_id("<|begin_of_text|>")
    spec["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                  "tokens": ["<|begin_of_text|>"]}}}]}
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)), bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>", pad_token="<|end_of_text|>")
    fast.chat_template = TEMPLATE
    fast.save_pretrained(folder)
    end, eot = fast.convert_tokens_to_ids(["<|end_of_text|>", "<|eot_id|>"])
    torch.manual_seed(5)
    config = transformers.LlamaConfig(
        vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=bos, eos_token_id=[end, eot], pad_token_id=end)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(20)  # a peaked distribution: greedy ties are impossible
    prompt = fast(PROMPT, return_tensors="pt").input_ids
    assert prompt[0, 0].item() == bos
    with torch.no_grad():
        run_on = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                max_new_tokens=24, min_new_tokens=24, eos_token_id=None,
                                pad_token_id=end)[0, prompt.shape[1]:].tolist()
    # The stop: the first new token from the fourth on not seen before it.
    stop = next(t for i, t in enumerate(run_on) if i >= 3 and t not in run_on[:i])
    model.config.eos_token_id = [end, stop]
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=bos, eos_token_id=[end, stop], pad_token_id=end)
    model.save_pretrained(folder)
    print(json.dumps({"run_on": run_on, "stop": stop, "stops_after": run_on.index(stop) + 1}))


if __name__ == "__main__":
    main(sys.argv[1])
