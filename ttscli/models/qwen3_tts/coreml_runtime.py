"""Run the Core ML packages built by coreml_export.py (macOS 15+).

:class:`CoreMLTalker` has the MLX talker's small protocol: ``new_cache()``, ``prefill(embeds,
cache)`` (fed one position per call: the package is a one-position program), ``step(embed,
cache) -> (logits, hidden)``, and ``__call__(embeds, cache)`` like ``Talker.__call__``. Its KV
cache has a fixed capacity; passing it raises GenerationError, never a silent clamp.
Arrays come back as mx.array when the input was one, else numpy.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ttscli.backends.coreml import CoreMLModel, require_coreml
from ttscli.errors import CheckpointError, GenerationError

from .coreml_export import CODE_PREDICTOR, SPEECH_DECODER, SPEECH_DECODER_STREAM, TALKER, read_manifest


def _np(x) -> np.ndarray:
    if type(x).__module__.startswith("mlx"):
        import mlx.core as mx

        x = x.astype(mx.float32)   # numpy has no bfloat16
    return np.asarray(x, dtype=np.float32)


def _like(a: np.ndarray, ref):
    if type(ref).__module__.startswith("mlx"):
        import mlx.core as mx

        return mx.array(a)
    return a


def _entry(manifest: dict, name: str, package_dir: Path) -> dict:
    try:
        return manifest["packages"][name]
    except KeyError:
        raise CheckpointError(f"{package_dir}: no {name} package in the manifest; convert again") from None


def _load(package_dir: Path, entry: dict, compute_units: str) -> CoreMLModel:
    require_coreml()
    return CoreMLModel(package_dir, entry, compute_units)


def capacity_error(capacity: int, needed: int, what: str = "prompt + generated frames") -> GenerationError:
    return GenerationError(
        f"Core ML talker capacity is {capacity} positions but the {what} need {needed}; "
        f"re-export with a larger capacity (ttscli convert MODEL --to coreml --capacity N) "
        f"or use --code-decoder-backend mlx")


@dataclass
class CoreMLCache:
    """One request's Core ML state plus how many positions it holds."""

    state: Any
    capacity: int
    offset: int = 0
    extra: dict = field(default_factory=dict)


class CoreMLTalker:
    def __init__(self, package_dir: Path, compute_units: str = "all", manifest: dict | None = None,
                 model=None):
        """``model``: anything with ``new_state()`` and ``predict(inputs, state)`` to use instead of
        loading the package through Core ML (tests run the package's MIL program with numpy)."""
        self.package_dir = Path(package_dir)
        manifest = manifest or read_manifest(self.package_dir)
        entry = _entry(manifest, TALKER, self.package_dir)
        self.model = model or _load(self.package_dir, entry, compute_units)
        self.capacity = int(entry["capacity"])
        self.hidden_size = int(entry["hidden_size"])
        self.vocab_size = int(entry["vocab_size"])

    def new_cache(self) -> CoreMLCache:
        return CoreMLCache(self.model.new_state(), self.capacity)

    def ensure_fits(self, cache: CoreMLCache, positions: int, what: str = "prompt + generated frames") -> None:
        """Raise before work starts if ``positions`` more would pass the capacity."""
        if cache.offset + positions > cache.capacity:
            raise capacity_error(cache.capacity, cache.offset + positions, what)

    def _one(self, x: np.ndarray, cache: CoreMLCache) -> tuple[np.ndarray, np.ndarray]:
        self.ensure_fits(cache, 1)
        out = self.model.predict({"inputs_embeds": x.reshape(1, 1, self.hidden_size),
                                  "position": np.array([cache.offset], np.int32)}, cache.state)
        cache.offset += 1
        return out["logits"].reshape(1, -1), out["hidden"].reshape(1, -1)

    def prefill(self, embeds, cache: CoreMLCache):
        """Feed ``embeds [1, L, H]`` (one call per position); logits/hidden of the last one."""
        e = _np(embeds).reshape(-1, self.hidden_size)
        if not e.shape[0]:
            raise ValueError("prefill needs at least one position")
        self.ensure_fits(cache, e.shape[0], "prompt")
        logits = hidden = None
        for row in e:
            logits, hidden = self._one(row, cache)
        return _like(logits, embeds), _like(hidden, embeds)

    def step(self, embed, cache: CoreMLCache):
        """One position ``embed [1, 1, H]`` or ``[1, H]`` -> ``(logits [1, V], hidden [1, H])``."""
        logits, hidden = self._one(_np(embed).reshape(self.hidden_size), cache)
        return _like(logits, embed), _like(hidden, embed)

    def __call__(self, embeds, cache: CoreMLCache):
        return self.prefill(embeds, cache)


