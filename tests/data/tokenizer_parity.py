"""pipetrain's tokenizer.json reader against the tokenizers library it re-creates.

Five tokenizers of the kinds published models use are trained here (GPT-2's byte level,
LLaMA-3's split regex before the byte level, Qwen2's NFC normalizer and single-digit split
regex before the byte level, LLaMA-2's SentencePiece conversion with byte fallback (Mistral's
and Gemma's kind), a metaspace pre-tokenizer), and post-processors in the shapes published
models use (LLaMA 3's BOS by TemplateProcessing after ByteLevel, Gemma 3's, GPT-2's
ByteLevel, BERT's and RoBERTa's pair templates); for each, `pipetrain tokenize` must give the
library's ids for every text with and without special tokens (and for pairs), over a few
thousand texts (empty ones, special tokens' text, Unicode), and its text for every id list,
byte for byte.
Usage: tokenizer_parity.py PATH/TO/pipetrain
"""
import json
import random
import subprocess
import sys
import tempfile
import time

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, trainers)

pipetrain = sys.argv[1]
work_folder = tempfile.TemporaryDirectory()
work = work_folder.name

UNICODE = ("Café naïve — 東京タワー 😀 ñandú; Ελληνικά, русский, العربية.\n"
           "Zahlen 1234567 und 3.14; e-mail: x@y.z\t(tab)\r\n") * 3
with open(f"{work}/unicode.txt", "w", encoding="utf-8") as f:
    f.write(UNICODE)
CORPUS = ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0",
          f"{work}/unicode.txt"]
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2's (and Qwen2.5's, Qwen3's): digits one by one, after NFC.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

GPL = open(CORPUS[0], encoding="utf-8").read()
TEXTS = [
    "Hello world", " leading space", "trailing spaces  ", "a", "",
    "multiple   spaces\tand\ttabs\n\nnewlines\r\n  indented",
    "Café naïve — 東京 😀 ñ", "never seen: ✓ ∑ ∂ 🦙 ﬁ",
    "numbers 1234567 3.14159 and contractions: don't, I'll, we've, SHE'S, 'Re",
    "<|endoftext|>between<|endoftext|> and </s> <s>text<unk>",
    "fill  <mask>  in, <mask>\n<mask>x",
    "no-break\u00a0<mask>\u3000ideographic,\u2028<mask>\u0085 zzq zzq",
    "decomposed: Cafe\u0301 n\u0303 A\u030a \u212b \ufb01 \u00bd",
    GPL[1000:2500],
    "abc xabcx bcab abcd", "HELLO World, hello world; Hello, wor", "tok123 tok19999x tok5tok50",
]


def byte_level(pattern=None, nfc=False):
    tokenizer = Tokenizer(models.BPE(ignore_merges=pattern is not None))
    if nfc:
        tokenizer.normalizer = normalizers.NFC()
    level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pattern is None)
    tokenizer.pre_tokenizer = (level if pattern is None else pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(pattern), behavior="isolated"), level]))
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train(CORPUS, trainer)
    # RoBERTa's kind of mask: the whitespace around it belongs to it.
    tokenizer.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True)])
    return tokenizer


def empty_matches():
    """GPT-2's vocabulary split by a pattern that also matches empty text (a cut there)."""
    spec = json.loads(byte_level().to_str())
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"(?=[aeiou])|\s+"}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}
    return Tokenizer.from_str(json.dumps(spec))


def metaspace():
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tokenizer.decoder = decoders.Metaspace(prepend_scheme="first")
    tokenizer.train(CORPUS, trainers.BpeTrainer(vocab_size=500,
                                                special_tokens=["<unk>", "<s>", "</s>"]))
    return tokenizer


