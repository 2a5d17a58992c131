"""CUDA kernels of our own for the shared LM's one-position step (``mx.fast.cuda_kernel``).

A decode step on a GPU is bound by MLX's host time per graph node, not by the GPU (README,
Qwen3-TTS speed), so these kernels exist to replace several nodes with one. Only on MLX's CUDA
backend; everywhere else the plain MLX ops run.

``qk_norm_rope``: from the fused q/k/v projection's output ``[B, (H + 2 Hk) D]``, the query and
key heads RMS-normalised with their weights (Qwen3's q/k norms; skipped for Llama blocks) and
rotated (rotate-half RoPE at one position), written heads-first ``[B, H, D]`` / ``[B, Hk, D]``:
one node where MLX runs two RMSNorms and two RoPEs. Arithmetic as MLX's own kernels do it:
float32 inside, the norm's output cast to the model dtype before the rotation.

``one_query_attention``: one query per row over a fixed-capacity cache with a boolean mask
(True = visible), GQA by head groups, an online softmax per warp merged at the end: one node
where MLX runs a scale, two matmuls, a select and a softmax.

``add_rms_norm``: a block's residual add and the RMSNorm that follows it (the next sublayer's or
the final norm), ``h = x + r`` and ``rms_norm(h) * w`` from one node instead of two.

Each kernel is built per dtype of its arrays (float32, bfloat16, float16: :data:`DTYPES`): MLX
declares every input as a pointer of that array's own type and instantiates the source once per
template, so the sources read inputs through ``auto`` pointers, compute in float32 and store in
the output type, which is the dtype MLX's own ops would give (``mx.result_type`` of the inputs,
as the residual add and ``mx.fast.rms_norm`` promote). A model whose arrays are of another dtype
runs the plain MLX ops (:func:`supports`). ``scripts/cuda_compile_check.py`` compiles every
kernel for every dtype and family shape with NVRTC, without a GPU.
"""
from __future__ import annotations

import functools

import mlx.core as mx
import numpy as np

_QK_NORM_ROPE = """
    constexpr int HALF = D / 2;
    constexpr int N = (H + 2 * HK) * D;
    const int head = blockIdx.x;
    const int row = blockIdx.y;
    const int i = threadIdx.x;
    const auto* src = y + (size_t)row * N + (size_t)head * D;
    float a = static_cast<float>(src[i]);
    float b = static_cast<float>(src[i + HALF]);
    if (NORM) {
        __shared__ float part[HALF];
        part[i] = a * a + b * b;
        __syncthreads();
        for (int s = HALF / 2; s > 0; s >>= 1) {
            if (i < s) part[i] += part[i + s];
            __syncthreads();
        }
        const float r = rsqrtf(part[0] / D + eps[0]);
        const T* w = head < H ? qw : kw;
        a = static_cast<float>(static_cast<T>(static_cast<float>(w[i]) * static_cast<float>(static_cast<T>(a * r))));
        b = static_cast<float>(static_cast<T>(static_cast<float>(w[i + HALF])
                                              * static_cast<float>(static_cast<T>(b * r))));
    }
    const float ang = static_cast<float>(pos[0]) * inv_freq[i];
    const float c = cosf(ang);
    const float s = sinf(ang);
    T* dst = head < H ? q + ((size_t)row * H + head) * D : k + ((size_t)row * HK + (head - H)) * D;
    dst[i] = static_cast<T>(a * c - b * s);
    dst[i + HALF] = static_cast<T>(b * c + a * s);
"""


_ADD_RMS_NORM = """
    const int row = blockIdx.x;
    const int t = threadIdx.x;
    const auto* xr = x + (size_t)row * N;
    const auto* rr = r + (size_t)row * N;
    TH* hr = h + (size_t)row * N;
    __shared__ float part[THREADS];
    float ss = 0.0f;
    for (int j = t; j < N; j += THREADS) {
        const TH v = static_cast<TH>(static_cast<float>(xr[j]) + static_cast<float>(rr[j]));
        hr[j] = v;
        const float f = static_cast<float>(v);
        ss += f * f;
    }
    part[t] = ss;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        __syncthreads();
    }
    const float scale = rsqrtf(part[0] / N + eps[0]);
    TN* nr = n + (size_t)row * N;
    for (int j = t; j < N; j += THREADS) {
        const float v = static_cast<float>(static_cast<TN>(static_cast<float>(hr[j]) * scale));
        nr[j] = static_cast<TN>(static_cast<float>(w[j]) * v);
    }
"""


