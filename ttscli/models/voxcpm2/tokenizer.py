"""VoxCPM2's text tokenizer: the checkpoint's ``tokenizer.json`` (a Llama-style BPE) read with
``tokenizers``, with upstream's one change (``mask_multichar_chinese_tokens``): a token made only
of CJK ideographs, once its word-start mark is dropped, is spelt as single characters, so the LM
reads Chinese one character per position as it was trained to."""
from __future__ import annotations

from pathlib import Path

from ttscli.errors import CheckpointError

WORD_START = "\u2581"


def is_cjk_word(token: str) -> bool:
    """Two or more characters, all in the CJK Unified Ideographs block (U+4E00..U+9FFF)."""
    return len(token) >= 2 and all("\u4e00" <= c <= "\u9fff" for c in token)


class TextTokenizer:
    """``encode(text)`` -> ids as upstream's ``text_tokenizer(text)``: ``tokenize`` (no BOS, no
    specials added), multi-character CJK tokens split, each piece looked up (unknown: ``<unk>``)."""

    def __init__(self, tok):
        self._tok = tok
        vocab = tok.get_vocab()
        self._vocab = vocab
        self._split = {t for t in vocab if is_cjk_word(t)}
        self._unk = vocab.get("<unk>", 0)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def tokens(self, text: str) -> list[str]:
        out = []
        for token in self._tok.encode(text, add_special_tokens=False).tokens:
            bare = token.replace(WORD_START, "")
            out.extend(bare if bare in self._split else [token])
        return out

    def encode(self, text: str) -> list[int]:
        return [self._vocab.get(t, self._unk) for t in self.tokens(text)]


def load_tokenizer(folder: Path) -> TextTokenizer:
    from tokenizers import Tokenizer

    f = Path(folder) / "tokenizer.json"
    if not f.is_file():
        raise CheckpointError(f"{f} is missing; VoxCPM2 reads its text through it")
    try:
        return TextTokenizer(Tokenizer.from_file(str(f)))
    except Exception as e:  # noqa: BLE001  (tokenizers raises a bare Exception on a bad file)
        raise CheckpointError(f"{f} is not a readable tokenizer ({e})") from None
