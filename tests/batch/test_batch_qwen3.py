"""`ttscli batch` on a tiny Qwen3-TTS checkpoint goes through the batched generator: every row's
file equals the unbatched path's (--batch-size 1) for the same seeds, long rows are split into
sentence chunks as `speak` splits them, and a bad row fails alone."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "qwen3_e2e"))
from e2e_fixture import build

CV = "qwen3-tts-1.7b-customvoice"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build("customvoice", tmp_path_factory.mktemp("qwen3-batch") / "cv", eos_gain=3.0)


def entries(out: Path) -> dict:
    return {e["id"]: e for e in map(json.loads, (out / "manifest.jsonl").read_text().splitlines())}


def test_batched_rows_equal_unbatched_and_speak(run_cli, tmp_path, ckpt):
    rows = [{"id": "a", "text": "Hello there.", "voice": "ryan"},
            {"id": "b", "text": "A first sentence here. And a second one follows it.", "voice": "serena",
             "temperature": 0.8},
            {"id": "c", "text": "Short.", "voice": "eric", "seed": 42},
            {"id": "bad", "text": "Hi.", "voice": "nobody"},
            {"id": "d", "text": "The last row of the manifest.", "voice": "ryan", "do_sample": False}]
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = ["-m", CV, "--model-dir", ckpt, "--seed", "9"]
    p4 = run_cli("batch", m, "-o", "b4", "--batch-size", "4", *common)
    p1 = run_cli("batch", m, "-o", "b1", "--batch-size", "1", *common)
    for p in (p4, p1):
        assert p.returncode == 1 and "1 of 5 rows failed" in p.err, p.err
    e4, e1 = entries(tmp_path / "b4"), entries(tmp_path / "b1")
    assert set(e4) == set(e1) == {"a", "b", "c", "d"}
    err = json.loads((tmp_path / "b4" / "errors.jsonl").read_text())
    assert err["id"] == "bad" and "has no voice 'nobody'" in err["error"]
    for i in e4:
        x4, sr = sf.read(str(tmp_path / "b4" / e4[i]["path"]), dtype="int16")
        x1, _ = sf.read(str(tmp_path / "b1" / e1[i]["path"]), dtype="int16")
        assert sr == 24000 and e4[i]["seed"] == e1[i]["seed"] and len(x4) == len(x1) > 0, i
        assert np.abs(x4.astype(np.int32) - x1).max() <= 2, i
    # the unbatched path is `speak`'s path: row b (two sentence chunks) equals speak with its seed
    p = run_cli("speak", rows[1]["text"], "--voice", "serena", "--temperature", "0.8", "--seed",
                str(e4["b"]["seed"]), "-m", CV, "--model-dir", ckpt, "-o", "b.wav")
    assert p.returncode == 0, p.err
    xs, _ = sf.read(str(tmp_path / "b.wav"), dtype="int16")
    x4, _ = sf.read(str(tmp_path / "b4" / e4["b"]["path"]), dtype="int16")
    assert len(xs) == len(x4) and np.abs(xs.astype(np.int32) - x4).max() <= 2