_ONE_QUERY_ATTENTION = """
    constexpr int WARPS = 4;
    const int S = keys_shape[2];
    const int head = blockIdx.x;
    const int row = blockIdx.y;
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int kvh = head / (H / HK);
    const auto* qr = q + ((size_t)row * H + head) * D;
    const auto* kr = keys + ((size_t)row * HK + kvh) * (size_t)S * D;
    const auto* vr = values + ((size_t)row * HK + kvh) * (size_t)S * D;
    const bool* mr = mask + (MASK_ROWS == 1 ? 0 : (size_t)row * S);
    constexpr int PER = (D + 31) / 32;
    float qv[PER], acc[PER];
    for (int e = 0; e < PER; ++e) {
        const int d = lane + 32 * e;
        qv[e] = d < D ? static_cast<float>(qr[d]) * scale[0] : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int s = warp; s < S; s += WARPS) {
        if (!mr[s]) continue;
        const auto* ks = kr + (size_t)s * D;
        float dot = 0.0f;
        for (int e = 0; e < PER; ++e) {
            const int d = lane + 32 * e;
            if (d < D) dot += qv[e] * static_cast<float>(ks[d]);
        }
        for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffff, dot, o);
        const float mn = fmaxf(m, dot);
        const float corr = expf(m - mn);
        const float p = expf(dot - mn);
        l = l * corr + p;
        const auto* vs = vr + (size_t)s * D;
        for (int e = 0; e < PER; ++e) {
            const int d = lane + 32 * e;
            acc[e] = acc[e] * corr + (d < D ? p * static_cast<float>(vs[d]) : 0.0f);
        }
        m = mn;
    }
    __shared__ float wm[WARPS], wl[WARPS];
    __shared__ float wacc[WARPS][PER * 32];
    if (lane == 0) { wm[warp] = m; wl[warp] = l; }
    for (int e = 0; e < PER; ++e) wacc[warp][lane + 32 * e] = acc[e];
    __syncthreads();
    if (warp == 0) {
        float mx_ = -INFINITY;
        for (int w = 0; w < WARPS; ++w) mx_ = fmaxf(mx_, wm[w]);
        float tot = 0.0f;
        for (int w = 0; w < WARPS; ++w) tot += wm[w] == -INFINITY ? 0.0f : wl[w] * expf(wm[w] - mx_);
        T* orow = out + ((size_t)row * H + head) * D;
        for (int e = 0; e < PER; ++e) {
            const int d = lane + 32 * e;
            if (d >= D) continue;
            float sum = 0.0f;
            for (int w = 0; w < WARPS; ++w) sum += wm[w] == -INFINITY ? 0.0f : wacc[w][d] * expf(wm[w] - mx_);
            orow[d] = static_cast<T>(sum / tot);
        }
    }
"""


# the dtypes every kernel here is built and compile-checked for
DTYPES = (mx.float32, mx.bfloat16, mx.float16)


def supports(*arrays: mx.array) -> bool:
    """Every array is of a dtype the kernels take (else the caller runs MLX's ops)."""
    return all(a.dtype in DTYPES for a in arrays)


def all_float32(*modules) -> bool:
    """Every parameter of these modules is float32: the one-kernel step and frame (cuda_step.py,
    Qwen3-TTS's cuda_frame.py) read their weights as float4 rows of float32, so any other dtype
    runs MLX's ops instead."""
    from mlx.utils import tree_flatten

    return all(v.dtype == mx.float32 for m in modules for _, v in tree_flatten(m.parameters()))


def available() -> bool:
    """MLX's CUDA backend is the default device (custom CUDA kernels can run)."""
    return (mx.default_device().type == mx.gpu and hasattr(mx.fast, "cuda_kernel")
            and not mx.metal.is_available())


# threads of a grid-barrier kernel's block
THREADS = 512

