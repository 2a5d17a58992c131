"""The published ONNX graph under onnxruntime, as the reference for parity (optional dependency).

Its two ``RandomNormalLike`` nodes (duration noise, prior noise) become graph inputs, so the
reference and our model can be fed identical standard-normal noise and compared at the
voice's default noise scales, not only at zero noise.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ttscli.errors import BackendUnavailableError


class OnnxVits:
    def __init__(self, onnx_path: Path, threads: int = 1):
        try:
            import onnx
            import onnxruntime as ort
        except ImportError as err:
            raise BackendUnavailableError("onnxruntime is not installed: pip install onnxruntime") from err
        model = onnx.load(str(onnx_path))
        self.noise_inputs: dict[str, str] = {}
        for node in list(model.graph.node):
            if node.op_type == "RandomNormalLike":
                out = node.output[0]
                model.graph.node.remove(node)
                model.graph.input.append(onnx.helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None))
                self.noise_inputs["dp" if node.name.startswith("/dp/") else "prior"] = out
        if set(self.noise_inputs) != {"dp", "prior"}:
            raise BackendUnavailableError(f"{onnx_path.name}: unexpected noise nodes {sorted(self.noise_inputs)}")
        self.channels = next(
            (int(i.dims[0]) for i in model.graph.initializer if i.name == "enc_p.proj.bias"), 384) // 2
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])

    def __call__(self, ids, noise_scale: float, length_scale: float, noise_w: float,
                 dp_noise: np.ndarray | None = None, prior_noise: np.ndarray | None = None) -> np.ndarray:
        """Audio for one id sequence. ``dp_noise [1, 2, T]``, ``prior_noise [1, C, F]``
        (channels-first, as in the graph); None means zeros."""
        t = len(ids)
        if dp_noise is None:
            dp_noise = np.zeros((1, 2, t), np.float32)
        if prior_noise is None:
            prior_noise = np.zeros((1, self.channels, 1), np.float32)    # broadcasts over frames
        feeds = {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([t], dtype=np.int64),
            "scales": np.array([noise_scale, length_scale, noise_w], dtype=np.float32),
            self.noise_inputs["dp"]: dp_noise.astype(np.float32),
            self.noise_inputs["prior"]: prior_noise.astype(np.float32),
        }
        return self.session.run(None, feeds)[0].reshape(-1)
