"""Qwen2's byte-level BPE text tokenizer, assembled from ``vocab.json`` + ``merges.txt`` +
``tokenizer_config.json`` with ``tokenizers`` (Qwen's published folders ship no
``tokenizer.json``). Shared by the families whose LM is a Qwen (Qwen3-TTS, CosyVoice3).
"""
from __future__ import annotations

import json
from pathlib import Path

from ttscli.config import read_json
from ttscli.errors import CheckpointError

# transformers' Qwen2 pre-tokenizer split (the published Qwen2/Qwen3 text tokenizer).  Note:
# upstream loads its processor with fix_mistral_regex=True, and transformers 4.57.3 then swaps
# in a different split pattern when the folder is local (config.json says 4.57.3) but not when
# it comes from a Hub id.  On the real vocab both gave identical ids for mixed English/Chinese/
# digits/contractions/CamelCase test strings; we keep the pattern the tokenizer was made with.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


class TextTokenizer:
    """Qwen2 byte-level BPE: ``encode(str) -> list[int]`` with added/special tokens matched whole."""

    def __init__(self, tok):
        self._tok = tok

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def add_special_tokens(self, tokens: list[str]) -> None:
        """Add ``tokens`` as whole-matched specials, each absent one at the next id, in order
        (transformers' ``add_special_tokens``)."""
        from tokenizers import AddedToken

        self._tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in tokens])


def load_tokenizer(path: Path) -> TextTokenizer:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    path = Path(path)
    if (path / "tokenizer.json").exists() and not (path / "vocab.json").exists():
        return TextTokenizer(Tokenizer.from_file(str(path / "tokenizer.json")))
    try:
        vocab = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
        lines = (path / "merges.txt").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as e:
        raise CheckpointError(f"{path}: text tokenizer file missing ({Path(e.filename).name}); "
                              "the checkpoint folder needs vocab.json and merges.txt") from e
    merges = [tuple(ln.split(" ")) for ln in lines if ln and not ln.startswith("#version")]
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token=None, continuing_subword_prefix="",
                        end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    cfg = read_json(path / "tokenizer_config.json") if (path / "tokenizer_config.json").exists() else {}
    added = sorted(cfg.get("added_tokens_decoder", {}).items(), key=lambda kv: int(kv[0]))
    for idx, t in added:
        token = AddedToken(t["content"], single_word=t.get("single_word", False), lstrip=t.get("lstrip", False),
                           rstrip=t.get("rstrip", False), normalized=t.get("normalized", False),
                           special=t.get("special", False))
        if t.get("special", False):
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
        if tok.token_to_id(t["content"]) != int(idx):
            raise CheckpointError(f"{path / 'tokenizer_config.json'}: added token {t['content']!r} should have "
                                  f"id {idx} but follows a vocab of {len(vocab)} entries")
    return TextTokenizer(tok)
