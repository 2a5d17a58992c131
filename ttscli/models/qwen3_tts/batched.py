"""Qwen3-TTS frames for many utterances at once (continuous batching on ttscli.lm.batch).

The frame of :func:`ttscli.models.qwen3_tts.loop.generate_frames`, done for every row of a
batch: one talker forward and one code-predictor pass (16 positions) per frame for all rows,
while each row keeps its own prompt, positions, PRNG key stream, repetition-penalty set,
EOS block, frame limit and stop. Rows arrive from ``source`` whenever a slot is free and
leave at their EOS. A row's codes equal those of the same request run alone (same seed), up to
the rounding of batched matmuls (tests/batch/test_batched_generation.py). MLX talker only.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import numpy as np

from ttscli.errors import GenerationError
from ttscli.lm import KeyStream, logit_bias
from ttscli.lm.batch import RowBatch, sample_rows
from ttscli.models.qwen3_tts.family import FAMILY
from ttscli.models.qwen3_tts.loop import LoopConfig
from ttscli.models.qwen3_tts.prompt import Prompt
from ttscli.models.qwen3_tts.talker import Talker


@dataclass
class Item:
    """One utterance to generate: ``key`` names it in the output."""

    key: Any
    prompt: Prompt
    cfg: LoopConfig
    seed: int | None = None


@dataclass
class _Row:
    item: Item
    keys: KeyStream
    frames: int = 0
    extra: dict = field(default_factory=dict)


def predictor_frame(cp, hidden: mx.array, c0_embed: mx.array, params: list, keys: mx.array):
    """:meth:`CodePredictor.frame` for ``B`` rows, each drawing with its own keys ``[B, 15, 2]``."""
    return cp.frame_with(hidden, c0_embed, lambda j, logits: sample_rows(logits, params, keys[:, j]))


class _Compiled:
    """Compiled predictor frames by the rows' sampling params (shapes retrace by themselves)."""

    def __init__(self, cp, limit: int = 16):
        self.cp, self.limit, self.fns = cp, limit, {}

    def __call__(self, hidden, c0_embed, params: list, keys):
        k = tuple(params)
        fn = self.fns.get(k)
        if fn is None:
            if len(self.fns) >= self.limit:  # bounded: a long-running server sees many mixes
                self.fns.clear()
            fn = mx.compile(lambda h, e, ks: predictor_frame(self.cp, h, e, list(k), ks))
            self.fns[k] = fn
        return fn(hidden, c0_embed, keys)


