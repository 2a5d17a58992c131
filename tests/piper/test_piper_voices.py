"""Any Piper voice, without a registry file: by path, by --model-dir, by name from the Hugging
Face cache layout of rhasspy/piper-voices; its JSON's language, rate and speakers honoured.

The voices are built from the embedded one (tests/piper/voices.py): same weights, other
config, and a multi-speaker graph with a ``sid`` input."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import soundfile as sf

from clitools import only_line

from ttscli.errors import UsageError

from voices import embedded, multi_speaker_graph, write_voice

pytest.importorskip("onnxruntime")

ONNX = ["--backend", "vits=onnx"]
SPEAKERS = ["alice", "bob", "carol"]


@pytest.fixture(scope="module")
def voices(tmp_path_factory):
    root = tmp_path_factory.mktemp("voices")
    multi = multi_speaker_graph(root / "multi.graph", len(SPEAKERS))
    return {
        "de": write_voice(root / "de", "de_DE-test-medium", espeak="de", code="de_DE"),
        "es16k": write_voice(root / "es", "es_ES-test-low", espeak="es", code="es_ES", sample_rate=16000),
        "multi": write_voice(root / "multi", "en_GB-trio-medium", espeak="en-gb-x-rp", code="en_GB",
                             speakers=SPEAKERS, graph=multi),
        "nolang": write_voice(root / "nolang", "xx_XX-test-medium", espeak="xx-nowhere", code="xx_XX"),
    }


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def load(model, cache, monkeypatch, **kw):
    import ttscli
    from ttscli.models.base import LoadOptions

    monkeypatch.setenv("TTSCLI_CACHE", str(cache))
    return ttscli.load(str(model), options=LoadOptions(backends={"vits": kw.pop("backend", "onnx")}), **kw)


def speak(pipe, text, **kw):
    import ttscli

    return np.concatenate(list(ttscli.synthesize(pipe, ttscli.Request(text, seed=5, **kw))))


def test_voice_by_path_speaks_its_own_language(voices, cache, monkeypatch):
    """Same weights, German config: German phonemes (not English ones) reach the graph."""
    from ttscli.models.piper.phonemize import text_to_ids

    source, config = embedded()
    german = load(voices["de"], cache, monkeypatch)
    english = load(source, cache, monkeypatch)
    text = "Guten Tag, wie geht es dir?"
    assert german.espeak_voice == "de" and german.spec.languages == ["de", "de-de"]
    assert text_to_ids(text, german.id_map, "de") != text_to_ids(text, config["phoneme_id_map"], "en-us")
    a, b = speak(german, text), speak(english, text)
    assert a.shape != b.shape or not np.allclose(a, b)
    assert np.array_equal(a, speak(german, text))
    with pytest.raises(UsageError, match="does not speak --language 'en'"):
        speak(german, text, language="en")


def test_voice_json_sets_rate_and_defaults(voices, cache, monkeypatch):
    pipe = load(voices["es16k"], cache, monkeypatch)
    assert pipe.sample_rate == 16000 and pipe.spec.sample_rate == 16000
    assert pipe.inference == {"noise_scale": 0.667, "length_scale": 1.0, "noise_w": 0.8}


def test_multi_speaker_voice_by_name_or_number(voices, cache, monkeypatch):
    pipe = load(voices["multi"], cache, monkeypatch)
    assert pipe.model.takes_speaker and pipe.spec.voices == SPEAKERS
    text = "Every speaker says this."
    by = {v: speak(pipe, text, voice=v) for v in ("alice", "bob", "1", "Carol")}
    assert np.array_equal(by["bob"], by["1"])
    assert np.array_equal(speak(pipe, text), by["alice"])          # no --voice: speaker 0
    assert not np.array_equal(by["alice"], by["bob"]) and not np.array_equal(by["bob"], by["Carol"])
    with pytest.raises(UsageError, match="has no voice 'dave' \\(it has alice, bob, carol\\)"):
        speak(pipe, text, voice="dave")
    with pytest.raises(UsageError, match="has no voice '3'"):
        speak(pipe, text, voice="3")


def test_multi_speaker_voice_refuses_mlx(voices, cache, monkeypatch):
    with pytest.raises(UsageError, match="vits runs on onnx, not 'mlx'"):
        load(voices["multi"], cache, monkeypatch, backend="mlx")


def test_voice_cache_is_keyed_by_content(voices, tmp_path, monkeypatch):
    """A voice named by its file converts into a folder named by the file's hash, not its name."""
    import shutil

    from ttscli.registry import load_registry

    other = tmp_path / "de_DE-test-medium.onnx"
    shutil.copyfile(voices["es16k"], other)
    shutil.copyfile(voices["es16k"].with_name("es_ES-test-low.onnx.json"), tmp_path / "de_DE-test-medium.onnx.json")
    reg = load_registry()
    spec_a, spec_b = reg.resolve(str(voices["de"])), reg.resolve(str(other))
    assert spec_a.id != spec_b.id and spec_b.sample_rate == 16000
    assert spec_a.cache_id.startswith("piper-de_DE-test-medium-") and "/" not in spec_a.cache_id
    assert spec_a.cache_id == spec_b.cache_id           # the same bytes under the same name
    with open(other, "r+b") as f:       # same name, other bytes: another cache
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(b"\x01" if last == b"\x00" else b"\x00")
    assert load_registry().resolve(str(other)).cache_id != spec_a.cache_id


