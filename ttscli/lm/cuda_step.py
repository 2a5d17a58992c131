"""One decode step of a shared-LM stack and its head as one CUDA kernel (MLX CUDA only).

A talker step of a Qwen3-TTS frame is 313 graph nodes of MLX, whose host time on a GPU is many
times its weight reads (docs/benchmarks.md#qwen3-gpu-step-kernel). Here it is one node: a persistent
kernel whose blocks meet at grid barriers (:data:`ttscli.lm.cuda_kernels.GRID_HELPERS`, shared with
Qwen3-TTS's code-predictor frame) for one position over the KV cache. The attention over the
cache is split across blocks (each block a slice of the positions of one query head, online
softmax per warp, merged per block, then the slices merged per head), so a long cache is read
by every multiprocessor at once.

Every input is one array, so the host enqueues a handful of arrays whatever the depth: the
layers' weights stacked per kind, and the caches of all layers as one array that the kernel
copies forward and extends by this position (:class:`LMStepKernel`). Checked on a GPU by the
``cuda``-marked tests of tests/lm/test_cuda_step.py (against MLX's compiled step and float32 on the CPU).
"""
from __future__ import annotations

import functools

import mlx.core as mx
import numpy as np

from ttscli.lm.cuda_kernels import GRID_HELPERS, THREADS, multiprocessors

