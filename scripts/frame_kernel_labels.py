"""Which kernels a Qwen3-TTS frame launches, by primitive, per part (talker step, code-predictor
frame, codebook-0 sampling): the histogram behind ``ttscli bench``'s "kernels per frame".

    python scripts/frame_kernel_labels.py [--model qwen3-tts-0.6b-base] [--top 30]

Random weights at the real dimensions; on a GPU the fast primitives (RMSNorm, RoPE, SDPA) are
one node each, on the CPU MLX expands them into their reference graphs, so run it on the
device whose figures you want to cut.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ttscli  # noqa: F401  (BLAS before mlx)

# isort: split
import mlx.core as mx

import ttscli.lm as lm
from ttscli.lm.decoder import _VIEWS, graph_primitives


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-tts-0.6b-base")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()

    from ttscli.api import load
    from ttscli.lm import MLXCodeDecoder, SamplingParams
    from ttscli.models.base import LoadOptions
    from ttscli.models.qwen3_tts.loop import frame_kernels

    pipe = load(a.model, options=LoadOptions(random_weights=True))
    parts: list[collections.Counter] = []

    def spy(*outs):
        fd, path = tempfile.mkstemp(suffix=".dot")
        os.close(fd)
        try:
            mx.export_to_dot(path, *outs)
            labels = re.findall(r'label ="([^"]*)", shape=rectangle', Path(path).read_text())
        finally:
            os.unlink(path)
        parts.append(collections.Counter(lb for lb in labels if lb not in _VIEWS))
        return graph_primitives(*outs)

    lm.graph_primitives = spy
    talker = pipe.model.talker
    dec = pipe.code_decoder
    if not isinstance(dec, MLXCodeDecoder):
        print(f"{a.model}: the code decoder is {type(dec).__name__}, not MLX", file=sys.stderr)
        return 2
    x = mx.random.normal((1, 16, talker.args.hidden_size)) * 0.1
    totals = frame_kernels(talker, dec, SamplingParams(0.9, 50, 1.0), SamplingParams(0.9, 50, 1.0, 0.0, 1.05), x)
    out = {"device": str(mx.default_device()), "totals": totals}
    for name, c in zip(("sampling", "code_predictor_frame", "talker_step"), parts):
        out[name] = {"kernels": sum(c.values()), "top": dict(c.most_common(a.top))}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
