"""Kokoro exported from our MLX model to float32 ONNX and run by onnxruntime: the same durations,
F0, N, text features and decoder audio as our MLX model on the same inputs, the published graph's
float twin end to end (parity.py's checks, unchanged), perturbed weights caught, the cache, the
backend choice."""
import numpy as np
import pytest

# ttscli before mlx: importing it loads a fast BLAS
from ttscli.models.kokoro import parity

mx = pytest.importorskip("mlx.core")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from clitools import only_line


@pytest.fixture(scope="module")
def onnx_model(kokoro_model, kokoro_ckpt, shared_cache, monkeypatch_module):
    from ttscli.models.kokoro.onnx_runtime import open_model

    return open_model(kokoro_model, kokoro_ckpt)


@pytest.fixture(scope="module")
def monkeypatch_module(shared_cache):
    mp = pytest.MonkeyPatch()
    mp.setenv("TTSCLI_CACHE", str(shared_cache))
    yield mp
    mp.undo()


def _prosody(model, voices, vocab, ps: str):
    from ttscli.models.kokoro.load import style_row
    from ttscli.models.kokoro.pipeline import tokens_of

    toks = mx.array(tokens_of(ps, vocab), dtype=mx.int32)
    s = mx.array(style_row(voices[parity.VOICE], len(ps)))
    d, dur = model.durations(toks, s)
    mx.eval(dur)
    p = model.prosody(toks, s, d, dur)
    mx.eval(p.f0, p.n, p.asr)
    return p, s


@pytest.mark.slow
@pytest.mark.parametrize("utt", parity.UTTERANCES)
def test_decoder_matches_mlx_on_the_same_features(kokoro_model, onnx_model, kokoro_voices, kokoro_vocab, utt):
    p, s = _prosody(kokoro_model, kokoro_voices, kokoro_vocab, utt[1])
    har, feats = kokoro_model.source(p.f0)
    ref = np.array(kokoro_model.decode(p, s, feats))
    got = np.array(onnx_model.decode(p, s, feats))
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()

    o_har, o_feats = onnx_model.source(p.f0)
    har, feats, o_feats = np.array(har), np.array(feats), np.array(o_feats)
    assert np.abs(np.array(o_har) - har).max() <= 1e-5 * np.abs(har).max()
    bins = feats.shape[1] // 2
    mag = feats[:, :bins]
    assert np.abs(o_feats[:, :bins] - mag).max() <= 1e-5 * mag.max()
    # phase is compared where it is defined: bins above rounding noise (an unvoiced stretch's
    # constant source leaves ~1e-9 magnitudes whose phase is any angle, in torch too)
    live = mag > 1e-4 * mag.max()
    dphi = np.angle(np.exp(1j * (o_feats[:, bins:] - feats[:, bins:])))
    assert np.abs(dphi[live]).max() < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("utt", parity.UTTERANCES)
def test_text_side_matches_mlx(kokoro_model, onnx_model, kokoro_voices, kokoro_vocab, utt):
    from ttscli.models.kokoro.load import style_row
    from ttscli.models.kokoro.pipeline import tokens_of

    toks = mx.array(tokens_of(utt[1], kokoro_vocab), dtype=mx.int32)
    s = mx.array(style_row(kokoro_voices[parity.VOICE], len(utt[1])))
    ref_d, ref_dur = kokoro_model.durations(toks, s, 1.1)
    d, dur = onnx_model.durations(toks, s, 1.1)
    assert np.array_equal(np.array(dur), np.array(ref_dur))
    assert parity.rel_l2(np.array(d), np.array(ref_d)) < 1e-5
    ref = kokoro_model.prosody(toks, s, ref_d, ref_dur)
    got = onnx_model.prosody(toks, s, d, dur)
    for k in ("f0", "n", "asr"):
        assert parity.rel_l2(np.array(getattr(got, k)), np.array(getattr(ref, k))) < 1e-5, k


@pytest.mark.slow
def test_end_to_end_passes_the_float_twin_checks(onnx_model, refs):
    checks = parity.compare(onnx_model, refs)
    bad = [(c.name, c.value, c.threshold) for c in checks if not c.passed]
    assert not bad
    by = {c.name: c.value for c in checks}
    assert by["float twin: decoder on its durations + STFT features (rel L2)"] < 1e-4