_BODY = r"""
    constexpr int WARPS = THREADS / 32;
    constexpr int NQKV = (H + 2 * HK) * D;
    constexpr int HD = H * D;
    constexpr int HALF = D / 2;
    constexpr int PP = (HALF + 31) / 32;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int gw = blockIdx.x * WARPS + warp;
    const int NW = gridDim.x * WARPS;
    const float eps = params[0], scale = params[1], rscale = params[2];
    const int pos = pos_in[0];
    const int CAP = cache_shape[4];
    const size_t PLANE = (size_t)B * HK * CAP * D;          // one layer's keys (or values)
    const int NSPLIT = gridDim.x / (B * H) > 0 ? gridDim.x / (B * H) : 1;

    unsigned int* bar = reinterpret_cast<unsigned int*>(scratch);
    float* xs = scratch + 32;
    float* qkv = xs + B * HC;
    float* att = qkv + B * NQKV;
    float* act = att + B * HD;
    float* part = act + B * I;                  // [B * H, NSPLIT, D + 2]: m, l, acc[D]
    unsigned int target = 0;

    __shared__ float sx[B * HC];
    __shared__ float red[WARPS];
    __shared__ float wm[WARPS], wl[WARPS];
    __shared__ float wacc[WARPS][D];

    for (int i = t; i < B * HC; i += THREADS) xs[i] = x[i];   // every block writes the same values
    {   // the cache's positions before this one, into the output cache (this one is written below)
        const size_t rows = (size_t)L * 2 * B * HK * CAP, D4 = D / 4;
        const float4* src = reinterpret_cast<const float4*>(cache);
        float4* dst = reinterpret_cast<float4*>(cache_out);
        for (size_t i = (size_t)blockIdx.x * THREADS + t; i < rows * D4; i += (size_t)gridDim.x * THREADS)
            if ((int)((i / D4) % CAP) < pos) dst[i] = src[i];
    }
    __threadfence();
    __syncthreads();

    for (int l = 0; l < L; ++l) {
        block_rms_norm<HC, B, WARPS>(xs, ln1 + (size_t)l * HC, eps, sx, red);
        for (int r = gw; r < NQKV; r += NW) {
            float acc[B];
            row_dots<HC, B, false>(wqkv + ((size_t)l * NQKV + r) * HC, sx, acc);
            if (lane == 0) for (int b = 0; b < B; ++b) qkv[b * NQKV + r] = acc[b] + bqkv[(size_t)l * NQKV + r];
        }
        grid_sync(bar, target);

        // ---- attention, split: block -> (row, head, slice of positions 0..pos)
        for (int task = blockIdx.x; task < B * H * NSPLIT; task += gridDim.x) {
            const int bh = task % (B * H), sp = task / (B * H);
            const int b = bh / H, h = bh % H, kvh = h / (H / HK);
            const float* qr = qkv + b * NQKV + h * D;
            const float* kr = qkv + b * NQKV + HD + kvh * D;
            const float* vr = qkv + b * NQKV + HD + HK * D + kvh * D;
            float qa[PP], qb[PP], ka[PP], kb[PP], va[PP], vb[PP];
            float sq = 0.0f, sk = 0.0f;
            for (int e = 0; e < PP; ++e) {
                const int i = lane + 32 * e;
                const bool on = i < HALF;
                qa[e] = on ? __ldcg(qr + i) : 0.0f;  qb[e] = on ? __ldcg(qr + i + HALF) : 0.0f;
                ka[e] = on ? __ldcg(kr + i) : 0.0f;  kb[e] = on ? __ldcg(kr + i + HALF) : 0.0f;
                va[e] = on ? __ldcg(vr + i) : 0.0f;  vb[e] = on ? __ldcg(vr + i + HALF) : 0.0f;
                sq += qa[e] * qa[e] + qb[e] * qb[e];
                sk += ka[e] * ka[e] + kb[e] * kb[e];
            }
            for (int o = 16; o > 0; o >>= 1) {
                sq += __shfl_xor_sync(0xffffffff, sq, o);
                sk += __shfl_xor_sync(0xffffffff, sk, o);
            }
            const float rq = QKNORM ? rsqrtf(sq / D + eps) : 1.0f, rk = QKNORM ? rsqrtf(sk / D + eps) : 1.0f;
            for (int e = 0; e < PP; ++e) {
                const int i = lane + 32 * e;
                if (i >= HALF) continue;
                const float q1 = QKNORM ? qn[l * D + i] * (qa[e] * rq) : qa[e];
                const float q2 = QKNORM ? qn[l * D + i + HALF] * (qb[e] * rq) : qb[e];
                const float k1 = QKNORM ? kn[l * D + i] * (ka[e] * rk) : ka[e];
                const float k2 = QKNORM ? kn[l * D + i + HALF] * (kb[e] * rk) : kb[e];
                const float ang = static_cast<float>(pos) * inv_freq[i];
                const float c = cosf(ang), s = sinf(ang);
                qa[e] = (q1 * c - q2 * s) * scale;  qb[e] = (q2 * c + q1 * s) * scale;
                ka[e] = k1 * c - k2 * s;            kb[e] = k2 * c + k1 * s;
            }
            if (sp == 0 && h % (H / HK) == 0 && warp == 0) {      // the new position, into the output cache
                float* ko = cache_out + 2 * l * PLANE + (((size_t)b * HK + kvh) * CAP + pos) * D;
                float* vo = ko + PLANE;
                for (int e = 0; e < PP; ++e) {
                    const int i = lane + 32 * e;
                    if (i >= HALF) continue;
                    ko[i] = ka[e];  ko[i + HALF] = kb[e];
                    vo[i] = va[e];  vo[i + HALF] = vb[e];
                }
            }
            const float* kc = cache + 2 * l * PLANE + ((size_t)b * HK + kvh) * (size_t)CAP * D;
            const float* vc = kc + PLANE;
            const int chunk = (pos + 1 + NSPLIT - 1) / NSPLIT;
            const int s0 = sp * chunk, s1 = min(pos + 1, s0 + chunk);
            float m = -INFINITY, den = 0.0f, aa[PP], ab[PP];
            for (int e = 0; e < PP; ++e) { aa[e] = 0.0f; ab[e] = 0.0f; }
            for (int s = s0 + warp; s < s1; s += WARPS) {
                float dot = 0.0f, xa[PP], xb[PP];
                for (int e = 0; e < PP; ++e) {
                    const int i = lane + 32 * e;
                    const bool on = i < HALF;
                    const float k1 = s == pos ? ka[e] : (on ? kc[(size_t)s * D + i] : 0.0f);
                    const float k2 = s == pos ? kb[e] : (on ? kc[(size_t)s * D + i + HALF] : 0.0f);
                    xa[e] = s == pos ? va[e] : (on ? vc[(size_t)s * D + i] : 0.0f);
                    xb[e] = s == pos ? vb[e] : (on ? vc[(size_t)s * D + i + HALF] : 0.0f);
                    dot += qa[e] * k1 + qb[e] * k2;
                }
                for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffff, dot, o);
                const float mn = fmaxf(m, dot);
                const float corr = expf(m - mn), w = expf(dot - mn);
                den = den * corr + w;
                for (int e = 0; e < PP; ++e) { aa[e] = aa[e] * corr + w * xa[e]; ab[e] = ab[e] * corr + w * xb[e]; }
                m = mn;
            }
            if (lane == 0) { wm[warp] = m; wl[warp] = den; }
            for (int e = 0; e < PP; ++e) {
                const int i = lane + 32 * e;
                if (i < HALF) { wacc[warp][i] = aa[e]; wacc[warp][i + HALF] = ab[e]; }
            }
            __syncthreads();
            if (warp == 0) {            // the block's slice: warps merged
                float mm = -INFINITY;
                for (int w = 0; w < WARPS; ++w) mm = fmaxf(mm, wm[w]);
                float* pr = part + ((size_t)bh * NSPLIT + sp) * (D + 2);
                float tot = 0.0f;
                for (int w = 0; w < WARPS; ++w) tot += wm[w] == -INFINITY ? 0.0f : wl[w] * expf(wm[w] - mm);
                for (int d = lane; d < D; d += 32) {
                    float sum = 0.0f;
                    for (int w = 0; w < WARPS; ++w) sum += wm[w] == -INFINITY ? 0.0f : wacc[w][d] * expf(wm[w] - mm);
                    pr[2 + d] = sum;
                }
                if (lane == 0) { pr[0] = mm; pr[1] = tot; }
            }
            __syncthreads();
        }
        grid_sync(bar, target);
        // ---- the slices of each (row, head) merged
        for (int bh = gw; bh < B * H; bh += NW) {
            const float* pr = part + (size_t)bh * NSPLIT * (D + 2);
            float mm = -INFINITY;
            for (int sp = 0; sp < NSPLIT; ++sp) mm = fmaxf(mm, __ldcg(pr + sp * (D + 2)));
            float tot = 0.0f;
            for (int sp = 0; sp < NSPLIT; ++sp) {
                const float ms = __ldcg(pr + sp * (D + 2));
                tot += ms == -INFINITY ? 0.0f : __ldcg(pr + sp * (D + 2) + 1) * expf(ms - mm);
            }
            const int b = bh / H, h = bh % H;
            for (int d = lane; d < D; d += 32) {
                float sum = 0.0f;
                for (int sp = 0; sp < NSPLIT; ++sp) {
                    const float ms = __ldcg(pr + sp * (D + 2));
                    sum += ms == -INFINITY ? 0.0f : __ldcg(pr + sp * (D + 2) + 2 + d) * expf(ms - mm);
                }
                att[b * HD + h * D + d] = sum / tot;
            }
        }
        grid_sync(bar, target);

        add_rows<HD, HC, B, WARPS>(wo + (size_t)l * HC * HD, att, xs, rscale);
        grid_sync(bar, target);

        block_rms_norm<HC, B, WARPS>(xs, ln2 + (size_t)l * HC, eps, sx, red);
        for (int r = gw; r < I; r += NW) {
            float g[B], u[B];
            row_dots2<HC, B>(wgu + ((size_t)l * 2 * I + r) * HC, wgu + ((size_t)l * 2 * I + I + r) * HC, sx, g, u);
            if (lane == 0)
                for (int b = 0; b < B; ++b) act[b * I + r] = (g[b] * (1.0f / (1.0f + expf(-g[b])))) * u[b];
        }
        grid_sync(bar, target);

        add_rows<I, HC, B, WARPS>(wd + (size_t)l * HC * I, act, xs, rscale);
        grid_sync(bar, target);
    }
    block_rms_norm<HC, B, WARPS>(xs, fnorm, eps, sx, red);
    if (blockIdx.x == 0) for (int i = t; i < B * HC; i += THREADS) hidden[i] = sx[i];
    for (int r = gw; r < V; r += NW) {
        float acc[B];
        row_dots<HC, B, false>(head + (size_t)r * HC, sx, acc);
        if (lane == 0) for (int b = 0; b < B; ++b) logits[b * V + r] = acc[b];
    }
"""


