"""A code predictor's whole frame as one CUDA kernel (``mx.fast.cuda_kernel``, MLX CUDA only).

On a GPU a Qwen3-TTS frame is bound by MLX's host time per graph node, not by the GPU: the
host takes longer to enqueue the compiled code-predictor frame (~1,100 nodes: 16 positions x
5 layers, 15 heads, 15 draws) than the GPU needs to read its float32 weights
(docs/benchmarks.md#qwen3-gpu-frame-kernel). Here the frame is one node: a persistent kernel whose
blocks walk the 16 positions together, meeting at a grid barrier wherever a step needs the
whole of the previous one (after the q/k/v, attention, output, gate/up and down projections of
each layer, and after each head). The KV cache of the frame lives in the kernel's scratch.

Per position, as :meth:`ttscli.models.qwen3_tts.code_predictor.CodePredictor.frame_with` does
it: input RMSNorm, q/k/v, per-head q/k RMSNorm and RoPE, causal attention over the frame's
positions, output projection and residual, RMSNorm, SwiGLU, residual; after the last layer the
final norm and, from position 1 on, head ``p - 1``, the draw of code ``p`` and its embedding
(the next position's input; the frame's summed embedding adds them in the loop's order).
The draw is :func:`ttscli.lm.sample.sample_with`'s: NaN as -inf, greedy argmax, or temperature,
top-k (the k-th largest value kept with its ties) and the Gumbel-max draw with the noise MLX
draws for the same key, falling back to the argmax when nothing finite is left. Sampling
with top-p, min-p or a repetition penalty is not done here (:func:`unsupported` says why
and the MLX frame runs).

Every block must be resident at once for the barrier: one block per multiprocessor, at most
128, the count read from the CUDA driver. Float32 weights only (the GPU default); they are
stacked per kind on first use, a second copy of the predictor (~0.6 GB at 0.6B) on the device.
A predictor narrower than its talker (1.7B) has its input projection in the kernel (``PROJ``),
not yet checked on a GPU, so it keeps the MLX frame for now.

Checked on a GPU by the ``cuda``-marked tests of tests/qwen3_tts/test_cuda_frame.py: codes equal to the
MLX frame's, the last head's logits within 1e-4 of float32 on the CPU (relative to their scale)
(docs/benchmarks.md#qwen3-gpu-frame-kernel).

The kernel reads this family's code predictor as it is laid out (per-codebook embedding tables
and heads, the optional ``small_to_mtp_projection``, q/k norms), so it lives here; the device
helpers it shares with the LM's one-position step (grid barrier, row dot products, norms, the
top-k draw) are :data:`ttscli.lm.cuda_kernels.GRID_HELPERS`.
"""
from __future__ import annotations

import functools

import mlx.core as mx
import numpy as np

from ttscli.lm.cuda_kernels import GRID_HELPERS, THREADS, multiprocessors

MAX_ROWS = 4
# TTSCLI_CUDA_FRAME=off: the MLX frame everywhere (e.g. a GPU shared with persistent kernels of
# other processes, where this kernel's blocks might not all be resident at once)
ENV = "TTSCLI_CUDA_FRAME"

