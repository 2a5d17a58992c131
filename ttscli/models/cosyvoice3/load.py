"""The published Fun-CosyVoice3 folder -> our modules, strictly (a missing, unexpected or
mis-shaped tensor is one error naming it).

    cosyvoice3.yaml            sizes (config.py)
    llm.pt                     CosyVoice3LM: llm.model.model.* (Qwen2), speech_embedding, llm_decoder
    flow.pt                    CausalMaskedDiffWithDiT (codecs/s3gen/dit.py)
    hift.pt                    CausalHiFTGenerator (codecs/s3gen/hift.py), weight norm folded
    campplus.onnx              the speaker x-vector (192), run by onnxruntime as upstream does
    speech_tokenizer_v3.onnx   16 kHz audio -> 25 Hz speech tokens, run by onnxruntime
    CosyVoice-BlankEN/         the Qwen2 config and its BPE tokenizer (vocab.json, merges.txt)
    spk2info.pt                optional: upstream's stored speakers (the first is the default voice)

``.pt`` files are read by ttscli.torchfile (tensors only, never plain unpickling).
"""
from __future__ import annotations

from pathlib import Path

from ttscli.checkpoint import load_strict
from ttscli.errors import CheckpointError
from ttscli.models.cosyvoice3.config import CosyVoice3Args


def _file(folder: Path, name: str) -> Path:
    p = Path(folder) / name
    if not p.is_file():
        raise CheckpointError(f"{folder}: no {name} (a Fun-CosyVoice3 folder holds cosyvoice3.yaml, llm.pt, "
                              "flow.pt, hift.pt, campplus.onnx, speech_tokenizer_v3.onnx and CosyVoice-BlankEN/)")
    return p


def _torch_weights(path: Path) -> dict:
    import mlx.core as mx

    from ttscli import torchfile

    return {k: mx.array(v) for k, v in torchfile.state_dict(path).items()}


def _random(module, dtype: str | None = None):
    from ttscli.nn.init import random_weights

    return random_weights(module, dtype=dtype)


def load_llm(folder: Path | None, args: CosyVoice3Args, dtype: str | None = "float32", random_weights: bool = False):
    from ttscli.models.cosyvoice3.llm import CosyVoice3LM

    model = CosyVoice3LM(args)
    if random_weights:
        return _random(model, dtype)
    path = _file(folder, "llm.pt")
    return load_strict(model, _torch_weights(path), source=str(path), dtype=dtype)


def load_flow(folder: Path | None, args: CosyVoice3Args, random_weights: bool = False):
    from ttscli.codecs.s3gen.dit import CausalMaskedDiffWithDiT

    model = CausalMaskedDiffWithDiT(args.flow)
    if random_weights:
        return _random(model)
    path = _file(folder, "flow.pt")
    return load_strict(model, _torch_weights(path), source=str(path), dtype="float32")


def load_hift(folder: Path | None, args: CosyVoice3Args, random_weights: bool = False):
    from ttscli.codecs.s3gen.hift import CausalHiFTGenerator, fold_weight_norm

    model = CausalHiFTGenerator(args.hift)
    if random_weights:
        return _random(model)
    path = _file(folder, "hift.pt")
    return load_strict(model, fold_weight_norm(_torch_weights(path)), source=str(path), dtype="float32")


def load_pipeline(spec, checkpoint: Path | None, options):
    """The engine's load hook: every component from one folder (or random at the real size)."""
    from ttscli.errors import BackendUnavailableError
    from ttscli.models.cosyvoice3.config import read_args
    from ttscli.models.cosyvoice3.frontend import (
        ReferenceEncoder,
        load_speakers,
        load_text_tokenizer,
        random_text_tokenizer,
        random_voice,
    )
    from ttscli.models.cosyvoice3.pipeline import CosyVoice3Pipeline

    from ttscli.backends.select import split_backend

    for component, backend in options.backends.items():
        if backend != "mlx" and not (component in ("flow_estimator", "code_decoder")
                                     and split_backend(backend)[0] == "onnx") \
                and not (component == "code_decoder" and backend == "coreml"):
            raise BackendUnavailableError(f"CosyVoice3 {component}: backend {backend!r} is not available "
                                          "(code_decoder: mlx, coreml or onnx[-f32|-int8|-int4]; flow_estimator: "
                                          "mlx or onnx[-f32|-int8|-int4]; the rest: mlx)")
    flow_backend, code_backend = options.backend("flow_estimator"), options.backend("code_decoder")
    if split_backend(code_backend)[0] == "onnx":      # before anything loads
        from ttscli.models.cosyvoice3.onnx_lm import check_options

        check_options(options)
    rnd = options.random_weights
    if code_backend == "coreml":       # before anything loads
        from ttscli.backends.coreml import require_converted

        require_converted("CosyVoice3", "cosyvoice3", rnd)
    dtype = options.dtype or "float32"      # the LM's; the flow and HiFT run in float32 as upstream's do
    args = CosyVoice3Args() if rnd else read_args(checkpoint)
    lm = load_llm(checkpoint, args, dtype=dtype, random_weights=rnd)
    if split_backend(code_backend)[0] == "onnx":
        from ttscli.models.cosyvoice3.onnx_lm import attach as attach_lm

        code_backend = attach_lm(lm, code_backend, None if rnd else Path(checkpoint), getattr(spec, "id", None))
    elif code_backend == "coreml":
        # the LM converted by `ttscli convert cosyvoice3 --to coreml`, found by its manifest's source hashes
        from ttscli.backends.coreml.decoder import open_code_decoder

        lm.decoder = open_code_decoder(Path(checkpoint), options.coreml_compute_units)
    flow = load_flow(checkpoint, args, random_weights=rnd)
    if split_backend(flow_backend)[0] == "onnx":
        from ttscli.codecs.s3gen import onnx_dit

        # a flow integrates its error over its steps: plain "onnx" is float32 here (int8 only by name)
        precision = "float32" if flow_backend.lower() == "onnx" else split_backend(flow_backend)[1]
        onnx_dit.attach(flow, None if rnd else Path(checkpoint), getattr(spec, "id", None), precision)
        flow_backend = f"onnx-{precision}"
    hift = load_hift(checkpoint, args, random_weights=rnd)
    if rnd:
        tokenizer, encoder, voice = random_text_tokenizer(), None, random_voice(args.speech_token_size)
    else:
        tokenizer = load_text_tokenizer(checkpoint)
        onnx = [Path(checkpoint) / n for n in ("campplus.onnx", "speech_tokenizer_v3.onnx")]
        encoder = ReferenceEncoder(checkpoint) if all(p.is_file() for p in onnx) else None
        voice = None
    store = None if rnd else Path(checkpoint) / "spk2info.pt"
    speakers = load_speakers(store, args.speech_token_size) if store is not None and store.is_file() else {}
    return CosyVoice3Pipeline(spec, args, lm, flow, hift, tokenizer, encoder, voice,
                              backends={"code_decoder": code_backend, "flow_estimator": flow_backend, "vocoder": "mlx"},
                              speakers=speakers)
