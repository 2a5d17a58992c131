"""The MLX decoder-only LM: Qwen3 blocks (q/k RMSNorm) and Llama blocks (none), pre-norm.

Names are those of a Hugging Face ``model.`` subtree (``embed_tokens``, ``layers.N.self_attn.
q_proj``, ``layers.N.input_layernorm``, ``layers.N.mlp.gate_proj``, ``norm``), so a family
subclasses :class:`DecoderLM` at the path its checkpoint uses and loads weights without
renaming.  Caches are passed in per call (one list per request; a batch shares positions).
"""
from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ttscli.lm.cache import KVCache, make_cache
from ttscli.lm.config import LMArgs
from ttscli.lm.rope import make_rope, module_inv_freq
from ttscli.nn.layers import MLP, Attention, RMSNorm, attention, on_cpu, swiglu


def create_causal_mask(length: int, offset: int = 0) -> Any:
    """Mask argument for the attention: None for one query, else causal.

    MLX aligns the string mask ``"causal"`` to the end of the keys, which is what a prefill on
    top of an existing cache needs.
    """
    return None if length == 1 else "causal"


def _fusable(*linears: nn.Module) -> bool:
    return all(type(m) is nn.Linear for m in linears)


def _concat(linears: list[nn.Linear]) -> tuple[mx.array, mx.array | None]:
    w = mx.concatenate([m.weight for m in linears], axis=0)
    b = mx.concatenate([m.bias for m in linears], axis=0) if "bias" in linears[0] else None
    return w, b


def _linear(x: mx.array, w: mx.array, b: mx.array | None) -> mx.array:
    return x @ w.T if b is None else mx.addmm(b, x, w.T)


