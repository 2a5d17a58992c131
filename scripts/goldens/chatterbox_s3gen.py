"""Goldens for Chatterbox's S3Gen side, computed by upstream ``chatterbox-tts`` 0.1.7.

Run with the throwaway reference venv (scripts/goldens/README.md), from the repo root:

    REFVENV/bin/python scripts/goldens/chatterbox_s3gen.py

Writes tests/fixtures/chatterbox/s3gen/:

- ``hift_tiny.safetensors``: upstream ``HiFTGenerator`` + ``ConvRNNF0Predictor`` built with the
  arguments ``S3Token2Wav`` passes (24 kHz, upsample 8/5/3, kernels 16/11/7, 8 harmonics, iSTFT
  16/4) but 32 base channels instead of 512 (and 32 F0-predictor channels), every tensor
  re-initialised deterministically (upstream init leaves Snake alpha = 1 and tiny weights), saved
  with ``safetensors.torch.save_file`` under the published ``mel2wav.`` names (weight-norm as
  ``parametrizations.weight.original0/1``).
- ``hift_tiny.npz``: a random mel, and what upstream ``HiFTGenerator.inference`` makes of it:
  ``f0``, the harmonic source ``source``, the waveform ``wav``, plus the random draws SineGen made
  inside the call (``phase`` [9] uniform initial phases, ``sine_noise`` [9, L] the normal draws),
  recorded so that our implementation can be fed the same values.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "chatterbox" / "s3gen"
sys.path.insert(0, str(ROOT / "scripts"))
import reference_stubs  # noqa: F401  (torchaudio extension + perth shims, before chatterbox)
import torch
from chatterbox.models.s3gen import hifigan
from chatterbox.models.s3gen.f0_predictor import ConvRNNF0Predictor
from chatterbox.models.s3gen.hifigan import HiFTGenerator
from safetensors.torch import save_file

BASE = 32
N_MEL_FRAMES = 24
FLOW_WIDTH = 64


def reinit(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Fan-in-scaled normals for weights (v of weight norm), g near the norm of v so each
    folded weight keeps that scale, Snake alpha spread around 1, norm scales near 1, small biases."""
    norms = {f"{n}.weight" for n, m in module.named_modules()
             if isinstance(m, (torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.BatchNorm1d))}
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name in norms:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("alpha"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name.endswith("original0"):
                p.copy_(0.8 + 0.4 * torch.rand(p.shape, generator=gen))
            elif p.ndim == 1:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(fan_in))


class Recorder:
    """Wraps the two random sources SineGen uses and keeps what they returned."""

    def __init__(self):
        self.uniform, self.normal = [], []

    def __enter__(self):
        self._randn_like, self._sample = torch.randn_like, hifigan.Uniform.sample
        rec = self

        def randn_like(x, *a, **k):
            y = rec._randn_like(x, *a, **k)
            rec.normal.append(y.clone())
            return y

        def sample(dist, *a, **k):
            y = rec._sample(dist, *a, **k)
            rec.uniform.append(y.clone())
            return y

        torch.randn_like = randn_like
        hifigan.Uniform.sample = sample
        return self

    def __exit__(self, *exc):
        torch.randn_like, hifigan.Uniform.sample = self._randn_like, self._sample


def build_hift() -> HiFTGenerator:
    gen = torch.Generator().manual_seed(1234)
    model = HiFTGenerator(
        sampling_rate=24000, base_channels=BASE,
        upsample_rates=[8, 5, 3], upsample_kernel_sizes=[16, 11, 7],
        source_resblock_kernel_sizes=[7, 7, 11],
        source_resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        f0_predictor=ConvRNNF0Predictor(cond_channels=BASE),
    ).eval()
    reinit(model, gen)
    # the F0 head sets the harmonic frequencies: scale it so F0 lands in the speech range
    # (hundreds of Hz) and a few frames fall under the 10 Hz voicing threshold
    with torch.no_grad():
        model.f0_predictor.classifier.weight.mul_(60.0)
        model.f0_predictor.classifier.bias.fill_(28.0)
        # keep the iSTFT magnitudes moderate, or the output sits on the 0.99 clip
        model.conv_post.parametrizations.weight.original0.mul_(0.15)
        model.conv_post.bias.fill_(-1.5)
    return model, gen


