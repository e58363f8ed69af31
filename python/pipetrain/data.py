"""The command line's data, read from Python as `pipetrain train` reads it."""
from dataclasses import dataclass
from typing import List


@dataclass
class TokenWindows:
    """Token windows of `context` + 1 tokens from text files (bytes, vocabulary 256) or
    pre-tokenized files (`data_type` "tokens", `token_bytes` 2 or 4), as `pipetrain train`
    reads `data.type` text and tokens: global sample k drawn from (the config's seed, k), each
    data-parallel replica its share, the position saved in checkpoints. Give it to initialize()
    as `training_data` (or to set_dataiterator); inputs are the first `context` tokens, labels
    the next ones."""
    paths: List[str]
    context: int
    vocab_size: int = 256
    data_type: str = "text"
    token_bytes: int = 2
    validation_fraction: float = 0.1