def generate_batched(talker: Talker, source: Callable[[int], list[Item]] | Iterable[Item], max_batch: int = 16,
                     stats: dict | None = None, drop: Callable[[Any], bool] | None = None
                     ) -> Iterator[tuple[Any, np.ndarray | None | Exception]]:
    """Yield ``(key, codes int32 [16])`` per frame of each row, ``(key, None)`` when a row ends
    at its EOS, ``(key, GenerationError)`` when it reaches its frame limit first.

    ``source(n)`` returns up to ``n`` new items (an empty list: none now; the generator ends
    once no row is left and ``source`` returned nothing); a plain iterable is read as needed.
    ``stats`` (optional) gets ``steps``, ``rows_per_step`` and ``step_s`` (one per frame step).
    ``drop(key)`` true: the row leaves before the next step without a word (its client is gone).
    """
    if not callable(source):
        it = iter(source)

        def source(n, it=it):
            out = []
            for _ in range(n):
                x = next(it, None)
                if x is None:
                    break
                out.append(x)
            return out

    a = talker.args
    V = a.vocab_size
    eos = a.codec_eos_token_id
    suppressed = [i for i in range(V - 1024, V) if i != eos]
    bias_closed = logit_bias(V, suppressed + [eos])[None]
    bias_open = {False: logit_bias(V, suppressed)[None], True: bias_closed}
    vocab = mx.arange(V)[None]
    cp_frame = _Compiled(talker.code_predictor)
    batch = RowBatch(talker.model)
    rows: list[_Row] = []
    logits = hidden = seen = None   # [B, V], [B, H], [B, V] bool (codebook-0 ids drawn so far)
    if stats is not None:
        stats.setdefault("steps", 0)
        stats.setdefault("rows_per_step", [])
        stats.setdefault("step_s", [])

    while True:
        had_rows = bool(rows)
        new = source(max_batch - len(rows)) if len(rows) < max_batch else []
        if new:
            caches, lg, hd = [], [], []
            # rows joining together with prompts of one length are prefilled as one batch (as a
            # lone request, up to a batched matmul's rounding); others alone
            by_len: dict[int, list[Item]] = {}
            for item in new:
                by_len.setdefault(item.prompt.embeds.shape[1], []).append(item)
            for group in by_len.values():
                cache = talker.new_cache()
                embeds = mx.concatenate([item.prompt.embeds for item in group], 0)
                l1, h1 = talker(embeds, cache)
                caches.append(cache)
                lg.append(l1)
                hd.append(h1)
                rows.extend(_Row(item, KeyStream(item.seed)) for item in group)
            batch.join(caches)
            logits = mx.concatenate(([logits] if logits is not None else []) + lg, 0)
            hidden = mx.concatenate(([hidden] if hidden is not None else []) + hd, 0)
            seen = mx.concatenate(([seen] if seen is not None else []) + [mx.zeros((len(new), V), mx.bool_)], 0)
        if drop is not None and rows:
            stay = [i for i, r in enumerate(rows) if not drop(r.item.key)]
            if len(stay) != len(rows):
                batch.keep(stay)
                rows = [rows[i] for i in stay]
                sel = mx.array(stay, dtype=mx.int32)
                logits, hidden, seen = (logits[sel], hidden[sel], seen[sel]) if stay else (None, None, None)
        if not rows:
            if new or had_rows:
                continue  # the rows there were got dropped: ask the source again
            return
        t0 = time.perf_counter()
        ks = mx.stack([r.keys.take(16) for r in rows])      # [B, 16, 2]
        bias = [bias_closed if r.frames < r.item.cfg.min_new_tokens else bias_open[r.item.cfg.ignore_eos]
                for r in rows]
        c0 = sample_rows(logits, [r.item.cfg.talker for r in rows], ks[:, 0], seen=seen,
                         bias=bias[0] if all(b is bias[0] for b in bias) else mx.concatenate(bias, 0))
        c0_embed = talker.embed_codec(c0)
        rest, frame_embed = cp_frame(hidden, c0_embed, [r.item.cfg.sub for r in rows], ks[:, 1:])
        codes = mx.concatenate([c0[:, None], rest], axis=1)
        text = mx.concatenate([r.item.prompt.text_at(r.frames) for r in rows], 0)
        # Queue the next talker step before waiting, as the single-row loop does.
        hidden = batch.step(frame_embed[:, None, :] + text)
        logits = talker.codec_head(hidden)
        seen = mx.logical_or(seen, vocab == c0[:, None])
        mx.async_eval(codes, logits, hidden, seen)
        out = np.array(codes)
        if stats is not None:
            stats["steps"] += 1
            stats["rows_per_step"].append(len(rows))
            stats["step_s"].append(time.perf_counter() - t0)
        keep = []
        for i, r in enumerate(rows):
            if int(out[i, 0]) == eos:
                yield r.item.key, None
                continue
            r.frames += 1
            yield r.item.key, out[i]
            if r.frames >= r.item.cfg.max_frames:
                yield r.item.key, _overrun(r, logits[i:i + 1], seen[i:i + 1], bias_open[False], eos)
                continue
            keep.append(i)
        if len(keep) != len(rows):
            batch.keep(keep)
            rows = [rows[i] for i in keep]
            if keep:
                sel = mx.array(keep, dtype=mx.int32)
                logits, hidden, seen = logits[sel], hidden[sel], seen[sel]
            else:
                logits = hidden = seen = None