def hift() -> None:
    model, gen = build_hift()
    sd = {f"mel2wav.{k}": v.contiguous() for k, v in model.state_dict().items()}
    OUT.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(OUT / "hift_tiny.safetensors"))

    mel = torch.randn(1, 80, N_MEL_FRAMES, generator=gen) * 2.0 - 5.0
    torch.manual_seed(99)
    with Recorder() as rec, torch.no_grad():
        wav, source = model.inference(speech_feat=mel)
        f0 = model.f0_predictor(mel)
    phase = rec.uniform[0][0, :, 0].numpy()
    phase[0] = 0.0  # SineGen zeroes the fundamental's phase after drawing it
    np.savez_compressed(
        OUT / "hift_tiny.npz", mel=mel[0].numpy(), f0=f0[0].numpy(), source=source[0, 0].numpy(),
        wav=wav[0].numpy(), phase=phase, sine_noise=rec.normal[0][0].numpy())
    print("clipped", float((wav.abs() >= 0.99).float().mean()), "unvoiced", float((f0 < 10).float().mean()))
    print("hift:", {k: tuple(v.shape) for k, v in sd.items() if "f0_predictor.classifier" in k},
          "wav", tuple(wav.shape), "f0 range", float(f0.min()), float(f0.max()),
          "wav absmax", float(wav.abs().max()))


def build_flow():
    from chatterbox.models.s3gen.configs import CFM_PARAMS
    from chatterbox.models.s3gen.decoder import ConditionalDecoder
    from chatterbox.models.s3gen.flow import CausalMaskedDiffWithXvec
    from chatterbox.models.s3gen.flow_matching import CausalConditionalCFM
    from chatterbox.models.s3gen.transformer import upsample_encoder as ue

    # PreLookaheadLayer and Upsample1D are built with a hard-coded 512 channels inside
    # UpsampleConformerEncoder: pass the tiny width to the same classes instead
    pre, up = ue.PreLookaheadLayer, ue.Upsample1D
    ue.PreLookaheadLayer = lambda channels, pre_lookahead_len: pre(FLOW_WIDTH, pre_lookahead_len)
    ue.Upsample1D = lambda channels, out_channels, stride: up(FLOW_WIDTH, FLOW_WIDTH, stride)
    try:
        encoder = ue.UpsampleConformerEncoder(
            output_size=FLOW_WIDTH, attention_heads=2, linear_units=128, num_blocks=2,
            input_layer="linear", pos_enc_layer_type="rel_pos_espnet",
            selfattention_layer_type="rel_selfattn", input_size=FLOW_WIDTH, normalize_before=True,
            use_cnn_module=False, macaron_style=False)
    finally:
        ue.PreLookaheadLayer, ue.Upsample1D = pre, up
    estimator = ConditionalDecoder(in_channels=320, out_channels=80, causal=True, channels=[64],
                                   attention_head_dim=32, n_blocks=2, num_mid_blocks=2, num_heads=2,
                                   act_fn="gelu")
    decoder = CausalConditionalCFM(spk_emb_dim=80, cfm_params=CFM_PARAMS, estimator=estimator)
    model = CausalMaskedDiffWithXvec(input_size=FLOW_WIDTH, encoder=encoder, decoder=decoder).eval()
    gen = torch.Generator().manual_seed(4321)
    reinit(model, gen)
    return model, gen


