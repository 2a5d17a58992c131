"""The embedded voice on onnxruntime (Piper's VITS backend "onnx"): the published graph with its
noise drawn from the request's seed, so it is reproducible; against the unmodified graph at
zero noise (the reference itself); concurrent workers give the audio of one worker; the
backend choice and its errors."""
import numpy as np
import pytest

import ttscli
from ttscli.generate import Request, effective_workers, synthesize
from ttscli.models.base import LoadOptions

pytest.importorskip("onnxruntime")

TEXT = ("The first sentence is short. Here is a second one, a little longer than the first. "
        "A third sentence follows. Then a fourth, to give the workers something to share! "
        "Is this the fifth? It is, and the sixth ends the paragraph.")


@pytest.fixture(scope="module")
def pipe():
    return ttscli.load("piper-joe", options=LoadOptions(backends={"vits": "onnx"}))


def audio(pipe, workers=1, **kw):
    return np.concatenate(list(synthesize(pipe, Request(text=TEXT, **kw), workers=workers)))


def test_workers_match_one_worker(pipe):
    assert pipe.concurrent_safe and pipe.backends == {"vits": "onnx"}
    assert effective_workers(pipe, 3) == (3, None)
    one = audio(pipe, 1, seed=7)
    two = audio(pipe, 2, seed=7)
    assert one.size > pipe.sample_rate * 5
    np.testing.assert_array_equal(one, two)
    assert not np.array_equal(one, audio(pipe, 2, seed=8))      # the seed is what fixes the noise


def test_zero_noise_matches_the_published_graph(pipe):
    """At zero noise the seeded graph is the unmodified graph (what piper-tts runs)."""
    from ttscli.models.piper import find_onnx, text_to_ids
    from ttscli.models.piper.load import default_voice_dir
    from ttscli.models.piper.reference import OnnxVits

    ids = text_to_ids("Zero noise, same audio.", pipe.id_map, pipe.espeak_voice)[0]
    ref = OnnxVits(find_onnx(default_voice_dir()))(ids, 0.0, 1.0, 0.0)
    ours, _ = pipe.model(ids, 0.0, 1.0, 0.0, np.random.default_rng(0))
    np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_speed_and_knobs(pipe):
    slow = audio(pipe, seed=1, speed=0.5)
    fast = audio(pipe, seed=1)
    assert slow.size > 1.7 * fast.size
    quiet = audio(pipe, seed=1, knobs={"volume": 0.5})
    assert np.abs(quiet).max() <= 0.5 + 1e-6


def test_backend_choice():
    from ttscli.errors import UsageError
    from ttscli.models.piper.load import vits_backend

    assert ttscli.load("piper-joe", backends={"vits": "MLX"}).backends == {"vits": "mlx"}
    with pytest.raises(UsageError, match="piper-joe's vits runs on mlx, onnx, not 'tpu'"):
        ttscli.load("piper-joe", backends={"vits": "tpu"})
    assert ttscli.load("piper-joe", random_weights=True).backends == {"vits": "mlx"}
    with pytest.raises(UsageError, match="random weights"):
        vits_backend(LoadOptions(backends={"vits": "onnx"}, random_weights=True))
    with pytest.raises(UsageError, match="piper-joe has no component 'code_decoder'"):
        ttscli.load("piper-joe", backends={"code_decoder": "onnx"})


def test_cli_workers_and_env(run_cli, tmp_path):
    import soundfile as sf

    p = run_cli("speak", TEXT, "-o", tmp_path / "a.wav", "--seed", "3", "--workers", "2", "-v")
    assert p.returncode == 0, p.err
    assert "2 worker(s)" in p.err
    q = run_cli("speak", TEXT, "-o", tmp_path / "b.wav", "--seed", "3")
    assert q.returncode == 0, q.err
    a, _ = sf.read(tmp_path / "a.wav")
    b, _ = sf.read(tmp_path / "b.wav")
    np.testing.assert_array_equal(a, b)
    bad = run_cli("speak", "hi", "-o", tmp_path / "c.wav", "--backend", "vits=gpu")
    assert bad.returncode == 2 and "Traceback" not in bad.err and "--backend vits=gpu" in bad.err
    assert not (tmp_path / "c.wav").exists()
