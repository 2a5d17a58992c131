"""Load a Qwen3-TTS 12 Hz checkpoint folder exactly as published on Hugging Face.

Files read: ``config.json``, ``generation_config.json``, ``model.safetensors`` (one file, bf16
on disk; cast to the compute dtype, float32 by default on CPU), and the text tokenizer
``vocab.json`` + ``merges.txt`` + ``tokenizer_config.json`` (a ``Qwen2Tokenizer``: the repos
ship no ``tokenizer.json``, so the byte-level BPE is assembled here with ``tokenizers``).
The speech codec in ``speech_tokenizer/`` is loaded by that package.

Other published conversions (judged from the converter's code, mlx-audio 0.3-0.6; their files
were not reachable here):

- ``mlx-community/Qwen3-TTS-12Hz-*-bf16`` (mlx-audio conversions) keep the checkpoint's tensor
  names, and linear layers are [out, in] in both frameworks, so the talker and code predictor
  load.  Their Conv1d weights (speaker encoder, speech tokenizer) were transposed to MLX
  layout [out, k, in]: a Base conversion is reported as mis-shaped by the strict check instead
  of being guessed at (a shape heuristic cannot tell a k=1 conv's layout).  CustomVoice and
  VoiceDesign bf16 conversions have no speaker encoder and load.
- Quantised conversions (``-4bit``, ``-6bit``, ``-8bit``) store each quantised linear as packed
  ``weight`` + ``scales`` + ``biases``; without our config marker they are refused with the
  tensor named (:mod:`ttscli.quantize`; quantising is ``ttscli convert``'s job).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ttscli import quantize
from ttscli.checkpoint import read_safetensors
from ttscli.config import read_json
from ttscli.errors import BackendUnavailableError, CheckpointError
from ttscli.lm.tokenizer import QWEN2_SPLIT, TextTokenizer, load_tokenizer  # noqa: F401  (this family's names)
from ttscli.models.base import LoadOptions
from ttscli.models.qwen3_tts.config import GenerationConfig, ModelArgs
from ttscli.models.qwen3_tts.model import Qwen3TTSModel

# the role words' ids in the Qwen2 vocabulary: upstream cuts the role off the prompt as its first
# three tokens (<|im_start|>, the role, "\n"), so random weights' byte tokenizer keeps them whole
ASSISTANT_ID, USER_ID = 77091, 872


def load_model(path: Path, dtype: str | None = None) -> tuple[Qwen3TTSModel, GenerationConfig]:
    """Build from ``config.json`` and load ``model.safetensors`` strictly, in ``dtype`` (float32
    by default, whatever the file holds)."""
    path = Path(path)
    config = read_json(path / "config.json")
    model = Qwen3TTSModel(ModelArgs.from_dict(config, source=str(path / "config.json")))
    st = path / "model.safetensors"
    if not st.exists():
        if (path / "model.safetensors.index.json").exists():
            raise CheckpointError(f"{path}: sharded checkpoints are not published for Qwen3-TTS; "
                                  "expected one model.safetensors")
        raise CheckpointError(f"{st} is missing; pass the checkpoint folder in its Hugging Face layout")
    weights = read_safetensors(st)
    quantize.prepare(model, config, weights, str(st))  # checkpoints written by `ttscli convert -q`
    model.load_checkpoint_weights(weights, dtype or "float32", str(st))
    return model, GenerationConfig.from_file(path / "generation_config.json")


def check_components(args: ModelArgs, decoder_args, checkpoint: Path | None = None) -> None:
    """The talker, its code predictor and the speech tokenizer must agree on the codes they pass.

    Each part loads strictly on its own, so a folder assembled from mismatched parts would only
    fail mid-generation ("code out of range"); here the mismatch is named with both parts."""
    talker = args.talker_config
    cp = talker.code_predictor_config
    where = f"{checkpoint}: " if checkpoint is not None else ""
    # codebook-0 ids precede the talker's 1024 control ids (the loop suppresses those: loop.py)
    talker_codes = talker.vocab_size - 1024
    size = decoder_args.codebook_size
    problems = []
    if talker.num_code_groups != decoder_args.num_quantizers:
        problems.append(f"the talker emits {talker.num_code_groups} codebooks per frame but the speech decoder "
                        f"reads {decoder_args.num_quantizers}")
    if talker_codes > size:
        problems.append(f"the talker emits codebook-0 codes up to {talker_codes - 1} but the speech decoder's "
                        f"codebook_size is {size}")
    if cp.vocab_size > size:
        problems.append(f"the code predictor emits codes up to {cp.vocab_size - 1} but the speech decoder's "
                        f"codebook_size is {size}")
    enc = {}
    if checkpoint is not None and (checkpoint / "speech_tokenizer" / "config.json").is_file():
        enc = read_json(checkpoint / "speech_tokenizer" / "config.json")
    enc_size = (enc.get("encoder_config") or {}).get("codebook_size")
    if isinstance(enc_size, int) and enc_size > min(talker_codes, cp.vocab_size):
        problems.append(f"the speech encoder (clone references) emits codes up to {enc_size - 1} but the talker "
                        f"and code predictor take {min(talker_codes, cp.vocab_size)}")
    enc_groups = enc.get("encoder_valid_num_quantizers")
    if isinstance(enc_groups, int) and enc_groups != talker.num_code_groups:
        problems.append(f"the speech encoder keeps {enc_groups} codebooks but the talker uses {talker.num_code_groups}")
    if problems:
        raise CheckpointError(f"{where}the talker (config.json) and the speech tokenizer "
                              "(speech_tokenizer/config.json) do not match: "
                              + "; ".join(problems))


def preset_for(spec_id: str) -> str:
    """Registry id (e.g. "qwen3-tts-1.7b-customvoice") -> preset name ("1.7B-CustomVoice")."""
    m = re.search(r"(0\.6b|1\.7b)-(base|customvoice|voicedesign)", spec_id.lower())
    if not m:
        raise CheckpointError(f"{spec_id}: cannot tell the model size/kind for random weights")
    kind = {"base": "Base", "customvoice": "CustomVoice", "voicedesign": "VoiceDesign"}[m.group(2)]
    return f"{m.group(1).upper()}-{kind}"


def load_code_decoder(backend: str, model, checkpoint: Path | None, options: LoadOptions):
    from ttscli.lm import MLXCodeDecoder

    if backend == "mlx":
        return MLXCodeDecoder(model.talker, sequential=options.prefill_mode == "sequential")
    if backend == "coreml":
        # The talker converted by `ttscli convert --to coreml`, found by its manifest's source
        # hashes; random weights (bench) build their own package first.
        from ttscli.backends.coreml import require_coreml
        from ttscli.backends.coreml.decoder import CoreMLCodeDecoder, open_code_decoder

        require_coreml()
        if checkpoint is None:
            from ttscli.models.qwen3_tts.coreml_export import build_from_model

            return CoreMLCodeDecoder.open(build_from_model(model))
        return open_code_decoder(checkpoint)
    if backend.startswith("onnx"):
        return load_onnx_decoder(backend, model, checkpoint, options)
    raise BackendUnavailableError(f"unknown code decoder backend {backend!r}; use mlx, coreml or onnx")


def load_onnx_decoder(backend: str, model, checkpoint: Path | None, options: LoadOptions, model_id: str | None = None):
    """Talker + code predictor on onnxruntime (``onnx`` = int8, or ``onnx-f32|int8|int4``),
    from the conversion of ``checkpoint`` in ttscli's cache (built on first use) or, for random
    weights, from the in-memory model."""
    import os

    from ttscli.backends.onnx import require_onnxruntime
    from ttscli.backends.onnx.graph import Quant
    from ttscli.backends.select import split_backend
    from ttscli.models.qwen3_tts.onnx_decoder import open_decoder
    from ttscli.models.qwen3_tts.onnx_export import DEFAULT_PREFILL, PREFILL_ENV, build_from_model, find_or_build

    require_onnxruntime()
    quant = Quant(split_backend(backend)[1])
    folder = build_from_model(model, quant) if checkpoint is None else find_or_build(checkpoint, quant, model_id)
    prefill = os.environ.get(PREFILL_ENV, "").strip().lower() or DEFAULT_PREFILL
    if options.prefill_mode == "sequential" and prefill == "mlx":
        prefill = "onnx"    # bench's sequential variant: the backend's own prefill
    return open_decoder(folder, model, prefill)


def load_pipeline(spec: Any, checkpoint: Path | None, options: LoadOptions):
    """Build the pipeline for a checkpoint folder in its Hugging Face layout (or random weights)."""
    from ttscli.models.qwen3_tts.config import GenerationConfig, preset_config
    from ttscli.models.qwen3_tts.model import build_random
    from ttscli.models.qwen3_tts.pipeline import Qwen3TTSPipeline
    from ttscli.text import ByteTokenizer
    from ttscli.codecs.qwen3_12hz import build_random_decoder, load_speech_decoder

    dtype = options.dtype or "float32"
    if options.random_weights:
        preset = preset_for(spec.id)
        model = build_random(preset_config(preset), dtype)
        gen = GenerationConfig.from_dict(dict(getattr(spec, "defaults", {}) or {}))
        tokenizer = ByteTokenizer({"<|im_start|>": model.args.im_start_token_id,
                                   "<|im_end|>": model.args.im_end_token_id,
                                   "assistant": ASSISTANT_ID, "user": USER_ID})
        decoder = build_random_decoder(dtype)
        checkpoint = None
    else:
        checkpoint = Path(checkpoint)
        model, gen = load_model(checkpoint, dtype)
        tokenizer = load_tokenizer(checkpoint)
        decoder = load_speech_decoder(checkpoint / "speech_tokenizer", dtype)
        check_components(model.args, decoder.args, checkpoint)
    code_decoder = load_code_decoder(options.backend("code_decoder"), model, checkpoint, options)
    pipe = Qwen3TTSPipeline(spec, model, gen, tokenizer, decoder, code_decoder, checkpoint,
                            random_weights=options.random_weights)
    if hasattr(code_decoder, "compiled_frame"):    # onnxruntime runs the talker and the code predictor
        pipe.backends.update(code_decoder=f"onnx-{code_decoder.precision}", code_predictor="onnx")
    return pipe
