"""--random-weights builds joe-medium dimensions without touching the converted cache."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ttscli.generate import Request
from ttscli.models.base import LoadOptions
from ttscli.models.piper import load_pipeline


def test_random_weights_pipeline(voice_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path))
    spec = SimpleNamespace(id="piper-joe", sample_rate=22050, defaults={})
    pipe = load_pipeline(spec, voice_dir, LoadOptions(random_weights=True))
    audio = np.concatenate(list(pipe.generate(Request(text="Random weights.", seed=0))))
    assert audio.size > 0 and np.isfinite(audio).all()
    assert not (tmp_path / "converted").exists()
