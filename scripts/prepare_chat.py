"""Fine-tuning examples: chat or prompt/completion JSONL into an indexed dataset with loss masks.

Run through scripts/prepare-data (which picks the project's Python environment):
  scripts/prepare-data --chat --tokenizer DIR --out PREFIX [--context N]
                       [--overlong truncate|drop] [--train-on answers|last|all] FILE.jsonl...

DIR        the model's tokenizer as transformers saves it (tokenizer.json with
           tokenizer_config.json or chat_template.jinja): conversations are rendered with its
           own chat template by transformers' apply_chat_template (prompt/completion text
           needs none)
FILE.jsonl one example per line, either
             {"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": "..."}, ...]}
           or {"prompt": "...", "completion": "..."} (plain text: the tokenizer's special
           tokens around it, its end-of-sequence token after the completion; lists of messages
           instead of strings are a conversation whose completion messages are trained on)
PREFIX     writes PREFIX.bin and PREFIX.idx (a Megatron indexed dataset, one document per
           example) and PREFIX.mask (one byte per token: 1 where the loss counts it);
           train with data.type "indexed" and data.paths [PREFIX]
--context  the model.context to train at: an example longer than N + 1 tokens is cut to
           that (--overlong truncate, the default) or left out (drop); both are counted
--train-on answers: every assistant message (the default); last: the last one only; all:
           every token, prompts too
An assistant message's tokens are what the template renders for it after the prompt that
asks for it (add_generation_prompt), through its end-of-turn tokens. Bad input stops with
one line naming the file and line, exit 2, before anything is written.

Preference pairs (for scoring by `pipetrain logprobs`; DPO is not built yet):
  scripts/prepare-data --preference --tokenizer DIR --out PREFIX [--context N] ... FILE.jsonl...
reads TRL's forms, {"prompt", "chosen", "rejected"} as text or as lists of messages, or
{"chosen", "rejected"} conversations whose shared first messages are the prompt; renders
each side as a prompt/completion example above (its answer trained on), and writes chosen and
rejected as documents 2i and 2i + 1, kept or dropped together. A pair whose sides share no
prompt, or whose conversations' template renders it differently, is refused. (Text sides are
tokenized whole, as prompt/completion examples are.)

Prompts for `pipetrain generate --prompts` from conversations:
  scripts/prepare-data --prompts --tokenizer DIR --out PROMPTS.jsonl FILE.jsonl...
renders each line's {"messages": [...]} (the conversation so far, its last message not the
assistant's; "max_new_tokens" kept) with the model's template and add_generation_prompt, as
apply_chat_template gives the ids, and writes {"ids": [...]} per line.
"""
import argparse
import array
import json
import os
import pathlib
import sys

from prepare_data import OneLineParser

ROLES = ("system", "user", "assistant", "tool")


def fail(message):
    print(f"prepare-data: {message}", file=sys.stderr)
    sys.exit(2)


def load_tokenizer(path):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import transformers
    except ImportError as e:
        fail(f"rendering chat templates needs transformers in this Python environment ({e})")
    folder = pathlib.Path(path)
    if folder.is_file():
        folder = folder.parent
    if not (folder / "tokenizer.json").is_file():
        fail(f"--tokenizer {path}: no tokenizer.json there (give the model's folder)")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    except Exception:  # a folder with tokenizer.json alone
        try:
            tokenizer = transformers.PreTrainedTokenizerFast(
                tokenizer_file=str(folder / "tokenizer.json"))
        except Exception as e:  # the package's own error types vary by version
            fail(f"--tokenizer {path}: transformers cannot read its tokenizer.json ({e})")
        template = folder / "chat_template.jinja"
        if template.is_file():
            tokenizer.chat_template = template.read_text(encoding="utf-8")
    return tokenizer


def text_of(content, where, tool_calls):
    """A message's content as text: a string, or a list of parts (the OpenAI form), its
    text parts joined; null only beside tool calls (kept null). Anything else is refused,
    `where` naming the message."""
    if isinstance(content, str):
        return content
    if content is None:
        if tool_calls:
            return None
        fail(f"{where}: content is null (give text)")
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content, 1):
            if not isinstance(part, dict) or part.get("type") != "text" or \
                    not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                fail(f"{where}: content part {j} is {kind!r}, not text: only text parts "
                     "are trained on")
            texts.append(part["text"])
        return "".join(texts)
    fail(f"{where}: content must be text or a list of text parts, not "
         f"{type(content).__name__}")


