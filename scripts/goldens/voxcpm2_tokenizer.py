"""Text -> ids of upstream's VoxCPM2 tokenizer (voxcpm 2.0.3: LlamaTokenizerFast wrapped by
``mask_multichar_chinese_tokens``) on the tiny checkpoint's tokenizer.json, for texts that reach
its CJK split, unknown characters and a voice-design prefix.

    REFVENV/bin/python scripts/goldens/voxcpm2_tokenizer.py

Writes tests/fixtures/voxcpm2/tokenizer_ids.json: [{"text": ..., "ids": [...]}, ...].
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import reference_stubs

reference_stubs.install()

TINY = ROOT / "tests" / "fixtures" / "voxcpm2" / "tiny"
TEXTS = ("Hello world.", "你好世界 今天很好。", "今天很好", "x今天y你好世界", "好世界世界。",
         "(A warm young voice)Hello world.", "Zürich ü 😀", "  Speak   softly. ", "")


def main() -> None:
    from transformers import LlamaTokenizerFast
    from voxcpm.model.utils import mask_multichar_chinese_tokens

    tok = mask_multichar_chinese_tokens(LlamaTokenizerFast.from_pretrained(str(TINY)))
    rows = [{"text": t, "ids": list(tok(t))} for t in TEXTS]
    out = TINY.parent / "tokenizer_ids.json"
    out.write_text(json.dumps(rows, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(rows)


if __name__ == "__main__":
    main()