def flow() -> None:
    model, gen = build_flow()
    sd = {f"flow.{k}": v.contiguous() for k, v in model.state_dict().items()}
    save_file(sd, str(OUT / "flow_tiny.safetensors"))

    n_prompt, n_tok = 8, 10
    prompt_token = torch.randint(0, 6561, (1, n_prompt), generator=gen)
    token = torch.randint(0, 6561, (1, n_tok), generator=gen)
    prompt_feat = torch.randn(1, 2 * n_prompt, 80, generator=gen) * 2.0 - 5.0
    embedding = torch.randn(1, 192, generator=gen)
    out = {"prompt_token": prompt_token[0].numpy(), "token": token[0].numpy(),
           "prompt_feat": prompt_feat[0].numpy(), "embedding": embedding[0].numpy()}
    with torch.no_grad():
        # the encoder alone (prompt + tokens, the lookahead included)
        both = torch.cat([prompt_token, token], dim=1)
        h, _ = model.encoder(model.input_embedding(both), torch.tensor([both.shape[1]]))
        out["encoder_out"] = h[0].numpy()
        # finalize=True only: upstream 0.1.7's finalize=False path fails at batch 1 (the
        # decoder mask keeps the untrimmed length), so streaming is tested against one-shot
        torch.manual_seed(7)
        with Recorder() as rec:
            mel, _ = model.inference(
                token=token, token_len=torch.tensor([n_tok]), prompt_token=prompt_token,
                prompt_token_len=torch.tensor([n_prompt]), prompt_feat=prompt_feat,
                prompt_feat_len=None, embedding=embedding, finalize=True, n_timesteps=10)
        out["mel"] = mel[0].numpy()
        out["noise"] = rec.normal[0][0].numpy()
    np.savez_compressed(OUT / "flow_tiny.npz", **out)
    print("flow:", {k: v.shape for k, v in out.items()}, "mel range", float(mel.min()), float(mel.max()))


def build_s3gen():
    """The whole tiny S3Token2Wav: the tiny flow and HiFT above, a tiny S3TokenizerV2 (128
    wide, 2 heads of 64 as the rotary embedding needs, 2 blocks) and a tiny CAMPPlus (growth 8,
    bottleneck 2, 32 initial channels; the 12/24/16 dense layers and the FCM head as upstream)."""
    from chatterbox.models.s3gen.s3gen import S3Token2Wav
    from chatterbox.models.s3gen.xvector import CAMPPlus
    from chatterbox.models.s3tokenizer.s3tokenizer import S3Tokenizer
    from s3tokenizer.model_v2 import ModelConfig

    flow_model, _ = build_flow()
    gen = torch.Generator().manual_seed(777)
    # S3Tokenizer.__init__ does not pass its config on to S3TokenizerV2 (always the 1280-wide
    # model): swap in the same encoder/quantizer classes at the tiny width
    from s3tokenizer.model_v2 import AudioEncoderV2, FSQVectorQuantization
    cfg = ModelConfig(n_audio_state=128, n_audio_head=2, n_audio_layer=2)
    tok = S3Tokenizer("speech_tokenizer_v2_25hz")
    tok.config = cfg
    tok.encoder = AudioEncoderV2(cfg.n_mels, cfg.n_audio_state, cfg.n_audio_head, cfg.n_audio_layer, 2, False)
    tok.quantizer = FSQVectorQuantization(cfg.n_audio_state, cfg.n_codebook_size)
    spk = CAMPPlus(growth_rate=8, bn_size=2, init_channels=32, memory_efficient=False)
    reinit(tok, gen)
    reinit(spk, gen)
    with torch.no_grad():
        # valid BatchNorm statistics (upstream init leaves mean 0 / var 1)
        for m in spk.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=gen))
    model = S3Token2Wav.__new__(S3Token2Wav)
    torch.nn.Module.__init__(model)
    model.tokenizer, model.speaker_encoder, model.flow = tok, spk, flow_model
    model.mel2wav, _ = build_hift()
    model.meanflow = False
    model.resamplers = {}
    model.estimator_dtype = "fp32"
    from chatterbox.models.s3gen.utils.mel import mel_spectrogram
    model.mel_extractor = mel_spectrogram
    n_trim = 24000 // 50
    trim_fade = torch.zeros(2 * n_trim)
    trim_fade[n_trim:] = (torch.cos(torch.linspace(torch.pi, 0, n_trim)) + 1) / 2
    model.register_buffer("trim_fade", trim_fade, persistent=False)
    return model.eval()


