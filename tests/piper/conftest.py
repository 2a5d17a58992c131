"""Shared fixtures: the embedded joe-medium voice, our converted model, onnxruntime references."""
from __future__ import annotations

import json
from pathlib import Path

import ttscli  # noqa: F401  (first: preloads OpenBLAS before mlx is imported)

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "piper"


@pytest.fixture(scope="session")
def voice_dir() -> Path:
    from ttscli.models.piper import default_voice_dir
    return default_voice_dir()


@pytest.fixture(scope="session")
def id_map(voice_dir) -> dict:
    return json.loads((voice_dir / "en_US-joe-medium.onnx.json").read_text(encoding="utf-8"))["phoneme_id_map"]


@pytest.fixture(scope="session")
def converted(voice_dir, tmp_path_factory) -> Path:
    from ttscli.models.piper import convert_onnx
    return convert_onnx(voice_dir / "en_US-joe-medium.onnx", tmp_path_factory.mktemp("piper") / "mlx")


@pytest.fixture(scope="session")
def model(converted):
    from ttscli.models.piper import load_converted
    return load_converted(converted)[0]


class OnnxVits:
    """The published ONNX graph with its two RandomNormalLike nodes turned into inputs, so the
    reference and our model can be fed the same standard-normal noise."""

    def __init__(self, onnx_path: Path):
        import onnx
        import onnxruntime as ort

        m = onnx.load(str(onnx_path))
        self.noise_inputs = {}
        for node in list(m.graph.node):
            if node.op_type == "RandomNormalLike":
                out = node.output[0]
                m.graph.node.remove(node)
                m.graph.input.append(onnx.helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None))
                self.noise_inputs["dp" if node.name.startswith("/dp/") else "prior"] = out
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        self.session = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])

    def __call__(self, ids, noise_scale, length_scale, noise_w, dp_noise=None, prior_noise=None):
        """dp_noise ``[1, 2, T]``, prior_noise ``[1, 192, F]`` (channels-first, as the graph)."""
        t = len(ids)
        if dp_noise is None:
            dp_noise = np.zeros((1, 2, t), np.float32)
        feeds = {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([t], dtype=np.int64),
            "scales": np.array([noise_scale, length_scale, noise_w], dtype=np.float32),
            self.noise_inputs["dp"]: dp_noise.astype(np.float32),
        }
        if prior_noise is None:
            prior_noise = np.zeros((1, 192, 1), np.float32)      # broadcasts over the frames
        feeds[self.noise_inputs["prior"]] = prior_noise.astype(np.float32)
        return self.session.run(None, feeds)[0].reshape(-1)


@pytest.fixture(scope="session")
def onnx_ref(voice_dir) -> OnnxVits:
    pytest.importorskip("onnxruntime")
    return OnnxVits(voice_dir / "en_US-joe-medium.onnx")
