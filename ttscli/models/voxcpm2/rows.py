"""VoxCPM2 rows (the :class:`~ttscli.models.base.RowGenerator` of ``VoxCPM2Pipeline.rows()``).

:func:`ttscli.models.voxcpm2.generate.patches` for many requests at once. Each request is
prefilled alone on its own prompt (plain, voice design, clone or continuation: prompts of any
length), then its base-LM and residual-LM caches join two :class:`ttscli.lm.batch.RowBatch` es,
left-padded so every row keeps its own positions. Per patch, for every row at once: the
diffusion head (LocDiT with CFG, over the rows that take the same number of steps, each row
starting from its own seeded noise and guided at its own ``cfg_value``), the stop head, the
patch encoder, one base-LM and one residual-LM forward. Each row then has its own stop, patch
limit and AudioVAE stream, fed the same groups of patches as ``VoxCPM2Pipeline.generate``, so its
samples are those of the same request alone up to the rounding of batched matmuls.

The AudioVAE stays per row: each row's causal stream has its own carried state, is fed at its
own times (a streamed row a chunk at a time, a whole one once at its end), and continuation
rows start it on their prompt's patches.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from ttscli.errors import GenerationError
from ttscli.lm.batch import RowAudio, RowBatch
from ttscli.lm.sample import KeyStream
from ttscli.models.base import Request, Row

from .generate import prefill
from .pipeline import Plan, decode_group, limit_message


class PatchDecoder:
    """One row's AudioVAE stream: patches in, samples out in the groups ``generate`` decodes
    (a streamed request's ``first_chunk_frames`` then ``chunk_frames`` patches; any other
    request's patches all at once when it ends)."""

    def __init__(self, pipe, request: Request, voice):
        self.pipe = pipe
        self.request = request
        self.stream = pipe.decode_stream(voice)
        self.pending: list[mx.array] = []
        self.decoded = 0

    def push(self, patch: mx.array) -> list[np.ndarray]:
        self.pending.append(patch)
        if self.request.stream and len(self.pending) >= decode_group(self.request, self.decoded):
            return [self._decode()]
        return []

    def flush(self) -> np.ndarray | None:
        return self._decode() if self.pending else None

    def _decode(self) -> np.ndarray:
        audio = self.pipe.decode(self.stream, self.pending)
        self.pending, self.decoded = [], self.decoded + 1
        return audio


@dataclass(eq=False)
class VoxRow:
    """One request's side of the batch: its plan (the prompt until it joins), key stream,
    audio, and the LM states its next patch is drawn from."""

    plan: Plan
    keys: KeyStream
    audio: RowAudio
    ignore_eos: bool
    lm_hidden: mx.array | None = None         # [1, H] after FSQ
    res_hidden: mx.array | None = None        # [1, H]
    cond: mx.array | None = None              # [1, P, D]: the previous patch (or the prompt's last)
    patches: int = 0
    joined: bool = False


class VoxCPM2Rows:
    def __init__(self, pipe):
        self.pipe = pipe
        self.model = pipe.model
        self.base = RowBatch(pipe.model.base_lm)
        self.residual = RowBatch(pipe.model.residual_lm)
        self.members: list[VoxRow] = []       # in batch order

    # ---- the row protocol
    def start(self, request: Request) -> Row:
        p = self.pipe
        voice = p.voice_prompt(request)
        plan = p.plan(request, voice)
        state = VoxRow(plan, KeyStream(request.seed), RowAudio(PatchDecoder(p, request, voice), request.stream),
                       request.ignore_eos)
        return Row(request, state)

    def step(self, rows: Sequence[Row]) -> None:
        by_state = {id(row.state): row for row in rows}
        self._join([row.state for row in rows if not row.state.joined])
        members = list(self.members)
        t = time.perf_counter()
        lm_hidden = mx.concatenate([m.lm_hidden for m in members], 0)
        res_hidden = mx.concatenate([m.res_hidden for m in members], 0)
        patches = self._patches(members, self.model.dit_condition(lm_hidden, res_hidden))
        stop = self.model.stop(lm_hidden).argmax(-1)
        mx.eval(patches, stop)
        stop = np.array(stop)
        going = []
        for i, m in enumerate(members):
            row = by_state[id(m)]
            try:
                self._patch(m, row, patches[i:i + 1], int(stop[i]) == 1)
            except Exception as e:  # noqa: BLE001 - the row fails alone; the engine hands it to its request
                row.done, row.error = True, e
            if not row.done:
                going.append(i)
        self._keep(going)
        if going:
            self._advance(patches[mx.array(going, dtype=mx.int32)] if len(going) < len(members) else patches)
        self.pipe.stats.frame_s.append(time.perf_counter() - t)

    def take(self, row: Row) -> np.ndarray | None:
        return row.state.audio.take(row.done)

    def drop(self, row: Row) -> None:
        m = row.state
        if m in self.members:
            self._keep([i for i, x in enumerate(self.members) if x is not m])
        m.lm_hidden = m.res_hidden = m.cond = None

    # ---- the batch
    def _join(self, new: list[VoxRow]) -> None:
        """Prefill each row's prompt alone, as the pipeline does, and add its caches to the batch."""
        for m in new:
            t = time.perf_counter()
            p = m.plan.prompt
            pre = prefill(self.model, p)
            base_cache, res_cache = pre.caches
            mx.eval(pre.lm_hidden, pre.residual_hidden, [c.state for c in base_cache + res_cache])
            self.base.join([base_cache])
            self.residual.join([res_cache])
            m.lm_hidden, m.res_hidden, m.cond = pre.lm_hidden, pre.residual_hidden, p.feats[:, -1]
            m.joined = True
            self.members.append(m)
            self.pipe.stats.prefill_tokens += p.tokens.shape[1]
            self.pipe.stats.prefill_s += time.perf_counter() - t

    def _keep(self, idx: list[int]) -> None:
        """Only the members at ``idx`` (in order) stay in the batch."""
        if len(idx) == len(self.members):
            return
        self.base.keep(idx)
        self.residual.keep(idx)
        self.members = [self.members[i] for i in idx]

    def _patches(self, members: list[VoxRow], mu: mx.array) -> mx.array:
        """Every row's next patch ``[B, P, D]``: its own noise and guidance, the diffusion head
        over the rows that integrate with the same number of steps at once."""
        noise = mx.concatenate([self.pipe.noise(m.keys) for m in members], 0)
        cond = mx.concatenate([m.cond for m in members], 0)
        cfg = mx.array([m.plan.cfg for m in members], mx.float32)
        groups: dict[int, list[int]] = {}
        for i, m in enumerate(members):
            groups.setdefault(m.plan.steps, []).append(i)
        if len(groups) == 1:
            return self.model.feat_decoder(mu, cond, noise, members[0].plan.steps, cfg)
        out = [None] * len(members)
        for steps, idx in groups.items():
            take = mx.array(idx, dtype=mx.int32)
            got = self.model.feat_decoder(mu[take], cond[take], noise[take], steps, cfg[take])
            for j, i in enumerate(idx):
                out[i] = got[j:j + 1]
        return mx.concatenate(out, 0)

    def _patch(self, m: VoxRow, row: Row, patch: mx.array, says_stop: bool) -> None:
        """This step's patch of one row, decided as ``VoxCPM2Pipeline.latents`` decides it."""
        i = m.patches
        m.patches += 1
        m.cond = patch
        self.pipe.stats.frames += 1
        m.audio.push(patch)
        if not m.ignore_eos and i > m.plan.min_len and says_stop:
            m.audio.flush()
            row.done = True
        elif m.patches >= m.plan.limit:
            if not m.ignore_eos:
                raise GenerationError(limit_message(m.plan.limit))
            m.audio.flush()
            row.done = True

    def _advance(self, patches: mx.array) -> None:
        """Both LMs one position on the rows' new patches ``[B, P, D]`` (the rows still going)."""
        model = self.model
        embed = model.embed_patches(patches[:, None])
        lm_hidden = model.fsq_layer(self.base.step(embed))
        fused = model.fusion_concat_proj(mx.concatenate([lm_hidden, embed[:, 0]], -1))
        res_hidden = self.residual.step(fused[:, None])
        mx.eval(lm_hidden, res_hidden)
        for i, m in enumerate(self.members):
            m.lm_hidden, m.res_hidden = lm_hidden[i:i + 1], res_hidden[i:i + 1]


def bench_batch(pipe, sizes: list[int], frames: int, text: str, seed: int = 0, warmup: int = 1) -> dict[str, dict]:
    """``ttscli bench voxcpm2 --batch``: ``frames`` patches for each of ``B`` rows at once, per
    size, through :class:`VoxCPM2Rows` (both LMs, the diffusion head and each row's AudioVAE
    decode: the whole of a batched patch). Rows are prefilled when they join, which the wall
    time includes. Random weights never stop, so rows run with ignore_eos."""
    from ttscli.batching import bench_rows

    return bench_rows(pipe, sizes, frames, text, seed, warmup, frame_seconds=pipe.patch_samples / pipe.ref_sample_rate)
