"""Chatterbox's English text front end: the reference's punctuation clean-up, then its HF
``tokenizers`` file with every space spelled as the ``[SPACE]`` token."""
from __future__ import annotations

from pathlib import Path

from ttscli.errors import CheckpointError

SPACE = "[SPACE]"
_REPLACE = (("...", ", "), ("\u2026", ", "), (":", ","), (" - ", ", "), (";", ", "), ("\u2014", "-"),
            ("\u2013", "-"), (" ,", ","), ("\u201c", '"'), ("\u201d", '"'), ("\u2018", "'"), ("\u2019", "'"))
_ENDERS = (".", "!", "?", "-", ",")


def punc_norm(text: str) -> str:
    """The reference's ``punc_norm``: capital first letter, single spaces, rare punctuation
    mapped to what the model saw in training, a full stop added when the text has no ending."""
    if not text:
        return "You need to add some text for me to talk."
    if text[0].islower():
        text = text[0].upper() + text[1:]
    text = " ".join(text.split())
    for old, new in _REPLACE:
        text = text.replace(old, new)
    text = text.rstrip(" ")
    if not text.endswith(_ENDERS):
        text += "."
    return text


class EnTokenizer:
    def __init__(self, path: Path):
        from tokenizers import Tokenizer

        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as e:  # noqa: BLE001  (the Rust side raises a bare Exception)
            raise CheckpointError(f"{path}: not a readable tokenizer file ({e})") from None
        vocab = self.tokenizer.get_vocab()
        for special in ("[START]", "[STOP]"):
            if special not in vocab:
                raise CheckpointError(f"{path}: the vocabulary has no {special} token")

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text.replace(" ", SPACE)).ids
