"""VoxCPM2's patch loop, as upstream's ``VoxCPM2Model._inference``: prefill both LMs over the
prompt, then per patch draw the latent with the DiT, embed it back, decide stop, step the LMs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import mlx.core as mx
import numpy as np

from ttscli.models.voxcpm2.model import VoxCPM2


@dataclass
class Prompt:
    """``tokens``, ``text_mask``, ``feat_mask [1, T]`` and ``feats [1, T, P, D]``: each position
    is a text token (its latent zeros) or a latent patch (its token 0)."""

    tokens: mx.array
    text_mask: mx.array
    feats: mx.array
    feat_mask: mx.array


@dataclass
class Prefill:
    lm_hidden: mx.array          # [1, H] after FSQ where the last position is audio
    residual_hidden: mx.array    # [1, H]
    base_hidden: mx.array        # [1, T, H] post-norm, before FSQ (what the goldens compare)
    residual_all: mx.array       # [1, T, H]
    caches: tuple


def prompt_patch_embeddings(model: VoxCPM2, p: Prompt) -> mx.array:
    """``model.embed_patches(p.feats)`` at the prompt's latent positions, zeros (of the dtype it
    returns) at its text ones. The prefill multiplies the text positions' embeddings by a zero
    mask, and the encoder reads each patch alone, so this is the same input for the encoder's
    work on the reference audio only (none at all without one; upstream encodes every position)."""
    B, T = p.tokens.shape
    where = np.flatnonzero(np.asarray(p.feat_mask).reshape(B, T).any(axis=0))
    if where.size == T:
        return model.embed_patches(p.feats)
    proj = model.enc_to_lm_proj.weight
    out = mx.zeros((B, T, proj.shape[0]), mx.result_type(p.feats, proj))
    if where.size:
        at = mx.array(where.astype(np.int32))
        out[:, at] = model.embed_patches(p.feats[:, at])
    return out


def stacks(model: VoxCPM2) -> tuple:
    """The base and residual LMs as the patch loop calls them (``(input_embeddings=, cache=)``
    -> every position's post-norm hidden; ``make_cache()``): the MLX stacks, or their
    onnxruntime graphs or Core ML packages when attached (onnx_lm.attach, coreml_export.attach)."""
    return model.converted_stacks or (model.base_lm, model.residual_lm)


def prefill(model: VoxCPM2, p: Prompt) -> Prefill:
    base_lm, residual_lm = stacks(model)
    text_embed = model.base_lm.embed_tokens(p.tokens) * model.args.scale_emb
    feat_embed = prompt_patch_embeddings(model, p)
    tm, fm = p.text_mask[..., None], p.feat_mask[..., None]
    base_cache, res_cache = base_lm.make_cache(), residual_lm.make_cache()
    base = base_lm(input_embeddings=tm * text_embed + fm * feat_embed, cache=base_cache)
    enc = model.fsq_layer(base) * fm + base * tm
    res = residual_lm(input_embeddings=model.fusion_concat_proj(mx.concatenate([enc, fm * feat_embed], -1)),
                      cache=res_cache)
    return Prefill(enc[:, -1], res[:, -1], base, res, (base_cache, res_cache))


def step(model: VoxCPM2, patch: mx.array, caches: tuple) -> tuple[mx.array, mx.array]:
    """Both LMs one position on from a drawn ``patch [1, P, D]``: (LM hidden after FSQ, residual
    hidden), each ``[1, H]``; ``caches`` (base, residual) advance in place."""
    base_lm, residual_lm = stacks(model)
    embed = model.embed_patches(patch[:, None])
    lm_hidden = model.fsq_layer(base_lm(input_embeddings=embed, cache=caches[0])[:, -1])
    fused = model.fusion_concat_proj(mx.concatenate([lm_hidden, embed[:, 0]], -1))
    return lm_hidden, residual_lm(input_embeddings=fused[:, None], cache=caches[1])[:, -1]


def patches(model: VoxCPM2, p: Prompt, noise: Callable[[int], mx.array], *, steps: int, cfg_value: float,
            min_len: int = 2, max_len: int = 2000, pre: Prefill | None = None) -> Iterator[tuple[mx.array, mx.array]]:
    """Yields (patch ``[1, P, D]``, stop logits ``[1, 2]``) per patch; the patch on which the
    stop head says stop (past ``min_len``) is the last.  ``noise(i)`` is patch i's starting
    noise ``[1, P, D]``.  Runs to ``max_len`` patches at most: the caller decides whether
    reaching it is an error.  ``pre``: the prompt's prefill when the caller ran it (to time it
    apart); its caches are advanced in place."""
    pre = pre or prefill(model, p)
    lm_hidden, res_hidden = pre.lm_hidden, pre.residual_hidden
    cond = p.feats[:, -1]
    for i in range(max_len):
        patch = model.feat_decoder(model.dit_condition(lm_hidden, res_hidden), cond, noise(i), steps, cfg_value)
        stop = model.stop(lm_hidden)
        mx.eval(patch, stop)
        yield patch, stop
        if i > min_len and int(stop[0].argmax()) == 1:
            return
        cond = patch
        lm_hidden, res_hidden = step(model, patch, pre.caches)
