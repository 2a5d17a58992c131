"""`ttscli parity piper-joe`: our MLX VITS vs the voice's ONNX graph (onnxruntime) and piper-tts.

The passing runs go through the installed console script on the real embedded voice. Each check
is then shown to fail in-process, on one short sentence, with one converted weight perturbed
(or the phoneme-id map, for the phoneme check): the reference stays the untouched ONNX graph.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import ttscli  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx
import numpy as np
import pytest

from clitools import by_name

pytest.importorskip("onnxruntime")

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "parity"
CLEAN = "waveform at zero noise (rel L2)"
NOISY = "waveform at noise 0.667/0.8, same draws (rel L2)"
FRAMES = "frame counts (durations) equal"
IDS = "phoneme ids equal piper-tts's"
GOLDEN = "waveform vs golden (rel L2)"
GOLDEN_FRAMES = "frame count vs golden"


def test_cli_against_onnxruntime_passes(run_cli):
    p = run_cli("parity", "piper-joe", "--against", "onnxruntime", "--json", "-q")
    assert p.returncode == 0, p.err
    report = json.loads(p.stdout)
    checks = by_name(report["checks"])
    assert set(checks) == {CLEAN, NOISY, FRAMES, IDS}            # piper-tts is in the dev venv
    assert report["passed"] and all(c["passed"] for c in checks.values())
    assert checks[CLEAN]["value"] <= 1e-3 and checks[NOISY]["value"] <= 1e-3
    assert checks[FRAMES]["value"] == checks[FRAMES]["threshold"] >= 6


def test_cli_golden_from_piper_tts_passes(run_cli):
    p = run_cli("parity", "piper-joe", "--golden", FIX / "piper-joe.npz", "--json", "-q")
    assert p.returncode == 0, p.err
    checks = by_name(json.loads(p.stdout)["checks"])
    assert set(checks) == {GOLDEN, GOLDEN_FRAMES} and all(c["passed"] for c in checks.values())


# ---------------------------------------------------------------- each check can fail (in-process)

@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    from ttscli.models.piper import convert_onnx, default_voice_dir, find_onnx
    from ttscli.models.piper.reference import OnnxVits

    onnx_path = find_onnx(default_voice_dir())
    converted = convert_onnx(onnx_path, tmp_path_factory.mktemp("piper-parity") / "mlx")
    return onnx_path, converted, OnnxVits(onnx_path)


@pytest.fixture
def short(monkeypatch):
    """One sentence, one extra length scale: enough for each check, a fraction of the CLI's time."""
    from ttscli.models.piper import parity

    monkeypatch.setattr(parity, "SENTENCES", ("Wait, what did you say?",))
    monkeypatch.setattr(parity, "PHONEME_TEXTS", ("Wait, what did you say?", "It costs $3.50."))
    monkeypatch.setattr(parity, "LENGTH_SCALES", (1.0, 1.5))
    return parity


def perturb(key: str, scale: float, seed: int = 0):
    """An edit adding noise of ``scale`` x mean |w| to one converted weight."""
    def edit(model):
        from mlx.utils import tree_flatten

        w = dict(tree_flatten(model.parameters()))[key]
        noise = mx.array(np.random.default_rng(seed).standard_normal(w.shape).astype(np.float32))
        model.load_weights([(key, w + scale * mx.abs(w).mean() * noise)], strict=False)
    return edit


def shift(key: str, by: float):
    """An edit adding a constant to one converted weight."""
    def edit(model):
        from mlx.utils import tree_flatten

        model.load_weights([(key, dict(tree_flatten(model.parameters()))[key] + by)], strict=False)
    return edit


def loaded(voice, edit=None):
    from ttscli.models.piper import load_converted

    model, config = load_converted(voice[1])
    if edit:
        edit(model)
    return model, config


def checks_with(voice, short, edit=None, id_map_edit=None) -> dict:
    onnx_path, _, ref = voice
    model, config = loaded(voice, edit)
    id_map = dict(config["phoneme_id_map"])
    if id_map_edit:
        id_map_edit(id_map)
    checks = short.onnx_checks(model, id_map, config.get("espeak_voice", "en-us"), ref, (0.667, 1.0, 0.8), onnx_path)
    return {c.name: c for c in checks}


def test_clean_waveform_check_fails_on_decoder_weight(voice, short):
    checks = checks_with(voice, short, perturb("dec.conv_post.weight", 0.02))
    assert not checks[CLEAN].passed and checks[CLEAN].value > 1e-3
    assert checks[FRAMES].passed and checks[IDS].passed


def test_noisy_waveform_check_fails_on_prior_log_std(voice, short):
    """logs_p only scales the prior noise: at zero noise the output is untouched."""
    def shift_logs_p(model):
        bias = np.array(model.enc_p.proj.bias)
        bias[bias.shape[0] // 2:] += 0.3                       # the logs_p half of the projection
        model.load_weights([("enc_p.proj.bias", mx.array(bias))], strict=False)

    checks = checks_with(voice, short, shift_logs_p)
    assert not checks[NOISY].passed and checks[NOISY].value > 1e-3
    assert checks[CLEAN].passed and checks[FRAMES].passed


def test_frames_check_fails_on_duration_predictor(voice, short):
    """The last flow of the duration predictor shifts log-durations directly."""
    checks = checks_with(voice, short, shift("dp.flows.0.m", 0.3))
    assert not checks[FRAMES].passed and checks[FRAMES].value < checks[FRAMES].threshold


def test_phoneme_check_fails_on_changed_id_map(voice, short):
    def swap(m):
        m["ə"], m["ɪ"] = m["ɪ"], m["ə"]

    checks = checks_with(voice, short, id_map_edit=swap)
    assert not checks[IDS].passed and checks[IDS].value < checks[IDS].threshold
    assert checks[CLEAN].passed                                 # both sides got the same (wrong) ids


def test_missing_piper_tts_is_reported_not_passed(voice, short, monkeypatch):
    monkeypatch.setitem(sys.modules, "piper", None)             # import piper -> ImportError
    checks = checks_with(voice, short)
    assert IDS not in checks
    assert "NOT compared: piper-tts is not installed" in checks[FRAMES].detail


def test_golden_checks_fail_on_decoder_and_durations(voice, short):
    checks = {c.name: c for c in short.golden_checks(loaded(voice, perturb("dec.conv_post.weight", 0.02))[0],
                                                     FIX / "piper-joe.npz")}
    assert not checks[GOLDEN].passed and checks[GOLDEN_FRAMES].passed
    checks = {c.name: c for c in short.golden_checks(loaded(voice, shift("dp.flows.0.m", 0.3))[0],
                                                     FIX / "piper-joe.npz")}
    assert not checks[GOLDEN_FRAMES].passed
