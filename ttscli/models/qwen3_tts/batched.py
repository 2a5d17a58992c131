"""Qwen3-TTS rows (the :class:`~ttscli.models.base.RowGenerator` of ``Qwen3TTSPipeline.rows()``).

The frame of :func:`ttscli.models.qwen3_tts.loop.generate_frames`, done for every row of a
batch: one talker forward and one code-predictor pass (16 positions) per frame for all rows,
while each row keeps its own prompt, positions, PRNG key stream, repetition-penalty set, EOS
block, frame limit and stop, and its own speech decoder stream. A row's codes equal those of
the same request run alone (same seed), up to the rounding of batched matmuls. MLX talker only.
Admission, chunking, crossfades and cancellation are the engine's (ttscli.batching).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from ttscli.errors import GenerationError, LimitReached
from ttscli.lm import KeyStream, logit_bias
from ttscli.lm.batch import RowAudio, RowBatch, sample_rows
from ttscli.models.base import Request, Row
from ttscli.models.qwen3_tts.family import FAMILY
from ttscli.models.qwen3_tts.loop import LoopConfig
from ttscli.models.qwen3_tts.prompt import Prompt
from ttscli.models.qwen3_tts.talker import Talker


@dataclass(eq=False)
class TalkerRow:
    """One row's talker side: its prompt, loop settings and key stream; ``audio`` (None: frames
    only, as bench reads them) decodes its codes."""

    prompt: Prompt
    cfg: LoopConfig
    keys: KeyStream
    audio: RowAudio | None = None
    frames: int = 0


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


class TalkerBatch:
    """The talker and code predictor over the rows now in the batch, in ``rows`` order.

    Rows joining together with prompts of one length are prefilled as one batch (as a lone
    request, up to a batched matmul's rounding); others alone."""

    def __init__(self, talker: Talker):
        self.talker = talker
        a = talker.args
        V = a.vocab_size
        self.eos = a.codec_eos_token_id
        suppressed = [i for i in range(V - 1024, V) if i != self.eos]
        self.bias_closed = logit_bias(V, suppressed + [self.eos])[None]
        self.bias_open = {False: logit_bias(V, suppressed)[None], True: self.bias_closed}
        self.vocab = mx.arange(V)[None]
        self.cp_frame = _Compiled(talker.code_predictor)
        self.batch = RowBatch(talker.model)
        self.rows: list[TalkerRow] = []
        self.logits = self.hidden = self.seen = None   # [B, V], [B, H], [B, V] bool (codebook-0 ids so far)

    def join(self, new: Sequence[TalkerRow]) -> None:
        if not new:
            return
        V = self.talker.args.vocab_size
        caches, lg, hd = [], [], []
        by_len: dict[int, list[TalkerRow]] = {}
        for r in new:
            by_len.setdefault(r.prompt.embeds.shape[1], []).append(r)
        for group in by_len.values():
            cache = self.talker.new_cache()
            l1, h1 = self.talker(mx.concatenate([r.prompt.embeds for r in group], 0), cache)
            caches.append(cache)
            lg.append(l1)
            hd.append(h1)
            self.rows.extend(group)
        self.batch.join(caches)
        self.logits = mx.concatenate(([self.logits] if self.logits is not None else []) + lg, 0)
        self.hidden = mx.concatenate(([self.hidden] if self.hidden is not None else []) + hd, 0)
        seen = mx.zeros((len(new), V), mx.bool_)
        self.seen = mx.concatenate(([self.seen] if self.seen is not None else []) + [seen], 0)

    def keep(self, keep: list[int]) -> None:
        """Keep only the rows at these positions (in this order)."""
        if len(keep) == len(self.rows):
            return
        self.batch.keep(keep)
        self.rows = [self.rows[i] for i in keep]
        if keep:
            sel = mx.array(keep, dtype=mx.int32)
            self.logits, self.hidden, self.seen = self.logits[sel], self.hidden[sel], self.seen[sel]
        else:
            self.logits = self.hidden = self.seen = None

    def remove(self, row: TalkerRow) -> None:
        if row in self.rows:
            self.keep([i for i, r in enumerate(self.rows) if r is not row])

    def step(self) -> list[tuple[TalkerRow, np.ndarray | None, bool, GenerationError | None]]:
        """One frame for every row: ``(row, codes int32 [16] or None at EOS, ended, error)``.
        Rows that ended have left the batch."""
        rows = self.rows
        ks = mx.stack([r.keys.take(16) for r in rows])      # [B, 16, 2]
        bias = [self.bias_closed if r.frames < r.cfg.min_new_tokens else self.bias_open[r.cfg.ignore_eos]
                for r in rows]
        c0 = sample_rows(self.logits, [r.cfg.talker for r in rows], ks[:, 0], seen=self.seen,
                         bias=bias[0] if all(b is bias[0] for b in bias) else mx.concatenate(bias, 0))
        c0_embed = self.talker.embed_codec(c0)
        rest, frame_embed = self.cp_frame(self.hidden, c0_embed, [r.cfg.sub for r in rows], ks[:, 1:])
        codes = mx.concatenate([c0[:, None], rest], axis=1)
        text = mx.concatenate([r.prompt.text_at(r.frames) for r in rows], 0)
        # Queue the next talker step before waiting, as the single-row loop does.
        self.hidden = self.batch.step(frame_embed[:, None, :] + text)
        self.logits = self.talker.codec_head(self.hidden)
        self.seen = mx.logical_or(self.seen, self.vocab == c0[:, None])
        mx.async_eval(codes, self.logits, self.hidden, self.seen)
        out = np.array(codes)
        events, keep = [], []
        for i, r in enumerate(rows):
            if int(out[i, 0]) == self.eos:
                events.append((r, None, True, None))
                continue
            r.frames += 1
            if r.frames >= r.cfg.max_frames:
                events.append((r, out[i], True, self._overrun(r, i)))
                continue
            events.append((r, out[i], False, None))
            keep.append(i)
        self.keep(keep)
        return events

    def _overrun(self, r: TalkerRow, i: int) -> GenerationError | None:
        """A row at its frame limit: complete if EOS is next (as the single-row loop decides)."""
        from ttscli.lm.sample import sample

        cfg = r.cfg
        if cfg.ignore_eos:
            return None
        last = sample(self.logits[i:i + 1], cfg.talker, r.keys.next(), seen=self.seen[i:i + 1],
                      bias=self.bias_open[False])
        if int(last.item()) == self.eos:
            return None
        return LimitReached(f"reached max frames ({cfg.max_frames}, {cfg.max_frames / 12.5:.1f} s of audio) "
                               "before end of speech; raise --max-frames or shorten the text chunk")


class Qwen3Rows:
    """``Qwen3TTSPipeline.rows()``: chunk requests as rows of one :class:`TalkerBatch`, each
    decoded by its own speech decoder stream (``first_chunk_frames``/``chunk_frames`` when
    streamed, else the one-shot decode's exact 50-frame chunks)."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.batch = TalkerBatch(pipe.model.talker)

    def start(self, request: Request) -> Row:
        prompt, voice = self.pipe.prompt_for(request)
        if request.stream:
            sd = self.pipe.speech_stream(voice, FAMILY.first_chunk(request.first_chunk_frames),
                                         max(1, request.chunk_frames))
        else:
            sd = self.pipe.speech_stream(voice)
        return Row(request, TalkerRow(prompt, self.pipe.loop_config(request), KeyStream(request.seed),
                                      RowAudio(sd, request.stream)))

    def step(self, rows: Sequence[Row]) -> None:
        by_state = {id(row.state): row for row in rows}
        self.batch.join([row.state for row in rows if row.state not in self.batch.rows])
        for state, codes, ended, error in self.batch.step():
            row = by_state[id(state)]
            try:
                if codes is not None:
                    state.audio.push(codes)
                if ended and error is None:
                    state.audio.flush()
            except Exception as e:  # noqa: BLE001 - the row fails alone; the engine hands it to its request
                self.batch.remove(state)
                ended, error = True, e
            row.done, row.error = ended, error

    def take(self, row: Row) -> np.ndarray | None:
        return row.state.audio.take(row.done)

    def drop(self, row: Row) -> None:
        self.batch.remove(row.state)


def bench_batch(pipe, sizes: list[int], frames: int, text: str, seed: int = 0, warmup: int = 1) -> dict[str, dict]:
    """``ttscli bench --batch``: ``frames`` frames for each of ``B`` rows at once, per size.

    Frames only (talker + code predictor, the part batching changes); rows are prefilled when
    they join, which the wall time includes. Random weights never stop, so rows run with
    ignore_eos."""
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
            batch = TalkerBatch(pipe.model.talker)
            t0 = time.perf_counter()
            batch.join([TalkerRow(prompt, cfg, KeyStream(seed + i)) for i in range(B)])
            steps, n = [], 0
            while batch.rows:
                ts = time.perf_counter()
                n += sum(1 for _, codes, _, _ in batch.step() if codes is not None)
                steps.append(time.perf_counter() - ts)
            wall = time.perf_counter() - t0
        step_ms = float(np.median(steps) * 1e3)
        out[f"batch {B}"] = {
            "step_ms_p50": step_ms,
            "frame_ms_per_row": step_ms / B,
            "frames_per_s": n / wall,
            "audio_s_per_s": n / 12.5 / wall,
            "total_s": wall,
        }
    base = out[f"batch {sizes[0]}"]["audio_s_per_s"]
    for v in out.values():
        v["speedup_vs_first"] = v["audio_s_per_s"] / base
    return out