def sentencepiece_conversion():
    """LLaMA-2's layout: no pre-tokenizer, byte tokens in the model, fused unknowns."""
    spec = json.loads(metaspace().to_str())
    vocab = spec["model"]["vocab"]
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    spec["model"].update(byte_fallback=True, fuse_unk=True)
    spec["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    spec["pre_tokenizer"] = None
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    return Tokenizer.from_str(json.dumps(spec))


def added_tokens():
    """Added tokens of both kinds overlapping: the ones matched as written are cut out first
    (a special "bc" wins over a normalized "ab" in "abc"), the normalized ones after a
    normalizer that turns "H" into "h"."""
    tokenizer = byte_level()
    tokenizer.normalizer = normalizers.Replace("H", "h")
    tokenizer.add_tokens([AddedToken("ab", normalized=True), AddedToken("hello", normalized=True),
                          AddedToken(" world", normalized=True, rstrip=True)])
    tokenizer.add_special_tokens([AddedToken("bc", normalized=False)])
    return tokenizer


def normalized_after_conversion():
    """LLaMA-2's layout with tokens matched after its normalizer (spaces made "▁")."""
    tokenizer = sentencepiece_conversion()
    tokenizer.add_tokens([AddedToken("hello", normalized=True), AddedToken("▁wor", normalized=True)])
    return tokenizer


def many_added():
    """20,000 added tokens (found by a trie, not one by one)."""
    tokenizer = byte_level()
    tokenizer.add_tokens([AddedToken(f"tok{i}", normalized=False) for i in range(20000)])
    return tokenizer


def duplicate_added():
    """A file listing one added token twice (as edited files do): the first id counts."""
    spec = json.loads(byte_level().to_str())
    first = len(spec["model"]["vocab"]) + len(spec["added_tokens"])
    for i in range(2):
        spec["added_tokens"].append({"id": first + i, "content": "zzq", "single_word": False,
                                     "lstrip": False, "rstrip": False, "normalized": False,
                                     "special": False})
    return Tokenizer.from_str(json.dumps(spec))


def with_post_processor(tokenizer, specials, post_processor):
    """`tokenizer` with special tokens `specials` added and `post_processor` (a dict)."""
    tokenizer.add_special_tokens([AddedToken(t, normalized=False) for t in specials])
    spec = json.loads(tokenizer.to_str())
    ids = {t: tokenizer.token_to_id(t) for t in specials}
    spec["post_processor"] = post_processor(ids)
    return Tokenizer.from_str(json.dumps(spec))


def template(single, pair, ids):
    """TemplateProcessing as transformers writes it: pieces like "<bos>", "$A", "$B:1"."""
    def pieces(text):
        out = []
        for word in text.split():
            name, _, type_id = word.partition(":")
            type_id = int(type_id or 0)
            if name.startswith("$"):
                out.append({"Sequence": {"id": name[1:], "type_id": type_id}})
            else:
                out.append({"SpecialToken": {"id": name, "type_id": type_id}})
        return out
    return {"type": "TemplateProcessing", "single": pieces(single), "pair": pieces(pair),
            "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in ids.items()}}


def llama3_bos():
    """LLaMA 3's: BOS added by a TemplateProcessing after a ByteLevel post-processor."""
    return with_post_processor(
        byte_level(LLAMA3_PATTERN), ["<|begin_of_text|>"], lambda ids: {
            "type": "Sequence", "processors": [
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                 "use_regex": True},
                template("<|begin_of_text|> $A",
                         "<|begin_of_text|> $A <|begin_of_text|>:1 $B:1", ids)]})


def gemma3_bos():
    """Gemma 3's: SentencePiece's conversion, <bos> by TemplateProcessing."""
    return with_post_processor(sentencepiece_conversion(), ["<bos>"], lambda ids: template(
        "<bos> $A", "<bos> $A <bos>:1 $B:1", ids))


def gpt2_byte_level():
    """GPT-2's: a ByteLevel post-processor (offsets only)."""
    return with_post_processor(byte_level(), [], lambda ids: {
        "type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True})


def bert_pair():
    """BERT's [CLS] A [SEP] B [SEP] over a BPE model."""
    return with_post_processor(byte_level(), ["[CLS]", "[SEP]"], lambda ids: {
        "type": "BertProcessing", "sep": ["[SEP]", ids["[SEP]"]], "cls": ["[CLS]", ids["[CLS]"]]})


def roberta_pair():
    """RoBERTa's <s> A </s></s> B </s>."""
    return with_post_processor(byte_level(), ["<s>", "</s>"], lambda ids: {
        "type": "RobertaProcessing", "sep": ["</s>", ids["</s>"]], "cls": ["<s>", ids["<s>"]],
        "trim_offsets": True, "add_prefix_space": False})


def many_texts(count, specials):
    """Texts of every kind: empty, a special token's text alone and inside text, slices of
    the corpus and of Unicode, random code points."""
    rng = random.Random(11)
    corpus = GPL + UNICODE
    texts = ["", " ", "\n"] + specials + [f"x{t}y {t}" for t in specials]
    while len(texts) < count:
        kind = rng.randrange(4)
        if kind == 0:
            start = rng.randrange(len(corpus) - 80)
            texts.append(corpus[start:start + rng.randrange(80)])
        elif kind == 1:
            texts.append("".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(160, 0x3000),
                                                 rng.randrange(0x1F300, 0x1F600)]))
                                 for _ in range(rng.randrange(12))))
        elif kind == 2 and specials:
            texts.append(rng.choice(specials) + corpus[rng.randrange(len(corpus) - 30):][:20])
        else:
            texts.append(rng.choice(TEXTS))
    # A text starting with "-" would be read as an option.
    return ["x" + t if t.startswith("-") else t for t in texts]