def _one_query_attention(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: mx.array) -> mx.array:
    """One query per row over keys with a boolean ``mask [B or 1, 1, 1, S]`` (True = visible):
    a fixed-capacity cache's unwritten slots, or a batch's left padding.

    Written out as two GEMVs around a masked softmax rather than MLX's fused kernel: with an
    array mask that kernel takes a slow path on CUDA (a compiled talker step several times its
    unmasked cost; docs/benchmarks.md#qwen3-gpu-attention-kernel), while these few ops compile into three
    kernels.  GQA without repeating k/v: the query heads of one kv head form one block.
    """
    B, H, _, D = q.shape
    Hk = k.shape[1]
    w = (q * scale).reshape(B, Hk, H // Hk, D) @ k.swapaxes(-1, -2)       # [B, Hk, rep, S]
    w = mx.where(mask, w.astype(mx.float32), -mx.inf)       # mask [B or 1, 1, 1, S]
    p = mx.softmax(w, axis=-1).astype(v.dtype)
    return (p @ v).reshape(B, H, 1, D)


def _kernel_dtypes(*arrays: mx.array) -> bool:
    """The CUDA kernels of ours take these arrays' dtypes (ttscli.lm.cuda_kernels.DTYPES); where
    not, the step runs MLX's ops."""
    from ttscli.lm.cuda_kernels import supports

    return supports(*arrays)


def _row_mask(mask: Any) -> bool:
    """A one-query boolean mask per row, ``[B or 1, 1, 1, S]``, on a GPU: the case the masked
    one-query attention (ours or :func:`_one_query_attention`) takes over from MLX's kernel."""
    return (not on_cpu() and isinstance(mask, mx.array) and mask.dtype == mx.bool_ and mask.ndim == 4
            and mask.shape[1] == mask.shape[2] == 1)


class LMAttention(Attention):
    """:class:`Attention` whose q/k/v projections can run as one matmul (see :meth:`fuse`).

    The checkpoint's ``q_proj``/``k_proj``/``v_proj`` stay the parameters (names and files are
    unchanged); the fused matrix is a plain attribute built from them, used only while those
    parameter arrays are still the ones it was built from, so reloading weights can never run
    a stale copy.
    """

    # where MLX runs on CUDA, a fused step's q/k norms and RoPE are one kernel of ours
    # (ttscli.lm.cuda_kernels); None: wherever that is available, False: never
    fused_qk_rope: bool | None = None
    # with it, a masked one-query attention is our kernel too (None: with the above, False: never)
    fused_attention: bool | None = None

    def _qk_norm_rope(self):
        if self.fused_qk_rope is False:
            return None
        k = self.__dict__.get("_qk_kernel")
        if k is None:
            k = False
            from ttscli.lm import cuda_kernels

            rope = self.rope
            if cuda_kernels.available() and getattr(rope, "dims", None) == self.head_dim:
                inv = module_inv_freq(rope, self.head_dim)
                try:
                    k = cuda_kernels.QKNormRope(self.num_heads, self.num_kv_heads, self.head_dim, inv,
                                                self.q_norm if self.qk_norm else None,
                                                self.k_norm if self.qk_norm else None,
                                                self.q_norm.eps if self.qk_norm else 1e-6)
                except ValueError:
                    k = False
            object.__setattr__(self, "_qk_kernel", k)
        return k or None

    def _norm_weights(self) -> list[mx.array]:
        return [self.q_norm.weight, self.k_norm.weight] if self.qk_norm else []

    def fuse(self) -> None:
        parts = [self.q_proj, self.k_proj, self.v_proj]
        if _fusable(*parts):
            object.__setattr__(self, "_fused", (self.q_proj.weight, *_concat(parts)))

    def _fused_now(self):
        """The fused (source weight, W, b), or None when absent or stale (weights reloaded since)."""
        f = self.__dict__.get("_fused")
        return f if f is not None and f[0] is self.q_proj.weight else None

    def _qkv(self, x: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        f = self._fused_now()
        if f is None:
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        y = _linear(x, f[1], f[2])
        nq, nk = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return y[..., :nq], y[..., nq:nq + nk], y[..., nq + nk:]

    def __call__(self, x: mx.array, mask: Any = None, cache: Any = None) -> mx.array:
        if x.ndim == 2:
            return self._one_position(x, mask, cache)
        B, L, _ = x.shape
        q, k, v = self._qkv(x)
        q = q.reshape(B, L, self.num_heads, self.head_dim)
        k = k.reshape(B, L, self.num_kv_heads, self.head_dim)
        v = v.reshape(B, L, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q = self.q_norm(q)
            k = self.k_norm(k)
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
        offset = cache.offset if cache is not None else 0
        q = self.rope(q, offset)
        k = self.rope(k, offset)
        if cache is not None:
            k, v = cache.update_and_fetch(k, v)
        if L == 1 and _row_mask(mask):
            out = _one_query_attention(q, k, v, self.scale, mask)
        else:
            out = attention(q, k, v, self.scale, mask)
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1))

    def _one_position(self, x: mx.array, mask: Any, cache: Any) -> mx.array:
        """One position per row, ``x [B, hidden]`` -> ``[B, hidden]`` (see ``DecoderLM.flat_decode``).

        With a single position the heads-first layout ``[B, heads, 1, D]`` is the projection's
        own memory order, so q/k/v are reshaped straight into it and the output straight out of
        it: no transposes, and the 2-D projections need no flatten/unflatten around them."""
        B = x.shape[0]
        offset = cache.offset if cache is not None else 0
        f = self._fused_now()
        kernel = self._qk_norm_rope() if f is not None else None
        if kernel is not None and not _kernel_dtypes(x, f[1], *self._norm_weights()):
            kernel = None
        if kernel is not None:
            y = _linear(x, f[1], f[2])
            q, k = kernel(y, offset)
            nqk = (self.num_heads + self.num_kv_heads) * self.head_dim
            v = y[:, nqk:].reshape(B, self.num_kv_heads, 1, self.head_dim)
        else:
            q, k, v = self._qkv(x)
            q = q.reshape(B, self.num_heads, 1, self.head_dim)
            k = k.reshape(B, self.num_kv_heads, 1, self.head_dim)
            v = v.reshape(B, self.num_kv_heads, 1, self.head_dim)
            if self.qk_norm:
                q = self.q_norm(q)
                k = self.k_norm(k)
            q = self.rope(q, offset)
            k = self.rope(k, offset)
        if cache is not None:
            k, v = cache.update_and_fetch(k, v)
        if _row_mask(mask):
            if kernel is not None and self.fused_attention is not False and _kernel_dtypes(q, k, v):
                from ttscli.lm.cuda_kernels import one_query_attention

                out = one_query_attention(q, k, v, self.scale, mask)
            else:
                out = _one_query_attention(q, k, v, self.scale, mask)
        else:
            out = attention(q, k, v, self.scale, mask)
        return self.o_proj(out.reshape(B, -1))


class LMMLP(MLP):
    """:class:`MLP` whose gate/up projections can run as one matmul (same rules as LMAttention)."""

    def fuse(self) -> None:
        parts = [self.gate_proj, self.up_proj]
        if _fusable(*parts):
            object.__setattr__(self, "_fused", (self.gate_proj.weight, *_concat(parts)))

    def __call__(self, x: mx.array) -> mx.array:
        f = self.__dict__.get("_fused")
        if f is None or f[0] is not self.gate_proj.weight:
            return super().__call__(x)
        gu = _linear(x, f[1], f[2])
        n = gu.shape[-1] // 2
        g, u = gu[..., :n], gu[..., n:]
        return self.down_proj(swiglu(g, u) if on_cpu() else nn.silu(g) * u)


def fuse_projections(model: nn.Module) -> nn.Module:
    """Fuse q/k/v and gate/up of every shared-LM block under ``model`` (after its weights are
    loaded; dtype casts or reloads afterwards simply fall back to the separate projections until
    fused again).  One launch instead of three and two per layer: what a decode step on a GPU
    is bound by.  Not used on the CPU, where the separate GEMVs cost the same and the goldens
    were taken."""
    for _, m in model.named_modules():
        if isinstance(m, (LMAttention, LMMLP)):
            m.fuse()
    return model


class DecoderLayer(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x)); each branch times ``residual_scale`` where the
    stack has one (muP), the attention scale times the square of the RoPE's attention factor."""

    def __init__(self, a: LMArgs):
        super().__init__()
        self.self_attn = LMAttention(a.hidden_size, a.num_attention_heads, a.num_key_value_heads, a.head_dim,
                                   eps=a.rms_norm_eps, bias=a.attention_bias or a.qkv_bias, qk_norm=a.qk_norm,
                                   rope=make_rope(a.rope, a.head_dim), o_bias=a.attention_bias)
        self.self_attn.scale *= a.rope.attention_factor() ** 2
        self.mlp = LMMLP(a.hidden_size, a.intermediate_size, bias=a.mlp_bias)
        self.input_layernorm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        self.residual_scale = a.residual_scale

    def _branch(self, y: mx.array) -> mx.array:
        return y if self.residual_scale == 1.0 else y * self.residual_scale

    def __call__(self, x: mx.array, mask: Any = None, cache: Any = None) -> mx.array:
        h = x + self._branch(self.self_attn(self.input_layernorm(x), mask, cache))
        return h + self._branch(self.mlp(self.post_attention_layernorm(h)))


