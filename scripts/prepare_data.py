"""Tokenizes text files into a Megatron-LM indexed dataset for `data.type: indexed`.

Run through scripts/prepare-data (which picks the project's Python environment):
  scripts/prepare-data --tokenizer TOKENIZER --out PREFIX [--eod TOKEN] [--lines] FILE...

TOKENIZER  a Hugging Face tokenizer.json (the `tokenizers` package) or a SentencePiece
           .model (needs the `sentencepiece` package in that environment)
PREFIX     writes PREFIX.bin (the tokens) and PREFIX.idx (MMIDIDX version 1: sequence
           lengths, byte offsets, document index), as Megatron-LM's _IndexWriter does;
           tokens are uint16 when the vocabulary has fewer than 65500 entries, else int32
--eod      a token (its text, e.g. "</s>", or its id) appended to every document
--lines    every non-empty line is a document (default: every file is one)
--chat     fine-tuning examples instead (scripts/prepare_chat.py: chat or prompt/completion
           JSONL rendered with the model's chat template, with a loss mask per token)
--prompts  conversations rendered as `pipetrain generate --prompts` lines instead
           (scripts/prepare_chat.py)
--preference  preference pairs (chosen, rejected) instead, as documents 2i and 2i + 1
           (scripts/prepare_chat.py)
Prints the number of documents and tokens and the vocabulary size to set as
model.vocab_size. The output prefix is checked before any tokenizing; the files are written
to temporary names, all of them complete before any is renamed (temporaries removed on a
failure), and a .mask starts with the size and CRC-32 of the .bin it was made with, so
that `train` refuses a mask beside tokens of another run.
"""
import argparse
import array
import os
import pathlib
import struct
import sys
import zlib

