"""Upstream IndexTTS2 (PyTorch) as ``ttscli bench indextts2 --random-weights --peer pytorch`` runs
it: ttscli calls this script with the Python of an environment that has torch and upstream's
dependencies (scripts/reference-venv.sh), the index-tts checkout in ``src`` and upstream's pinned
transformers 4.52.1 in ``deps`` (both from scripts/goldens/indextts2_fetch.sh).

Reads ``{"text_ids", "repeats", "frames", "threads", "src", "deps", "ref_seconds", "beams"}`` as
JSON on stdin, prints the median figures as one JSON line (the last line of stdout; upstream's
own prints go to stderr). Every module is upstream's class at the published size
(checkpoints/config.yaml): ``UnifiedVoice`` (GPT-2 24 x 1280 and its two Conformer + perceiver
conditioners), ``MyModel`` (DiT CFM, length regulator, ``gpt_layer``), the MaskGCT semantic codec,
CAMPPlus, BigVGAN v2 from its 22 kHz / 80 band / 256x config.json (weight norm removed), and
transformers' ``Wav2Vec2BertModel`` / ``SeamlessM4TFeatureExtractor`` at w2v-bert-2.0's (default)
config; PyTorch's default random initialisation, random semantic mean / std and emotion matrices,
float32 on the CPU. They are set on an ``IndexTTS2`` made without its ``__init__`` (which loads
files), whose text tokenizer is replaced by one that gives ``text_ids`` (the ids ttscli's
random-weights run gives the same text) as one segment.

One run is upstream's ``IndexTTS2.infer_generator`` for one utterance in clone mode (the speaker
reference is also the emotion reference), the reference already cached: the two emotion
Conformers (``merge_emovec``), ``inference_speech`` (speaker Conformer + perceiver, the prompt,
upstream's vendored HF beam sampling: ``beams`` beams, top-p 0.8, top-k 30, temperature 0.8,
repetition penalty 10) for exactly ``frames`` codes (``min_new_tokens`` = ``max_mel_tokens`` =
``frames``: the stop code cannot win before), the second GPT forward for the latent, S2Mel
(``gpt_layer``, codec ``vq2emb``, length regulator, 25 Euler steps with CFG 0.7) and BigVGAN.
The reference is ``ref_seconds`` of a synthetic voiced signal in a temporary 22.05 kHz wav;
``ref_s`` times its encoding (w2v-BERT for the speaker and again for the emotion reference,
the codec, the prompt mel, the fbank + CAMPPlus, the prompt condition) by running
``infer_generator`` on an emptied cache up to its text step. Stage times come from timers
wrapped around the model methods; upstream's files are not edited.
"""
from __future__ import annotations

import contextlib
import json
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path


SR = 22050
EMO_ROWS = 73
STYLE = 192


class ReferenceDone(Exception):
    """Raised by the tokenizer stand-in to end ``infer_generator`` once the reference is encoded."""


class IdTokenizer:
    """Stands in for upstream's ``TextTokenizer``: the pieces are the given ids spelt as strings,
    one segment holds them all, and they convert back to the same ids."""

    unk_token_id = 2

    def __init__(self, ids: list[int]):
        self.pieces = [f"<{i}>" for i in ids]
        self.tokenized_at = None
        self.stop_here = False

    def tokenize(self, text: str) -> list[str]:
        self.tokenized_at = time.perf_counter()
        if self.stop_here:
            raise ReferenceDone
        return list(self.pieces)

    def split_segments(self, pieces, max_tokens, quick_streaming_tokens=0):
        return [list(pieces)]

    def convert_tokens_to_ids(self, pieces) -> list[int]:
        return [int(p[1:-1]) for p in pieces]

    def convert_ids_to_tokens(self, ids) -> list[str]:
        return [f"<{i}>" for i in ids]