# Device helpers of the kernels that run every block at once and meet at grid barriers (the
# shared LM's one-position step, cuda_step.py, and Qwen3-TTS's code-predictor frame): the
# barrier, lane-partial row dot products, a block's RMSNorm, the k-th largest value and the
# argmax of a block.
GRID_HELPERS = r"""
__device__ __forceinline__ void grid_sync(unsigned int* bar, unsigned int& target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        target += gridDim.x;
        __threadfence();
        atomicAdd(bar, 1u);
        volatile unsigned int* vb = bar;
        while (*vb < target) { }
        __threadfence();
    }
    __syncthreads();
}

// lane-partial dot products of one weight row with B vectors (row stride K), then summed over the warp
template <int K, int B, bool COHERENT>
__device__ __forceinline__ void row_dots(const float* __restrict__ w, const float* v, float* acc) {
    const int lane = threadIdx.x & 31;
    #pragma unroll
    for (int b = 0; b < B; ++b) acc[b] = 0.0f;
    #pragma unroll 8
    for (int k = lane * 4; k < K; k += 128) {
        const float4 wv = __ldg(reinterpret_cast<const float4*>(w + k));
        #pragma unroll
        for (int b = 0; b < B; ++b) {
            const float4 x = COHERENT ? __ldcg(reinterpret_cast<const float4*>(v + b * K + k))
                                      : *reinterpret_cast<const float4*>(v + b * K + k);
            acc[b] += wv.x * x.x + wv.y * x.y + wv.z * x.z + wv.w * x.w;
        }
    }
    #pragma unroll
    for (int b = 0; b < B; ++b) {
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[b] += __shfl_xor_sync(0xffffffff, acc[b], o);
    }
}

// row_dots for two weight rows at once (gate and up): both rows' loads in flight together
template <int K, int B>
__device__ __forceinline__ void row_dots2(const float* __restrict__ w1, const float* __restrict__ w2,
                                          const float* v, float* a1, float* a2) {
    const int lane = threadIdx.x & 31;
    #pragma unroll
    for (int b = 0; b < B; ++b) { a1[b] = 0.0f; a2[b] = 0.0f; }
    #pragma unroll 4
    for (int k = lane * 4; k < K; k += 128) {
        const float4 x1 = __ldg(reinterpret_cast<const float4*>(w1 + k));
        const float4 x2 = __ldg(reinterpret_cast<const float4*>(w2 + k));
        #pragma unroll
        for (int b = 0; b < B; ++b) {
            const float4 x = *reinterpret_cast<const float4*>(v + b * K + k);
            a1[b] += x1.x * x.x + x1.y * x.y + x1.z * x.z + x1.w * x.w;
            a2[b] += x2.x * x.x + x2.y * x.y + x2.z * x.z + x2.w * x.w;
        }
    }
    #pragma unroll
    for (int b = 0; b < B; ++b) {
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            a1[b] += __shfl_xor_sync(0xffffffff, a1[b], o);
            a2[b] += __shfl_xor_sync(0xffffffff, a2[b], o);
        }
    }
}

// xs[b][r] += w[r] . v[b] for every row r of an N x K projection that this warp owns: an output
// projection added into the residual stream (times ``scale``, a muP stack's residual scale), its
// input vectors v [B, K] written by other blocks
template <int K, int N, int B, int WARPS>
__device__ __forceinline__ void add_rows(const float* __restrict__ w, const float* v, float* xs,
                                         float scale = 1.0f) {
    const int lane = threadIdx.x & 31;
    for (int r = blockIdx.x * WARPS + (threadIdx.x >> 5); r < N; r += gridDim.x * WARPS) {
        float acc[B];
        row_dots<K, B, true>(w + (size_t)r * K, v, acc);
        if (lane == 0)
            for (int b = 0; b < B; ++b)
                xs[b * N + r] = __ldcg(xs + b * N + r) + (scale == 1.0f ? acc[b] : acc[b] * scale);
    }
}

// every block: s[b][k] = w[k] * (x[b][k] * rsqrt(mean_k x^2 + eps)), x read coherently from global
template <int N, int B, int WARPS>
__device__ __forceinline__ void block_rms_norm(const float* x, const float* __restrict__ w, float eps,
                                               float* s, float* red) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    for (int b = 0; b < B; ++b) {
        float ss = 0.0f;
        for (int k = t; k < N; k += WARPS * 32) {
            const float v = __ldcg(x + b * N + k);
            s[b * N + k] = v;
            ss += v * v;
        }
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
        if (lane == 0) red[warp] = ss;
        __syncthreads();
        float tot = 0.0f;
        for (int i = 0; i < WARPS; ++i) tot += red[i];
        const float r = rsqrtf(tot / N + eps);
        for (int k = t; k < N; k += WARPS * 32) s[b * N + k] = w[k] * (s[b * N + k] * r);
        __syncthreads();
    }
}

// the k-th largest of v[0..n) (k >= 1, duplicates counted): a radix select over order-preserving
// keys, four histogram passes of 8 bits instead of a full sort
__device__ __forceinline__ float kth_largest(const float* v, int n, int k, unsigned int* hist, int* sel) {
    const int lane = threadIdx.x & 31;
    unsigned int prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const unsigned int u = __float_as_uint(v[i]);
            const unsigned int key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xFFu], 1u);
        }
        __syncthreads();
        if (threadIdx.x < 32) {     // bins from the top: lane j counts bins 255 - 8j .. 248 - 8j
            unsigned int c[8], local = 0;
            for (int j = 0; j < 8; ++j) { c[j] = hist[255 - (lane * 8 + j)]; local += c[j]; }
            unsigned int incl = local;
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned int up = __shfl_up_sync(0xffffffff, incl, o);
                if (lane >= o) incl += up;
            }
            unsigned int run = incl - local;
            if (run < (unsigned int)k && (unsigned int)k <= incl) {
                for (int j = 0; j < 8; ++j) {
                    if (run + c[j] >= (unsigned int)k) { sel[0] = 255 - (lane * 8 + j); sel[1] = k - (int)run; break; }
                    run += c[j];
                }
            }
        }
        __syncthreads();
        prefix |= ((unsigned int)sel[0]) << shift;
        mask |= 0xFFu << shift;
        k = sel[1];
        __syncthreads();
    }
    return __uint_as_float((prefix & 0x80000000u) ? (prefix & 0x7fffffffu) : ~prefix);
}

// block-wide argmax, the first index on ties (MLX's argmax)
template <int WARPS>
__device__ __forceinline__ int block_argmax(float val, int idx, float* rv, int* ri) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(0xffffffff, val, o);
        const int i2 = __shfl_xor_sync(0xffffffff, idx, o);
        if (v2 > val || (v2 == val && i2 < idx)) { val = v2; idx = i2; }
    }
    if (lane == 0) { rv[warp] = val; ri[warp] = idx; }
    __syncthreads();
    float bv = rv[0];
    int bi = ri[0];
    for (int w = 1; w < WARPS; ++w) {
        if (rv[w] > bv || (rv[w] == bv && ri[w] < bi)) { bv = rv[w]; bi = ri[w]; }
    }
    __syncthreads();
    return bi;
}
"""