class Example:
    """One line's messages (a conversation) or prompt/completion text."""

    def __init__(self, record, where):
        self.where = where
        if not isinstance(record, dict):
            fail(f"{where}: an example is a JSON object, not {type(record).__name__}")
        if "messages" in record:
            self.messages = self.checked_messages(record["messages"], "messages")
            self.trained_from = 0
        elif "prompt" in record and "completion" in record:
            prompt, completion = record["prompt"], record["completion"]
            if isinstance(prompt, list) and isinstance(completion, list):
                self.messages = self.checked_messages(prompt + completion, "prompt + completion")
                self.trained_from = len(prompt)
                if not any(m["role"] == "assistant" for m in completion):
                    fail(f"{where}: the completion has no assistant message to train on")
            elif isinstance(prompt, str) and isinstance(completion, str):
                self.messages = None
                if not completion.strip():
                    fail(f"{where}: the completion is empty")
                self.prompt, self.completion = prompt, completion
            else:
                fail(f"{where}: prompt and completion must both be strings or both lists "
                     "of messages")
        else:
            fail(f"{where}: an example needs \"messages\", or \"prompt\" and \"completion\"")

    def checked_messages(self, messages, key):
        where = self.where
        if not isinstance(messages, list) or not messages:
            fail(f"{where}: {key} must be a non-empty list of messages")
        for i, m in enumerate(messages, 1):
            if not isinstance(m, dict):
                fail(f"{where}: message {i} is not an object")
            if "role" not in m:
                fail(f"{where}: message {i} has no role")
            if m["role"] not in ROLES:
                fail(f"{where}: message {i} has role {m['role']!r}, not one of "
                     f"{', '.join(ROLES)}")
            content = text_of(m.get("content"), f"{where}: message {i} ({m['role']})",
                              bool(m.get("tool_calls")))
            if m["role"] == "assistant" and not m.get("tool_calls") and not content.strip():
                fail(f"{where}: message {i} (assistant) is empty")
            if content is not m.get("content"):
                messages[i - 1] = dict(m, content=content)
        if messages[0]["role"] == "assistant":
            fail(f"{where}: message 1 is the assistant's: a conversation starts with a system "
                 "or user message")
        if not any(m["role"] == "assistant" for m in messages):
            fail(f"{where}: no assistant message to train on")
        return messages


def render(tokenizer, messages, where, **options):
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, **options)
    except Exception as e:  # the template's own errors (raise_exception) name the problem
        fail(f"{where}: the chat template refuses this conversation ({e})")


def answer_spans(tokenizer, example, train_on):
    """The rendered text and the character spans of the assistant messages trained on."""
    messages, where = example.messages, example.where
    text = render(tokenizer, messages, where)
    chosen = [i for i, m in enumerate(messages)
              if m["role"] == "assistant" and i >= example.trained_from]
    if train_on == "last":
        chosen = chosen[-1:]
    spans = []
    for i in chosen:
        before = render(tokenizer, messages[:i], where, add_generation_prompt=True)
        through = render(tokenizer, messages[:i + 1], where)
        if not through.startswith(before) or not text.startswith(through):
            fail(f"{where}: the chat template renders message {i + 1} differently once later "
                 "messages follow (it rewrites earlier turns); use --train-on last")
        spans.append((len(before), len(through)))
    return text, spans


def text_bound(tokenizer, context):
    """How many characters of an example can hold its first context + 1 tokens, with room to
    spare: no token covers more characters than its vocabulary entry has (byte-level entries
    one per byte), so tokenizing that much of a longer text gives more than context + 1
    tokens, its first ones as the whole text's. None without --context: no bound."""
    if context is None:
        return None
    longest = max(len(token) for token in tokenizer.get_vocab())
    return 2 * (context + 2) * longest + 256


def tokens_and_mask(tokenizer, example, train_on, bound=None, context=None):
    """An example's ids and mask; with `bound`, of its first `bound` characters only (the
    work an example costs is bounded by the context, however long it is), unless those give
    no more than context + 1 tokens (a tokenizer that drops characters): then of all of it."""
    if bound is not None:
        ids, mask, cut = tokens_and_mask_of(tokenizer, example, train_on, bound)
        if not cut or len(ids) > context + 1:
            return ids, mask
    ids, mask, _ = tokens_and_mask_of(tokenizer, example, train_on, None)
    return ids, mask


