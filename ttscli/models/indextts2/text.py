"""IndexTTS2's text side: upstream's punctuation rewrite, the CJK split and upper-casing, the
SentencePiece BPE (``bpe.model``) and the segmenter that cuts a text into GPT passes.

Numbers, dates and symbols are read out by the engine's normaliser (``ttscli.textnorm``) before a
chunk reaches the family, where upstream runs WeTextProcessing; what follows is upstream's own
post-processing (``indextts/utils/front.py``): the ``'s`` contractions that read as ``is``, the
punctuation map (full-width and typographic marks to the few the BPE knows; the Chinese map also
turns ``$`` into ``.``), then ``tokenize_by_CJK_char`` (every CJK character its own word, the rest
upper-cased, as the BPE was trained).

Segments follow ``TextTokenizer.split_segments``: cut after sentence punctuation, a too-long
sentence at its commas, then hyphens, then every ``max_tokens`` pieces; neighbours are merged again
while they fit (after ``quick_tokens`` pieces, so a short first segment can start streaming early).
"""
from __future__ import annotations

import re
from pathlib import Path

from ttscli.errors import CheckpointError, UsageError

CHAR_MAP = {
    "：": ",", "；": ",", ";": ",", "，": ",", "。": ".", "！": "!", "？": "?", "\n": " ", "·": "-", "、": ",",
    "...": "…", ",,,": "…", "，，，": "…", "……": "…", "“": "'", "”": "'", '"': "'", "‘": "'", "’": "'",
    "（": "'", "）": "'", "(": "'", ")": "'", "《": "'", "》": "'", "【": "'", "】": "'", "[": "'", "]": "'",
    "—": "-", "～": "-", "~": "-", "「": "'", "」": "'", ":": ",",
}
ZH_CHAR_MAP = {"$": ".", **CHAR_MAP}
CONTRACTION = re.compile(r"(what|where|who|which|how|t?here|it|s?he|that|this)'s", re.IGNORECASE)
CJK = re.compile(r"([\u1100-\u11ff\u2e80-\ua4cf\ua840-\uD7AF\uF900-\uFAFF\uFE30-\uFE4F\uFF65-\uFFDC"
                 r"\U00020000-\U0002FFFF])")
HAN = re.compile(r"[\u4e00-\u9fff]")
PINYIN = re.compile(r"(?<![a-z])((?:[bpmfdtnlgkhjqxzcsryw]|[zcs]h)?(?:[aeiouüv]|[ae]i|u[aio]|ao|ou|i[aue]|"
                    r"[uüv]e|[uvü]ang?|uai|[aeiuv]n|[aeio]ng|ia[no]|i[ao]ng)|ng|er)([1-5])", re.IGNORECASE)
JQX_U = re.compile(r"([jqx])[uü](n|e|an)*(\d)", re.IGNORECASE)
EMAIL = re.compile(r"^[a-zA-Z0-9]+@[a-zA-Z0-9]+\.[a-zA-Z]+$")

SENTENCE_END = (".", "!", "?", "▁.", "▁?", "▁...")
COMMAS = (",", "▁,")
QUOTES = ("'", "▁'")
MAX_SEGMENT_TOKENS = 120        # upstream max_text_tokens_per_segment


def _map(text: str, table: dict[str, str]) -> str:
    pattern = re.compile("|".join(re.escape(k) for k in table))
    return pattern.sub(lambda m: table[m.group()], text)


def chinese(text: str) -> bool:
    """Upstream ``use_chinese``: Han characters, or no Latin letter, or an e-mail address, or
    pinyin with tone numbers select the Chinese rules."""
    if HAN.search(text) or not re.search(r"[a-zA-Z]", text) or EMAIL.match(text):
        return True
    return PINYIN.search(text) is not None


def punctuate(text: str) -> str:
    """The contraction rewrite and the punctuation map of upstream's ``normalize``, after the
    language normaliser."""
    text = CONTRACTION.sub(r"\1 is", text)
    if chinese(text):
        # pinyin with a tone keeps its reading; after j, q, x the vowel u/ü is written v, as the BPE has it
        text = PINYIN.sub(lambda m: JQX_U.sub(r"\1v\2\3", m.group(0)), text.rstrip())
        return _map(text, ZH_CHAR_MAP)
    return _map(text, CHAR_MAP)