_SOURCE = r"""
    constexpr int WARPS = THREADS / 32;
    constexpr int NQKV = (H + 2 * HK) * D;
    constexpr int HD = H * D;
    constexpr int HALF = D / 2;
    constexpr int PP = (HALF + 31) / 32;    // rotary pairs per lane
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int gw = blockIdx.x * WARPS + warp;
    const int NW = gridDim.x * WARPS;
    const float eps = params[0], temperature = params[1], scale = params[2];

    // scratch layout (floats): barrier word, residual x [B, HC], qkv [B, NQKV], att [B, HD],
    // act [B, I], logits [B, V], kv [L, 2, B, HK, P, D]
    unsigned int* bar = reinterpret_cast<unsigned int*>(scratch);
    float* xs = scratch + 32;
    float* qkv = xs + B * HC;
    float* att = qkv + B * NQKV;
    float* act = att + B * HD;
    float* logits = act + B * I;
    float* kv = logits + B * V;
    unsigned int target = 0;

    __shared__ float sx[B * (HC > HIN ? HC : HIN)];
    __shared__ float sv[VP];
    __shared__ unsigned int hist[256];
    __shared__ int sel[2];
    __shared__ float red[WARPS];
    __shared__ float rv[WARPS];
    __shared__ int ri[WARPS];
    __shared__ int scode[B];

    for (int p = 0; p < P; ++p) {
        // ---- this position's input -> residual stream xs
        if (PROJ) {
            for (int b = 0; b < B; ++b)
                for (int k = t; k < HIN; k += THREADS) {
                    float v;
                    if (p == 0) v = hidden[b * HIN + k];
                    else if (p == 1) v = c0[b * HIN + k];
                    else v = emb[((size_t)(p - 2) * V + scode[b]) * HIN + k];
                    sx[b * HIN + k] = v;
                }
            __syncthreads();
            for (int r = gw; r < HC; r += NW) {
                float acc[B];
                row_dots<HIN, B, false>(proj_w + (size_t)r * HIN, sx, acc);
                if (lane == 0) for (int b = 0; b < B; ++b) xs[b * HC + r] = acc[b] + proj_b[r];
            }
            grid_sync(bar, target);
        } else {
            for (int b = 0; b < B; ++b)
                for (int k = t; k < HC; k += THREADS) {
                    float v;
                    if (p == 0) v = hidden[b * HIN + k];
                    else if (p == 1) v = c0[b * HIN + k];
                    else v = emb[((size_t)(p - 2) * V + scode[b]) * HIN + k];
                    xs[b * HC + k] = v;     // every block writes the same values
                }
            __threadfence();
            __syncthreads();
        }

        for (int l = 0; l < L; ++l) {
            // ---- input norm, q/k/v
            block_rms_norm<HC, B, WARPS>(xs, ln1 + l * HC, eps, sx, red);
            const float* wq = wqkv + (size_t)l * NQKV * HC;
            for (int r = gw; r < NQKV; r += NW) {
                float acc[B];
                row_dots<HC, B, false>(wq + (size_t)r * HC, sx, acc);
                if (lane == 0) for (int b = 0; b < B; ++b) qkv[b * NQKV + r] = acc[b];
            }
            grid_sync(bar, target);

            // ---- attention: one warp per (row, query head); lane j holds the rotary pairs
            // (i, i + D/2) for i = j, j + 32, ...
            for (int task = gw; task < B * H; task += NW) {
                const int b = task / H, h = task % H, kvh = h / (H / HK);
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
                const float rq = rsqrtf(sq / D + eps), rk = rsqrtf(sk / D + eps);
                for (int e = 0; e < PP; ++e) {          // q/k RMSNorm, then rotate-half RoPE at position p
                    const int i = lane + 32 * e;
                    if (i >= HALF) continue;
                    const float q1 = qn[l * D + i] * (qa[e] * rq), q2 = qn[l * D + i + HALF] * (qb[e] * rq);
                    const float k1 = kn[l * D + i] * (ka[e] * rk), k2 = kn[l * D + i + HALF] * (kb[e] * rk);
                    const float ang = static_cast<float>(p) * inv_freq[i];
                    const float c = cosf(ang), s = sinf(ang);
                    qa[e] = (q1 * c - q2 * s) * scale;  qb[e] = (q2 * c + q1 * s) * scale;
                    ka[e] = k1 * c - k2 * s;            kb[e] = k2 * c + k1 * s;
                }
                float* kc = kv + ((((size_t)l * 2 + 0) * B + b) * HK + kvh) * P * D;
                float* vc = kv + ((((size_t)l * 2 + 1) * B + b) * HK + kvh) * P * D;
                if (h % (H / HK) == 0) {
                    for (int e = 0; e < PP; ++e) {
                        const int i = lane + 32 * e;
                        if (i >= HALF) continue;
                        kc[p * D + i] = ka[e];  kc[p * D + i + HALF] = kb[e];
                        vc[p * D + i] = va[e];  vc[p * D + i + HALF] = vb[e];
                    }
                }
                float sc[P];                        // scores of positions 0..p (loads issued together)
                #pragma unroll
                for (int s = 0; s < P; ++s) {
                    float dot = 0.0f;
                    if (s <= p) {
                        for (int e = 0; e < PP; ++e) {
                            const int i = lane + 32 * e;
                            const bool on = i < HALF;
                            const float k1 = s == p ? ka[e] : (on ? __ldcg(kc + s * D + i) : 0.0f);
                            const float k2 = s == p ? kb[e] : (on ? __ldcg(kc + s * D + i + HALF) : 0.0f);
                            dot += qa[e] * k1 + qb[e] * k2;
                        }
                    }
                    sc[s] = dot;
                }
                float m = -INFINITY;
                #pragma unroll
                for (int s = 0; s < P; ++s) {
                    if (s > p) break;
                    for (int o = 16; o > 0; o >>= 1) sc[s] += __shfl_xor_sync(0xffffffff, sc[s], o);
                    m = fmaxf(m, sc[s]);
                }
                float den = 0.0f, aa[PP], ab[PP];
                for (int e = 0; e < PP; ++e) { aa[e] = 0.0f; ab[e] = 0.0f; }
                #pragma unroll
                for (int s = 0; s < P; ++s) {
                    if (s > p) break;
                    const float w = expf(sc[s] - m);
                    den += w;
                    for (int e = 0; e < PP; ++e) {
                        const int i = lane + 32 * e;
                        const bool on = i < HALF;
                        aa[e] += w * (s == p ? va[e] : (on ? __ldcg(vc + s * D + i) : 0.0f));
                        ab[e] += w * (s == p ? vb[e] : (on ? __ldcg(vc + s * D + i + HALF) : 0.0f));
                    }
                }
                for (int e = 0; e < PP; ++e) {
                    const int i = lane + 32 * e;
                    if (i >= HALF) continue;
                    att[b * HD + h * D + i] = aa[e] / den;
                    att[b * HD + h * D + i + HALF] = ab[e] / den;
                }
            }
            grid_sync(bar, target);

            // ---- output projection + residual
            add_rows<HD, HC, B, WARPS>(wo + (size_t)l * HC * HD, att, xs);
            grid_sync(bar, target);

            // ---- post-attention norm, gate/up, SwiGLU
            block_rms_norm<HC, B, WARPS>(xs, ln2 + l * HC, eps, sx, red);
            const float* wg = wgu + (size_t)l * 2 * I * HC;
            for (int r = gw; r < I; r += NW) {
                float g[B], u[B];
                row_dots2<HC, B>(wg + (size_t)r * HC, wg + (size_t)(I + r) * HC, sx, g, u);
                if (lane == 0)
                    for (int b = 0; b < B; ++b) act[b * I + r] = (g[b] * (1.0f / (1.0f + expf(-g[b])))) * u[b];
            }
            grid_sync(bar, target);

            // ---- down projection + residual
            add_rows<I, HC, B, WARPS>(wd + (size_t)l * HC * I, act, xs);
            grid_sync(bar, target);
        }
        if (p == 0) continue;

        // ---- final norm, head p - 1
        block_rms_norm<HC, B, WARPS>(xs, fnorm, eps, sx, red);
        const float* wh = heads + (size_t)(p - 1) * V * HC;
        for (int r = gw; r < V; r += NW) {
            float acc[B];
            row_dots<HC, B, false>(wh + (size_t)r * HC, sx, acc);
            if (lane == 0) for (int b = 0; b < B; ++b) logits[b * V + r] = acc[b];
        }
        grid_sync(bar, target);

        // ---- the draw of code p, in every block (no barrier needed before the next position)
        for (int b = 0; b < B; ++b) {
            float bv = -INFINITY;
            int bi = 0x7fffffff;
            for (int i = t; i < VP; i += THREADS) {
                float x = -INFINITY;
                if (i < V) {
                    x = __ldcg(logits + b * V + i);
                    if (isnan(x)) x = -INFINITY;
                }
                sv[i] = x;
                if (i < V && (x > bv || (x == bv && i < bi))) { bv = x; bi = i; }
            }
            const int fallback = block_argmax<WARPS>(bv, bi, rv, ri);
            int code = fallback;
            if (!GREEDY) {
                for (int i = t; i < VP; i += THREADS) sv[i] = i < V ? sv[i] / temperature : -INFINITY;
                __syncthreads();
                const float kth = (TOPK > 0 && TOPK < V) ? kth_largest(sv, V, TOPK, hist, sel) : -INFINITY;
                float fv = -INFINITY, dv = -INFINITY;
                int di = 0x7fffffff;
                for (int i = t; i < V; i += THREADS) {
                    const float f = sv[i] < kth ? -INFINITY : sv[i];
                    fv = fmaxf(fv, f);
                    const float z = f + noise[((size_t)(p - 1) * B + b) * V + i];
                    if (z > dv || (z == dv && i < di)) { dv = z; di = i; }
                }
                for (int o = 16; o > 0; o >>= 1) fv = fmaxf(fv, __shfl_xor_sync(0xffffffff, fv, o));
                if (lane == 0) red[warp] = fv;
                __syncthreads();
                float fmax_ = -INFINITY;
                for (int w = 0; w < WARPS; ++w) fmax_ = fmaxf(fmax_, red[w]);
                __syncthreads();
                const int drawn = block_argmax<WARPS>(dv, di, rv, ri);
                if (isfinite(fmax_)) code = drawn;
            }
            if (t == 0) scode[b] = code;
            __syncthreads();
        }
        // ---- codes and the summed embedding (block 0), in the loop's order
        if (blockIdx.x == 0) {
            if (p == 1) {
                for (int i = t; i < B * HIN; i += THREADS) total[i] = c0[i];
                __syncthreads();
            }
            for (int b = 0; b < B; ++b) {
                if (t == 0) codes[b * NCB + (p - 1)] = scode[b];
                for (int k = t; k < HIN; k += THREADS)
                    total[b * HIN + k] = total[b * HIN + k] + emb[((size_t)(p - 1) * V + scode[b]) * HIN + k];
            }
            __syncthreads();
        }
    }
"""