def _overrun(r: _Row, logits: mx.array, seen: mx.array, bias: mx.array, eos: int):
    """A row at its frame limit: complete if EOS is next (as the single-row loop decides)."""
    from ttscli.lm.sample import sample

    cfg = r.item.cfg
    if cfg.ignore_eos:
        return None
    last = sample(logits, cfg.talker, r.keys.next(), seen=seen, bias=bias)
    if int(last.item()) == eos:
        return None
    return GenerationError(f"reached max frames ({cfg.max_frames}, {cfg.max_frames / 12.5:.1f} s of audio) "
                           "before end of speech; raise --max-frames or shorten the text chunk")


def bench_batch(pipe, sizes: list[int], frames: int, text: str, seed: int = 0, warmup: int = 1) -> dict[str, dict]:
    """``ttscli bench --batch``: ``frames`` frames for each of ``B`` rows at once, per size.

    Frames only (talker + code predictor, the part batching changes); each row is prefilled
    alone when it joins, which the wall time includes. Random weights never stop, so rows run
    with ignore_eos."""
    from ttscli.models.base import Request
    from ttscli.models.qwen3_tts.prompt import prepare

    if pipe.backends.get("code_decoder") != "mlx":
        from ttscli.errors import UsageError

        raise UsageError("--batch needs the MLX code decoder (batched rows share one MLX forward)")
    r = Request(text=text, seed=seed, max_frames=frames, ignore_eos=True)
    args = pipe.args
    speaker = None if args.is_base else ((getattr(pipe.spec, "defaults", {}) or {}).get("voice") or args.speakers[0])
    instruct = "A calm, clear voice." if args.tts_model_type == "voice_design" else None
    prompt = prepare(pipe.model.talker, args, pipe.tokenizer, text, speaker=speaker, instruct=instruct,
                     voice=pipe.voice_prompt(r))
    cfg = pipe.loop_config(r)
    out = {}
    for B in sizes:
        for _ in range(warmup + 1):
            stats: dict = {}
            items = [Item(key=i, prompt=prompt, cfg=cfg, seed=seed + i) for i in range(B)]
            t0 = time.perf_counter()
            n = sum(1 for _, x in generate_batched(pipe.model.talker, items, max_batch=B, stats=stats)
                    if isinstance(x, np.ndarray))
            wall = time.perf_counter() - t0
        steps = np.asarray(stats["step_s"])
        out[f"batch {B}"] = {
            "step_ms_p50": float(np.median(steps) * 1e3),
            "frame_ms_per_row": float(np.median(steps) * 1e3 / B),
            "frames_per_s": n / wall,
            "audio_s_per_s": n / 12.5 / wall,
            "total_s": wall,
        }
    base = out[f"batch {sizes[0]}"]["audio_s_per_s"]
    for v in out.values():
        v["speedup_vs_first"] = v["audio_s_per_s"] / base
    return out


def row_prompt(pipe, r):
    """A chunk request's prompt, voice and loop config, as ``Qwen3TTSPipeline.frames`` builds them."""
    prompt, voice = pipe.prompt_for(r)
    return prompt, voice, pipe.loop_config(r)