# ---- the CLI, as a user runs it -----------------------------------------------------------------

def test_cli_path_model_dir_and_info(voices, run_cli, tmp_path):
    p = run_cli("speak", "Hola, buenos días.", "-m", voices["es16k"], "-o", "a.wav", *ONNX)
    assert p.returncode == 0, p.err
    assert sf.info(str(tmp_path / "a.wav")).samplerate == 16000
    p = run_cli("speak", "Hola.", "--model-dir", voices["es16k"].parent, "-o", "b.wav", *ONNX)
    assert p.returncode == 0, p.err
    assert sf.info(str(tmp_path / "b.wav")).samplerate == 16000
    p = run_cli("models", voices["multi"], "--json")
    assert p.returncode == 0, p.err
    info = json.loads(p.stdout)
    assert info["voices"] == SPEAKERS and info["sample_rate"] == 22050 and "en-gb" in info["languages"]
    assert "3 speakers" in info["name"] and "medium" in info["name"]
    assert info["backends_usable"] == {"vits": ["onnx"]}


def test_cli_refusals_are_one_line(voices, run_cli, tmp_path):
    cases = [
        (["-m", voices["de"], "--voice", "joe"], "cannot honour --voice"),
        (["-m", voices["multi"], "--voice", "dave"], "has no voice 'dave' (it has alice, bob, carol)"),
        (["-m", voices["nolang"]], "cannot phonemize its language here: espeak-ng has no voice 'xx-nowhere'"),
        (["-m", tmp_path / "missing.onnx"], "Piper voice not found"),
        (["--model-dir", tmp_path], "should hold one Piper voice"),
    ]
    for args, message in cases:
        p = run_cli("speak", "Hallo.", *args, "-o", "x.wav", *ONNX)
        assert p.returncode != 0 and message in only_line(p.err), (args, p.err)
        assert not (tmp_path / "x.wav").exists()


def _hub_cache(root, voice_onnx, repo_path):
    """``voice_onnx`` in the Hugging Face cache layout: blobs, a snapshot of links, refs/main."""
    repo = root / "models--rhasspy--piper-voices"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    for src, rel in ((voice_onnx, repo_path), (voice_onnx.with_name(voice_onnx.name + ".json"), repo_path + ".json")):
        blob = repo / "blobs" / f"blob-{src.name}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(src.read_bytes())
        link = repo / "snapshots" / commit / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))


def test_cli_voice_from_hub_cache(voices, run_cli, tmp_path):
    hub = tmp_path / "hub"
    _hub_cache(hub, voices["es16k"], "es/es_ES/test/low/es_ES-test-low.onnx")
    env = {"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    p = run_cli("speak", "Hola.", "-m", "piper:es_ES-test-low", "-o", "h.wav", *ONNX, env=env)
    assert p.returncode == 0, p.err
    assert sf.info(str(tmp_path / "h.wav")).samplerate == 16000
    p = run_cli("speak", "Hola.", "-m", "piper:es_MX-ald-medium", "-o", "m.wav", *ONNX, env=env)
    assert p.returncode != 0 and not (tmp_path / "m.wav").exists()
    assert ("huggingface-cli download rhasspy/piper-voices es/es_MX/ald/medium/es_MX-ald-medium.onnx "
            "es/es_MX/ald/medium/es_MX-ald-medium.onnx.json") in only_line(p.err)



def test_multi_speaker_voice_defaults_to_onnx_everywhere(voices, monkeypatch):
    """Where the family's measured default is MLX (macOS), a voice MLX cannot run still
    defaults to onnxruntime."""
    from ttscli.backends import select
    from ttscli.models import get_family
    from ttscli.registry import load_registry

    monkeypatch.setattr(select, "this_machine", lambda: ("darwin", ""))
    monkeypatch.setattr(select, "mlx_on_gpu", lambda: True)
    spec = load_registry().resolve(str(voices["multi"]))
    assert select.resolve(spec, get_family("piper"))["vits"].backend == "onnx"
    assert select.resolve(load_registry().resolve("piper-joe"), get_family("piper"))["vits"].backend == "mlx"


def test_user_voice_converts_to_mlx(voices, cache, monkeypatch):
    """The MLX VITS runs any single-speaker voice, converted into the voice's own cache folder."""
    pytest.importorskip("mlx.core")
    pipe = load(voices["de"], cache, monkeypatch, backend="mlx")
    assert pipe.backends == {"vits": "mlx"} and pipe.espeak_voice == "de"
    assert (cache / "converted" / pipe.spec.cache_id / "mlx" / "model.safetensors").is_file()
    audio = speak(pipe, "Guten Tag.")
    assert audio.size > 2000 and np.isfinite(audio).all()