MAX_ROWS = 4


def unsupported(lm, head, rows: int) -> str | None:
    """Why :class:`LMStepKernel` cannot run this stack + head for ``rows`` rows (None: it can)."""
    from ttscli.lm import cuda_kernels
    from ttscli.lm.model import DecoderLayer, _plain_layers

    if not cuda_kernels.available():
        return "not on MLX's CUDA backend"
    a = lm.args
    if rows > MAX_ROWS or 4 * rows * a.hidden_size > 32 * 1024:
        return f"{rows} rows: the kernel takes up to {MAX_ROWS}"
    if a.attention_bias or a.mlp_bias or "bias" in head:
        return "biases other than q/k/v's"
    if not _plain_layers(lm, scaled=True) or not all(type(lyr) is DecoderLayer for lyr in lm.layers):
        return "layers other than the shared DecoderLayer"
    if a.head_dim % 2 or a.num_attention_heads % a.num_key_value_heads:
        return "odd head_dim, or query heads not a multiple of key/value heads"
    if any(n % 4 for n in (a.hidden_size, a.intermediate_size, a.num_attention_heads * a.head_dim)):
        return "widths must be multiples of 4"
    if not cuda_kernels.all_float32(*lm.layers, lm.norm, head):
        return "float32 weights only"
    rope = lm.layers[0].self_attn.rope
    if getattr(rope, "dims", None) != a.head_dim or getattr(rope, "traditional", False):
        return "RoPE over part of the head, or interleaved"
    return None


KINDS = ("ln1", "wqkv", "bqkv", "qn", "kn", "wo", "ln2", "wgu", "wd")


@functools.lru_cache(maxsize=1)
def _kernel():
    return mx.fast.cuda_kernel(
        name="ttscli_lm_step",
        input_names=["x", "pos_in", *KINDS, "cache", "fnorm", "head", "inv_freq", "params"],
        output_names=["logits", "hidden", "cache_out", "scratch"],
        source=_BODY, header=GRID_HELPERS)


