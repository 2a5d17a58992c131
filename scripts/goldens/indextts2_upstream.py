"""A tiny IndexTTS2 checkpoint set and its goldens, computed by the upstream index-tts code.

Upstream is not a PyPI package: fetch it first (scripts/goldens/indextts2_fetch.sh, which also puts
upstream's pinned transformers 4.52.1 in a side folder), then, from the repository root, with the
reference venv (scripts/goldens/README.md):

    INDEXTTS_SRC=../refsrc/index-tts INDEXTTS_DEPS=../refsrc/index-tts-deps \\
        REFVENV/bin/python scripts/goldens/indextts2_upstream.py [--check]

``--check`` reloads the written files through upstream's loaders and recomputes the goldens.

Writes tests/fixtures/indextts2/:

- ``tiny/config.yaml``: upstream's ``checkpoints/config.yaml`` with the ``gpt`` section at tiny
  sizes (width 32, 2 layers, 2 heads, 100 text ids, a 64-code semantic codebook with start / stop
  at 64 / 65, two small Conformer + perceiver conditioners) and ``tiny/gpt.pth``: the
  ``state_dict()`` of upstream's ``UnifiedVoice`` built from that section, saved by
  ``torch.save`` as the published ``gpt.pth`` is, every tensor re-initialised deterministically.
  The w2v-BERT feature width (1024) is hard-coded inside ``UnifiedVoice.__init__`` (the two
  Conformer inputs, the emotion perceiver's width, ``emovec_layer``); here those four modules are
  rebuilt from the same classes with width :data:`FEAT` (``feature_width`` in the yaml), so the
  tensor names are the published ones and only those widths differ. The start code's
  ``mel_head`` bias is -10, so greedy codes stay inside the codebook as a trained model's do.
- the same yaml's ``semantic_codec`` and ``s2mel`` sections at tiny sizes (codec width 32, a
  64 x 8 codebook; DiT width 32 x 3 layers, WaveNet 2 layers, regulator width 32) and
  ``tiny/s2mel.pth`` (``{"net": {"cfm", "length_regulator", "gpt_layer"}}`` of upstream's
  ``MyModel``, its hard-coded ``gpt_layer`` widths rebuilt as :data:`GPT_LAYER`),
  ``tiny/semantic_codec/model.safetensors`` (``RepCodec``, MaskGCT's path, written by ``safetensors.torch.save_model``
  as MaskGCT's file is read) and ``tiny/bigvgan/`` (``config.json`` = :data:`VOCODER`, four
  x4 stages, and ``bigvgan_generator.pt`` = ``{"generator": state_dict}`` with weight norm).
- ``goldens.npz``: the inputs (``spk_feat`` / ``emo_feat``: normalised w2v-BERT features,
  ``text``: BPE ids), the speaker conditioning latents (``cond_latents``, upstream
  ``get_conditioning``: 32 perceiver latents), the emotion vectors of the speaker and emotion
  references (``emovec_spk``, ``emovec_emo``, ``get_emovec``) and their blend at
  ``alpha`` = ``emo_alpha`` (``emovec``, ``merge_emovec``); the GPT prompt as
  ``inference_speech`` builds it (``prompt_embeds``: conditioning + 2 speed rows + text with its
  start / stop ids, ``prepare_gpt_inputs``), the prefill's last hidden state (``prefill_hidden``,
  after ``final_norm``) and logits (``prefill_logits``, ``mel_head``) at the start-mel position;
  20 greedy codes from upstream ``inference_speech`` through its vendored ``generate``
  (``greedy``: ``min_new_tokens`` = 20 keeps the stop id out, no repetition penalty;
  ``greedy_rep``: the same with upstream's default ``repetition_penalty`` 10); and the latent
  that feeds S2Mel (``gpt_latent``: ``UnifiedVoice.forward`` over the prompt and ``greedy``).
  Then S2Mel as ``infer_generator`` runs it: the codec's ids and quantised features of
  ``spk_feat`` (``codec_ids``, ``codec_quantized``), ``vq2emb(greedy) + gpt_layer(gpt_latent)``
  (``codec_vq2emb``), the reference mel and CAMPPlus style inputs (``ref_mel``, ``style``:
  random), the length regulator's outputs for the reference and the codes (``prompt_cond``,
  ``cond``: 1.72 frames per code), the CFM's starting noise (``cfm_noise``, recorded) and its mel
  after the prompt frames (``s2mel_mel``: 25 Euler steps, CFG 0.7), and BigVGAN's waveform of
  that mel (``wav``).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "indextts2"
SRC = Path(os.environ.get("INDEXTTS_SRC", ROOT.parent / "refsrc" / "index-tts"))
DEPS = Path(os.environ.get("INDEXTTS_DEPS", ROOT.parent / "refsrc" / "index-tts-deps"))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(SRC))
sys.path.insert(0, str(DEPS))   # upstream's pinned transformers 4.52.1 (indextts2_fetch.sh says why)
import reference_stubs  # noqa: F401  (torchaudio's CUDA-linked extension loader)


def install_stubs() -> None:
    """Import-time shims for upstream imports that the goldens never run: ``matplotlib`` (when it
    is not installed; BigVGAN's ``utils`` imports it for its spectrogram plot, and calls
    ``matplotlib.use`` at import),
    ``indextts.utils.tokenizer`` (only ``LANGUAGE_DICT``, read by the 2.5 ``campplus`` speaker mode;
    the module imports whisper and tiktoken) and the packages ``indextts.s2mel.dac`` /
    ``indextts.s2mel.dac.nn`` registered without running their ``__init__`` (which imports
    descript-audiotools' training tools; the length regulator imports only ``dac.nn.quantize``,
    whose file is the real one)."""
    if importlib.util.find_spec("matplotlib") is None:
        mpl = types.ModuleType("matplotlib")
        mpl.use = lambda backend: None
        mpl.pylab = types.ModuleType("matplotlib.pylab")
        sys.modules.update({"matplotlib": mpl, "matplotlib.pylab": mpl.pylab})
    tok = types.ModuleType("indextts.utils.tokenizer")
    tok.LANGUAGE_DICT = {}
    sys.modules["indextts.utils.tokenizer"] = tok
    for pkg in ("indextts.s2mel.dac", "indextts.s2mel.dac.nn"):
        mod = types.ModuleType(pkg)
        mod.__path__ = [str(SRC / pkg.replace(".", "/"))]
        sys.modules[pkg] = mod


install_stubs()
import safetensors.torch
import torch
from omegaconf import OmegaConf

FEAT = 32          # stands in for the w2v-BERT 2.0 width, 1024
TEXT_IDS = 100
CODES = 64
EMO_ALPHA = 0.6
N_GREEDY = 20

# (pattern, replacement) on the ``gpt`` section of upstream's config.yaml: sizes only
TINY = [
    (r"model_dim: 1280", "model_dim: 32"),
    (r"max_mel_tokens: 1815", "max_mel_tokens: 120"),
    (r"max_text_tokens: 600", "max_text_tokens: 40"),
    (r"heads: 20", "heads: 2"),
    (r"layers: 24", "layers: 2"),
    (r"number_text_tokens: 12000", f"number_text_tokens: {TEXT_IDS}"),
    (r"number_mel_codes: 8194", f"number_mel_codes: {CODES + 2}"),
    (r"start_mel_token: 8192", f"start_mel_token: {CODES}"),
    (r"stop_mel_token: 8193", f"stop_mel_token: {CODES + 1}"),
    (r"output_size: 512", "output_size: 16"),
    (r"linear_units: 2048", "linear_units: 64"),
    (r"linear_units: 1024", "linear_units: 48"),
    (r"attention_heads: 8", "attention_heads: 2"),
    (r"attention_heads: 4", "attention_heads: 2"),
    (r"num_blocks: 6", "num_blocks: 2"),
    (r"num_blocks: 4", "num_blocks: 1"),
]


# the same for the semantic_codec and s2mel sections (the vocoder is configured by its own json)
TINY_S2MEL = [
    (r"codebook_size: 8192", f"codebook_size: {CODES}"),
    (r"hidden_size: 1024", f"hidden_size: {FEAT}"),
    (r"vocos_dim: 384", "vocos_dim: 16"),
    (r"vocos_intermediate_dim: 2048", "vocos_intermediate_dim: 32"),
    (r"vocos_num_layers: 12", "vocos_num_layers: 1"),
    (r"channels: 512", "channels: 32"),
    (r"in_channels: 1024", f"in_channels: {FEAT}"),
    (r"hidden_dim: 512", "hidden_dim: 32"),
    (r"num_heads: 8", "num_heads: 2"),
    (r"depth: 13", "depth: 3"),
    (r"content_dim: 512", "content_dim: 32"),
    (r"num_layers: 8", "num_layers: 2"),
    (r"content_codebook_size: 2048", "content_codebook_size: 16"),
    (r"content_codebook_size: 1024", "content_codebook_size: 16"),
]
GPT_LAYER = (16, 8)   # upstream's hard-coded gpt_layer widths are 256, 128 (from 1280 to 1024)
VOCODER = {"resblock": "1", "upsample_rates": [4, 4, 4, 4], "upsample_kernel_sizes": [8, 8, 8, 8],
           "upsample_initial_channel": 32, "resblock_kernel_sizes": [3, 7, 11],
           "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "use_tanh_at_final": False,
           "use_bias_at_final": False, "activation": "snakebeta", "snake_logscale": True, "num_mels": 80,
           "n_fft": 1024, "hop_size": 256, "win_size": 1024, "sampling_rate": 22050, "fmin": 0, "fmax": None}


def tiny_yaml() -> str:
    text = (SRC / "checkpoints" / "config.yaml").read_text()
    head, rest = text.split("semantic_codec:", 1)
    for pat, rep in TINY:
        head, n = re.subn(pat, rep, head)
        assert n >= 1, pat
    for pat, rep in TINY_S2MEL:
        rest, n = re.subn(pat, rep, rest)
        assert n >= 1, pat
    return head + f"    feature_width: {FEAT}\n\nsemantic_codec:" + rest


def build_gpt(cfg):
    """Upstream's ``UnifiedVoice`` from the tiny ``gpt`` section, its four feature-width modules
    rebuilt by the same classes at :data:`FEAT` (see the module docstring)."""
    from indextts.gpt.conformer_encoder import ConformerEncoder
    from indextts.gpt.model_v2 import UnifiedVoice
    from indextts.gpt.perceiver import PerceiverResampler

    g = OmegaConf.to_container(cfg.gpt)
    g.pop("feature_width")
    gpt = UnifiedVoice(**g)
    cm, em = g["condition_module"], g["emo_condition_module"]

    def conformer(m):
        return ConformerEncoder(input_size=FEAT, output_size=m["output_size"], linear_units=m["linear_units"],
                                attention_heads=m["attention_heads"], num_blocks=m["num_blocks"],
                                input_layer=m["input_layer"])

    gpt.conditioning_encoder = conformer(cm)
    gpt.emo_conditioning_encoder = conformer(em)
    gpt.emo_perceiver_encoder = PerceiverResampler(FEAT, dim_context=em["output_size"], ff_mult=em["perceiver_mult"],
                                                   heads=em["attention_heads"], num_latents=1)
    gpt.emovec_layer = torch.nn.Linear(FEAT, g["model_dim"])
    return gpt.eval()


def build_s2mel(cfg):
    """Upstream's ``MyModel`` (CFM + length regulator + ``gpt_layer``) from the tiny ``s2mel``
    section, ``gpt_layer`` rebuilt at tiny widths (upstream hard-codes 1280 -> 256 -> 128 -> 1024),
    the semantic codec (``RepCodec``) from ``semantic_codec`` and BigVGAN from :data:`VOCODER`."""
    from indextts.codec.maskgct_codec import build_semantic_codec
    from indextts.s2mel.modules.bigvgan.bigvgan import BigVGAN
    from indextts.s2mel.modules.bigvgan.env import AttrDict
    from indextts.s2mel.modules.commons import MyModel

    s2mel = MyModel(cfg.s2mel, use_gpt_latent=True)
    a, b = GPT_LAYER
    dim = cfg.gpt.model_dim
    s2mel.models["gpt_layer"] = torch.nn.Sequential(torch.nn.Linear(dim, a), torch.nn.Linear(a, b),
                                                    torch.nn.Linear(b, FEAT))
    return s2mel.eval(), build_semantic_codec(cfg.semantic_codec).eval(), BigVGAN(AttrDict(VOCODER)).eval()


def reinit(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Fan-in-scaled normals for matrices, weight-norm gains near 1, norm gains near 1, small
    biases (Snake's log-scale alpha / beta near 0, i.e. factors near 1); the embeddings, the speed
    rows (zero at upstream init) and the latents get lively values. Buffers stay as built (the
    Conformer's sinusoids, the DiT's time frequencies and positions, BigVGAN's filters)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("weight_g"):
                p.copy_(0.8 + 0.4 * torch.rand(p.shape, generator=gen))
            elif p.ndim == 1 and name.endswith(("weight", "gamma")):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            elif "embedding" in name or name.endswith(LIVELY):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(p[0].numel()))


LIVELY = ("latents", "pos_bias_u", "pos_bias_v", "mask_token", "content_mask_embedder.weight")


def gpt_goldens(gpt, gen) -> dict:
    spk = torch.randn(1, 40, FEAT, generator=gen)
    emo = torch.randn(1, 30, FEAT, generator=gen)
    text = torch.randint(2, TEXT_IDS, (1, 12), generator=gen, dtype=torch.int32)
    spk_len, emo_len = torch.tensor([spk.shape[1]]), torch.tensor([emo.shape[1]])
    with torch.inference_mode():
        cond = gpt.get_conditioning(spk.transpose(1, 2), spk_len)
        emovec_spk = gpt.get_emovec(spk, spk_len)
        emovec_emo = gpt.get_emovec(emo, emo_len)
        # infer_v2 passes the feature width (1024) as every length, which masks nothing for the
        # <= 750 frames of its 15 s references; the frame count masks nothing either
        emovec = gpt.merge_emovec(spk, emo, spk_len, emo_len, alpha=EMO_ALPHA)
        # the prompt exactly as inference_speech assembles it (free-length mode: speed rows 1, 0)
        zero = torch.zeros(1, dtype=torch.long)
        conds = torch.cat((cond + emovec.unsqueeze(1), gpt.speed_emb(zero + 1).unsqueeze(1),
                           gpt.speed_emb(zero).unsqueeze(1)), 1)
        ids, embeds, mask = gpt.prepare_gpt_inputs(conds, text)
        gpt.inference_model.store_mel_emb(embeds)
        out = gpt.inference_model(input_ids=ids, attention_mask=mask, use_cache=False,
                                  output_hidden_states=True, return_dict=True)
        hidden = gpt.final_norm(out.hidden_states[-1][:, -1])
        logits = out.logits[:, -1]
        greedy = {}
        for name, rep in (("greedy", 1.0), ("greedy_rep", 10.0)):
            codes, latent_in = gpt.inference_speech(
                spk, text, None, emo_speech_condition=emo,
                cond_lengths=spk_len, emo_cond_lengths=emo_len, emo_vec=emovec, do_sample=False, num_beams=1,
                repetition_penalty=rep, min_new_tokens=N_GREEDY, max_generate_length=N_GREEDY)
            assert codes.shape[1] == N_GREEDY, codes.shape
            greedy[name] = codes[0].numpy().astype(np.int64)
        codes = torch.from_numpy(greedy["greedy"])[None]
        latent = gpt(latent_in, text, torch.tensor([text.shape[1]]), codes, torch.tensor([codes.shape[1]]), emo,
                     cond_mel_lengths=spk_len, emo_cond_mel_lengths=emo_len, emo_vec=emovec,
                     use_speed=torch.zeros(1, dtype=torch.long))
    return {"spk_feat": spk[0].numpy(), "emo_feat": emo[0].numpy(), "text": text[0].numpy().astype(np.int64),
            "emo_alpha": np.float32(EMO_ALPHA), "cond_latents": cond[0].numpy(),
            "emovec_spk": emovec_spk[0].numpy(), "emovec_emo": emovec_emo[0].numpy(), "emovec": emovec[0].numpy(),
            "prompt_embeds": embeds[0].numpy(), "prefill_hidden": hidden[0].numpy(),
            "prefill_logits": logits[0].numpy(), **greedy, "gpt_latent": latent[0].numpy()}


def s2mel_goldens(s2mel, codec, vocoder, gpt_gold, gen) -> dict:
    """The S2Mel path of ``infer_generator`` for one segment, step by step with upstream's modules:
    the reference's quantised semantic features through the length regulator (prompt condition),
    the generated codes' codebook vectors plus ``gpt_layer(latent)`` through it (condition, 1.72
    frames per code), 25 Euler steps with CFG 0.7 from recorded noise, then BigVGAN."""
    feat = torch.from_numpy(gpt_gold["spk_feat"])[None]
    codes = torch.from_numpy(gpt_gold["greedy"])[None]
    latent = torch.from_numpy(gpt_gold["gpt_latent"])[None]
    n_ref_mel = int(feat.shape[1] * 1.72)
    ref_mel = torch.randn(1, 80, n_ref_mel, generator=gen) * 0.8 - 5.0
    style = torch.randn(1, 192, generator=gen)
    cfm, regulator = s2mel.models["cfm"], s2mel.models["length_regulator"]
    cfm.estimator.setup_caches(max_batch_size=1, max_seq_length=8192)
    with torch.inference_mode():
        ids, s_ref = codec.quantize(feat)
        prompt_cond = regulator(s_ref, ylens=torch.LongTensor([n_ref_mel]), n_quantizers=3, f0=None)[0]
        s_infer = codec.quantizer.vq2emb(codes.unsqueeze(1)).transpose(1, 2)
        s_infer = s_infer + s2mel.models["gpt_layer"](latent)
        target = (torch.LongTensor([codes.shape[1]]) * 1.72).long()
        cond = regulator(s_infer, ylens=target, n_quantizers=3, f0=None)[0]
        mu = torch.cat([prompt_cond, cond], dim=1)
        torch.manual_seed(7)   # CFM.inference draws its noise first: the same draw is recorded
        noise = torch.randn([1, 80, mu.shape[1]])
        torch.manual_seed(7)
        mel = cfm.inference(mu, torch.LongTensor([mu.shape[1]]), ref_mel, style, None, 25, inference_cfg_rate=0.7)
        mel = mel[:, :, n_ref_mel:]
        vocoder.remove_weight_norm()
        wav = vocoder(mel.float())
    return {"codec_ids": ids[0].numpy().astype(np.int64), "codec_quantized": s_ref[0].numpy(),
            "codec_vq2emb": s_infer[0].numpy(), "ref_mel": ref_mel[0].numpy(), "style": style[0].numpy(),
            "prompt_cond": prompt_cond[0].numpy(), "cond": cond[0].numpy(), "cfm_noise": noise[0].numpy(),
            "s2mel_mel": mel[0].numpy(), "wav": wav[0, 0].numpy()}


def main() -> None:
    torch.manual_seed(0)
    yaml = tiny_yaml()
    cfg = OmegaConf.create(yaml)
    gpt = build_gpt(cfg)
    gen = torch.Generator().manual_seed(1234)
    reinit(gpt, gen)
    with torch.no_grad():   # the start code never wins, as in a trained model: codes stay in the codebook
        gpt.mel_head.bias[gpt.start_mel_token] = -10.0
    gpt.post_init_gpt2_config(use_deepspeed=False, kv_cache=True, half=False)
    s2mel, codec, vocoder = build_s2mel(cfg)
    for module in (s2mel, codec, vocoder):
        reinit(module, gen)
    with torch.no_grad():   # a waveform below BigVGAN's clamp at 1
        vocoder.conv_post.weight_g.mul_(0.03)
    tiny = OUT / "tiny"
    (tiny / "bigvgan").mkdir(parents=True, exist_ok=True)
    # saved before any call: BigVGAN's weight norm is removed for inference, as upstream does
    torch.save({"net": {k: {n: t.contiguous() for n, t in m.state_dict().items()} for k, m in s2mel.models.items()}},
               tiny / "s2mel.pth")
    (tiny / "semantic_codec").mkdir(exist_ok=True)
    safetensors.torch.save_model(codec, str(tiny / "semantic_codec" / "model.safetensors"))
    torch.save({"generator": vocoder.state_dict()}, tiny / "bigvgan" / "bigvgan_generator.pt")
    (tiny / "bigvgan" / "config.json").write_text(json.dumps(VOCODER, indent=1) + "\n")
    goldens = gpt_goldens(gpt, gen)
    goldens.update(s2mel_goldens(s2mel, codec, vocoder, goldens, gen))
    (tiny / "config.yaml").write_text(yaml)
    # as the published file: UnifiedVoice's own tensors (post_init's alias gpt.wte is not one)
    state = {k: v.contiguous() for k, v in gpt.state_dict().items()
             if not k.startswith(("inference_model.", "gpt.wte."))}
    torch.save(state, tiny / "gpt.pth")
    np.savez_compressed(OUT / "goldens.npz", **{k: np.asarray(v) for k, v in goldens.items()})
    for k, v in goldens.items():
        print(f"{k:16s} {np.asarray(v).shape}")


def check() -> None:
    """Reloads the written files through upstream's own loaders (``load_checkpoint``,
    ``load_checkpoint2``, ``safetensors.torch.load_model``, ``BigVGAN.from_pretrained``) and
    recomputes the emotion blend, the greedy codes, the mel from the recorded noise
    (``CFM.solve_euler``) and the waveform: the files are loadable as upstream loads the published
    ones, and the recorded noise is the draw the CFM used."""
    from indextts.s2mel.modules.bigvgan.bigvgan import BigVGAN
    from indextts.s2mel.modules.commons import load_checkpoint2
    from indextts.utils.checkpoint import load_checkpoint

    tiny, g = OUT / "tiny", np.load(OUT / "goldens.npz")
    cfg = OmegaConf.load(tiny / "config.yaml")
    gpt = build_gpt(cfg)
    load_checkpoint(gpt, str(tiny / "gpt.pth"))
    gpt.post_init_gpt2_config(kv_cache=True)
    s2mel, codec, _ = build_s2mel(cfg)
    load_checkpoint2(s2mel, None, str(tiny / "s2mel.pth"), load_only_params=True, ignore_modules=[],
                     is_distributed=False)
    safetensors.torch.load_model(codec, str(tiny / "semantic_codec" / "model.safetensors"))
    vocoder = BigVGAN.from_pretrained(str(tiny / "bigvgan")).eval()
    spk, emo = (torch.from_numpy(g[k])[None] for k in ("spk_feat", "emo_feat"))
    spk_len, emo_len = torch.tensor([spk.shape[1]]), torch.tensor([emo.shape[1]])
    with torch.inference_mode():
        emovec = gpt.merge_emovec(spk, emo, spk_len, emo_len, alpha=float(g["emo_alpha"]))
        codes, _ = gpt.inference_speech(spk, torch.from_numpy(g["text"]).int()[None], None, emo_speech_condition=emo,
                                        cond_lengths=spk_len, emo_cond_lengths=emo_len, emo_vec=emovec,
                                        do_sample=False, num_beams=1, min_new_tokens=N_GREEDY,
                                        max_generate_length=N_GREEDY)
        cfm = s2mel.models["cfm"]
        cfm.estimator.setup_caches(max_batch_size=1, max_seq_length=8192)
        mu = torch.from_numpy(np.concatenate([g["prompt_cond"], g["cond"]]))[None]
        ref_mel = torch.from_numpy(g["ref_mel"])[None]
        mel = cfm.solve_euler(torch.from_numpy(g["cfm_noise"])[None].clone(), torch.LongTensor([mu.shape[1]]), ref_mel,
                              mu, torch.from_numpy(g["style"])[None], None, torch.linspace(0, 1, 26), 0.7)
        vocoder.remove_weight_norm()
        wav = vocoder(torch.from_numpy(g["s2mel_mel"])[None])
    assert np.array_equal(codes[0].numpy(), g["greedy"])
    for name, ours in (("emovec", emovec[0]), ("s2mel_mel", mel[0, :, ref_mel.shape[-1]:]), ("wav", wav[0, 0])):
        err = float(np.abs(ours.numpy() - g[name]).max())
        assert err < 1e-5, (name, err)     # summation order varies with the CPU and its threads
        print(f"{name:10s} max error {err:.2e}")
    print("greedy     equal")


if __name__ == "__main__":
    check() if "--check" in sys.argv[1:] else main()