def decode(pipe, frames: list[np.ndarray], voice) -> np.ndarray:
    """Codes -> audio as ``Qwen3TTSPipeline.generate`` decodes a one-shot chunk."""
    sd = pipe.speech_stream(voice)
    out = [c for codes in frames for c in sd.push(codes)]
    tail = sd.flush()
    if tail is not None and len(tail):
        out.append(tail)
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def synthesize_many(pipe, requests: Iterable[tuple[Any, Any]], max_batch: int = 16
                    ) -> Iterator[tuple[Any, np.ndarray | BaseException]]:
    """Whole requests, checked by the engine, through one batch: every sentence chunk of every
    request is a row (seeds as :func:`ttscli.models.base.chunk_requests` gives them), rows join
    as others finish, and each request's audio, its chunks joined as
    :func:`ttscli.generate.synthesize` joins them, is yielded when its last chunk ends; a failing
    request yields its exception."""
    from ttscli.dsp import CROSSFADE_S, crossfade_join
    from ttscli.models.base import chunk_requests
    from ttscli.text import chunk_text

    it = iter(requests)
    state: dict[Any, dict] = {}          # request key -> chunks, audio so far, voice per chunk
    ready: list[tuple[Any, BaseException]] = []
    backlog: list[Item] = []
    n_fade = int(round(CROSSFADE_S * pipe.sample_rate))

    def source(n: int) -> list[Item]:
        while len(backlog) < n:
            nxt = next(it, None)
            if nxt is None:
                break
            key, req = nxt
            try:
                chunks = chunk_requests(req, chunk_text(req.text, pipe.max_chunk_chars))
                st = {"n": len(chunks), "audio": {}, "voice": {}, "frames": {}, "failed": False}
                items = []
                for i, r in enumerate(chunks):
                    prompt, voice, cfg = row_prompt(pipe, r)
                    st["voice"][i] = voice
                    st["frames"][i] = []
                    items.append(Item(key=(key, i), prompt=prompt, cfg=cfg, seed=r.seed))
            except Exception as e:  # noqa: BLE001 - a request's failure is handed to its caller, never stops the batch
                ready.append((key, e))
                continue
            state[key] = st
            backlog.extend(items)
        take = backlog[:n]
        del backlog[:n]
        return take

    for (key, i), x in generate_batched(pipe.model.talker, source, max_batch=max_batch):
        yield from _drain(ready)
        st = state.get(key)
        if st is None or st["failed"]:
            continue
        if isinstance(x, np.ndarray):
            st["frames"][i].append(x)
            continue
        if isinstance(x, BaseException):
            st["failed"] = True
            del state[key]
            yield key, x
            continue
        try:
            st["audio"][i] = decode(pipe, st["frames"].pop(i), st["voice"][i])
        except Exception as e:  # noqa: BLE001 - a request's failure is handed to its caller, never stops the batch
            st["failed"] = True
            del state[key]
            yield key, e
            continue
        if len(st["audio"]) == st["n"]:
            del state[key]
            pieces = ((j, st["audio"][j]) for j in range(st["n"]))
            parts = list(crossfade_join(pieces, n_fade))
            yield key, np.concatenate(parts) if parts else np.zeros(0, np.float32)
    yield from _drain(ready)


def _drain(ready: list):
    while ready:
        yield ready.pop(0)


class Joiner:
    """:func:`ttscli.dsp.crossfade_join` fed one piece at a time: ``push(chunk_index,
    samples)`` returns what can be sent now, ``finish()`` the rest."""

    def __init__(self, n_fade: int):
        self.n = n_fade
        self.held = np.zeros(0, np.float32)
        self.current = -1
        self.head = 0
        self.fade = np.sin(np.linspace(0, np.pi / 2, n_fade, dtype=np.float32)) ** 2 if n_fade else None

    def push(self, idx: int, x: np.ndarray) -> list[np.ndarray]:
        x = np.asarray(x, np.float32).reshape(-1)
        out = []
        if idx != self.current:
            self.current, self.head = idx, len(self.held)
        if self.head:
            k = min(self.head, len(x))
            start = len(self.held) - self.head
            ramp = (self.fade if len(self.held) == self.n else np.linspace(0, 1, len(self.held), dtype=np.float32))
            w = ramp[start:start + k]
            self.held[start:start + k] = self.held[start:start + k] * (1 - w) + x[:k] * w
            self.head -= k
            x = x[k:]
            if self.head:
                return out
            out.append(self.held)
            self.held = np.zeros(0, np.float32)
        buf = np.concatenate([self.held, x]) if len(self.held) else x
        keep = min(self.n, len(buf))
        if len(buf) > keep:
            out.append(buf[: len(buf) - keep])
        self.held = buf[len(buf) - keep:].copy()
        return out

    def finish(self) -> list[np.ndarray]:
        out, self.held = ([self.held] if len(self.held) else []), np.zeros(0, np.float32)
        return out


