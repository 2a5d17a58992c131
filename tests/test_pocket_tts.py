"""Pocket TTS against the upstream package (pocket-tts 4.0.1) on the tiny checkpoint in the
published layout and its goldens (scripts/goldens/pocket_tts_upstream.py): text tokens, the Mimi
encoder (clone) and decoder, the voice and text prefills, frames with upstream's recorded noise,
EOS decisions, the waveform; then streaming, loading errors and limits."""
from __future__ import annotations

import shutil
from pathlib import Path

import ttscli  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx
import numpy as np
import pytest

from ttscli.errors import CheckpointError, GenerationError, UsageError
from ttscli.models import get_family
from ttscli.models.base import LoadOptions, Request, cosine
from ttscli.registry import load_registry

FIX = Path(__file__).resolve().parent / "fixtures" / "pocket_tts"
TEXT = "hello world, how are you today"


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(FIX / "goldens.npz"))


@pytest.fixture(scope="module")
def pipe():
    spec = load_registry().resolve("pocket-tts")
    return get_family("pocket_tts").load(spec, FIX / "tiny", LoadOptions())


def replay(pipe, golden, **request):
    """Our generation with upstream's recorded noise; (audio, hidden per frame, EOS logits)."""
    noise = iter(golden["noise"])
    hidden, eos = [], []
    step = pipe.code_decoder.step

    def record_step(embed, cache):
        logit, h = step(embed, cache)
        eos.append(float(logit[0, 0]))
        hidden.append(np.array(h[0]))
        return logit, h

    pipe.noise = lambda keys, t, c: mx.array(next(noise))[None]
    pipe.code_decoder.step = record_step
    try:
        req = Request(text=TEXT, voice="alba", knobs={"frames_after_eos": int(golden["frames_after_eos"])}, **request)
        audio = list(pipe.generate(req))
    finally:
        del pipe.noise
        del pipe.code_decoder.step
    return audio, hidden, eos


def test_text_prompt_and_tokens_match_upstream(pipe, golden):
    from ttscli.models.pocket_tts.prompt import prepare_text

    text, guess = prepare_text(TEXT, pipe.args)
    assert text == str(golden["text"]) and guess == 1
    assert pipe.tokenizer.encode(text) == golden["tokens"].tolist()


def test_mimi_encoder_matches_upstream_with_its_window(pipe, golden):
    from ttscli.models.pocket_tts.prompt import end_on_pause

    # 1.1 s at 200 Hz runs the encoder transformer far past its 20-step window
    latents = np.array(pipe.model.mimi.encode(end_on_pause(golden["ref_audio"], 24000))[0])
    ref = golden["voice_latents"]
    assert latents.shape == ref.shape
    assert np.abs(latents - ref).max() <= 1e-4 * np.abs(ref).max()


def test_clone_prompt_prefill_matches_upstream(pipe, golden):
    from ttscli.models.pocket_tts.prompt import end_on_pause

    prompt = pipe.voice_prompt(golden["ref_audio"])
    _, hidden = pipe.code_decoder.prefill(prompt, pipe.code_decoder.new_cache())
    assert cosine(np.array(hidden[0]), golden["voice_prompt_hidden"]) >= 0.99999
    assert end_on_pause(golden["ref_audio"], 24000).size < golden["ref_audio"].size


def test_builtin_voice_and_text_prefill_match_upstream(pipe, golden):
    cache = pipe.voice_cache(Request(text=TEXT, voice="alba"))
    tokens = mx.array(golden["tokens"][None])
    _, hidden = pipe.code_decoder.prefill(pipe.model.flow_lm.text_embeddings(tokens), cache)
    assert cosine(np.array(hidden[0]), golden["prefill_hidden"]) >= 0.99999