def ids_of(output):
    return [[int(i) for i in line.split(",") if i] for line in output.split("\n")[:-1]]


def run(*args):
    # bytes, not text mode: "\r\n" must come back as written
    done = subprocess.run([pipetrain, "tokenize", *args], capture_output=True)
    if done.returncode != 0:
        sys.exit(f"pipetrain tokenize exited {done.returncode}: {done.stderr.decode()[:500]}")
    return done.stdout.decode("utf-8")


failures = 0
for name, tokenizer in [("gpt2", byte_level()), ("llama3", byte_level(LLAMA3_PATTERN)),
                        ("qwen2", byte_level(QWEN2_PATTERN, nfc=True)),
                        ("llama2", sentencepiece_conversion()), ("metaspace", metaspace()),
                        ("empty-matches", empty_matches()), ("added-tokens", added_tokens()),
                        ("normalized-after-conversion", normalized_after_conversion()),
                        ("many-added", many_added()), ("duplicate-added", duplicate_added())]:
    path = f"{work}/{name}.json"
    tokenizer.save(path)
    started = time.monotonic()
    expected = [tokenizer.encode(t, add_special_tokens=False).ids for t in TEXTS]
    library_seconds = time.monotonic() - started
    started = time.monotonic()
    got = ids_of(run("--tokenizer", path, "--no-special-tokens", *TEXTS))
    pipetrain_seconds = time.monotonic() - started
    if len(got) != len(TEXTS):
        failures += 1
        print(f"FAIL {name}: {len(got)} lines of ids for {len(TEXTS)} texts")
    for text, want, have in zip(TEXTS, expected, got):
        if want != have:
            failures += 1
            print(f"FAIL {name} encode {text[:40]!r}: tokenizers {want[:12]}..., pipetrain "
                  f"{have[:12]}...")
    rng = random.Random(7)
    size = tokenizer.get_vocab_size()
    id_lists = expected + [[rng.randrange(size) for _ in range(40)] for _ in range(20)]
    want_text = "".join(tokenizer.decode(ids, skip_special_tokens=False) + "\n"
                        for ids in id_lists)
    have_text = run("--tokenizer", path, "--decode", *[",".join(map(str, ids))
                                                         for ids in id_lists])
    if want_text != have_text:
        failures += 1
        print(f"FAIL {name} decode: {len(want_text)} vs {len(have_text)} characters; first "
              f"difference at {next(i for i, (a, b) in enumerate(zip(want_text + '$', have_text + '#')) if a != b)}")
    print(f"{name}: {len(TEXTS)} texts ({sum(map(len, expected))} ids) and "
          f"{len(id_lists)} id lists compared (encoding: library {library_seconds:.2f} s, "
          f"pipetrain {pipetrain_seconds:.2f} s with loading)")