def tokens_and_mask_of(tokenizer, example, train_on, bound):
    """The ids and mask of an example's first `bound` characters (None: all), and whether
    that cut any."""
    if example.messages is None:  # prompt/completion text
        whole = example.prompt + example.completion
        text = whole[:bound]
        encoded = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
        spans = [(len(example.prompt), len(text))]
        eos = tokenizer.eos_token_id
        # The end token once: a tokenizer may add it itself (add_eos_token).
        end = [eos] if eos is not None and encoded["input_ids"][-1:] != [eos] else []
    else:
        if not tokenizer.chat_template:
            fail(f"{example.where}: the tokenizer has no chat template for this conversation "
                 "(tokenizer_config.json's chat_template, or chat_template.jinja)")
        whole, spans = answer_spans(tokenizer, example, train_on)
        text = whole[:bound]
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        end = []
    ids = list(encoded["input_ids"]) + end
    offsets = list(encoded["offset_mapping"])
    mask = [int(train_on == "all" or (stop > start and any(a <= start < b for a, b in spans)))
            for start, stop in offsets] + [1] * len(end)
    return ids, mask, len(text) < len(whole)


def records(files):
    """Each line's JSON value and where it is ("FILE:LINE")."""
    for name in files:
        try:
            # JSON lines end at "\n" only: strings may hold U+2028 and the like raw.
            lines = pathlib.Path(name).read_text(encoding="utf-8-sig").split("\n")
        except (OSError, UnicodeDecodeError) as e:
            fail(f"{name}: cannot be read as UTF-8 text ({e})")
        for number, line in enumerate((line.rstrip("\r") for line in lines), 1):
            if not line.strip():
                continue
            where = f"{name}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{where}: not JSON ({e.msg} at column {e.colno})")
            yield record, where


def examples(files):
    for record, where in records(files):
        yield Example(record, where)