@functools.lru_cache(maxsize=1)
def multiprocessors() -> int:
    """The first GPU's multiprocessor count from the CUDA driver (0 when it cannot be read): a
    grid-barrier kernel runs one block per multiprocessor, all resident at once."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev, n = ctypes.c_int(), ctypes.c_int()
        if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0):
            return 0
        if cuda.cuDeviceGetAttribute(ctypes.byref(n), 16, dev):   # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
            return 0
        return int(n.value)
    except (OSError, AttributeError):
        return 0


@functools.lru_cache(maxsize=1)
def _qk_kernel():
    return mx.fast.cuda_kernel(name="ttscli_qk_norm_rope", input_names=["y", "qw", "kw", "inv_freq", "pos", "eps"],
                               output_names=["q", "k"], source=_QK_NORM_ROPE)


class QKNormRope:
    """The kernel bound to one attention's shapes, norm weights and rotary frequencies."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int, inv_freq: np.ndarray,
                 q_norm=None, k_norm=None, eps: float = 1e-6):
        half = head_dim // 2
        if head_dim % 2 or half & (half - 1) or half > 512:
            raise ValueError(f"head_dim {head_dim}: the kernel takes head_dim / 2 a power of two up to 512")
        self.h, self.hk, self.d = heads, kv_heads, head_dim
        self.norm = q_norm is not None
        self.q_norm, self.k_norm = q_norm, k_norm
        self.inv_freq = mx.array(np.asarray(inv_freq, np.float32).reshape(-1))
        self.eps = mx.array([eps], mx.float32)

    def __call__(self, y: mx.array, offset) -> tuple[mx.array, mx.array]:
        """``y [B, (H + 2 Hk) D]`` at position ``offset`` (int or int32 array) -> ``q [B, H, 1, D]``,
        ``k [B, Hk, 1, D]``."""
        B = y.shape[0]
        if self.norm:   # mx.fast.rms_norm's output dtype, then RoPE's (the same)
            out = mx.result_type(y.dtype, self.q_norm.weight.dtype, self.k_norm.weight.dtype)
            qw, kw = self.q_norm.weight.astype(out), self.k_norm.weight.astype(out)
        else:
            out = y.dtype
            qw = kw = mx.ones((self.d,), out)
        pos = offset.astype(mx.int32).reshape(1) if isinstance(offset, mx.array) else mx.array([offset], mx.int32)
        half = self.d // 2
        q, k = _qk_kernel()(inputs=[y, qw, kw, self.inv_freq, pos, self.eps],
                            template=[("T", out), ("H", self.h), ("HK", self.hk), ("D", self.d),
                                      ("NORM", self.norm)],
                            grid=(half * (self.h + self.hk), B, 1), threadgroup=(half, 1, 1),
                            output_shapes=[(B, self.h, 1, self.d), (B, self.hk, 1, self.d)],
                            output_dtypes=[out, out])
        return q, k