# Post-processors: ids with and without special tokens, and pairs, as the library gives them.
for name, tokenizer, specials in [
        ("llama3-bos", llama3_bos(), ["<|begin_of_text|>"]), ("gemma3-bos", gemma3_bos(), ["<bos>"]),
        ("qwen2-none", byte_level(QWEN2_PATTERN, nfc=True), []),
        ("gpt2-byte-level", gpt2_byte_level(), []), ("bert-pair", bert_pair(), ["[CLS]", "[SEP]"]),
        ("roberta-pair", roberta_pair(), ["<s>", "</s>"])]:
    path = f"{work}/{name}.json"
    tokenizer.save(path)
    texts = many_texts(2000, specials)
    checked = 0
    for flags, add in [([], True), (["--no-special-tokens"], False)]:
        want = [tokenizer.encode(t, add_special_tokens=add).ids for t in texts]
        have = ids_of(run("--tokenizer", path, *flags, *texts))
        pairs = texts[:400]
        want += [tokenizer.encode(a, b, add_special_tokens=add).ids
                 for a, b in zip(pairs[::2], pairs[1::2])]
        have += ids_of(run("--tokenizer", path, "--pair", *flags, *pairs))
        if len(have) != len(want):
            failures += 1
            print(f"FAIL {name}: {len(have)} lines of ids for {len(want)} encodings")
        bad = [(i, w, h) for i, (w, h) in enumerate(zip(want, have)) if w != h]
        for i, w, h in bad[:3]:
            print(f"FAIL {name} {flags} encoding {i}: tokenizers {w[:12]}, pipetrain {h[:12]}")
        failures += len(bad)
        checked += len(want)
    added = sum(len(tokenizer.encode(t).ids) - len(tokenizer.encode(t, add_special_tokens=False).ids)
                for t in texts)
    print(f"{name}: {checked} encodings equal the library's ({added} special tokens added "
          f"over {len(texts)} texts)")
# Real tokenizer.json files pass 16 MiB (Gemma 3's is 33 MiB): one of 17 MiB is read.
padded, gpt2 = f"{work}/padded.json", byte_level()
with open(padded, "w", encoding="utf-8") as f:
    f.write(gpt2.to_str() + " " * (17 << 20))
want = ",".join(map(str, gpt2.encode("Hello world", add_special_tokens=False).ids))
have = run("--tokenizer", padded, "Hello world").strip()
if want != have:
    failures += 1
    print(f"FAIL a 17 MiB tokenizer.json: {have!r}, the library {want!r}")
else:
    print("a 17 MiB tokenizer.json read")
# What pipetrain does not read is bad input: one line naming the file and field, exit 2.
wordpiece = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
wordpiece.save(f"{work}/wordpiece.json")
single_word = byte_level()
single_word.add_tokens([AddedToken("word", single_word=True)])
single_word.save(f"{work}/single-word.json")
unknown_processor = json.loads(byte_level().to_str())
unknown_processor["post_processor"] = {"type": "Future", "x": 1}
with open(f"{work}/unknown-processor.json", "w") as f:
    json.dump(unknown_processor, f)
unknown_field = json.loads(byte_level().to_str())
unknown_field["template_engine"] = {"x": 1}
with open(f"{work}/unknown-field.json", "w") as f:
    json.dump(unknown_field, f)
for path, expected_error in [
        (f"{work}/wordpiece.json", 'model.type must be "BPE"'),
        (f"{work}/single-word.json", ".single_word true is not supported"),
        (f"{work}/unknown-processor.json", "post_processor of type Future is not supported"),
        (f"{work}/unknown-field.json", "template_engine is not supported")]:
    refused = subprocess.run([pipetrain, "tokenize", "--tokenizer", path, "a"],
                             capture_output=True, text=True)
    if refused.returncode != 2 or expected_error not in refused.stderr or \
            not refused.stderr.startswith(f"pipetrain: {path}: ") or \
            refused.stderr.count("\n") != 1:
        failures += 1
        print(f"FAIL {path}: exit {refused.returncode}, {refused.stderr!r}")
    else:
        print(f"refused: {refused.stderr.strip()}")
sys.exit(1 if failures else 0)
