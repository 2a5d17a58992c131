"""The published IndexTTS2 folders -> our modules, strictly (a missing, unexpected or mis-shaped
tensor is one error naming it).

``IndexTeam/IndexTTS-2``:

    config.yaml                  sizes of every component, the file names below (config.py)
    gpt.pth                      UnifiedVoice: the GPT (gpt.py) and its conditioners (conditioning.py)
    s2mel.pth                    {"net": {cfm, length_regulator, gpt_layer}} (s2mel.py)
    bpe.model                    SentencePiece BPE (text.py)
    wav2vec2bert_stats.pt        mean / var of w2v-BERT's 17th layer
    feat1.pt, feat2.pt           emotion matrices (emotion.py)
    qwen0.6bemo4-merge/          optional: the text-to-emotion classifier (emotion_text.py)

and four parts from their own repositories (``hub.part``; a ``--model-dir`` may hold them in the
subfolders named): ``w2v-bert-2.0/`` (``facebook/w2v-bert-2.0``), ``semantic_codec/model.safetensors``
(``amphion/MaskGCT``), ``campplus_cn_common.bin`` (``funasr/campplus``) and ``bigvgan/``
(``nvidia/bigvgan_v2_22khz_80band_256x``). ``.pt`` / ``.pth`` / ``.bin`` files are read by
ttscli.torchfile (tensors only, never plain unpickling).
"""
from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np

from ttscli.errors import BackendUnavailableError, CheckpointError
from ttscli.models.indextts2.config import IndexTTS2Args, read_args

W2V_LAYERS = 17
ONNX_COMPONENTS = ("code_decoder", "flow_estimator")


def _file(folder: Path, name: str) -> Path:
    p = Path(folder) / name
    if not p.exists():
        raise CheckpointError(f"{folder}: no {name} (an IndexTTS2 folder holds config.yaml, gpt.pth, s2mel.pth, "
                              "bpe.model, wav2vec2bert_stats.pt, feat1.pt and feat2.pt)")
    return p


def gpt_state(path: Path) -> dict:
    """``gpt.pth``: a bare state_dict or one under ``"model"`` (upstream's ``load_checkpoint``)."""
    from ttscli import torchfile

    obj = torchfile.load(path)
    if isinstance(obj, dict) and isinstance(obj.get("model"), dict):
        obj = obj["model"]
    if not isinstance(obj, dict) or not all(isinstance(v, np.ndarray) for v in obj.values()):
        raise CheckpointError(f"{path}: expected a state_dict of tensors (IndexTTS2's gpt.pth)")
    return obj


def load_unified_voice(folder: Path | None, args: IndexTTS2Args, dtype: str | None = None):
    """(SemanticGPT, Conditioners) from ``gpt.pth`` (or random at the published size). The file
    holds both; each takes its own tensors strictly, so together every tensor is accounted for."""
    from ttscli.models.indextts2.conditioning import (
        CONDITIONER_PREFIXES,
        ConditionArgs,
        load_conditioners,
        random_conditioners,
    )
    from ttscli.models.indextts2.gpt import GPTArgs, load_gpt, random_gpt

    src = "config.yaml"
    g = GPTArgs.from_dict(args.gpt, source=src, where="gpt.")
    c = ConditionArgs.from_dict(args.gpt.get("condition_module", {}), source=src, where="gpt.condition_module.")
    e = ConditionArgs.from_dict(args.gpt.get("emo_condition_module", {}), source=src,
                                where="gpt.emo_condition_module.")
    if folder is None:
        return (random_gpt(g, dtype=dtype),
                random_conditioners(c, e, g.model_dim, args.feature_width))
    path = _file(folder, args.gpt_checkpoint)
    w = gpt_state(path)
    gpt = load_gpt(w, g, CONDITIONER_PREFIXES, source=str(path), dtype=dtype)
    cond = load_conditioners(w, c, e, g.model_dim, args.feature_width, source=str(path))
    return gpt, cond


def load_s2mel_part(folder: Path | None, args: IndexTTS2Args):
    from ttscli.models.indextts2.s2mel import S2MelArgs, load_s2mel, random_s2mel

    a = S2MelArgs.from_dict(args.s2mel, source="config.yaml", where="s2mel.")
    if folder is None:
        return random_s2mel(a)
    return load_s2mel(_file(folder, args.s2mel_checkpoint), a)


def load_codec(path: Path | None, args: IndexTTS2Args):
    from ttscli.codecs.maskgct_semantic import SemanticCodecArgs, load_semantic_codec, random_semantic_codec

    a = SemanticCodecArgs.from_dict(args.semantic_codec, source="config.yaml", where="semantic_codec.")
    return random_semantic_codec(a) if path is None else load_semantic_codec(path, a)


def load_campplus(path: Path | None):
    from ttscli import torchfile
    from ttscli.checkpoint import load_strict
    from ttscli.codecs.s3gen.xvector import CAMPPlus, CAMPPlusArgs, campplus_args

    if path is None:
        from ttscli.nn.init import random_weights

        return random_weights(CAMPPlus(CAMPPlusArgs()))
    w = {k: mx.array(v) for k, v in torchfile.state_dict(path).items()}
    try:
        a = campplus_args(w)
    except KeyError as e:
        raise CheckpointError(f"{path}: not a CAMPPlus state_dict (no {e.args[0]})") from None
    return load_strict(CAMPPlus(a), w, source=str(path), dtype="float32")