class DecoderLM(nn.Module):
    """Embedding (optional: codec LMs feed their own embeddings), decoder layers, final norm.

    ``flat_decode`` (class default None: on a GPU): a one-position call runs its layers on
    ``[B, hidden]`` rows instead of ``[B, 1, hidden]``. Same arithmetic; MLX multiplies a 3-D
    input by a 2-D weight as flatten, matmul, unflatten, so the flat rows drop those two
    nodes around each of a layer's four projections plus the attention's transposes, which a
    launch-bound GPU step pays for in host time. The CPU keeps the path its goldens were taken
    with.
    """

    flat_decode: bool | None = None
    # flat rows on MLX's CUDA backend: residual adds fused with the norms after them (None:
    # wherever available, False: never)
    fused_norms: bool | None = None

    def __init__(self, a: LMArgs, embed_tokens: bool = True):
        super().__init__()
        self.args = a
        if embed_tokens:
            if a.vocab_size is None:
                raise ValueError("embed_tokens needs vocab_size")
            self.embed_tokens = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = [DecoderLayer(a) for _ in range(a.num_hidden_layers)]
        self.norm = RMSNorm(a.hidden_size, a.rms_norm_eps)

    def __call__(self, inputs: mx.array | None = None, cache: list[Any] | None = None,
                 input_embeddings: mx.array | None = None, causal: bool = True) -> mx.array:
        """Post-norm hidden states ``[B, L, H]`` of token ids ``inputs [B, L]`` or of
        ``input_embeddings [B, L, H]``; each cache in ``cache`` (one per layer) grows by L.
        ``causal=False`` (no cache): every position sees every other, as a bidirectional
        encoder over one short window does."""
        h = input_embeddings if input_embeddings is not None else self.embed_tokens(inputs)
        if not causal:
            if cache:
                raise ValueError("a bidirectional call takes no cache")
            mask = None
        elif cache and hasattr(cache[0], "make_mask"):
            mask = cache[0].make_mask(h.shape[1])   # fixed-capacity caches mask unwritten slots
        else:
            mask = create_causal_mask(h.shape[1], cache[0].offset if cache else 0)
        flat = h.shape[1] == 1 and (not on_cpu() if self.flat_decode is None else self.flat_decode)
        if flat:
            h = h.reshape(h.shape[0], h.shape[-1])
            if self._fuse_norms() and _kernel_dtypes(h, *self._norm_weights()):
                return self._flat_fused(h, mask, cache)[:, None]
        for i, layer in enumerate(self.layers):
            h = layer(h, mask, cache[i] if cache else None)
        h = self.norm(h)
        return h[:, None] if flat else h

    def _fuse_norms(self) -> bool:
        if self.fused_norms is False or not self.layers or not _plain_layers(self):
            return False
        from ttscli.lm import cuda_kernels

        return cuda_kernels.available()

    def _norm_weights(self) -> list[mx.array]:
        return [self.norm.weight] + [m.weight for layer in self.layers
                                     for m in (layer.input_layernorm, layer.post_attention_layernorm)]

    def _flat_fused(self, h: mx.array, mask: Any, cache: list[Any] | None) -> mx.array:
        """The layers of :meth:`__call__` on rows, each residual add fused with the norm after it
        (the next sublayer's, then the final one): ``ttscli.lm.cuda_kernels.add_rms_norm``."""
        from ttscli.lm.cuda_kernels import add_rms_norm

        n = self.layers[0].input_layernorm(h)
        for i, layer in enumerate(self.layers):
            h, n = add_rms_norm(h, layer.self_attn(n, mask, cache[i] if cache else None),
                                layer.post_attention_layernorm)
            nxt = self.layers[i + 1].input_layernorm if i + 1 < len(self.layers) else self.norm
            h, n = add_rms_norm(h, layer.mlp(n), nxt)
        return n

    def make_cache(self) -> list[KVCache]:
        return make_cache(len(self.layers))


def _plain_layers(lm: DecoderLM, scaled: bool = False) -> bool:
    # the fused loop restates DecoderLayer.__call__: only for layers that use it unchanged, unscaled
    # (``scaled``: a residual scale allowed, for a restatement that applies it)
    return (scaled or lm.args.residual_scale == 1.0) and \
        all(type(layer).__call__ is DecoderLayer.__call__ for layer in lm.layers) and \
        type(lm.norm) is RMSNorm and all(type(m) is RMSNorm for layer in lm.layers
                                          for m in (layer.input_layernorm, layer.post_attention_layernorm))