class CoreMLCodePredictor:
    """Codebooks 1..15 of one frame. Slots are reused every frame: the program masks by position,
    so what an earlier frame left beyond the current position is never attended to."""

    def __init__(self, package_dir: Path, compute_units: str = "all", manifest: dict | None = None,
                 model=None):
        self.package_dir = Path(package_dir)
        manifest = manifest or read_manifest(self.package_dir)
        entry = _entry(manifest, CODE_PREDICTOR, self.package_dir)
        self.model = model or _load(self.package_dir, entry, compute_units)
        self.input_size = int(entry["input_size"])
        self.num_heads = int(entry["num_heads"])
        self.vocab_size = int(entry["vocab_size"])

    def new_cache(self) -> CoreMLCache:
        return CoreMLCache(self.model.new_state(), self.num_heads + 1)

    def logits(self, embed, position: int, head: int, cache: CoreMLCache) -> np.ndarray:
        out = self.model.predict({"inputs_embeds": _np(embed).reshape(1, 1, self.input_size),
                                  "position": np.array([position], np.int32),
                                  "head": np.array([head], np.int32)}, cache.state)
        return out["logits"].reshape(-1)

    def frame(self, hidden, c0_embed, embed_code: Callable[[int, int], np.ndarray],
              sample: Callable[[np.ndarray], int], cache: CoreMLCache) -> list[int]:
        """Codes c1..c15. ``hidden``/``c0_embed``: the talker's post-norm state and E0(c0);
        ``embed_code(j, code)`` is ``code_predictor.model.codec_embedding[j](code)`` (numpy [H]);
        ``sample(logits)`` picks a code from ``logits [vocab]``."""
        self.logits(hidden, 0, 0, cache)                # position 0 only fills the cache
        codes = [int(sample(self.logits(c0_embed, 1, 0, cache)))]
        for j in range(1, self.num_heads):
            x = embed_code(j - 1, codes[-1])
            codes.append(int(sample(self.logits(x, j + 1, j, cache))))
        return codes


def windowed_decode(codes: np.ndarray, window: int, left_context: int,
                    decode_window: Callable[[np.ndarray], np.ndarray], samples_per_frame: int) -> np.ndarray:
    """The reference ``chunked_decode`` over a fixed-window decoder.

    ``codes [T, Q]``. Chunks of ``window - left_context`` new frames are decoded after up to
    ``left_context`` earlier frames (positions restart per window), right-padded to ``window``
    with code 0 (causality makes the padding invisible), and the context's samples dropped.
    A clip of at most ``window - left_context`` frames is one exact full decode.
    """
    codes = np.asarray(codes, np.int32)
    if codes.ndim != 2:
        raise ValueError(f"codes must be [frames, quantizers], got shape {codes.shape}")
    if not 0 <= left_context < window:
        raise ValueError(f"left_context {left_context} must be in [0, window={window})")
    chunk = window - left_context
    total, q = codes.shape
    out = []
    start = 0
    while start < total:
        end = min(start + chunk, total)
        ctx = left_context if start - left_context > 0 else start
        piece = codes[start - ctx:end]
        padded = np.zeros((q, window), np.int32)
        padded[:, :piece.shape[0]] = piece.T
        wav = np.asarray(decode_window(padded[None]), np.float32).reshape(-1)
        out.append(wav[ctx * samples_per_frame:(ctx + end - start) * samples_per_frame])
        start = end
    return np.concatenate(out) if out else np.zeros(0, np.float32)


