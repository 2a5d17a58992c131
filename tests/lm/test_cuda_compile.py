"""Every CUDA kernel of ours compiles, for every dtype a family uses and every family's shapes, as
MLX's CUDA backend would build it (scripts/cuda_compile_check.py: NVRTC, no GPU needed), so a
kernel that does not compile for a model's dtype is found here rather than on a GPU."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import mlx.core as mx
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "cuda_compile_check.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("cuda_compile_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def nvrtc(check):
    found = check.find_nvrtc()
    if found is None:
        pytest.skip("NVRTC is not installed (pip install -e '.[nvrtc]', Linux x86-64 only)")
    return check.NVRTC(*found)


def test_every_kernel_dtype_and_family_is_checked(check):
    from ttscli.lm import cuda_kernels

    labels = list(check.launches())
    for kernel in ("ttscli_qk_norm_rope", "ttscli_add_rms_norm", "ttscli_one_query_attention"):
        for family in check.families():
            for dtype in cuda_kernels.DTYPES:
                tag = f"{kernel}/{family}/{str(dtype).split('.')[-1]}/"
                assert any(x.startswith(tag) for x in labels), tag
    for family in ("qwen3-0.6B-talker", "qwen3-1.7B-talker", "chatterbox-t3", "breeze-backbone"):
        assert any(x.startswith(f"ttscli_lm_step/{family}/float32/") for x in labels), family
    for size in ("0.6B", "1.7B", "tiny"):
        assert any(x.startswith(f"ttscli_code_frame/qwen3-{size}-predictor/float32/") for x in labels), size


def test_the_generated_signature_is_mlxs(check):
    """Each input is declared with its own array's type, as MLX declares it (a bfloat16 model's
    float32 residual is ``const float*``), and the template's dtypes become ``using`` lines."""
    k = check.Launch("k", "out[0] = x[0] + x_shape[0];", "", ["x", "r"], [(mx.bfloat16, 2), (mx.float32, 2)],
                     ["out"], [mx.float16], [("T", mx.bfloat16), ("N", 4), ("F", False)])
    name, code = check.mlx_source(k)
    assert name == "custom_kernel_k_bfloat16_4_f"
    assert ("const __nv_bfloat16* x,\n    const __grid_constant__ Shape x_shape,\n    const float* r,\n"
            "    __half* out) {\n  using T = __nv_bfloat16;\n  constexpr int N = 4;\n  constexpr bool F = false;"
            in code)


def test_a_kernel_that_does_not_compile_is_reported(check, nvrtc):
    k = check.Launch("bad", "const T* p = x; out[0] = p[0];", "", ["x"], [(mx.float32, 1)], ["out"],
                     [mx.bfloat16], [("T", mx.bfloat16)])
    ok, log = nvrtc.compile(check.mlx_source(k)[1], "bad")
    assert not ok and "const float *" in log


def test_breeze_backbone_kernels_compile(check, nvrtc):
    """The case that reached a GPU: Breeze's bfloat16 backbone with its float32 residual."""
    assert check.check(nvrtc, only="/breeze-backbone/bfloat16/") == []


@pytest.mark.slow
def test_every_kernel_compiles(check, nvrtc):
    assert check.check(nvrtc) == []