def cjk_split(line: str) -> str:
    """``tokenize_by_CJK_char``: CJK characters split apart, everything upper-cased."""
    return " ".join(w.strip().upper() for w in CJK.split(line.strip()) if w.strip())


class IndexTokenizer:
    """``bpe.model`` through sentencepiece: text -> pieces -> ids (0 and 1 are the text start
    and stop ids the GPT adds; unknown pieces map to sentencepiece's unk)."""

    def __init__(self, path: Path | str):
        try:
            import sentencepiece
        except ImportError:
            raise UsageError("IndexTTS2's tokenizer needs sentencepiece: pip install 'ttscli[indextts2]'") from None
        path = Path(path)
        if not path.is_file():
            raise CheckpointError(f"{path.parent}: no {path.name} (IndexTTS2's SentencePiece BPE)")
        self.sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
        self.unk_id = self.sp.unk_id()

    @property
    def vocab_size(self) -> int:
        return self.sp.GetPieceSize()

    def pieces(self, text: str) -> list[str]:
        """Upstream ``TextTokenizer.tokenize`` after normalisation (a one-character text is
        encoded as written, as upstream does)."""
        if not text:
            return []
        if len(text.strip()) == 1:
            return self.sp.Encode(text, out_type=str)
        return self.sp.Encode(cjk_split(punctuate(text)), out_type=str)

    def ids(self, pieces: list[str]) -> list[int]:
        return [self.sp.PieceToId(p) for p in pieces]


def split_segments(pieces: list[str], max_tokens: int = MAX_SEGMENT_TOKENS, quick_tokens: int = 0,
                   ends: tuple[str, ...] = SENTENCE_END) -> list[list[str]]:
    """Upstream ``split_segments_by_token`` (module docstring), piece for piece."""
    if not pieces:
        return []
    segments: list[list[str]] = []
    cur: list[str] = []
    for i, tok in enumerate(pieces):
        cur.append(tok)
        if not any(c in ends for c in COMMAS) and any(c in cur for c in COMMAS):
            subs = split_segments(cur, max_tokens, quick_tokens, COMMAS)
        elif "-" not in ends and "-" in cur:
            subs = split_segments(cur, max_tokens, quick_tokens, ("-",))
        elif len(cur) <= max_tokens:
            if tok in ends and len(cur) > 2:
                # upstream appends a following quote here, but its loop index does not skip it,
                # so the quote is also the next segment's first piece: kept as upstream has it
                if i < len(pieces) - 1 and pieces[i + 1] in QUOTES:
                    cur.append(pieces[i + 1])
                segments.append(cur)
                cur = []
            continue
        else:
            subs = [cur[j:j + max_tokens] for j in range(0, len(cur), max_tokens)]
        segments.extend(subs)
        cur = []
    if cur:
        segments.append(cur)
    merged: list[list[str]] = []
    total = 0
    for seg in segments:
        total += len(seg)
        if not seg:
            continue
        if not merged:
            merged.append(seg)
        elif len(merged[-1]) + len(seg) <= max_tokens and total > quick_tokens:
            merged[-1] = merged[-1] + seg
        elif len(merged[-1]) + len(seg) <= max_tokens / 2:
            merged[-1] = merged[-1] + seg
        else:
            merged.append(seg)
    return merged


class RandomTokenizer:
    """Stand-in for ``bpe.model`` with random weights (which ship no tokenizer): one piece per
    upper-cased word and per punctuation mark, ids from a stable hash, so a prompt has about the
    length the real BPE gives English and segments cut where upstream's would."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.unk_id = 2

    def pieces(self, text: str) -> list[str]:
        out = []
        for w in re.findall(r"\w+|[^\w\s]", cjk_split(punctuate(text))):
            out.append(w if re.fullmatch(r"[^\w\s]", w) else "▁" + w)
        return out

    def ids(self, pieces: list[str]) -> list[int]:
        import zlib

        return [3 + zlib.crc32(p.encode()) % (self.vocab_size - 3) for p in pieces]