def synthetic_voice(sr: int, seconds: float, seed: int) -> np.ndarray:
    """A voiced-sounding test signal: a gliding harmonic tone with noise and an envelope."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(sr * seconds)) / sr
    f0 = 140 + 30 * np.sin(2 * np.pi * 0.7 * t)
    ph = 2 * np.pi * np.cumsum(f0) / sr
    x = sum(np.sin(k * ph) / k for k in range(1, 6)) * (0.5 + 0.5 * np.sin(2 * np.pi * 1.3 * t) ** 2)
    return (0.2 * x + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


def s3gen() -> None:
    """tests/fixtures/chatterbox/tiny/s3gen.safetensors (published layout, the two constant
    tokenizer buffers left out as upstream's file does) and s3gen_tiny.npz goldens."""
    from chatterbox.models.s3gen.s3gen import get_resampler

    model = build_s3gen()
    sd = {k: v.contiguous() for k, v in model.state_dict().items()
          if k not in ("tokenizer._mel_filters", "tokenizer.window")}
    tiny = ROOT / "tests" / "fixtures" / "chatterbox" / "tiny"
    tiny.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(tiny / "s3gen.safetensors"))

    out = {}
    ref24 = synthetic_voice(24000, 2.0, 5)
    wav16 = synthetic_voice(16000, 1.5, 6)
    out["ref24"], out["wav16"] = ref24, wav16
    with torch.no_grad():
        out["ref24_to_16"] = get_resampler(24000, 16000, "cpu")(torch.from_numpy(ref24)[None])[0].numpy()
        out["ref22_to_24"] = get_resampler(22050, 24000, "cpu")(torch.from_numpy(wav16)[None])[0].numpy()
        out["logmel16"] = model.tokenizer.log_mel_spectrogram(torch.from_numpy(wav16)[None])[0].numpy()
        toks, _ = model.tokenizer(torch.from_numpy(wav16)[None])
        out["tokens16"] = toks[0].numpy()
        toks, _ = model.tokenizer(torch.from_numpy(wav16)[None], max_len=20)
        out["tokens16_max20"] = toks[0].numpy()
        ref = model.embed_ref(torch.from_numpy(ref24), 24000)
        for k in ("prompt_token", "prompt_feat", "embedding"):
            out[f"ref_{k}"] = ref[k][0].numpy()
        from chatterbox.models.s3gen.xvector import extract_feature
        feats, _, _ = extract_feature(torch.from_numpy(out["ref24_to_16"])[None])
        out["fbank"] = feats[0].numpy()
        ref_other = model.embed_ref(torch.from_numpy(wav16), 16000)   # a reference at another rate
        for k in ("prompt_token", "prompt_feat", "embedding"):
            out[f"ref16_{k}"] = ref_other[k][0].numpy()
        speech = torch.from_numpy(np.random.default_rng(8).integers(0, 6561, 12))
        out["speech_tokens"] = speech.numpy()
        torch.manual_seed(11)
        with Recorder() as rec:
            wav, source = model.inference(speech_tokens=speech[None], ref_dict=dict(ref))
        out["wav"] = wav[0].numpy()
        out["source"] = source[0, 0].numpy()
        out["cfm_noise"] = rec.normal[0][0].numpy()
        out["sine_noise"] = rec.normal[1][0].numpy()
        phase = rec.uniform[0][0, :, 0].numpy()
        phase[0] = 0.0
        out["phase"] = phase
    np.savez_compressed(OUT / "s3gen_tiny.npz", **out)
    print("s3gen:", {k: v.shape for k, v in out.items()}, "tokens", out["tokens16"][:10],
          "wav absmax", float(np.abs(out["wav"]).max()), "params", sum(v.numel() for v in sd.values()))


if __name__ == "__main__":
    targets = sys.argv[1:] or ["hift", "flow", "s3gen"]
    for t in targets:
        globals()[t]()