def test_frames_eos_and_waveform_match_upstream(pipe, golden):
    audio, hidden, eos = replay(pipe, golden)
    assert len(hidden) == len(golden["step_hidden"])      # upstream's EOS stop, at the same frame
    for ours, ref in zip(hidden, golden["step_hidden"]):
        assert cosine(ours, ref) >= 0.99999
    assert [e > -4.0 for e in eos] == [bool(e > -4.0) for e in golden["eos_logits"]]
    assert any(e > -4.0 for e in eos[:6]) and not all(e > -4.0 for e in eos)   # both decisions, early ones ignored
    wav = np.concatenate(audio)
    ref = golden["audio"]
    assert wav.shape == ref.shape
    assert np.abs(wav - ref).max() <= 1e-4 * np.abs(ref).max()


def test_mimi_decoder_matches_upstream(pipe, golden):
    lm, mimi = pipe.model.flow_lm, pipe.model.mimi
    x = mx.array(golden["latents"])[None] * lm.emb_std + lm.emb_mean
    wav = np.array(mimi.decode(x)[0])
    ref = golden["mimi_decoded"]
    assert wav.shape == ref.shape and wav.size > 2 * 1920      # frames past the 20-step window
    assert np.abs(wav - ref).max() <= 1e-4 * np.abs(ref).max()


def test_stream_equals_one_shot_and_starts_after_one_frame(pipe, golden):
    one = np.concatenate(replay(pipe, golden)[0])
    chunks = replay(pipe, golden, stream=True, chunk_frames=3)[0]
    assert len(chunks[0]) == 1920                               # first audio after the first frame
    np.testing.assert_allclose(np.concatenate(chunks), one, atol=1e-5)


def test_mimi_decodes_on_one_thread_of_its_own_beside_the_lm(pipe):
    """Chunks are decoded off the generating thread (the flow LM goes on meanwhile), in order, by
    one thread for every generation: no thread per request; a closed stream leaves none queued."""
    import threading

    decode, seen = pipe.model.mimi.decode, []

    def record(x, stream=None):
        seen.append(threading.current_thread())
        return decode(x, stream)

    pipe.model.mimi.decode = record
    try:
        req = Request(text=TEXT, voice="alba", seed=2, max_frames=6, ignore_eos=True, stream=True, chunk_frames=2)
        alone = list(pipe.generate(req))
        threads = threading.active_count()
        for _ in range(3):
            assert all(np.array_equal(a, b) for a, b in zip(pipe.generate(req), alone, strict=True))
        closed = pipe.generate(req)
        next(closed)
        closed.close()
    finally:
        del pipe.model.mimi.decode
    assert threading.active_count() == threads
    assert len(seen) == 4 * 4 + 1 and len(set(seen)) == 1 and seen[0] is not threading.current_thread()


def test_seeded_generation_repeats(pipe):
    req = Request(text=TEXT, voice="alba", seed=7, max_frames=5, ignore_eos=True)
    a, b = (np.concatenate(list(pipe.generate(req))) for _ in range(2))
    assert a.shape == (5 * 1920,) and np.array_equal(a, b)


def test_frame_limit_is_an_error(pipe):
    # EOS is ignored before frame 6, so a limit of 4 is always reached
    with pytest.raises(GenerationError, match="4 frames"):
        list(pipe.generate(Request(text=TEXT, voice="alba", seed=0, max_frames=4)))


def test_unknown_voice_and_voice_with_reference_are_refused(pipe, golden):
    with pytest.raises(UsageError, match="no voice .nobody..*alba"):
        list(pipe.generate(Request(text=TEXT, voice="nobody")))
    with pytest.raises(UsageError, match="not both"):
        list(pipe.generate(Request(text=TEXT, voice="alba", ref_audio=golden["ref_audio"], ref_sample_rate=24000)))


