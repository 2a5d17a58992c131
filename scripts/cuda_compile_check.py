"""Compile our CUDA kernels with NVRTC on a machine without a GPU, to catch compile errors before
spending device time (the kernels are JIT-compiled by MLX on the device).

    python -m venv /tmp/nvrtc && /tmp/nvrtc/bin/pip install nvidia-cuda-nvrtc-cu12
    python scripts/cuda_compile_check.py      # finds libnvrtc.so.12 under /tmp/nvrtc, else --nvrtc PATH

Builds ttscli.models.qwen3_tts.cuda_frame's kernel the way MLX does (the body inside a templated
``__global__`` function, the header before it) for Qwen3-TTS 0.6B's code predictor (1 and 4
rows, greedy and top-k) and the tiny fixture's, for sm_90. Exit status 1 on any error.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttscli.lm.cuda_kernels import GRID_HELPERS
from ttscli.models.qwen3_tts.cuda_frame import _SOURCE

INPUTS = ["hidden", "c0", "ln1", "wqkv", "qn", "kn", "wo", "ln2", "wgu", "wd", "fnorm", "heads", "emb",
          "proj_w", "proj_b", "inv_freq", "params", "noise"]
REAL = dict(B=1, L=5, HC=1024, HIN=1024, H=16, HK=8, D=128, I=3072, V=2048, VP=2048, P=16, NCB=15,
            PROJ=False, GREEDY=False, TOPK=50, THREADS=512)
CASES = {"0.6b": REAL, "0.6b-4rows-greedy": REAL | dict(B=4, GREEDY=True, TOPK=0),
         "1.7b-proj": REAL | dict(B=2, HIN=2048, PROJ=True),
         "tiny": dict(B=1, L=2, HC=32, HIN=32, H=4, HK=2, D=16, I=64, V=128, VP=128, P=16, NCB=15,
                      PROJ=False, GREEDY=True, TOPK=0, THREADS=512)}


def program(t: dict) -> str:
    args = ", ".join(("bool " if isinstance(v, bool) else "int ") + k for k, v in t.items())
    vals = ", ".join(("true" if v else "false") if isinstance(v, bool) else str(v) for v in t.values())
    sig = ", ".join(f"const float* {n}" for n in INPUTS) + ", int* codes, float* total, float* scratch"
    types = ", ".join("const float*" for _ in INPUTS) + ", int*, float*, float*"
    return (f"#define INFINITY __int_as_float(0x7f800000)\n{GRID_HELPERS}\ntemplate <{args}>\n"
            f"__global__ void kernel({sig}) {{\n{_SOURCE}\n}}\ntemplate __global__ void kernel<{vals}>({types});\n")


def compile_one(lib, code: str) -> tuple[int, str]:
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), b"kernel.cu", 0, None, None)
    opts = [b"--gpu-architecture=compute_90", b"--std=c++17", b"-default-device"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, log.value.decode(errors="replace")


TALKER = dict(HC=1024, H=16, HK=8, D=128, I=3072, V=3072, QKNORM=True)       # Qwen3-TTS 0.6B
T3 = dict(HC=1024, H=16, HK=16, D=64, I=4096, V=8194, QKNORM=False)          # Chatterbox (Llama 520M)


def step_program(layers: int, rows: int, sizes: dict = TALKER) -> str:
    """ttscli.lm.cuda_step's kernel at these stack sizes."""
    from ttscli.lm.cuda_step import _BODY, KINDS

    t = dict(B=rows, L=layers, **sizes, THREADS=512)
    ins = ["x", *KINDS, "cache", "fnorm", "head", "inv_freq", "params"]
    args = ", ".join(("bool " if isinstance(v, bool) else "int ") + k for k, v in t.items())
    vals = ", ".join(("true" if v else "false") if isinstance(v, bool) else str(v) for v in t.values())
    outs = ["logits", "hidden", "cache_out", "scratch"]
    sig = (", ".join(f"const float* {n}" for n in ins) + ", const int* pos_in, const int* cache_shape, "
           + ", ".join(f"float* {n}" for n in outs))
    types = ", ".join("const float*" for _ in ins) + ", const int*, const int*, " + ", ".join("float*" for _ in outs)
    return (f"#define INFINITY __int_as_float(0x7f800000)\n{GRID_HELPERS}\ntemplate <{args}>\n"
            f"__global__ void kernel({sig}) {{\n{_BODY}\n}}\n"
            f"template __global__ void kernel<{vals}>({types});\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvrtc", help="path of libnvrtc.so.12 (default: searched under /tmp/nvrtc)")
    a = ap.parse_args()
    path = a.nvrtc or next(iter(sorted(glob.glob("/tmp/nvrtc/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/"
                                                 "libnvrtc.so.12"))), None)
    if not path:
        print("libnvrtc.so.12 not found: pip install nvidia-cuda-nvrtc-cu12 (see the docstring)", file=sys.stderr)
        return 2
    lib = ctypes.CDLL(path)
    bad = 0
    programs = {name: program(t) for name, t in CASES.items()}
    programs |= {"step-28-layers": step_program(28, 1), "step-28-layers-2rows": step_program(28, 2),
                 "step-t3-30-layers-2rows": step_program(30, 2, T3)}
    for name, code in programs.items():
        rc, log = compile_one(lib, code)
        print(f"{name}: {'ok' if rc == 0 else 'FAILED'}" + (f"\n{log}" if rc or log.strip() else ""))
        bad += rc != 0
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