class LMStepKernel:
    """One decode step of a :class:`ttscli.lm.model.DecoderLM` and its head (an ``nn.Linear``
    without bias): ``(x [B, H], caches) -> (logits [B, V], post-norm
    hidden [B, H])``, the caches (one :class:`ttscli.lm.cache.KVCache` per layer, room reserved
    for this position) advanced by one.

    The layers' weights are stacked per kind once (a second device copy of the stack). The
    caches live in one array ``[layers, 2, B, kv_heads, capacity, head_dim]`` that each step
    reads and writes anew: the kernel copies the positions before this one (~50 MB a step for a
    0.6B talker at 200 positions, a small share of a step's weight reads) and adds this one. Each KVCache holds
    views into it, the first one the array itself; a cache that is not those views any more (new
    caches, grown storage) is stacked again.
    """

    def __init__(self, lm, head):
        from ttscli.lm.model import _concat
        from ttscli.lm.rope import module_inv_freq

        self.lm, self.head = lm, head
        a = lm.args
        layers = lm.layers
        D = a.head_dim
        ones = mx.ones((D,), mx.float32)
        # q/k/v end to end, and their biases (Qwen2's; zeros for a stack without them)
        qkv = [_concat([lyr.self_attn.q_proj, lyr.self_attn.k_proj, lyr.self_attn.v_proj]) for lyr in layers]
        self.weights = [
            mx.stack([lyr.input_layernorm.weight for lyr in layers]),
            mx.stack([w for w, _ in qkv]),
            mx.stack([b if b is not None else mx.zeros((w.shape[0],), mx.float32) for w, b in qkv]),
            mx.stack([lyr.self_attn.q_norm.weight if a.qk_norm else ones for lyr in layers]),
            mx.stack([lyr.self_attn.k_norm.weight if a.qk_norm else ones for lyr in layers]),
            mx.stack([lyr.self_attn.o_proj.weight for lyr in layers]),
            mx.stack([lyr.post_attention_layernorm.weight for lyr in layers]),
            mx.stack([_concat([lyr.mlp.gate_proj, lyr.mlp.up_proj])[0] for lyr in layers]),
            mx.stack([lyr.mlp.down_proj.weight for lyr in layers])]
        self.tail = [lm.norm.weight, head.weight,
                     mx.array(np.asarray(module_inv_freq(layers[0].self_attn.rope, D), np.float32).reshape(-1)),
                     mx.array([a.rms_norm_eps, layers[0].self_attn.scale, a.residual_scale], mx.float32)]
        mx.eval(self.weights, self.tail)
        self.blocks = min(128, multiprocessors())

    @staticmethod
    def _stacked(caches: list) -> mx.array:
        """The stacked cache the last step left with these caches (held by the first one, so it
        goes when they go), or a new stack of what they hold now."""
        held = getattr(caches[0], "_stacked_step", None)
        if held is not None and len(held[1]) == len(caches) and all(
                c.keys is k and c.values is v for c, (k, v) in zip(caches, held[1])):
            return held[0]
        return mx.stack([mx.stack([c.keys, c.values]) for c in caches]).astype(mx.float32)

    def __call__(self, x: mx.array, caches: list) -> tuple[mx.array, mx.array]:
        a = self.lm.args
        B, HC = x.shape
        H, HK, D, inter = a.num_attention_heads, a.num_key_value_heads, a.head_dim, a.intermediate_size
        V = self.head.weight.shape[0]
        L = len(self.lm.layers)
        pos = caches[0].offset
        cache = self._stacked(caches)
        nsplit = max(1, self.blocks // (B * H))
        scratch = 32 + B * (HC + (H + 2 * HK) * D + H * D + inter) + B * H * nsplit * (D + 2)
        logits, hidden, cache, _ = _kernel()(
            inputs=[x.astype(mx.float32), mx.array([pos], mx.int32), *self.weights, cache, *self.tail],
            template=[("B", B), ("L", L), ("HC", HC), ("H", H), ("HK", HK), ("D", D), ("I", inter),
                      ("V", V), ("QKNORM", bool(a.qk_norm)), ("THREADS", THREADS)],
            grid=(self.blocks * THREADS, 1, 1), threadgroup=(THREADS, 1, 1),
            output_shapes=[(B, V), (B, HC), cache.shape, (scratch,)],
            output_dtypes=[mx.float32] * 4, init_value=0)
        for i, c in enumerate(caches):
            c.keys, c.values = cache[i, 0], cache[i, 1]
            c.offset += 1
        caches[0]._stacked_step = (cache, [(c.keys, c.values) for c in caches])
        return logits, hidden