def test_strict_loading_names_the_published_tensor(tmp_path):
    from safetensors.numpy import load_file, save_file

    from ttscli.models.pocket_tts.load import load_model

    src = FIX / "tiny" / "languages" / "english"
    for case, edit, expect in (
        ("missing", lambda w: w.pop("mimi.decoder_transformer.transformer.layers.1.self_attn.in_proj.weight"),
         "missing.*mimi.decoder_transformer.transformer.layers.1.self_attn.in_proj.weight"),
        ("unexpected", lambda w: w.update({"flow_lm.extra.weight": np.zeros(3, np.float32)}),
         "unexpected.*flow_lm.extra.weight"),
        ("shape", lambda w: w.update({"mimi.decoder.model.2.convtr.weight": np.zeros((1, 1, 1), np.float32)}),
         "mimi.decoder.model.2.convtr.weight"),
    ):
        folder = tmp_path / case
        shutil.copytree(src, folder)
        weights = load_file(folder / "model.safetensors")
        edit(weights)
        save_file(weights, folder / "model.safetensors")
        with pytest.raises(CheckpointError, match=expect):
            load_model(folder)


def test_flow_lm_keeps_the_code_decoder_contract(pipe):
    from ttscli.lm.decoder import LATENT_HEAD, CodeDecoder

    dec, lm = pipe.code_decoder, pipe.model.flow_lm
    assert isinstance(dec, CodeDecoder)
    cache = dec.new_cache()
    logits, hidden = dec.prefill(lm.text_embeddings(mx.array([[1, 2, 3]])), cache)
    assert logits.shape == (1, LATENT_HEAD) and hidden.shape == (1, lm.args.d_model)
    logits, hidden = dec.step(lm.latent_embeddings(None), cache)
    assert logits.shape == (1, LATENT_HEAD) and cache[0].offset == 4
    latent = pipe.latent(hidden, mx.zeros((1, pipe.args.latent_dim)), 1)
    assert latent.shape == (1, pipe.args.latent_dim)


def test_noise_clamp_truncates_the_flow_noise(pipe):
    from ttscli.lm.sample import KeyStream

    keys = KeyStream(0)
    noise = np.concatenate([np.array(pipe.noise(keys, 1.0, 0.5)) for _ in range(50)])
    free = np.concatenate([np.array(pipe.noise(keys, 1.0, None)) for _ in range(50)])
    assert np.abs(noise).max() <= 0.5 + 1e-6 and np.abs(free).max() > 1.0
    assert np.array_equal(np.array(pipe.noise(keys, 0.0, None)), np.zeros((1, pipe.args.latent_dim)))


def test_cli_speak_clone_and_errors(run_cli, tmp_path, golden):
    import soundfile as sf

    tiny = FIX / "tiny"
    p = run_cli("speak", "-m", "pocket-tts", "--model-dir", tiny, "--seed", "1", "--temperature", "0.5",
                "--eos-threshold", "-4", "--frames-after-eos", "1", TEXT, "-o", "a.wav")
    assert p.returncode == 0, p.err
    audio, rate = sf.read(tmp_path / "a.wav")
    assert rate == 24000 and audio.ndim == 1 and len(audio) > 0 and len(audio) % 1920 == 0
    sf.write(tmp_path / "ref.wav", golden["ref_audio"], 24000)
    # the CLI asks every clone for a transcript before it knows the family; Pocket TTS reads none
    p = run_cli("clone", "-m", "pocket-tts", "--model-dir", tiny, "--ref", "ref.wav", "--ref-text", "unused",
                "--seed", "1", TEXT, "-o", "b.wav")
    assert p.returncode == 0, p.err
    assert sf.read(tmp_path / "b.wav")[0].size > 0
    for args, says in ((("--voice", "nobody"), "no voice 'nobody'"),
                       (("--sampler-decode-steps", "0"), "--sampler-decode-steps must be in [1..64]"),
                       (("--instruct", "whisper"), "instruct"),
                       (("--max-frames", "3"), "3 frames")):
        p = run_cli("speak", "-m", "pocket-tts", "--model-dir", tiny, *args, TEXT, "-o", "c.wav")
        lines = [ln for ln in p.err.strip().splitlines() if ln.strip()]
        assert p.returncode != 0 and not (tmp_path / "c.wav").exists(), args
        assert "Traceback" not in p.err and len(lines) == 1 and says in lines[0], (args, p.err)