@functools.lru_cache(maxsize=1)
def _kernel():
    return mx.fast.cuda_kernel(
        name="ttscli_code_frame",
        input_names=["hidden", "c0", "ln1", "wqkv", "qn", "kn", "wo", "ln2", "wgu", "wd", "fnorm", "heads", "emb",
                     "proj_w", "proj_b", "inv_freq", "params", "noise"],
        output_names=["codes", "total", "scratch"], source=_SOURCE, header=GRID_HELPERS)


def fits(a, hin: int, rows: int, vocab: int) -> bool:
    """Whether ``rows`` rows fit the kernel's static shared memory (48 KB a block)."""
    vp = 1 << (vocab - 1).bit_length()
    return rows <= MAX_ROWS and 4 * (rows * max(a.hidden_size, hin) + 2 * vp) + 1024 <= 48 * 1024


def unsupported(cp, params, rows: int | None = None) -> str | None:
    """Why the one-kernel frame cannot run this predictor with these sampling params (None: it can)."""
    import os

    from ttscli.lm.cuda_kernels import all_float32, available

    if not available():
        return "not on MLX's CUDA backend"
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "no", "false"):
        return f"switched off ({ENV})"
    if multiprocessors() < 8:
        return "the GPU's multiprocessor count could not be read"
    a = cp.model.args
    layers = cp.model.layers
    if not params.greedy and (params.top_p < 1.0 or params.min_p > 0.0 or params.repetition_penalty != 1.0):
        return "top-p, min-p and repetition penalty are drawn by the MLX frame"
    if a.attention_bias or a.mlp_bias or not a.qk_norm:
        return "biases or no q/k norm"
    hin = cp.model.codec_embedding[0].weight.shape[1]
    if a.head_dim % 2 or a.num_attention_heads % a.num_key_value_heads:
        return f"head_dim {a.head_dim} odd, or query heads not a multiple of key/value heads"
    if any(n % 4 for n in (a.hidden_size, a.intermediate_size, a.num_attention_heads * a.head_dim, hin)):
        return "widths must be multiples of 4 (float4 rows)"
    if not fits(a, hin, rows or 1, cp.lm_head[0].weight.shape[0]):
        return "one row does not fit the kernel's shared memory"
    if "small_to_mtp_projection" in cp:
        # the kernel has the projection (PROJ) but it has not been checked on a GPU yet:
        # tests/lm/test_cuda_frame.py's GPU check at the 1.7B's dimensions first
        return "a predictor narrower than its talker (1.7B) is not checked on a GPU yet"
    if not all_float32(*layers, cp.model.norm, *cp.lm_head, *cp.model.codec_embedding):
        return "float32 weights only"
    rope = layers[0].self_attn.rope
    if getattr(rope, "dims", None) != a.head_dim or getattr(rope, "traditional", False):
        return "RoPE over part of the head, or interleaved"
    return None


