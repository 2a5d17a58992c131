"""The embedded voice on onnxruntime: the published ONNX graph (what piper-tts runs), as a
backend of the piper family (component ``vits``).

The graph draws its two noises with ``RandomNormalLike``, unseeded. Here each becomes a slice
of a noise input as long as the tensor it imitates (``Shape`` -> ``Slice``): the pipeline draws
that noise from the request's seed, so a seed gives the same audio on every run and in every
worker. The prior noise's frame count is only known inside the graph (it follows the
predicted durations), so a generous buffer is passed and a short one is retried larger.

The edited graph is kept in ttscli's cache (``paths.converted_dir(MODEL, "onnx-seeded")``),
already through onnxruntime's CPU-independent optimizations and recording in its metadata the
source file's name, size and mtime and the onnxruntime version; later loads read it from there.
Editing the graph needs the ``onnx`` package, whose import (it loads ml_dtypes) cost a one-line
`ttscli speak` about as much CPU time as piper-tts's whole run, and the optimizations were half
of the session's start. A cache that is stale, unreadable or cannot be written is rebuilt, or
skipped, in memory: the voice always loads, with the same audio to the bit.

The session holds no request state and runs on the backend's global thread pool, so
sentence chunks may run concurrently (``concurrent_safe``).
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ttscli.errors import BackendUnavailableError
from ttscli.models.base import Pipeline, Request

from .settings import scales, sentence_audio
from .voice import Voice

NOISES = {"dp": "dp_noise", "prior": "prior_noise"}
FRAMES_PER_ID = 24         # first prior-noise buffer: frames per phoneme id (x length scale)
SEEDED_FORMAT = 2          # bumped when seeded_graph's edit changes: older cached graphs are rebuilt
DURATIONS = "durations"    # second output: frames per phoneme id, the predictor's ceil'd durations
DURATIONS_OF = "/Ceil_output_0"    # the tensor it exposes in piper's published graph
GRAPH_FILE = "seeded.onnx"
RECORD_KEY = "ttscli.seeded"    # metadata entry: the source, format, onnxruntime version and channels

_LOG = logging.getLogger(__name__)


def seeded_graph(onnx_path: Path):
    """The voice's graph with its noise nodes replaced by slices of ``dp_noise`` / ``prior_noise``."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(onnx_path))
    g = model.graph
    found = {}
    for node in list(g.node):
        if node.op_type != "RandomNormalLike":
            continue
        kind = "dp" if node.name.startswith("/dp/") else "prior"
        found[kind] = node
        i = list(g.node).index(node)
        g.node.remove(node)
        shape = f"{NOISES[kind]}/shape"
        zeros = f"{NOISES[kind]}/starts"
        g.initializer.append(onnx.numpy_helper.from_array(np.zeros(3, np.int64), zeros))
        g.node.insert(i, helper.make_node("Slice", [NOISES[kind], zeros, shape], [node.output[0]],
                                          name=f"/{kind}/noise_slice"))
        g.node.insert(i, helper.make_node("Shape", [node.input[0]], [shape], name=f"/{kind}/noise_shape"))
        g.input.append(helper.make_tensor_value_info(NOISES[kind], TensorProto.FLOAT, [1, None, None]))
    if set(found) != {"dp", "prior"}:
        raise BackendUnavailableError(f"{onnx_path.name}: unexpected noise nodes {sorted(found)}")
    if any(DURATIONS_OF in n.output for n in g.node):   # word timestamps read it (ttscli.words)
        g.node.append(helper.make_node("Identity", [DURATIONS_OF], [DURATIONS], name="/durations_out"))
        g.output.append(helper.make_tensor_value_info(DURATIONS, TensorProto.FLOAT, [1, 1, None]))
    channels = next((int(t.dims[0]) for t in g.initializer if t.name == "enc_p.proj.bias"), 384) // 2
    return model, channels


def _record(onnx_path: Path) -> dict:
    """What a cached seeded graph must have been built from, and by which onnxruntime."""
    import onnxruntime as ort

    from .convert import source_fingerprint

    return {"format": SEEDED_FORMAT, "source": source_fingerprint(onnx_path), "onnxruntime": ort.__version__}


def optimized(graph: bytes) -> bytes:
    """``graph`` after onnxruntime's basic and extended optimizations, the ones that do not
    depend on the CPU: a session made from it starts in less than half the time (the fusions
    are done), and its output is the same to the bit (the same optimizations, done earlier).
    onnxruntime writes the file itself, so it writes it into a fresh private folder."""
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="ttscli-seeded-") as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.log_severity_level = 3
        so.optimized_model_filepath = str(Path(tmp) / GRAPH_FILE)
        ort.InferenceSession(graph, so, providers=["CPUExecutionProvider"])
        return (Path(tmp) / GRAPH_FILE).read_bytes()


