"""Compile every CUDA kernel of ours with NVRTC, without a GPU, as MLX's CUDA backend would build it.

MLX JIT-compiles an ``mx.fast.cuda_kernel`` on the device, so a kernel that does not compile for
some dtype is only found there. This check calls each kernel's own Python wrapper (the code the
models run) with a stand-in for ``mx.fast.cuda_kernel`` that records what MLX would be given, then
generates the source MLX would generate from it and compiles it for sm_90a:

- ``ttscli.lm.cuda_kernels``' q/k-norm + RoPE, add + RMSNorm and one-query attention, for each
  dtype in ``cuda_kernels.DTYPES`` (and the mixed float32 / model-dtype pairs a bf16 model's step
  produces) at the shapes of every family: Qwen3-TTS 0.6B/1.7B talker and code predictor,
  Chatterbox's T3, Breeze's backbone and depth decoder, CosyVoice3's LM, and the tiny fixtures;
- ``ttscli.lm.cuda_step``'s one-kernel step and Qwen3-TTS's one-kernel code-predictor frame, in
  float32, the one dtype their gates let through (``cuda_kernels.all_float32``).

    pip install 'nvidia-cuda-nvrtc==13.*' 'nvidia-cuda-runtime==13.*' 'nvidia-cuda-cccl==13.*'
    python scripts/cuda_compile_check.py [--only SUBSTRING] [--nvrtc PATH]

NVRTC and the CUDA headers are found in the installed ``nvidia`` packages (the test extra of
pyproject.toml). Exit status 1 when any kernel fails to compile, 2 when NVRTC is not installed.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx

from ttscli.lm import cuda_kernels, cuda_step
from ttscli.models.qwen3_tts import cuda_frame

# MLX's name of each dtype's CUDA type (mlx/backend/cuda/utils.cpp, dtype_to_cuda_type)
CUDA_TYPES = {mx.bool_: "bool", mx.int32: "int32_t", mx.uint32: "uint32_t", mx.float16: "__half",
              mx.bfloat16: "__nv_bfloat16", mx.float32: "float"}

# What MLX's default header (mlx/backend/cuda/custom_kernel.cpp) brings in through
# "mlx/backend/cuda/device/utils.cuh" that our kernels use: the half types, the Shape/Strides
# arrays of the *_shape / *_strides parameters, INFINITY. Its other device utilities are not
# shipped as files (they are compiled into MLX's library), so they stand in here.
PRELUDE = """
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/array>
#include <cuda/std/limits>
#define MAX_NDIM 10
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
namespace mlx::core::cu {
using Shape = cuda::std::array<int32_t, MAX_NDIM>;
using Strides = cuda::std::array<int64_t, MAX_NDIM>;
}

#include <cooperative_groups.h>

"""


@dataclass
class Launch:
    """One call of an ``mx.fast.cuda_kernel``: what MLX's generator gets."""

    name: str
    source: str
    header: str
    input_names: list[str]
    inputs: list[tuple[mx.Dtype, int]]          # (dtype, ndim) of each input array
    output_names: list[str]
    output_dtypes: list[mx.Dtype]
    template: list[tuple[str, object]] = field(default_factory=list)


def _template_hash(template) -> str:
    out = ""
    for _, v in template:
        if isinstance(v, bool):
            out += "_t" if v else "_f"
        elif isinstance(v, int):
            out += f"_{v}"
        else:
            out += "_" + str(v).split(".")[-1]     # MLX's get_type_string: float32, bfloat16, ...
    return out


def mlx_source(k: Launch) -> tuple[str, str]:
    """(kernel name, full source) as mlx/backend/cuda/custom_kernel.cpp's ``build_kernel`` writes
    them: the default header, the kernel's header, then in ``namespace mlx::core::cu`` the kernel
    with each input as ``const <its array's dtype's type>* name`` (followed by ``Shape name_shape``
    etc. where the source mentions them), the outputs, the template as constexprs and ``using``
    types, and the source."""
    name = "custom_kernel_" + k.name + _template_hash(k.template)
    return name, PRELUDE + k.header + _kernel_block(k, name)


def _kernel_block(k: Launch, name: str) -> str:
    s = "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n"
    s += f"__global__ void {name}(\n"
    for n, (dt, ndim) in zip(k.input_names, k.inputs):
        s += f"    const {CUDA_TYPES[dt]}* {n},\n"
        if ndim > 0:
            if n + "_shape" in k.source:
                s += f"    const __grid_constant__ Shape {n}_shape,\n"
            if n + "_strides" in k.source:
                s += f"    const __grid_constant__ Strides {n}_strides,\n"
            if n + "_ndim" in k.source:
                s += f"    const __grid_constant__ int {n}_ndim,\n"
    s += ",\n".join(f"    {CUDA_TYPES[dt]}* {n}" for n, dt in zip(k.output_names, k.output_dtypes)) + ") {\n"
    for n, v in k.template:
        if isinstance(v, bool):
            s += f"  constexpr bool {n} = {'true' if v else 'false'};\n"
        elif isinstance(v, int):
            s += f"  constexpr int {n} = {v};\n"
        else:
            s += f"  using {n} = {CUDA_TYPES[v]};\n"
    return s + "\n" + k.source + "\n}\n\n} // namespace mlx::core::cu\n"