class Stages:
    """Per-run sums of the wrapped calls' wall times, and each call's last start / end."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.sums: dict[str, float] = {}
        self.starts: dict[str, float] = {}
        self.ends: dict[str, float] = {}

    def wrap(self, obj, attr: str, key: str, after=None) -> None:
        inner = getattr(obj, attr)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            out = inner(*args, **kwargs)
            t1 = time.perf_counter()
            self.sums[key] = self.sums.get(key, 0.0) + t1 - t0
            self.starts[key], self.ends[key] = t0, t1
            if after is not None:
                after(out)
            return out

        setattr(obj, attr, timed)


def install_stubs(src: Path) -> None:
    """Import-time stand-ins for what this path never runs: ``modelscope`` (infer_v2 imports its
    ``AutoModelForCausalLM`` for QwenEmotion, unused here), ``matplotlib`` when absent (BigVGAN's
    utils import it for plots), ``indextts.utils.tokenizer`` when whisper / tiktoken are absent
    (model_v2 reads only ``LANGUAGE_DICT``) and the ``indextts.s2mel.dac`` packages registered
    without their ``__init__`` (which imports descript-audiotools; the length regulator needs only
    the real ``dac/nn/quantize.py``)."""
    import importlib.util

    scope = types.ModuleType("modelscope")
    scope.AutoModelForCausalLM = None
    sys.modules["modelscope"] = scope
    if importlib.util.find_spec("matplotlib") is None:
        mpl = types.ModuleType("matplotlib")
        mpl.use = lambda *a, **k: None
        mpl.pylab = types.ModuleType("matplotlib.pylab")
        sys.modules["matplotlib"], sys.modules["matplotlib.pylab"] = mpl, mpl.pylab
    if importlib.util.find_spec("whisper") is None or importlib.util.find_spec("tiktoken") is None:
        tok = types.ModuleType("indextts.utils.tokenizer")
        tok.LANGUAGE_DICT = {}
        sys.modules["indextts.utils.tokenizer"] = tok
    if importlib.util.find_spec("audiotools") is None:
        for name in ("indextts.s2mel.dac", "indextts.s2mel.dac.nn"):
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(src.joinpath(*name.split(".")))]
            sys.modules[name] = pkg


def reference_wav(seconds: float, path: Path) -> None:
    """A voiced-like test signal: a gliding 110-220 Hz harmonic series under a syllable-rate
    envelope, plus a little noise, float32 at 22.05 kHz."""
    import numpy as np
    import soundfile

    t = np.arange(int(seconds * SR)) / SR
    f0 = 150 + 40 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / SR
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t) ** 2
    noise = np.random.default_rng(0).standard_normal(t.size)
    wav = 0.25 * envelope * voiced / 3 + 0.01 * noise
    soundfile.write(str(path), wav.astype(np.float32), SR, subtype="FLOAT")


def build(src: Path, text_ids: list[int]):
    """Upstream's modules at the published sizes with random weights, on an ``IndexTTS2`` whose
    ``__init__`` is skipped; the attributes are those ``infer_generator`` and its helpers read."""
    import torch
    from omegaconf import OmegaConf
    from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertConfig, Wav2Vec2BertModel

    from indextts.codec.maskgct_codec import build_semantic_codec
    from indextts.gpt.model_v2 import UnifiedVoice
    from indextts.infer_v2 import IndexTTS2
    from indextts.s2mel.modules.audio import mel_spectrogram
    from indextts.s2mel.modules.bigvgan.bigvgan import BigVGAN
    from indextts.s2mel.modules.bigvgan.env import AttrDict
    from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus
    from indextts.s2mel.modules.commons import MyModel

    cfg = OmegaConf.load(src / "checkpoints" / "config.yaml")
    tts = IndexTTS2.__new__(IndexTTS2)
    tts.cfg, tts.model_dir, tts.device, tts.dtype = cfg, str(src / "checkpoints"), "cpu", None
    tts.use_fp16 = tts.use_cuda_kernel = tts.use_accel = tts.use_torch_compile = False
    tts.stop_mel_token = cfg.gpt.stop_mel_token
    tts.qwen_emo = None

    gpt = UnifiedVoice(**cfg.gpt, use_accel=False).eval()
    gpt.post_init_gpt2_config(use_deepspeed=False, kv_cache=True, half=False)
    tts.gpt = gpt

    tts.extract_features = SeamlessM4TFeatureExtractor(padding_value=1.0)   # as w2v-bert-2.0's preprocessor
    tts.semantic_model = Wav2Vec2BertModel(Wav2Vec2BertConfig()).eval()
    width = tts.semantic_model.config.hidden_size
    tts.semantic_mean = 0.1 * torch.randn(width)
    tts.semantic_std = torch.sqrt(0.5 + torch.rand(width))
    tts.semantic_codec = build_semantic_codec(cfg.semantic_codec).eval()

    s2mel = MyModel(cfg.s2mel, use_gpt_latent=True)
    s2mel.models["cfm"].estimator.setup_caches(max_batch_size=1, max_seq_length=8192)
    tts.s2mel = s2mel.eval()
    tts.campplus_model = CAMPPlus(feat_dim=80, embedding_size=STYLE).eval()
    vocoder_cfg = json.loads((src / "indextts/s2mel/modules/bigvgan/config.json").read_text())
    vocoder = BigVGAN(AttrDict(vocoder_cfg), use_cuda_kernel=False)
    vocoder.remove_weight_norm()
    tts.bigvgan = vocoder.eval()

    tts.tokenizer = IdTokenizer(text_ids)
    tts.emo_num = list(cfg.emo_num)
    assert sum(tts.emo_num) == EMO_ROWS, tts.emo_num
    tts.emo_matrix = torch.split(torch.randn(EMO_ROWS, cfg.gpt.model_dim), tts.emo_num)
    tts.spk_matrix = torch.split(torch.randn(EMO_ROWS, STYLE), tts.emo_num)

    spect = cfg.s2mel.preprocess_params.spect_params
    fmax = None if str(spect.get("fmax", "None")) == "None" else 8000
    mel_args = {"n_fft": spect.n_fft, "win_size": spect.win_length, "hop_size": spect.hop_length,
                "num_mels": spect.n_mels, "sampling_rate": cfg.s2mel.preprocess_params.sr,
                "fmin": spect.get("fmin", 0), "fmax": fmax, "center": False}
    tts.mel_fn = lambda x: mel_spectrogram(x, **mel_args)
    clear_reference(tts)
    tts.gr_progress = None
    tts.model_version = cfg.get("version")
    return tts


def clear_reference(tts) -> None:
    for name in ("spk_cond", "s2mel_style", "s2mel_prompt", "spk_audio_prompt", "emo_cond", "emo_audio_prompt", "mel"):
        setattr(tts, f"cache_{name}", None)


def main() -> None:
    args = json.loads(sys.stdin.read())
    src, deps = Path(args["src"]), Path(args["deps"])
    frames, beams = int(args["frames"]), int(args["beams"])
    sys.path.insert(0, str(src))
    sys.path.insert(0, str(deps))   # upstream's pinned transformers 4.52.1, ahead of the venv's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import reference_stubs  # noqa: F401  (torchaudio's CUDA-linked extension loader)

    install_stubs(src)
    import torch

    if args.get("threads"):
        torch.set_num_threads(int(args["threads"]))
    torch.manual_seed(0)
    t0 = time.perf_counter()
    tts = build(src, [int(i) for i in args["text_ids"]])
    load_s = time.perf_counter() - t0
    print(f"built in {load_s:.1f} s", file=sys.stderr)

    stages, made = Stages(), {}
    stop = tts.stop_mel_token

    def count_codes(out) -> None:
        codes = out[0] if isinstance(out, tuple) else out
        row = codes[0].tolist()
        made["codes"] = row.index(stop) if stop in row else len(row)

    stages.wrap(tts.gpt, "inference_speech", "gpt", after=count_codes)
    stages.wrap(tts.gpt, "forward", "gpt_latent")            # Module.__call__ -> self.forward
    stages.wrap(tts.s2mel.models["cfm"], "inference", "cfm")
    stages.wrap(tts.bigvgan, "forward", "vocoder")

    tmp = tempfile.TemporaryDirectory()
    ref = Path(tmp.name) / "reference.wav"
    reference_wav(float(args["ref_seconds"]), ref)
    text = " ".join(tts.tokenizer.pieces)
    gen_kwargs = {"num_beams": beams, "max_mel_tokens": frames, "min_new_tokens": frames}

    def utterance() -> dict:
        stages.reset()
        made.clear()
        t_start = time.perf_counter()
        (sr, wav), = list(tts.infer_generator(str(ref), text, None, **gen_kwargs))
        total = time.perf_counter() - t_start
        if made.get("codes") != frames:
            raise RuntimeError(f"upstream made {made.get('codes')} codes, not the {frames} forced")
        s, a, b = stages.sums, stages.starts, stages.ends
        audio_s = wav.shape[0] / sr
        return {"total_s": total, "first_audio_s": total, "gpt_s": s["gpt"], "gpt_latent_s": s["gpt_latent"],
                # upstream's own s2mel span: gpt_layer, vq2emb, the length regulator and the CFM
                "s2mel_s": a["vocoder"] - b["gpt_latent"], "cfm_s": s["cfm"], "vocoder_s": s["vocoder"],
                "audio_s": audio_s, "rtf": total / audio_s, "codes": made["codes"],
                "prefix_s": tts.tokenizer.tokenized_at - t_start}

    def reference() -> float:
        clear_reference(tts)
        tts.tokenizer.stop_here = True
        t_start = time.perf_counter()
        try:
            list(tts.infer_generator(str(ref), text, None, **gen_kwargs))
        except ReferenceDone:
            pass
        finally:
            tts.tokenizer.stop_here = False
        assert tts.cache_spk_cond is not None and tts.cache_emo_cond is not None
        return tts.tokenizer.tokenized_at - t_start

    with contextlib.redirect_stdout(sys.stderr):   # upstream prints its progress on stdout
        warm = utterance()                             # also encodes and caches the reference
        print(f"warm-up: {warm['total_s']:.2f} s, reference {warm['prefix_s']:.2f} s", file=sys.stderr)
        runs, refs = [], []
        for i in range(int(args["repeats"])):
            refs.append(reference())
            runs.append(utterance())
            print(f"run {i + 1}: {runs[-1]['total_s']:.2f} s, reference {refs[-1]:.2f} s", file=sys.stderr)
    tmp.cleanup()
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "prefix_s"}
    med["rtf"] = med["total_s"] / med["audio_s"]
    med["ref_s"] = statistics.median(refs)
    med["ref_cold_s"] = warm["prefix_s"]
    med["load_s"] = load_s
    from peak_memory import peak_rss_mb   # beside this script

    med["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(med))


if __name__ == "__main__":
    main()