@functools.lru_cache(maxsize=1)
def _add_norm_kernel():
    return mx.fast.cuda_kernel(name="ttscli_add_rms_norm", input_names=["x", "r", "w", "eps"],
                               output_names=["h", "n"], source=_ADD_RMS_NORM)


def add_rms_norm(x: mx.array, r: mx.array, norm) -> tuple[mx.array, mx.array]:
    """``x + r`` and ``norm(x + r)`` for rows ``[B, hidden]``; ``norm`` an RMSNorm (weight, eps).
    Both in the dtypes MLX's ops give: ``x + r`` promoted, the norm promoted with its weight."""
    B, N = x.shape
    threads = 256
    th = mx.result_type(x.dtype, r.dtype)
    tn = mx.result_type(th, norm.weight.dtype)
    eps = mx.array([norm.eps], mx.float32)
    h, n = _add_norm_kernel()(inputs=[x, r, norm.weight, eps],
                              template=[("TH", th), ("TN", tn), ("N", N), ("THREADS", threads)],
                              grid=(threads * B, 1, 1), threadgroup=(threads, 1, 1),
                              output_shapes=[(B, N), (B, N)], output_dtypes=[th, tn])
    return h, n


@functools.lru_cache(maxsize=1)
def _attention_kernel():
    return mx.fast.cuda_kernel(name="ttscli_one_query_attention",
                               input_names=["q", "keys", "values", "mask", "scale"], output_names=["out"],
                               source=_ONE_QUERY_ATTENTION)


def one_query_attention(q: mx.array, keys: mx.array, values: mx.array, scale: float, mask: mx.array) -> mx.array:
    """``q [B, H, 1, D]`` over ``keys``/``values [B, Hk, S, D]`` where ``mask [B or 1, 1, 1, S]`` (bool,
    True = visible) allows -> ``[B, H, 1, D]``."""
    B, H, _, D = q.shape
    Hk, S = keys.shape[1], keys.shape[2]
    rows = mask.shape[0]
    dt = mx.result_type(q.dtype, keys.dtype, values.dtype)
    out, = _attention_kernel()(inputs=[q, keys, values, mask.reshape(rows, S), mx.array([scale], mx.float32)],
                               template=[("T", dt), ("H", H), ("HK", Hk), ("D", D), ("MASK_ROWS", rows)],
                               grid=(128 * H, B, 1), threadgroup=(128, 1, 1),
                               output_shapes=[(B, H, 1, D)], output_dtypes=[dt])
    return out