DONE = "done"


def stream_many(pipe, source: Callable[[int], list[tuple[Any, Any]]], drop: Callable[[Any], bool],
                max_batch: int = 16) -> Iterator[tuple[Any, Any]]:
    """Requests streamed through one batch (the server's loop): ``source(n)`` hands over up to
    ``n`` new ``(key, Request)``, checked by the engine (it may block while nothing runs, and returns [] to end);
    yields ``(key, samples)`` as each row's frames decode (every ``first_chunk_frames``, then
    ``chunk_frames``), ``(key, DONE)`` at its end, ``(key, exception)`` on failure. A request's
    sentence chunks run one after another in the batch, joined as ``speak`` joins them."""
    from ttscli.codecs.qwen3_12hz import StreamingDecoder
    from ttscli.dsp import CROSSFADE_S
    from ttscli.models.base import chunk_requests
    from ttscli.text import chunk_text

    n_fade = int(round(CROSSFADE_S * pipe.sample_rate))
    state: dict[Any, dict] = {}
    out: list[tuple[Any, Any]] = []          # events made inside source(), sent with the next ones
    nexts: list[Item] = []                   # next sentence chunks of running requests

    def item_for(key, st) -> Item:
        r = st["chunks"][st["i"]]
        prompt, voice, cfg = row_prompt(pipe, r)
        sd = StreamingDecoder(pipe.speech_decoder, FAMILY.first_chunk(r.first_chunk_frames),
                              max(1, r.chunk_frames))
        if voice is not None and voice.ref_codes is not None:
            mx.eval(pipe.speech_decoder(voice.ref_codes.astype(mx.int32), sd.cache))
        st["sd"] = sd
        return Item(key=key, prompt=prompt, cfg=cfg, seed=r.seed)

    def items(n: int) -> list[Item]:
        take = nexts[:n]
        del nexts[:n]
        if len(take) < n:
            for key, req in source(n - len(take)):
                try:
                    st = {"chunks": chunk_requests(req, chunk_text(req.text, pipe.max_chunk_chars)), "i": 0,
                          "join": Joiner(n_fade)}
                    take.append(item_for(key, st))
                    state[key] = st
                except Exception as e:  # noqa: BLE001 - a request's failure is handed to its caller, never stops the batch
                    out.append((key, e))
        return take

    def fail(key, e):
        state.pop(key, None)
        out.append((key, e))

    for key, x in generate_batched(pipe.model.talker, items, max_batch=max_batch,
                                   drop=lambda k: drop(k) or k not in state):
        st = state.get(key)
        if st is not None:
            try:
                if isinstance(x, np.ndarray):
                    for c in st["sd"].push(x):
                        out += [(key, y) for y in st["join"].push(st["i"], c)]
                elif isinstance(x, BaseException):
                    fail(key, x)
                else:
                    tail = st["sd"].flush()
                    if tail is not None and len(tail):
                        out += [(key, y) for y in st["join"].push(st["i"], tail)]
                    st["i"] += 1
                    if st["i"] < len(st["chunks"]):
                        nexts.append(item_for(key, st))
                    else:
                        out += [(key, y) for y in st["join"].finish()]
                        out.append((key, DONE))
                        del state[key]
            except Exception as e:  # noqa: BLE001 - a request's failure is handed to its caller, never stops the batch
                fail(key, e)
        while out:
            yield out.pop(0)
    while out:
        yield out.pop(0)