def test_saved_clone_voice_speaks_as_the_clone(pipe, golden, tmp_path):
    """--save-voice writes upstream's voice-state layout; --voice FILE reads it back to the same audio."""
    from safetensors.numpy import load_file

    path = tmp_path / "me.safetensors"
    ref = dict(ref_audio=golden["ref_audio"], ref_sample_rate=24000)
    cloned = np.concatenate(list(pipe.generate(Request(text=TEXT, seed=3, max_frames=5, ignore_eos=True,
                                                       save_voice=path, **ref))))
    saved = load_file(path)
    assert saved["transformer.layers.0.self_attn/cache"].shape[:2] == (2, 1)
    assert int(saved["transformer.layers.1.self_attn/offset"][0]) == 1 + len(golden["voice_latents"])
    again = np.concatenate(list(pipe.generate(Request(text=TEXT, voice=str(path), seed=3, max_frames=5,
                                                      ignore_eos=True))))
    assert np.array_equal(cloned, again)
    with pytest.raises(UsageError, match="--save-voice needs reference audio"):
        list(pipe.generate(Request(text=TEXT, save_voice=tmp_path / "x.safetensors")))


def test_bench_peer_needs_no_weights_at_random_weights(monkeypatch, tmp_path):
    """`ttscli bench pocket-tts --random-weights --peer pocket-tts` runs offline: the peer gets no
    checkpoint when none is on this machine, and names the Python it needs when it is not set."""
    from ttscli.bench import BenchRequest, peer_checkpoint
    from ttscli.models.pocket_tts.bench import bench_peer

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = load_registry().resolve("pocket-tts")
    assert peer_checkpoint(spec, BenchRequest(model="pocket-tts", random_weights=True)) is None
    assert peer_checkpoint(spec, BenchRequest(model="pocket-tts", random_weights=True,
                                              model_dir=FIX / "tiny")) == FIX / "tiny"
    monkeypatch.delenv("TTSCLI_POCKET_PYTHON", raising=False)
    with pytest.raises(UsageError, match="TTSCLI_POCKET_PYTHON"):
        bench_peer(spec, None, TEXT, 1)


def _as_mlx_audio(weights: dict, ratios: int = 3) -> dict:
    """The published tensors as mlx-audio 0.6.2's Pocket TTS conversion leaves them (its
    weights.py map_weights, restated): the voice projection at the top level, SEANet's Sequential
    indices as module paths one level deeper, Mimi's MLPs under gating., convs channels-last."""
    seanet = {}
    for side in ("encoder", "decoder"):
        seanet[f"mimi.{side}.model.0"] = f"mimi.{side}.init_conv1d"
        i = 1
        for stage in range(ratios):
            at = f"mimi.{side}.layers.{stage}"
            if side == "decoder":
                seanet[f"mimi.{side}.model.{i + 1}"], i = f"{at}.upsample", i + 2
            seanet[f"mimi.{side}.model.{i}.block.1"] = f"{at}.residuals.0.block.0"
            seanet[f"mimi.{side}.model.{i}.block.3"] = f"{at}.residuals.0.block.1"
            i += 1
            if side == "encoder":
                seanet[f"mimi.{side}.model.{i + 1}"], i = f"{at}.downsample", i + 2
        seanet[f"mimi.{side}.model.{i + 1}"] = f"mimi.{side}.final_conv1d"
    out = {}
    for name, w in weights.items():
        if name == "flow_lm.speaker_proj_weight":
            name = "speaker_proj_weight"
        for old in sorted(seanet, key=len, reverse=True):
            if name.startswith(old + "."):
                name = seanet[old] + name[len(old):]
                break
        if "_transformer.transformer.layers." in name and ".linear" in name:
            name = name.replace(".linear", ".gating.linear")
        if name.startswith("mimi.") and not name.startswith("mimi.quantizer."):
            parts = name.split(".")   # one module level deeper: conv.weight -> conv.conv.weight
            if parts[-2] in ("conv", "convtr"):
                name = ".".join(parts[:-1] + parts[-2:])
        if w.ndim == 3 and name.endswith(".weight"):
            upsample = name.startswith("mimi.upsample.")
            w = np.ascontiguousarray(w.transpose((1, 2, 0) if ".convtr." in name and not upsample else (0, 2, 1)))
        out[name] = w
    return out