def prompts_main(argv):
    parser = OneLineParser(prog="prepare-data --prompts",
                                     description="Conversations to generate's prompts.")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--out", required=True, help="the prompts file to write (JSONL)")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    tokenizer = load_tokenizer(args.tokenizer)
    if not tokenizer.chat_template:
        fail(f"--tokenizer {args.tokenizer}: no chat template to render conversations with")
    lines = []
    for record, where in records(args.files):
        messages = record.get("messages") if isinstance(record, dict) else None
        if not isinstance(messages, list) or not messages:
            fail(f"{where}: a prompt needs \"messages\", a non-empty list")
        for i, m in enumerate(messages, 1):
            if not isinstance(m, dict) or m.get("role") not in ROLES:
                fail(f"{where}: message {i} needs a role, one of {', '.join(ROLES)}")
            m["content"] = text_of(m.get("content"), f"{where}: message {i} ({m['role']})",
                                   bool(m.get("tool_calls")))
        if messages[-1]["role"] == "assistant":
            fail(f"{where}: the last message is the assistant's: a prompt asks for the next one")
        try:
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                tokenize=True, return_dict=False)
        except Exception as e:
            fail(f"{where}: the chat template refuses this conversation ({e})")
        line = {"ids": list(ids)}
        if "max_new_tokens" in record:
            line["max_new_tokens"] = record["max_new_tokens"]
        lines.append(json.dumps(line))
    if not lines:
        fail(f"{', '.join(args.files)}: no conversation in them")
    folder = os.path.dirname(args.out)
    if folder:
        os.makedirs(folder, exist_ok=True)
    temporary = f"{args.out}.tmp.{os.getpid()}"
    try:
        with open(temporary, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
        os.replace(temporary, args.out)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    print(f"{args.out}: {len(lines)} prompts")


def arguments(prog, argv):
    parser = OneLineParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--out", required=True, help="prefix of the .bin/.idx/.mask files")
    parser.add_argument("--context", type=int)
    parser.add_argument("--overlong", choices=("truncate", "drop"), default="truncate")
    parser.add_argument("--train-on", choices=("answers", "last", "all"), default="answers")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    if args.context is not None and args.context < 1:
        fail(f"--context {args.context} must be at least 1")
    import prepare_data
    prepare_data.check_output(args.out)
    return args


class Preparation:
    """Examples into ids and masks as --context and --overlong say, counted."""

    def __init__(self, args):
        self.args = args
        self.tokenizer = load_tokenizer(args.tokenizer)
        self.bound = text_bound(self.tokenizer, args.context)
        self.sequences, self.masks = [], array.array("B")
        self.truncated = self.dropped = self.read = 0

    def ids_and_mask(self, example):
        """(ids, mask, truncated), or None for an example --overlong drop leaves out (or one
        cut to nothing to train on)."""
        args = self.args
        ids, mask = tokens_and_mask(self.tokenizer, example, args.train_on, self.bound,
                                    args.context)
        if args.context is None or len(ids) <= args.context + 1:
            return ids, mask, False
        if args.overlong == "drop":
            return None
        ids, mask = ids[:args.context + 1], mask[:args.context + 1]
        return (ids, mask, True) if any(mask[1:]) else None

    def keep(self, prepared):
        for ids, mask, _ in prepared:
            self.sequences.append(ids)
            self.masks.extend(mask)

    def write(self, unit):
        args = self.args
        if not self.sequences:
            fail(f"{', '.join(args.files)}: no {unit} to train on ({self.read} read, "
                 f"{self.dropped} dropped)")
        import prepare_data
        vocab_size = len(self.tokenizer)
        prepare_data.write_indexed(args.out, self.sequences, vocab_size, self.masks.tobytes())
        return vocab_size


def main(argv):
    args = arguments("prepare-data --chat", argv)
    work = Preparation(args)
    for example in examples(args.files):
        work.read += 1
        prepared = work.ids_and_mask(example)
        if prepared is None:
            work.dropped += 1
            continue
        work.truncated += prepared[2]
        work.keep([prepared])
    vocab_size = work.write("example")
    tokens, trained = len(work.masks), sum(work.masks)
    print(f"{args.out}: {len(work.sequences)} examples of {work.read} ({work.truncated} "
          f"truncated, {work.dropped} dropped), {tokens} tokens, {trained} trained on "
          f"({100 * trained / tokens:.1f}%); model.vocab_size {vocab_size}")


def preference_sides(record, where):
    """A preference line's chosen and rejected examples, each its prompt and one answer, in
    TRL's forms: {"prompt", "chosen", "rejected"} as text or as messages, or {"chosen",
    "rejected"} (or with "messages" as the prompt) whose shared first messages are the
    prompt."""
    if not isinstance(record, dict):
        fail(f"{where}: a preference example is a JSON object, not {type(record).__name__}")
    for key in ("chosen", "rejected"):
        if key not in record:
            fail(f"{where}: a preference example needs \"chosen\" and \"rejected\" (no {key})")
    chosen, rejected = record["chosen"], record["rejected"]
    prompt = record.get("prompt", record.get("messages"))
    if prompt is None:  # the implicit prompt: the conversations' shared first messages
        if not (isinstance(chosen, list) and isinstance(rejected, list)):
            fail(f"{where}: without a prompt, chosen and rejected are conversations (lists of "
                 "messages) sharing their first ones")
        shared = 0
        while (shared < min(len(chosen), len(rejected)) and
               chosen[shared] == rejected[shared]):
            shared += 1
        if shared == 0 or chosen[shared - 1].get("role") == "assistant":
            fail(f"{where}: chosen and rejected share no prompt (no first message in common "
                 "that an answer follows)")
        prompt, chosen, rejected = chosen[:shared], chosen[shared:], rejected[shared:]
    sides = []
    for name, answer in (("chosen", chosen), ("rejected", rejected)):
        if isinstance(prompt, list) != isinstance(answer, list):
            fail(f"{where}: prompt and {name} must both be text or both lists of messages")
        sides.append(Example({"prompt": prompt, "completion": answer}, f"{where} ({name})"))
    return sides


def first_trained(mask):
    return next((i for i, m in enumerate(mask) if i > 0 and m), len(mask))


def preference_main(argv):
    args = arguments("prepare-data --preference", argv)
    work = Preparation(args)
    for record, where in records(args.files):
        work.read += 1
        sides = preference_sides(record, where)
        prepared = [work.ids_and_mask(side) for side in sides]
        if any(p is None for p in prepared):  # the pair stays together, or goes together
            work.dropped += 1
            continue
        (chosen, chosen_mask, _), (rejected, rejected_mask, _) = prepared
        start = first_trained(chosen_mask)
        # Conversations only: text is tokenized whole, as supervised examples are, so the
        # prompt's last token may merge with the answer's first differently on each side.
        conversation = sides[0].messages is not None
        if conversation and (start != first_trained(rejected_mask) or
                             chosen[:start] != rejected[:start]):
            fail(f"{where}: chosen and rejected render different prompts (their tokens before "
                 "the answers differ): the chat template must render the prompt alike for both")
        work.truncated += any(p[2] for p in prepared)
        work.keep(prepared)
    vocab_size = work.write("preference example")
    tokens = len(work.masks)
    print(f"{args.out}: {len(work.sequences) // 2} preference examples of {work.read} "
          f"({work.truncated} truncated, {work.dropped} dropped), chosen and rejected as "
          f"documents 2i and 2i + 1, {tokens} tokens; model.vocab_size {vocab_size}")