def batch_source(kernels: list[Launch]) -> str:
    """Many kernels in one program (the CUDA headers parsed once): each as :func:`mlx_source`
    writes it, named apart by its index, each distinct header once."""
    s, headers = PRELUDE, []
    for i, k in enumerate(kernels):
        if k.header not in headers:
            headers.append(k.header)
            s += k.header
        s += _kernel_block(k, f"{mlx_source(k)[0]}_{i}")
    return s


class _Recorder:
    """Stands in for ``mx.fast.cuda_kernel``: each call appends a :class:`Launch` and returns lazy
    zeros of the output shapes (nothing is ever evaluated)."""

    def __init__(self):
        self.launches: list[Launch] = []

    def __call__(self, name, input_names, output_names, source, header="", **_):
        def run(inputs, template=(), output_shapes=(), output_dtypes=(), **_):
            self.launches.append(Launch(name, source, header, list(input_names),
                                        [(a.dtype, a.ndim) for a in inputs], list(output_names),
                                        list(output_dtypes), list(template)))
            return [mx.zeros(s, d) for s, d in zip(output_shapes, output_dtypes)]
        return run


KERNEL_FACTORIES = (cuda_kernels._qk_kernel, cuda_kernels._add_norm_kernel, cuda_kernels._attention_kernel,
                    cuda_step._kernel, cuda_frame._kernel)


@contextlib.contextmanager
def recording():
    rec = _Recorder()
    real = mx.fast.cuda_kernel
    for f in KERNEL_FACTORIES:
        f.cache_clear()
    mx.fast.cuda_kernel = rec
    try:
        yield rec
    finally:
        mx.fast.cuda_kernel = real
        for f in KERNEL_FACTORIES:
            f.cache_clear()


@dataclass(frozen=True)
class Stack:
    """A decoder stack's shapes (one family's LM)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    layers: int
    vocab: int
    qk_norm: bool


def families() -> dict[str, Stack]:
    """Every family's decoder stacks that run our kernels, from the configs in the code."""
    from ttscli.models.breeze_tts.config import ModelArgs as BreezeArgs
    from ttscli.models.breeze_tts.config import real_config
    from ttscli.models.chatterbox.config import T3Args
    from ttscli.models.cosyvoice3.config import CosyVoice3Args
    from ttscli.models.qwen3_tts.config import preset_config

    def stack(a, vocab: int, qk_norm: bool | None = None) -> Stack:
        norm = getattr(a, "qk_norm", True) if qk_norm is None else qk_norm
        return Stack(a.hidden_size, a.num_attention_heads, a.num_key_value_heads, a.head_dim,
                     a.intermediate_size, a.num_hidden_layers, vocab, norm)

    out = {}
    for size in ("0.6B", "1.7B"):
        c = preset_config(f"{size}-Base")
        t, cp = SimpleNamespace(**c["talker_config"]), SimpleNamespace(**c["talker_config"]["code_predictor_config"])
        out[f"qwen3-{size}-talker"] = stack(t, t.vocab_size, True)
        out[f"qwen3-{size}-predictor"] = stack(cp, cp.vocab_size, True)
    t3 = T3Args().lm_args()
    out["chatterbox-t3"] = stack(t3, 8194, t3.qk_norm)
    b = BreezeArgs.from_dict(real_config(), source="real config")
    out["breeze-backbone"] = stack(b.backbone, b.vocab_size + 1)
    out["breeze-depth"] = stack(b.depth, b.vocab_size)
    tiny = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
    bt = BreezeArgs.from_dict(_json(tiny / "breeze" / "tiny" / "config.json"), source="tiny")
    out["breeze-tiny-backbone"] = stack(bt.backbone, bt.vocab_size + 1)
    out["breeze-tiny-depth"] = stack(bt.depth, bt.vocab_size)
    cv3 = CosyVoice3Args()
    out["cosyvoice3-lm"] = stack(cv3.lm, cv3.speech_token_size + 200, False)
    qt = _json(tiny / "parity" / "qwen3-tiny-base" / "config.json")["talker_config"]
    out["qwen3-tiny-talker"] = stack(SimpleNamespace(**qt), qt["vocab_size"], True)
    qc = qt["code_predictor_config"]
    out["qwen3-tiny-predictor"] = stack(SimpleNamespace(**qc), qc["vocab_size"], True)
    return out