def build_graph(onnx_path: Path, cache_dir: Path | None) -> tuple[bytes, int]:
    """The seeded graph as bytes, stored (:func:`optimized`) in ``cache_dir`` for the next
    load where it can be.

    The graph carries its own record (:func:`_record` and the prior-noise channels) in its
    metadata, so graph and record are replaced together in one rename. Written as
    user-named files are (ttscli.outfile): a link planted in the cache is not followed, and a
    run stopped halfway leaves no partial graph."""
    from ttscli.errors import TTSError
    from ttscli.outfile import resolve, write_destination

    model, channels = seeded_graph(onnx_path)
    entry = model.metadata_props.add()
    entry.key, entry.value = RECORD_KEY, json.dumps({**_record(onnx_path), "channels": channels})
    data = model.SerializeToString()
    if cache_dir is not None:
        what = "the seeded-graph cache"
        try:
            write_destination(resolve(cache_dir / GRAPH_FILE, what, parents=True), optimized(data), what)
        except (TTSError, OSError) as e:
            _LOG.info("seeded graph not cached: %s", e)
        except Exception as e:  # noqa: BLE001 - onnxruntime's own types; the voice loads from memory all the same
            _LOG.warning("seeded graph not cached: onnxruntime could not optimise it: %s", e)
    return data, channels


def record_channels(session, onnx_path: Path) -> int | None:
    """The prior-noise channels a cached graph recorded, if it was built from ``onnx_path`` as
    it is now (None: stale or not ttscli's)."""
    try:
        record = json.loads(session.get_modelmeta().custom_metadata_map[RECORD_KEY])
        current = _record(onnx_path)
        if {k: record.get(k) for k in current} == current:
            return int(record["channels"])
    except (KeyError, ValueError, TypeError, AttributeError):
        pass
    return None