class CodeFrameKernel:
    """``(hidden [B, Hin], c0_embed [B, Hin][, keys [15, 2]]) -> (codes [B, 15] int32, summed
    embedding [B, Hin])`` for one predictor and sampling params; weights stacked per kind on
    first use and again whenever the predictor's weights were replaced."""

    def __init__(self, cp, params, fallback=None):
        self.cp, self.params, self.fallback = cp, params, fallback
        self._src = None
        self._w: dict = {}

    def _weights(self) -> dict:
        """The kernel's constant inputs: weights stacked per kind, RoPE frequencies, scalars."""
        from ttscli.lm.model import _concat
        from ttscli.lm.rope import module_inv_freq

        first = self.cp.model.layers[0].self_attn.q_proj.weight
        if self._src is first:
            return self._w
        m, cp = self.cp.model, self.cp
        a = m.args
        layers = m.layers

        def qkv(layer):
            at = layer.self_attn
            return _concat([at.q_proj, at.k_proj, at.v_proj])[0]

        def gu(layer):
            return _concat([layer.mlp.gate_proj, layer.mlp.up_proj])[0]

        inv = module_inv_freq(layers[0].self_attn.rope, a.head_dim)
        greedy = self.params.greedy
        w = {
            "ln1": mx.stack([lyr.input_layernorm.weight for lyr in layers]),
            "wqkv": mx.stack([qkv(lyr) for lyr in layers]),
            "qn": mx.stack([lyr.self_attn.q_norm.weight for lyr in layers]),
            "kn": mx.stack([lyr.self_attn.k_norm.weight for lyr in layers]),
            "wo": mx.stack([lyr.self_attn.o_proj.weight for lyr in layers]),
            "ln2": mx.stack([lyr.post_attention_layernorm.weight for lyr in layers]),
            "wgu": mx.stack([gu(lyr) for lyr in layers]),
            "wd": mx.stack([lyr.mlp.down_proj.weight for lyr in layers]),
            "fnorm": m.norm.weight,
            "heads": mx.stack([h.weight for h in cp.lm_head]),
            "emb": mx.stack([e.weight for e in m.codec_embedding]),
            "inv_freq": mx.array(np.asarray(inv, np.float32).reshape(-1)),
            "params": mx.array([a.rms_norm_eps, 1.0 if greedy else self.params.temperature, a.head_dim ** -0.5],
                               mx.float32),
            "no_noise": mx.zeros((1,)),      # greedy: the kernel reads no noise
        }
        if "small_to_mtp_projection" in cp:
            w["proj_w"], w["proj_b"] = cp.small_to_mtp_projection.weight, cp.small_to_mtp_projection.bias
        else:
            w["proj_w"], w["proj_b"] = mx.zeros((1,)), mx.zeros((1,))
        mx.eval(list(w.values()))
        self._w, self._src = w, first
        return w

    def __call__(self, hidden: mx.array, c0_embed: mx.array, keys: mx.array | None = None):
        a = self.cp.model.args
        B, hin = hidden.shape
        if self.fallback is not None and not fits(a, hin, B, self.cp.lm_head[0].weight.shape[0]):
            return self.fallback(hidden, c0_embed) if self.params.greedy else self.fallback(hidden, c0_embed, keys)
        codes, total, _ = self.run(hidden, c0_embed, keys)
        return codes, total

    def last_logits(self, scratch: mx.array, rows: int) -> mx.array:
        """The last head's logits ``[rows, V]`` from :meth:`run`'s scratch (checks)."""
        a = self.cp.model.args
        V = self.cp.lm_head[0].weight.shape[0]
        at = 32 + rows * (a.hidden_size + (a.num_attention_heads * 2 + 2 * a.num_key_value_heads) * a.head_dim
                          + a.intermediate_size)
        return scratch[at:at + rows * V].reshape(rows, V)

    def run(self, hidden: mx.array, c0_embed: mx.array, keys: mx.array | None = None):
        """Codes, summed embedding and the kernel's scratch (see :meth:`last_logits`)."""
        a = self.cp.model.args
        B, hin = hidden.shape
        w = self._weights()
        V = self.cp.lm_head[0].weight.shape[0]
        ncb = len(self.cp.lm_head)
        positions = ncb + 1
        greedy = self.params.greedy
        noise = w["no_noise"] if greedy else mx.vmap(lambda k: mx.random.gumbel((B, V), key=k))(keys)
        vp = 1 << (V - 1).bit_length()
        H, HK, D, HC, inter = (a.num_attention_heads, a.num_key_value_heads, a.head_dim, a.hidden_size,
                               a.intermediate_size)
        scratch = (32 + B * (HC + (H + 2 * HK) * D + H * D + inter + V)
                   + a.num_hidden_layers * 2 * B * HK * positions * D)
        blocks = min(128, multiprocessors())
        codes, total, scratch = _kernel()(
            inputs=[hidden.astype(mx.float32), c0_embed.astype(mx.float32), w["ln1"], w["wqkv"], w["qn"], w["kn"],
                    w["wo"], w["ln2"], w["wgu"], w["wd"], w["fnorm"], w["heads"], w["emb"], w["proj_w"], w["proj_b"],
                    w["inv_freq"], w["params"], noise],
            template=[("B", B), ("L", a.num_hidden_layers), ("HC", HC), ("HIN", hin), ("H", H), ("HK", HK),
                      ("D", D), ("I", inter), ("V", V), ("VP", vp), ("P", positions), ("NCB", ncb),
                      ("PROJ", "small_to_mtp_projection" in self.cp), ("GREEDY", greedy),
                      ("TOPK", int(self.params.top_k) if not greedy else 0), ("THREADS", THREADS)],
            grid=(blocks * THREADS, 1, 1), threadgroup=(THREADS, 1, 1),
            output_shapes=[(B, ncb), (B, hin), (scratch,)],
            output_dtypes=[mx.int32, mx.float32, mx.float32], init_value=0)
        return codes, total.astype(hidden.dtype), scratch