@pytest.mark.slow
def test_perturbed_weights_fail_their_checks(kokoro_model, refs, monkeypatch_module):
    from mlx.utils import tree_flatten

    from ttscli.models.kokoro.onnx_export import build_from_model
    from ttscli.models.kokoro.onnx_runtime import OnnxDecoder, OnnxKModel

    # one graph build for two stages: the decoder's last conv and the F0 projection
    changes = {"decoder.generator.conv_post.weight": lambda w: w * 1.002, "predictor.F0_proj.bias": lambda w: w + 3.0}
    params = dict(tree_flatten(kokoro_model.parameters()))
    old = {k: params[k] for k in changes}
    kokoro_model.load_weights([(k, f(old[k])) for k, f in changes.items()], strict=False)
    try:
        model = OnnxKModel(kokoro_model, OnnxDecoder(build_from_model(kokoro_model)))
        failing = {c.name for c in parity.compare(model, refs) if not c.passed}
    finally:
        kokoro_model.load_weights(list(old.items()), strict=False)
        mx.eval(kokoro_model.parameters())
    assert {"float twin: decoder on its durations + STFT features (rel L2)", "float twin: F0 (rel L2)"} <= failing


@pytest.mark.slow
def test_conversion_is_found_by_source_hash_and_rebuilt_when_stale(kokoro_model, kokoro_ckpt, tmp_path,
                                                                   monkeypatch, capsys):
    import shutil

    from ttscli.backends.onnx.manifest import read_manifest
    from ttscli.models.kokoro.onnx_export import find_or_build

    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    ck = tmp_path / "ck"
    ck.mkdir()
    for f in ("model.sha256", "voices_ja.npz", "vocab.json"):
        shutil.copy(kokoro_ckpt / f, ck / f)
    first = find_or_build(ck, kokoro_model, "kokoro-test")
    assert "building" in capsys.readouterr().err
    assert read_manifest(first)["family"] == "kokoro"
    assert find_or_build(ck, kokoro_model, "kokoro-test") == first
    assert "building" not in capsys.readouterr().err
    (ck / "model.sha256").write_text("0" * 64 + "  kokoro-v1.0.int8.onnx\n")
    assert find_or_build(ck, kokoro_model, "kokoro-test") == first
    assert "building" in capsys.readouterr().err


def test_backend_choice(monkeypatch):
    from ttscli.backends.select import resolve
    from ttscli.errors import UsageError
    from ttscli.models import family_of
    from ttscli.registry import load_registry

    spec = load_registry().resolve("kokoro-82m")
    fam = family_of(spec)
    assert resolve(spec, fam, {"acoustic": "MLX"})["acoustic"].backend == "mlx"
    assert resolve(spec, fam, {"acoustic": "onnx"})["acoustic"].backend == "onnx"
    with pytest.raises(UsageError, match="kokoro-82m's acoustic runs on mlx, onnx, not 'tpu'"):
        resolve(spec, fam, {"acoustic": "tpu"})
    with pytest.raises(UsageError, match="kokoro-82m has no component 'code_decoder'"):
        resolve(spec, fam, {"code_decoder": "onnx"})
    monkeypatch.setattr(mx, "default_device", lambda: mx.Device(mx.DeviceType.gpu, 0))
    chosen = resolve(spec, fam)["acoustic"]                   # the graphs are CPU graphs
    assert (chosen.backend, chosen.why) == ("mlx", "MLX runs on the GPU here")


@pytest.mark.slow
def test_source_noise_on_onnx_is_one_line(run_cli, kokoro_model, tmp_path):
    out = tmp_path / "x.wav"
    p = run_cli("speak", "Hello.", "-m", "kokoro", "--source-noise", "-o", out, "--backend", "acoustic=onnx")
    assert p.returncode != 0
    # the first use of the onnx backend in this cache builds its graphs and says so on a line first
    err = "\n".join(line for line in p.err.splitlines() if not line.startswith("ttscli: building the ONNX"))
    assert "--backend acoustic=mlx" in only_line(err)
    assert not out.exists()