def _mlx_audio_folder(tmp_path, edit=None):
    import json

    from safetensors.numpy import load_file, save_file

    src = FIX / "tiny" / "languages" / "english"
    folder = tmp_path / "pocket-tts-mlx"
    shutil.copytree(src, folder)
    weights = _as_mlx_audio(load_file(src / "model.safetensors"))
    if edit:
        edit(weights)
    save_file(weights, folder / "model.safetensors")
    config = json.loads((src / "config.json").read_text())   # as mlx-audio's convert writes it
    config.update(model_type="pocket_tts", weights_name="model.safetensors")
    config["mimi"]["encoder_enabled"] = True
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_mlx_audio_layout_gives_the_same_model_and_audio(pipe, golden, tmp_path):
    from mlx.utils import tree_flatten

    spec = load_registry().resolve("pocket-tts")
    other = get_family("pocket_tts").load(spec, _mlx_audio_folder(tmp_path), LoadOptions())
    ours = dict(tree_flatten(pipe.model.parameters()))
    theirs = dict(tree_flatten(other.model.parameters()))
    assert set(theirs) == set(ours)
    assert all(theirs[k].dtype == mx.float32 and np.array_equal(np.array(theirs[k]), np.array(ours[k])) for k in ours)
    clone = dict(ref_audio=golden["ref_audio"], ref_sample_rate=24000)
    for voice in (dict(voice="alba"), clone):
        req = Request(text=TEXT, seed=5, max_frames=5, ignore_eos=True, **voice)
        a, b = (np.concatenate(list(p.generate(req))) for p in (pipe, other))
        assert a.size == 5 * 1920 and np.array_equal(a, b)


def test_mlx_audio_layout_refusals_are_one_line(tmp_path):
    from ttscli.models.pocket_tts.load import load_model

    def quantized(w):
        q, scales, biases = mx.quantize(mx.array(w["flow_lm.transformer.layers.0.linear1.weight"]), 32, 8)
        w["flow_lm.transformer.layers.0.linear1.weight"] = np.array(q)
        w["flow_lm.transformer.layers.0.linear1.scales"] = np.array(scales)
        w["flow_lm.transformer.layers.0.linear1.biases"] = np.array(biases)

    def version_1(w):   # pocket-tts 1.x: the voice projection reads Mimi's full width (here 32)
        w["speaker_proj_weight"] = np.zeros((64, 32), np.float32)

    for i, (edit, expect) in enumerate((
            (quantized, r"layers.0.linear1.weight is quantized \(packed uint32 with scales"),
            (version_1, r"speaker_proj_weight is \[64, 32\].*pocket-tts 1.x"),
            (lambda w: w.pop("mimi.decoder.layers.0.upsample.convtr.convtr.weight"),
             "missing 1: mimi.decoder.layers.0.upsample.convtr.convtr.weight.*mlx-audio"),
            (lambda w: w.update({"mimi.decoder.layers.0.extra.weight": np.zeros(3, np.float32)}),
             "unexpected 1: mimi.decoder.layers.0.extra.weight"),
            (lambda w: w.update({"mimi.upsample.convtr.convtr.convtr.weight": np.zeros((32, 1, 32), np.float32)}),
             r"mis-shaped 1: mimi.upsample.convtr.convtr.convtr.weight \[32, 1, 32\] \(expected \[32, 32, 1\]\)"))):
        with pytest.raises(CheckpointError, match=expect) as e:
            load_model(_mlx_audio_folder(tmp_path / str(i), edit))
        assert "\n" not in str(e.value)
