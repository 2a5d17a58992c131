"""VoxCPM2 through the installed `ttscli` on the tiny checkpoint: every mode (plain, voice design,
isolated-reference clone, continuation clone), its one-line refusals, and 48 kHz on every output
path (files of each format, the stdout pipe, --sample-rate, the server, batch)."""
from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("mlx.core")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clitools import no_files, only_line

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "voxcpm2"
TINY = FIX / "tiny"
TEXT = "Hello world."
RATE = 48000


def rate_of(path: Path) -> int:
    av = pytest.importorskip("av")
    with av.open(str(path)) as c:
        return c.streams.audio[0].rate


@pytest.fixture(scope="module")
def roomy(tmp_path_factory) -> Path:
    """The tiny checkpoint with a longer context: the CLI takes references of 0.5 s or more, which
    the tiny AudioVAE (4 samples per latent) turns into ~500 patches, past the fixture's 256."""
    folder = tmp_path_factory.mktemp("voxcpm2") / "tiny"
    shutil.copytree(TINY, folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_length"] = 4096
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture
def ref_wav(tmp_path) -> Path:
    rng = np.random.default_rng(0)
    sf.write(tmp_path / "ref.wav", (0.3 * rng.standard_normal(12000)).astype(np.float32), 24000)
    return tmp_path / "ref.wav"


def speak(run_cli, *args, model_dir=TINY):
    return run_cli("speak", "-m", "voxcpm2", "--model-dir", model_dir, "--seed", "1", TEXT, *args)


def test_speak_and_voice_design(run_cli, tmp_path):
    p = speak(run_cli, "-o", "plain.wav")
    assert p.returncode == 0, p.err
    p = speak(run_cli, "--instruct", "a warm low voice", "--inference-timesteps", "4", "--cfg-value", "1.5",
              "-o", "design.wav")
    assert p.returncode == 0, p.err
    plain, r1 = sf.read(tmp_path / "plain.wav")
    design, r2 = sf.read(tmp_path / "design.wav")
    assert r1 == r2 == RATE and plain.ndim == 1 and len(plain) > 0 and len(design) > 0
    assert len(plain) != len(design) or not np.array_equal(plain, design)


def test_clone_isolated_reference_and_continuation(run_cli, tmp_path, roomy, ref_wav):
    clone = ("clone", "-m", "voxcpm2", "--model-dir", roomy, "--ref", ref_wav, "--seed", "1", TEXT)
    p = run_cli(*clone, "--instruct", "cheerful", "-o", "ref.flac")          # no transcript: the isolated reference
    assert p.returncode == 0, p.err
    p = run_cli(*clone, "--ref-text", "Speak softly.", "--no-ref-prefix", "-o", "cont.wav")   # continuation only
    assert p.returncode == 0, p.err
    isolated, r1 = sf.read(tmp_path / "ref.flac")
    cont, r2 = sf.read(tmp_path / "cont.wav")
    assert r1 == r2 == RATE and len(isolated) > 0 and len(cont) > 0
    p = run_cli(*clone, "--ref-text", "Speak softly.", "--instruct", "cheerful", "-o", "bad.wav")
    assert p.returncode != 0 and "--instruct cannot go with a continuation prompt" in only_line(p.err)
    assert not (tmp_path / "bad.wav").exists()


@pytest.mark.slow
def test_saved_voice_from_the_cli(run_cli, tmp_path, roomy, ref_wav):
    clone = ("clone", "-m", "voxcpm2", "--model-dir", roomy, "--ref", ref_wav, "--seed", "1", TEXT)
    p = run_cli(*clone, "--ref-text", "Speak softly.", "--save-voice", "me.safetensors", "-o", "both.wav")
    assert p.returncode == 0, p.err
    p = speak(run_cli, "--voice", "me.safetensors", "-o", "again.wav", model_dir=roomy)
    assert p.returncode == 0, p.err
    assert np.array_equal(sf.read(tmp_path / "both.wav")[0], sf.read(tmp_path / "again.wav")[0])


@pytest.mark.slow
def test_refusals_leave_no_file(run_cli, tmp_path):
    for args, says in ((("--max-frames", "2"), "reached 2 patches without its stop"),
                       (("--cfg-value", "0"), "--cfg-value must be in [0.1..10]"),
                       (("--language", "en"), "voxcpm2 cannot honour --language")):
        p = speak(run_cli, *args, "-o", "x.wav")
        assert p.returncode != 0 and says in only_line(p.err), (args, p.err)
    no_files(tmp_path)


def test_opus_file_and_stdout_pipe_carry_48k(run_cli, tmp_path):
    p = speak(run_cli, "-o", "x.opus")
    assert p.returncode == 0, p.err
    assert rate_of(tmp_path / "x.opus") == RATE
    p = speak(run_cli, "-o", "-")
    assert p.returncode == 0, p.err
    audio, rate = sf.read(io.BytesIO(p.stdout))
    assert rate == RATE and len(audio) > 0


@pytest.mark.slow
@pytest.mark.parametrize("name,args,rate", [("x.flac", (), RATE), ("x.mp3", (), RATE), ("x.m4a", (), RATE),
                                            ("x.wav", ("--sample-rate", "24000"), 24000)])
def test_every_file_format_carries_48k_unless_asked(run_cli, tmp_path, name, args, rate):
    p = speak(run_cli, *args, "-o", name)
    assert p.returncode == 0, p.err
    assert rate_of(tmp_path / name) == rate


@pytest.mark.slow
def test_batch_writes_48k(run_cli, tmp_path):
    rows = [{"id": "a", "text": TEXT}, {"id": "b", "text": TEXT, "instruct": "a warm low voice"}]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = run_cli("batch", "m.jsonl", "-o", "out", "-m", "voxcpm2", "--model-dir", TINY, "--format", "opus")
    assert p.returncode == 0, p.err
    done = [json.loads(line) for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    assert [d["sample_rate"] for d in done] == [RATE, RATE]
    assert [rate_of(tmp_path / "out" / d["path"]) for d in done] == [RATE, RATE]


def test_server_resamples_only_when_asked(tmp_path):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
    from servertools import Server

    s = Server(["-m", "voxcpm2", "--model-dir", TINY])
    try:
        def post(**body):
            r = httpx.post(s.url + "/v1/audio/speech", json={"model": "voxcpm2", "input": TEXT, "seed": 1, **body},
                           timeout=120)
            assert r.status_code == 200, r.text
            return r

        audio, rate = sf.read(io.BytesIO(post(response_format="wav").content))
        assert rate == 24000          # what OpenAI clients expect unless they ask
        native, rate = sf.read(io.BytesIO(post(response_format="wav", sample_rate=RATE).content))
        assert rate == RATE and len(native) == 2 * len(audio)
        r = post(response_format="opus", sample_rate=RATE)
        assert r.headers["x-sample-rate"] == str(RATE)
        (tmp_path / "x.opus").write_bytes(r.content)
        assert rate_of(tmp_path / "x.opus") == RATE
        r = httpx.post(s.url + "/v1/audio/speech", json={"model": "voxcpm2", "input": TEXT, "cfg_value": 99},
                       timeout=120)
        assert r.status_code == 400 and "cfg_value must be in [0.1..10]" in r.json()["error"]["message"]
    finally:
        s.stop()
