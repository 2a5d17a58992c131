"""`ttscli parity` for Qwen3-TTS against the upstream goldens of the tiny fixtures.

The goldens (tests/fixtures/parity/qwen3-tiny-*.npz) come from qwen-tts 0.1.1 via
scripts/goldens/export_parity_npz.py. Passing runs go through the installed console script;
each check is then shown to fail on a checkpoint copy with one tensor perturbed (or, for the two
internal consistency checks, with a defect injected into one of the two paths they compare).
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import ttscli  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx
import numpy as np
import pytest

from clitools import by_name, only_line

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "parity"
MODELS = {"base": "qwen3-tts-0.6b-base", "customvoice": "qwen3-tts-1.7b-customvoice",
          "voicedesign": "qwen3-tts-1.7b-voicedesign"}
PROMPT = "prompt embeddings vs golden (max abs)"
LOGITS = "prefill logits vs golden (cosine)"
HIDDEN = "prefill hidden vs golden (cosine)"
GREEDY = "greedy frames vs golden (all 16 codes)"
BATCHED = "internal: batched vs sequential prefill (max abs)"
DECODER = "speech decoder vs golden waveform (max abs)"
STREAM = "internal: streamed vs one-shot decoder (max abs)"
REPRIME = "internal: re-primed fixed-slot vs one-shot decoder (max abs)"


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_cli_passes_on_upstream_goldens(run_cli, kind):
    p = run_cli("parity", MODELS[kind], "--model-dir", FIX / f"qwen3-tiny-{kind}",
                "--golden", FIX / f"qwen3-tiny-{kind}.npz", "--json", "-q")
    assert p.returncode == 0, p.err
    report = json.loads(p.stdout)
    checks = by_name(report["checks"])
    want = {PROMPT, LOGITS, HIDDEN, GREEDY, BATCHED, STREAM, REPRIME} | ({DECODER} if kind == "base" else set())
    assert set(checks) == want
    assert report["passed"] and all(c["passed"] for c in checks.values())
    assert checks[GREEDY]["value"] == checks[GREEDY]["threshold"] == 20.0
    assert checks[LOGITS]["value"] >= 0.99999 and checks[PROMPT]["value"] <= 1e-4


def test_cli_frames_option_and_failure_exit(run_cli, tmp_path):
    """--frames limits the greedy comparison; a perturbed codec_head makes the CLI exit 1."""
    ckpt = perturbed(tmp_path, {"talker.codec_head.weight": 0.05})
    p = run_cli("parity", MODELS["base"], "--model-dir", ckpt, "--golden", FIX / "qwen3-tiny-base.npz",
                "--frames", "5", "--json", "-q")
    checks = by_name(json.loads(p.stdout)["checks"])
    # (cli.main must return app()'s status: with standalone_mode=False click returns typer.Exit's code)
    assert p.returncode == 1, f"a failed check must exit 1, got {p.returncode}"
    assert not checks[LOGITS]["passed"] and checks[LOGITS]["value"] < 0.99999
    assert checks[HIDDEN]["passed"]                     # the head is after the hidden state
    assert checks[GREEDY]["threshold"] == 5.0


@pytest.mark.skipif(sys.platform == "darwin", reason="Core ML can run here")
def test_cli_against_coreml_is_unavailable_off_macos(run_cli):
    p = run_cli("parity", MODELS["base"], "--model-dir", FIX / "qwen3-tiny-base", "--against", "coreml")
    assert p.returncode == 1
    assert "Core ML needs macOS 15+" in only_line(p.err)


def test_cli_against_same_backend_is_a_usage_error(run_cli):
    p = run_cli("parity", MODELS["base"], "--model-dir", FIX / "qwen3-tiny-base", "--against", "mlx")
    assert p.returncode == 2
    assert "--against coreml" in only_line(p.err)


# ---------------------------------------------------------------- each check can fail (in-process)

def perturbed(tmp_path: Path, talker: dict[str, float] | None = None, decoder: dict[str, float] | None = None,
              kind: str = "base") -> Path:
    """A real copy of the fixture checkpoint with relative noise added to the named tensors."""
    dst = tmp_path / "ckpt"
    shutil.copytree(FIX / f"qwen3-tiny-{kind}", dst)          # follows the fixture's symlinks
    rng = np.random.default_rng(0)
    for path, edits in ((dst / "model.safetensors", talker), (dst / "speech_tokenizer" / "model.safetensors", decoder)):
        if not edits:
            continue
        w = mx.load(str(path))
        for key, scale in edits.items():
            x = w[key].astype(mx.float32)
            noise = mx.array(rng.standard_normal(x.shape).astype(np.float32))
            w[key] = (x + scale * float(mx.abs(x).mean()) * noise).astype(w[key].dtype)
        mx.save_safetensors(str(path), w)
    return dst


def run_checks(ckpt: Path, kind: str = "base", frames: int = 20) -> dict:
    from ttscli.models.qwen3_tts.parity import parity_checks
    from ttscli.registry import load_registry

    spec = load_registry().resolve(MODELS[kind])
    checks = parity_checks(spec, ckpt, golden=FIX / f"qwen3-tiny-{kind}.npz", frames=frames)
    return {c.name: c for c in checks}


def test_unperturbed_copy_passes(tmp_path):
    checks = run_checks(perturbed(tmp_path))
    assert all(c.passed for c in checks.values()), checks


@pytest.mark.slow
def test_prompt_check_fails_on_text_projection(tmp_path):
    checks = run_checks(perturbed(tmp_path, {"talker.text_projection.linear_fc2.bias": 0.1}))
    assert not checks[PROMPT].passed
    assert checks[LOGITS].passed          # prefill runs from the golden's own embeddings


@pytest.mark.slow
def test_hidden_check_fails_on_talker_layer(tmp_path):
    checks = run_checks(perturbed(tmp_path, {"talker.model.layers.1.mlp.down_proj.weight": 0.1}))
    assert not checks[HIDDEN].passed and checks[HIDDEN].value < 0.99999
    assert checks[PROMPT].passed


def test_greedy_check_fails_on_code_predictor_head(tmp_path):
    checks = run_checks(perturbed(tmp_path, {f"talker.code_predictor.lm_head.{i}.weight": 0.5 for i in range(15)}))
    assert not checks[GREEDY].passed and checks[GREEDY].value < 20
    assert checks[LOGITS].passed and checks[HIDDEN].passed     # the talker itself is intact


@pytest.mark.slow
def test_decoder_check_fails_on_decoder_conv(tmp_path):
    checks = run_checks(perturbed(tmp_path, decoder={"decoder.decoder.0.conv.weight": 0.05}))
    assert not checks[DECODER].passed and checks[DECODER].value > 1e-4
    assert checks[STREAM].passed and checks[GREEDY].passed


def test_batched_prefill_check_fails_without_causal_mask(tmp_path, monkeypatch):
    """Both paths share the weights, so no weight can split them: drop the causal mask of the
    batched path (sequential prefill never needs one) and the check must see it."""
    from ttscli.lm import model

    ckpt = perturbed(tmp_path)
    monkeypatch.setattr(model, "create_causal_mask", lambda *a, **k: None)
    checks = run_checks(ckpt)
    assert not checks[BATCHED].passed and checks[BATCHED].value > 1e-4


@pytest.mark.slow
def test_stream_check_fails_when_chunks_forget_their_context(tmp_path, monkeypatch):
    """Decode each streamed chunk on its own (no carried conv tails / KV): the classic chunking bug."""
    from ttscli.codecs.qwen3_12hz import streaming

    def forgetful(self, codes):
        self.chunks += 1
        return np.array(self.decoder(mx.array(codes)).astype(mx.float32))

    ckpt = perturbed(tmp_path)
    monkeypatch.setattr(streaming.StreamingDecoder, "_decode", forgetful)
    checks = run_checks(ckpt)
    assert not checks[STREAM].passed and checks[STREAM].value > 1e-4
    assert checks[DECODER].passed


@pytest.mark.slow
def test_reprime_check_fails_when_the_reprime_keeps_only_inputs(tmp_path, monkeypatch):
    """Re-prime by re-running the stack's input frames (every layer but the first loses context)."""
    from decoder_variants import input_only_reprime
    from ttscli.codecs.qwen3_12hz import transformer

    ckpt = perturbed(tmp_path)
    monkeypatch.setattr(transformer.DecoderTransformer, "_reprime", input_only_reprime)
    checks = run_checks(ckpt)
    assert not checks[REPRIME].passed and checks[REPRIME].value > 1e-4
    assert "2 re-primes" in checks[REPRIME].detail
    assert checks[STREAM].passed and checks[DECODER].passed