def check_backends(options) -> None:
    """What cannot run as asked, one line, before anything loads."""
    from ttscli.backends.select import split_backend

    for component, backend in options.backends.items():
        if backend != "mlx" and not (component in ONNX_COMPONENTS and split_backend(backend)[0] == "onnx") \
                and not (component == "code_decoder" and backend == "coreml"):
            raise BackendUnavailableError(f"IndexTTS2 {component}: backend {backend!r} is not available "
                                          "(code_decoder: mlx, coreml or onnx[-f32|-int8|-int4]; flow_estimator: "
                                          "mlx or onnx[-f32|-int8|-int4]; the rest: mlx)")
    if options.backends.get("code_decoder") == "coreml":
        from ttscli.backends.coreml import require_converted

        require_converted("IndexTTS2's GPT", "indextts2", options.random_weights)


def load_pipeline(spec, checkpoint: Path | None, options):
    """The engine's load hook: every component from the folder and its parts (or random at the
    real size)."""
    from ttscli import hub
    from ttscli.codecs.bigvgan import load_bigvgan, random_bigvgan
    from ttscli.codecs.w2vbert.model import load_w2vbert, random_w2vbert, read_stats
    from ttscli.models.indextts2.emotion import EmotionMatrices
    from ttscli.models.indextts2.pipeline import IndexTTS2Pipeline
    from ttscli.models.indextts2.text import IndexTokenizer, RandomTokenizer
    from ttscli.models.indextts2.voice import ReferenceEncoder, random_voice

    from ttscli.backends.select import split_backend

    check_backends(options)
    if options.dtype not in (None, "float32"):
        raise BackendUnavailableError(f"IndexTTS2 runs in float32 (asked for {options.dtype}), as upstream's "
                                      "inference does")
    rnd = options.random_weights
    folder = None if rnd else Path(checkpoint)
    args = read_args(folder)
    gpt, cond = load_unified_voice(folder, args)
    backends = {"code_decoder": options.backend("code_decoder"), "flow_estimator": options.backend("flow_estimator"),
                "vocoder": "mlx"}
    if split_backend(backends["code_decoder"])[0] == "onnx":
        from ttscli.models.indextts2.onnx_gpt import attach

        backends["code_decoder"] = attach(gpt, backends["code_decoder"], folder, getattr(spec, "id", None))
    elif backends["code_decoder"] == "coreml":
        from ttscli.models.indextts2.coreml_export import attach as attach_coreml

        backends["code_decoder"] = attach_coreml(gpt, folder, options.coreml_compute_units)
    s2mel = load_s2mel_part(folder, args)
    if split_backend(backends["flow_estimator"])[0] == "onnx":
        from ttscli.models.indextts2.onnx_s2mel import attach

        # a flow integrates its error over its steps: plain "onnx" is float32 here (int8 only by name)
        name = backends["flow_estimator"]
        precision = "float32" if name.lower() == "onnx" else split_backend(name)[1]
        backends["flow_estimator"] = attach(s2mel, folder, getattr(spec, "id", None), precision)
    if rnd:
        from ttscli.codecs.bigvgan import V2_22KHZ_80BAND_256X, BigVGANArgs

        codec, campplus = load_codec(None, args), load_campplus(None)
        vocoder = random_bigvgan(BigVGANArgs.from_dict(V2_22KHZ_80BAND_256X, source="bigvgan config"))
        w2v, stats = random_w2vbert(layers=W2V_LAYERS), (np.zeros(1024, np.float32), np.ones(1024, np.float32))
        tokenizer = RandomTokenizer(args.gpt["number_text_tokens"])
        emotions = EmotionMatrices.split(np.asarray(mx.random.normal((sum(args.emo_num), gpt.args.model_dim))),
                                         np.asarray(mx.random.normal((sum(args.emo_num), 192))), args.emo_num)
        voice = random_voice(gpt.args.model_dim, s2mel.args.length_regulator.channels)
        classifier = None
    else:
        codec = load_codec(hub.part(spec, folder, "semantic_codec") / "semantic_codec" / "model.safetensors", args)
        campplus = load_campplus(hub.part(spec, folder, "campplus") / "campplus_cn_common.bin")
        vocoder = load_bigvgan(hub.part(spec, folder, "bigvgan"))
        w2v = load_w2vbert(hub.part(spec, folder, "w2v_bert"), layers=W2V_LAYERS)
        stats = read_stats(_file(folder, args.w2v_stat))
        tokenizer = IndexTokenizer(_file(folder, args.bpe_model))
        emotions = EmotionMatrices.load(folder, args.emo_matrix, args.spk_matrix, args.emo_num)
        voice = None
        qwen = folder / args.qwen_emo_path
        classifier = None
        if (qwen / "config.json").is_file():
            from ttscli.models.indextts2.emotion_text import LazyClassifier

            classifier = LazyClassifier(qwen)
    if vocoder.args.sampling_rate != 22050 or vocoder.args.num_mels != 80:
        raise CheckpointError(f"bigvgan: {vocoder.args.sampling_rate} Hz / {vocoder.args.num_mels} mels; IndexTTS2's "
                              "S2Mel makes 80-band mels at 22050 Hz")
    encoder = ReferenceEncoder(w2v, stats, codec, s2mel, campplus, cond)
    return IndexTTS2Pipeline(spec, args, gpt, s2mel, codec, vocoder, tokenizer, encoder, emotions, voice, backends,
                             classifier)