def _json(path: Path) -> dict:
    import json

    return json.loads(path.read_text(encoding="utf-8"))


def small_kernels(s: Stack, dtype, rows: int) -> list[Launch]:
    """The three per-op kernels as a step of this stack in ``dtype`` calls them (the residual
    also in float32 against ``dtype`` and back, as a bf16 model fed float32 embeddings runs)."""
    z = functools.partial(mx.zeros, dtype=dtype)
    norm = SimpleNamespace(weight=z((s.head_dim,)), eps=1e-6) if s.qk_norm else None
    inv = [1.0] * (s.head_dim // 2)
    with recording() as rec:
        qk = cuda_kernels.QKNormRope(s.heads, s.kv_heads, s.head_dim, inv, norm, norm)
        qk(z((rows, (s.heads + 2 * s.kv_heads) * s.head_dim)), 7)
        n = SimpleNamespace(weight=z((s.hidden,)), eps=1e-6)
        for x, r in ((dtype, dtype), (dtype, mx.float32), (mx.float32, dtype)):
            cuda_kernels.add_rms_norm(mx.zeros((rows, s.hidden), x), mx.zeros((rows, s.hidden), r), n)
        for mask_rows in (1, rows):
            cuda_kernels.one_query_attention(z((rows, s.heads, 1, s.head_dim)), z((rows, s.kv_heads, 64, s.head_dim)),
                                             z((rows, s.kv_heads, 64, s.head_dim)), s.head_dim ** -0.5,
                                             mx.ones((mask_rows, 1, 1, 64), mx.bool_))
    return rec.launches


def step_kernel(s: Stack, rows: int) -> list[Launch]:
    """``cuda_step.LMStepKernel.__call__`` at this stack's shapes, float32 (its gate's dtype)."""
    k = object.__new__(cuda_step.LMStepKernel)
    a = SimpleNamespace(num_attention_heads=s.heads, num_key_value_heads=s.kv_heads, head_dim=s.head_dim,
                        intermediate_size=s.inter, qk_norm=s.qk_norm)
    k.lm, k.head, k.blocks = SimpleNamespace(args=a, layers=[None] * s.layers), SimpleNamespace(
        weight=mx.zeros((s.vocab, s.hidden))), 132
    k.weights = [mx.zeros((s.layers, 1, s.hidden)) for _ in cuda_step.KINDS]
    k.tail = [mx.zeros((s.hidden,)), k.head.weight, mx.zeros((s.head_dim // 2,)), mx.zeros((3,))]
    cache = [SimpleNamespace(keys=mx.zeros((rows, s.kv_heads, 256, s.head_dim)),
                             values=mx.zeros((rows, s.kv_heads, 256, s.head_dim)), offset=5)
             for _ in range(s.layers)]
    with recording() as rec:
        k(mx.zeros((rows, s.hidden)), cache)
    return rec.launches


def frame_kernel(s: Stack, talker_hidden: int, rows: int, greedy: bool) -> list[Launch]:
    """``cuda_frame.CodeFrameKernel.run`` for a code predictor of these shapes, float32."""
    a = SimpleNamespace(num_attention_heads=s.heads, num_key_value_heads=s.kv_heads, head_dim=s.head_dim,
                        hidden_size=s.hidden, intermediate_size=s.inter, num_hidden_layers=s.layers)
    first = mx.zeros((1,))
    layer = SimpleNamespace(self_attn=SimpleNamespace(q_proj=SimpleNamespace(weight=first)))
    heads = [SimpleNamespace(weight=mx.zeros((s.vocab, s.hidden))) for _ in range(15)]
    cp = _Predictor(model=SimpleNamespace(args=a, layers=[layer] * s.layers), lm_head=heads,
                    proj=talker_hidden != s.hidden)
    params = SimpleNamespace(greedy=greedy, temperature=0.9, top_k=0 if greedy else 50)
    k = cuda_frame.CodeFrameKernel(cp, params)
    k._w = {n: mx.zeros((1,)) for n in ("ln1", "wqkv", "qn", "kn", "wo", "ln2", "wgu", "wd", "fnorm", "heads",
                                        "emb", "inv_freq", "params", "no_noise", "proj_w", "proj_b")}
    k._src = first
    keys = None if greedy else mx.random.split(mx.random.key(0), 15)
    with recording() as rec:
        k.run(mx.zeros((rows, talker_hidden)), mx.zeros((rows, talker_hidden)), keys)
    return rec.launches


class _Predictor(SimpleNamespace):
    """A code predictor's attributes as CodeFrameKernel reads them (``in`` for the projection)."""

    def __contains__(self, name: str) -> bool:
        return name == "small_to_mtp_projection" and self.proj


def launches() -> dict[str, Launch]:
    """Every kernel launch to check, named ``kernel/family/dtype/rows``."""
    fam = families()
    out: dict[str, Launch] = {}

    def add(label: str, found: list[Launch]):
        for i, k in enumerate(found):
            out[f"{k.name}/{label}/{i}"] = k

    for name, s in fam.items():
        for dtype in cuda_kernels.DTYPES:
            for rows in (1, 2):
                add(f"{name}/{str(dtype).split('.')[-1]}/{rows}rows", small_kernels(s, dtype, rows))
        if not name.endswith("predictor") and name != "breeze-depth" and name != "breeze-tiny-depth":
            for rows in (1, cuda_step.MAX_ROWS):
                add(f"{name}/float32/{rows}rows", step_kernel(s, rows))
    for size in ("0.6B", "1.7B", "tiny"):
        s = fam[f"qwen3-{size}-predictor"]
        talker = fam[f"qwen3-{size}-talker"].hidden
        for rows, greedy in ((1, False), (cuda_frame.MAX_ROWS, True)):
            add(f"qwen3-{size}-predictor/float32/{rows}rows/{'greedy' if greedy else 'topk'}",
                frame_kernel(s, talker, rows, greedy))
    return out


def find_nvrtc() -> tuple[str, list[str]] | None:
    """libnvrtc and the CUDA include folders (the runtime's headers, CCCL) from the installed
    ``nvidia`` wheels (CUDA 13's layout, nvidia/cu13/..., or CUDA 12's), or None."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in map(Path, spec.submodule_search_locations):
        for lib in (root / "cu13" / "lib" / "libnvrtc.so.13", root / "cuda_nvrtc" / "lib" / "libnvrtc.so.12"):
            if lib.exists():
                inc = [p for p in (root / "cu13" / "include", root / "cu13" / "include" / "cccl",
                                   root / "cuda_runtime" / "include", root / "cuda_cccl" / "include") if p.is_dir()]
                return str(lib), [str(p) for p in inc]
    return None


class NVRTC:
    """NVRTC's C API through ctypes, with MLX's compile options (mlx/backend/cuda/jit_module.cpp)."""

    def __init__(self, lib: str, includes: list[str], arch: str = "compute_90a"):
        self.lib = ctypes.CDLL(lib)
        self.opts = [b"--device-as-default-execution-space", f"--gpu-architecture={arch}".encode()]
        self.opts += [f"--include-path={p}".encode() for p in includes]

    def compile(self, code: str, name: str) -> tuple[bool, str]:
        lib, prog = self.lib, ctypes.c_void_p()
        if lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), f"{name}.cu".encode(), 0, None, None):
            return False, "nvrtcCreateProgram failed"
        try:
            rc = lib.nvrtcCompileProgram(prog, len(self.opts), (ctypes.c_char_p * len(self.opts))(*self.opts))
            n = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            log = ctypes.create_string_buffer(n.value)
            lib.nvrtcGetProgramLog(prog, log)
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))
        return rc == 0, log.value.decode(errors="replace")


def check(nvrtc: NVRTC, only: str = "") -> list[tuple[str, str]]:
    """Compile every launch, the distinct ones together in one program; where that fails, each
    alone, to name the ones that do not compile. The (label, log) of each failure."""
    distinct: dict[str, tuple[str, Launch]] = {}
    for label, k in launches().items():
        if only in label:
            distinct.setdefault(mlx_source(k)[1], (label, k))
    ok, _ = nvrtc.compile(batch_source([k for _, k in distinct.values()]), "kernels")
    failed = []
    if not ok:
        for code, (label, _) in distinct.items():
            good, log = nvrtc.compile(code, label.split("/")[0])
            if not good:
                failed.append((label, log))
                print(f"{label}: FAILED\n{log}")
    print(f"{len(distinct)} distinct kernels compiled, {len(failed)} failed")
    return failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvrtc", help="path of libnvrtc.so (default: from the installed nvidia wheels)")
    ap.add_argument("--only", default="", help="check only the launches whose label contains this")
    a = ap.parse_args()
    found = find_nvrtc()
    if found is None and not a.nvrtc:
        print("NVRTC not found: pip install 'nvidia-cuda-nvrtc==13.*' 'nvidia-cuda-runtime==13.*' "
              "'nvidia-cuda-cccl==13.*'", file=sys.stderr)
        return 2
    lib, includes = found if found else (a.nvrtc, [])
    return 1 if check(NVRTC(a.nvrtc or lib, includes), a.only) else 0


if __name__ == "__main__":
    raise SystemExit(main())
