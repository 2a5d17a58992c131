"""IndexTTS2's text goldens, computed by upstream's ``TextNormalizer`` / ``TextTokenizer``
(``indextts/utils/front.py``) over a tiny SentencePiece BPE.

Run from the repository root after scripts/goldens/indextts2_fetch.sh, with the reference venv:

    INDEXTTS_SRC=../refsrc/index-tts REFVENV/bin/python scripts/goldens/indextts2_text.py

Writes ``tests/fixtures/indextts2/tiny/bpe.model``: a 100-piece BPE trained by sentencepiece on
upper-cased English and a few Han characters, with the published file's special ids (``<s>`` 0,
``</s>`` 1, ``<unk>`` 2; the GPT uses 0 and 1 as the text start / stop), and
``tests/fixtures/indextts2/text.json``: for each test text, upstream's pieces, ids and segments
(``split_segments`` at 120 and at 12 pieces per segment, and at 12 with ``quick_streaming_tokens``
4). Upstream's language normaliser (WeTextProcessing) is replaced by the identity, since ttscli
reads numbers out with its own normaliser before this stage; everything upstream does around it
(contractions, term and pinyin protection, the punctuation maps, the CJK split, upper-casing) runs.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "indextts2"
SRC = Path(os.environ.get("INDEXTTS_SRC", ROOT.parent / "refsrc" / "index-tts"))
sys.path.insert(0, str(SRC))
sys.path.insert(0, str(ROOT / "scripts"))
import reference_stubs  # noqa: F401  (torchaudio's CUDA-linked extension loader)
import sentencepiece as spm

CORPUS = [
    "HELLO THERE, THIS IS A SHORT SENTENCE FOR THE TOKENIZER.",
    "WHERE IS THE MONEY? WHO IS THERE! IT IS A GOOD DAY...",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG, AND THE CAT SLEEPS.",
    "SPEAK SLOWLY - THEN QUICKLY; 'QUOTED WORDS' AND MORE WORDS.",
    "我 爱 你 今 天 是 个 好 日 子",
]

TEXTS = [
    "Hello there, this is a short sentence for the tokenizer.",
    "Where's the money? Who's there! It's a good day...",
    "The quick brown fox jumps over the lazy dog, and the cat sleeps; then (quietly) it wakes: "
    "“quoted words” and more words - again and again, and again, until the end of the story.",
    "我爱你！今天是个好日子，it's a good day。",
    "a",
    "Speak slowly - then quickly - then slowly again - and stop.",
]


class Identity:
    def normalize(self, text: str) -> str:
        return text


def main() -> None:
    from indextts.utils.front import TextNormalizer, TextTokenizer

    tiny = OUT / "tiny"
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(CORPUS * 20) + "\n")
        spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(Path(tmp) / "bpe"), vocab_size=100,
                                       model_type="bpe", character_coverage=1.0, bos_id=0, eos_id=1, unk_id=2,
                                       pad_id=-1, num_threads=1, minloglevel=2)
        (tiny / "bpe.model").write_bytes((Path(tmp) / "bpe.model").read_bytes())
    normalizer = TextNormalizer()
    normalizer.zh_normalizer = normalizer.en_normalizer = Identity()
    tok = TextTokenizer(str(tiny / "bpe.model"), normalizer)
    cases = []
    for text in TEXTS:
        pieces = tok.tokenize(text)
        cases.append({"text": text, "pieces": pieces, "ids": tok.convert_tokens_to_ids(pieces),
                      "segments_120": tok.split_segments(pieces, 120),
                      "segments_12": tok.split_segments(pieces, 12),
                      "segments_12_quick4": tok.split_segments(pieces, 12, quick_streaming_tokens=4)})
    (OUT / "text.json").write_text(json.dumps({"unk_id": tok.unk_token_id, "cases": cases}, ensure_ascii=False,
                                              indent=1) + "\n")
    for c in cases:
        print(len(c["pieces"]), [len(s) for s in c["segments_12"]])


if __name__ == "__main__":
    main()