DTYPES = {"uint16": (8, "H"), "int32": (4, "i")}  # Megatron's dtype codes


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line (and exit 2), as every pipetrain error."""

    def error(self, message):
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


class Tokenizer:
    def __init__(self, path):
        path = pathlib.Path(path)
        if path.suffix == ".model":
            try:
                import sentencepiece
            except ImportError:
                sys.exit(f"prepare-data: {path}: reading a SentencePiece model needs the "
                         "sentencepiece package (pip install sentencepiece)")
            self._sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
            self.vocab_size = self._sp.get_piece_size()
            self.encode = lambda text: self._sp.encode(text)
            # piece_to_id gives the unknown token's id for a piece it does not have
            self.token_id = lambda piece: (self._sp.piece_to_id(piece)
                                           if self._sp.id_to_piece(self._sp.piece_to_id(piece))
                                           == piece else None)
        else:
            from tokenizers import Tokenizer as HfTokenizer
            try:
                self._hf = HfTokenizer.from_file(str(path))
            except Exception as e:  # the package's own error types vary by version
                sys.exit(f"prepare-data: {path}: not a tokenizer.json ({e})")
            self.vocab_size = self._hf.get_vocab_size(with_added_tokens=True)
            self.encode = lambda text: self._hf.encode(text, add_special_tokens=False).ids
            self.token_id = self._hf.token_to_id


def end_of_document(tokenizer, eod):
    if eod is None:
        return []
    if eod.isdigit() and int(eod) < tokenizer.vocab_size:
        return [int(eod)]
    token = tokenizer.token_id(eod)
    if token is None or token < 0:
        sys.exit(f"prepare-data: --eod {eod!r} is not a token of the tokenizer")
    return [token]


def documents(files, lines):
    for name in files:
        try:
            text = pathlib.Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            sys.exit(f"prepare-data: {name}: cannot be read as UTF-8 text ({e})")
        if lines:
            yield from (line for line in text.splitlines() if line.strip())
        else:
            yield text


# The .mask header: magic, then the .bin's size (uint64) and CRC-32 (uint32), 4 bytes kept.
MASK_MAGIC = b"PTMASK01"


def check_output(prefix, program="prepare-data"):
    """Refuses, before any work, an --out PREFIX that cannot be written: one line, exit 2."""
    def refuse(why):
        print(f"{program}: --out {prefix}: {why}", file=sys.stderr)
        sys.exit(2)
    if not prefix or prefix.endswith(os.sep) or os.path.basename(prefix) in ("", ".", ".."):
        refuse("name a file prefix (PREFIX writes PREFIX.bin, PREFIX.idx), not a folder")
    folder = os.path.dirname(prefix) or "."
    parent = folder
    while not os.path.exists(parent):  # the first folder up that exists must be a folder
        parent = os.path.dirname(parent) or "."
    if not os.path.isdir(parent):
        refuse(f"{parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        refuse(f"{parent} cannot be written")
    for suffix in (".bin", ".idx", ".mask"):
        if os.path.isdir(prefix + suffix):
            refuse(f"{prefix + suffix} is a folder")


def write_indexed(prefix, sequences, vocab_size, masks=None):
    """Writes PREFIX.bin and PREFIX.idx (one sequence and one document per entry of
    `sequences`, lists of ids) and, with `masks` (bytes, one per token), PREFIX.mask; without
    them an earlier run's PREFIX.mask is removed. Every file is written complete under a
    temporary name before any is renamed; the temporaries are removed on a failure.
    Returns the token dtype's name."""
    dtype = "uint16" if vocab_size < 65500 else "int32"
    code, typecode = DTYPES[dtype]
    tokens, lengths = array.array(typecode), []
    for ids in sequences:
        tokens.extend(ids)
        lengths.append(len(ids))
    pointers, offset = array.array("q"), 0
    for length in lengths:
        pointers.append(offset)
        offset += length * tokens.itemsize
    header = (b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code) +
              struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(lengths) + 1))
    index = [header, array.array("i", lengths).tobytes(), pointers.tobytes(),
             array.array("q", range(len(lengths) + 1)).tobytes()]
    data = tokens.tobytes()
    files = [(".bin", [data]), (".idx", index)]
    if masks is not None:
        mask_header = MASK_MAGIC + struct.pack("<QI", len(data), zlib.crc32(data)) + bytes(4)
        files.append((".mask", [mask_header, masks]))  # renamed last
    folder = os.path.dirname(prefix)
    if folder:
        os.makedirs(folder, exist_ok=True)  # the output's folder, as a user expects
    written = []
    try:
        for suffix, chunks in files:
            temporary = f"{prefix}{suffix}.tmp.{os.getpid()}"
            written.append((temporary, prefix + suffix))
            with open(temporary, "wb") as out:
                for chunk in chunks:
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        if masks is None and os.path.exists(prefix + ".mask"):
            os.remove(prefix + ".mask")  # an earlier --chat run's, which would not fit these
        for temporary, path in written:
            os.replace(temporary, path)
    finally:
        for temporary, _ in written:
            if os.path.exists(temporary):
                os.remove(temporary)
    return dtype


def main():
    if "--chat" in sys.argv[1:]:
        import prepare_chat
        return prepare_chat.main([a for a in sys.argv[1:] if a != "--chat"])
    if "--preference" in sys.argv[1:]:
        import prepare_chat
        return prepare_chat.preference_main([a for a in sys.argv[1:] if a != "--preference"])
    if "--prompts" in sys.argv[1:]:
        import prepare_chat
        return prepare_chat.prompts_main([a for a in sys.argv[1:] if a != "--prompts"])
    parser = OneLineParser(prog="prepare-data", description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--out", required=True, help="prefix of the .bin/.idx pair")
    parser.add_argument("--eod")
    parser.add_argument("--lines", action="store_true")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    check_output(args.out)

    tokenizer = Tokenizer(args.tokenizer)
    eod = end_of_document(tokenizer, args.eod)
    sequences = [tokenizer.encode(text) + eod for text in documents(args.files, args.lines)]
    tokens = sum(len(ids) for ids in sequences)
    if not sequences or not tokens:
        sys.exit("prepare-data: the files hold no text to tokenize")
    dtype = write_indexed(args.out, sequences, tokenizer.vocab_size)
    print(f"{args.out}: {len(sequences)} documents, {tokens} tokens ({dtype}); "
          f"model.vocab_size {tokenizer.vocab_size}")


if __name__ == "__main__":
    main()