class CoreMLSpeechDecoder:
    def __init__(self, package_dir: Path, compute_units: str = "all", manifest: dict | None = None,
                 left_context: int = 25, model=None):
        self.package_dir = Path(package_dir)
        manifest = manifest or read_manifest(self.package_dir)
        entry = _entry(manifest, SPEECH_DECODER, self.package_dir)
        self.model = model or _load(self.package_dir, entry, compute_units)
        self.window = int(entry["frames"])
        self.samples_per_frame = int(entry["samples_per_frame"])
        self.sample_rate = int(entry["sample_rate"])
        self.left_context = min(left_context, self.window // 2)

    def decode_window(self, codes: np.ndarray) -> np.ndarray:
        return self.model.predict({"codes": codes})["audio"].reshape(-1)

    def decode(self, codes) -> np.ndarray:
        """``codes [T, 16]`` -> float32 waveform ``[T * 1920]``."""
        return windowed_decode(np.asarray(codes), self.window, self.left_context, self.decode_window,
                               self.samples_per_frame)


class CoreMLStreamDecoder:
    """The stateful streaming decoder: push frames as they come, get their audio; equals a
    one-shot decode of all frames pushed so far. Calls run on whole ``frames``-sized groups;
    ``flush`` pads the remainder with code 0 (invisible to earlier samples: causal)."""

    def __init__(self, package_dir: Path, compute_units: str = "all", manifest: dict | None = None,
                 model=None):
        self.package_dir = Path(package_dir)
        manifest = manifest or read_manifest(self.package_dir)
        entry = _entry(manifest, SPEECH_DECODER_STREAM, self.package_dir)
        self.model = model or _load(self.package_dir, entry, compute_units)
        self.frames = int(entry["frames"])
        self.num_quantizers = int(entry["num_quantizers"])
        self.samples_per_frame = int(entry["samples_per_frame"])
        self.sample_rate = int(entry["sample_rate"])

    def new_stream(self) -> CoreMLCache:
        s = CoreMLCache(self.model.new_state(), capacity=2**31 - 1)
        s.extra["pending"] = np.zeros((0, self.num_quantizers), np.int32)
        return s

    def _run(self, codes: np.ndarray, stream: CoreMLCache) -> np.ndarray:
        out = self.model.predict({"codes": np.ascontiguousarray(codes.T[None], np.int32),
                                  "frames_seen": np.array([min(stream.offset, 2**30)], np.int32)}, stream.state)
        stream.offset += codes.shape[0]
        return np.asarray(out["audio"], np.float32).reshape(-1)

    def push(self, codes, stream: CoreMLCache) -> np.ndarray:
        """``codes [n, Q]`` -> audio of every complete group decoded now (maybe empty)."""
        codes = np.maximum(np.asarray(codes, np.int32).reshape(-1, self.num_quantizers), 0)
        pending = np.concatenate([stream.extra["pending"], codes])
        n = (pending.shape[0] // self.frames) * self.frames
        out = [self._run(pending[i:i + self.frames], stream) for i in range(0, n, self.frames)]
        stream.extra["pending"] = pending[n:]
        return self._drop(np.concatenate(out) if out else np.zeros(0, np.float32), stream)

    def flush(self, stream: CoreMLCache) -> np.ndarray:
        """Audio of the frames still pending; the stream ends here (the padding entered its state)."""
        pending = stream.extra["pending"]
        if not pending.shape[0]:
            return np.zeros(0, np.float32)
        padded = np.zeros((self.frames, self.num_quantizers), np.int32)
        padded[:pending.shape[0]] = pending
        stream.extra["pending"] = pending[:0]
        return self._drop(self._run(padded, stream)[:pending.shape[0] * self.samples_per_frame], stream)

    def prime(self, codes, stream: CoreMLCache) -> None:
        """Left context only (voice-clone reference codes): decoded into the state, audio dropped."""
        codes = np.asarray(codes).reshape(-1, self.num_quantizers)
        if stream.offset or stream.extra["pending"].shape[0]:
            raise ValueError("prime() must come before the first pushed frame")
        self.push(codes, stream)
        stream.extra["drop"] = stream.extra["pending"].shape[0] * self.samples_per_frame

    @staticmethod
    def _drop(wav: np.ndarray, stream: CoreMLCache) -> np.ndarray:
        drop = min(stream.extra.get("drop", 0), wav.shape[0])
        stream.extra["drop"] = stream.extra.get("drop", 0) - drop
        return wav[drop:]

    def decode(self, codes) -> np.ndarray:
        """One clip ``[T, Q]`` -> ``[T * samples_per_frame]``, exactly as a one-shot decode."""
        stream = self.new_stream()
        return np.concatenate([self.push(codes, stream), self.flush(stream)])


class ModelWeights:
    """A weight source over an MLX Qwen3TTSModel: its parameter names are the checkpoint's."""

    def __init__(self, model):
        import mlx.core as mx
        from mlx.utils import tree_flatten

        self._params = dict(tree_flatten(model.parameters()))
        if any(k.endswith(".scales") for k in self._params):
            raise CheckpointError("cannot build Core ML packages from a quantized MLX model; use the original checkpoint")
        self._mx = mx
        self.path = Path("MLX model")

    def __contains__(self, key: str) -> bool:
        return key in self._params

    def keys(self):
        return self._params.keys()

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._params[key].shape)

    def get(self, key: str) -> np.ndarray:
        return np.array(self._params[key].astype(self._mx.float32))


def _fingerprint(model, extra: str) -> str:
    import hashlib

    import mlx.core as mx
    from mlx.utils import tree_flatten

    h = hashlib.sha256(extra.encode())
    for k, v in sorted(tree_flatten(model.parameters())):
        if k.startswith("talker."):
            h.update(f"{k}{tuple(v.shape)}{float(v.astype(mx.float32).sum().item()):.6e}".encode())
    return h.hexdigest()[:16]


def build_from_model(model, capacity: int = 256, out_dir: Path | None = None,
                     progress: Callable[..., None] | None = None) -> Path:
    """Talker + code predictor packages from an in-memory MLX model (e.g. random weights at real
    dimensions for bench), cached by a fingerprint of its weights. Minutes at 0.6B size."""
    import dataclasses
    import json

    from ttscli.paths import cache_dir

    from .coreml_export import export_from_sources

    cfg = json.loads(json.dumps(dataclasses.asdict(model.args), default=str))
    out_dir = Path(out_dir) if out_dir else cache_dir() / "coreml" / f"model-{_fingerprint(model, f'{capacity}')}"
    if (out_dir / "manifest.json").is_file():
        return out_dir
    src = ModelWeights(model)
    tmp = out_dir.with_name(out_dir.name + ".partial")
    export_from_sources(cfg, {"decoder_config": {}}, (lambda: src, None), tmp, capacity=capacity,
                        progress=progress, components=(TALKER, CODE_PREDICTOR), source_name="MLX model weights")
    tmp.rename(out_dir)
    return out_dir


def find_converted(checkpoint: Path) -> Path:
    """The converted-packages folder whose manifest names this checkpoint's model.safetensors."""
    from ttscli.paths import cache_dir

    from .coreml_export import sha256

    digest = sha256(Path(checkpoint) / "model.safetensors")
    for m in sorted((cache_dir() / "converted").glob("*/coreml/manifest.json")):
        try:
            if read_manifest(m.parent)["source"]["sha256"].get("model.safetensors") == digest:
                return m.parent
        except (CheckpointError, KeyError):
            continue
    raise CheckpointError(f"no Core ML packages converted from {checkpoint}; run `ttscli convert MODEL --to coreml` "
                          "or use --code-decoder-backend mlx")


class CoreMLCodeDecoder(CoreMLTalker):
    """The talker behind loop.CodeDecoder on Core ML; everything else stays in MLX."""

    @classmethod
    def load(cls, model, checkpoint: Path | None, options) -> "CoreMLCodeDecoder":
        """``options.extra``: ``coreml_dir`` (packages folder; default: the converted cache entry
        built from this checkpoint, or for random weights a build from ``model``),
        ``coreml_compute_units`` (all | cpu_and_gpu | cpu_only | cpu_and_ne), ``coreml_capacity``."""
        require_coreml()
        extra = dict(getattr(options, "extra", {}) or {})
        folder = extra.get("coreml_dir")
        if folder is None:
            folder = (build_from_model(model, int(extra.get("coreml_capacity", 256)))
                      if checkpoint is None else find_converted(checkpoint))
        manifest = read_manifest(Path(folder))
        if checkpoint is not None and folder is not None and extra.get("coreml_dir"):
            from .coreml_export import sha256

            want = manifest["source"]["sha256"].get("model.safetensors")
            if want != sha256(Path(checkpoint) / "model.safetensors"):
                raise CheckpointError(f"Core ML packages in {folder} were converted from another checkpoint "
                                      f"than {checkpoint}; convert again")
        return cls(Path(folder), extra.get("coreml_compute_units", "all"), manifest)