def test_golden_without_known_arrays_is_rejected(tmp_path):
    from ttscli.errors import UsageError
    from ttscli.models.qwen3_tts.parity import read_golden

    bad = tmp_path / "bad.npz"
    np.savez(bad, something=np.zeros(3))
    with pytest.raises(UsageError, match="none of the Qwen3-TTS golden arrays"):
        read_golden(bad)
    np.savez(bad, **{"prefill/logits": np.zeros(3)})
    with pytest.raises(UsageError, match="needs its input prefill/embeds"):
        read_golden(bad)


def test_backend_comparison_passes_on_equal_talkers_and_fails_on_a_different_one(tmp_path):
    """The comparison `--against coreml` runs on a Mac, exercised here with two MLX talkers:
    batched vs sequential prefill (equal), then a talker with a perturbed layer."""
    from ttscli.models.qwen3_tts.load import load_model, load_tokenizer
    from ttscli.lm import MLXCodeDecoder
    from ttscli.models.qwen3_tts.parity import compare_code_decoders

    model, gen = load_model(FIX / "qwen3-tiny-base")
    tok = load_tokenizer(FIX / "qwen3-tiny-base")
    same = compare_code_decoders(model, gen, tok, MLXCodeDecoder(model.talker),
                                 MLXCodeDecoder(model.talker, sequential=True), "mlx", "mlx-seq", 8)
    assert all(c.passed for c in same), same
    assert same[1].value == 8.0                     # EOS is masked: all 8 frames compared
    other, _ = load_model(perturbed(tmp_path, {"talker.model.layers.1.mlp.down_proj.weight": 0.5}))
    diff = compare_code_decoders(model, gen, tok, MLXCodeDecoder(model.talker), MLXCodeDecoder(other.talker),
                                 "mlx", "perturbed", 8)
    assert [c.passed for c in diff] == [False, False], diff