def cached_session(cached: Path, so, onnx_path: Path):
    """(session, prior-noise channels) from the seeded graph cached for ``onnx_path``; None when
    there is none, or it is stale or damaged (then it is rebuilt)."""
    import onnxruntime as ort

    if not cached.is_file():
        return None
    try:
        session = ort.InferenceSession(str(cached), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types for a damaged file
        _LOG.warning("rebuilding the cached seeded graph %s: %s", cached, e)
        return None
    channels = record_channels(session, onnx_path)
    if channels is None:
        _LOG.info("the cached seeded graph %s is stale; rebuilding", cached)
        return None
    return session, channels


class OnnxVitsModel:
    def __init__(self, onnx_path: Path, cache_dir: Path | None = None):
        """``cache_dir``: where the seeded graph is kept between runs (None: built each time)."""
        from ttscli.backends.onnx.runtime import require_onnxruntime, session_options

        require_onnxruntime()
        import onnxruntime as ort

        onnx_path = Path(onnx_path)
        so = session_options()
        # tensors here are sized by the sentence: an arena would hold the longest sentence's
        # high-water mark for the session's life (+86 MB RSS in a server, README "Serve"); plain
        # malloc per run: the same best time of 6-8 runs on the loaded 2-core CPU (medians ~8% apart, noise)
        so.enable_cpu_mem_arena = False
        found = cached_session(cache_dir / GRAPH_FILE, so, onnx_path) if cache_dir is not None else None
        if found is None:
            graph, channels = build_graph(onnx_path, cache_dir)
            found = ort.InferenceSession(graph, so, providers=["CPUExecutionProvider"]), channels
        self.session, self.channels = found
        self.takes_speaker = "sid" in {i.name for i in self.session.get_inputs()}
        self.has_durations = DURATIONS in {o.name for o in self.session.get_outputs()}

    def __call__(self, ids: list[int], noise_scale: float, length_scale: float, noise_w: float,
                 rng: np.random.Generator, speaker: int | None = None) -> tuple[np.ndarray, int]:
        """Audio of one sentence and how many prior-noise frames it used; ``speaker`` feeds a
        multi-speaker graph's ``sid`` (speaker 0 when None)."""
        (audio, *_), frames = self.run(ids, noise_scale, length_scale, noise_w, rng, speaker, ["output"])
        return audio.reshape(-1), frames

    def with_durations(self, ids: list[int], noise_scale: float, length_scale: float, noise_w: float,
                       rng: np.random.Generator, speaker: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Audio of one sentence and the frames of each of its ids (the same audio as ``__call__``)."""
        if not self.has_durations:
            from ttscli.errors import UsageError

            raise UsageError("this Piper graph does not expose its durations, so it gives no word timestamps")
        (audio, durations), _ = self.run(ids, noise_scale, length_scale, noise_w, rng, speaker, ["output", DURATIONS])
        return audio.reshape(-1), np.maximum(durations.reshape(-1), 0).astype(np.int64)

    def run(self, ids: list[int], noise_scale: float, length_scale: float, noise_w: float,
            rng: np.random.Generator, speaker: int | None, outputs: list[str]) -> tuple[list[np.ndarray], int]:
        """The graph's ``outputs`` for one sentence and the prior-noise frames it used."""
        t = len(ids)
        dp = rng.standard_normal((1, 2, t), dtype=np.float32)
        frames = max(256, int(FRAMES_PER_ID * max(1.0, length_scale) * t))
        while True:
            prior = rng.standard_normal((1, self.channels, frames), dtype=np.float32)
            feeds = {"input": np.array([ids], np.int64), "input_lengths": np.array([t], np.int64),
                     "scales": np.array([noise_scale, length_scale, noise_w], np.float32),
                     NOISES["dp"]: dp, NOISES["prior"]: prior}
            if self.takes_speaker:
                feeds["sid"] = np.array([speaker or 0], np.int64)
            try:
                return self.session.run(outputs, feeds), frames
            except Exception as e:  # the slice came out shorter than the frames: retry longer
                if "prior_noise" not in str(e) and "broadcast" not in str(e).lower() or frames > 1 << 20:
                    raise
                frames *= 4


class PiperOnnxPipeline(Pipeline):
    """Piper on onnxruntime: same text front end, settings and per-sentence output as the MLX
    pipeline; the noise comes from the request's seed through numpy."""

    # Chunks are what --workers runs concurrently: a smaller budget than MLX's 400 lets a
    # paragraph spread over workers (sentences stay whole; they are rarely over 200 characters).
    max_chunk_chars = 200
    concurrent_safe = True
    word_durations = True

    def __init__(self, model: OnnxVitsModel, voice: Voice):
        super().__init__()
        self.backends = {"vits": "onnx"}
        self.model = model
        self.voice = voice
        self.id_map = voice.phoneme_id_map
        self.espeak_voice = voice.espeak_voice
        self.sample_rate = voice.sample_rate
        self.inference = dict(voice.inference)

    def settings(self, request: Request) -> dict:
        return scales(self.inference, request)

    def generate(self, request: Request) -> Iterator[np.ndarray]:
        for audio, _ in self.sentences(request, timed=False):
            yield audio

    def generate_words(self, request: Request) -> Iterator[tuple[np.ndarray, list]]:
        yield from self.sentences(request, timed=True)

    def sentences(self, request: Request, timed: bool) -> Iterator[tuple[np.ndarray, list]]:
        """(audio, words) per sentence; the words (from the graph's durations) only when ``timed``."""
        from .phonemize import phoneme_ids, phonemize
        from .timing import SentenceWords

        cfg = self.settings(request)
        speaker = self.voice.speaker_id(request.voice)
        seed = request.seed if request.seed is not None else int.from_bytes(os.urandom(4), "little")
        rng = np.random.default_rng(seed)
        normalize = request.knobs.get("normalize", True)
        volume = float(request.knobs.get("volume", 1.0))
        stats = self.reset_stats()       # per chunk; with workers the last chunk's figures remain
        t0 = time.perf_counter()
        phonemes = [s for s in phonemize(request.text, self.espeak_voice) if s]
        sentences = [phoneme_ids(s, self.id_map) for s in phonemes]
        stats.extra.update(phonemize_s=time.perf_counter() - t0, sentences=len(sentences))
        words = SentenceWords(request.text, phonemes, self.id_map, self.espeak_voice) if timed else None
        for k, ids in enumerate(sentences):
            t1 = time.perf_counter()
            args = (ids, cfg["noise_scale"], cfg["length_scale"], cfg["noise_w"], rng, speaker)
            audio, frames = self.model.with_durations(*args) if words else self.model(*args)
            stats.decoder_s += time.perf_counter() - t1
            audio = sentence_audio(audio, normalize, volume)
            stats.prefill_tokens += len(ids)
            if stats.first_audio_s is None:
                stats.first_audio_s = time.perf_counter() - t0
            yield audio, (words.place(k, frames, len(audio) / self.sample_rate) if words else [])
