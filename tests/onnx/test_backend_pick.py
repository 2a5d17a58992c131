"""The one rule behind every component that runs on MLX or onnxruntime (Piper's VITS, Kokoro,
S3Gen's flow estimator): asked, else the environment variable, else the measured default; a bad
name or a missing onnxruntime is one line with the way out."""
from __future__ import annotations

import pytest

import ttscli.backends.onnx as onnx_pkg
from ttscli.backends.select import pick_mlx_or_onnx
from ttscli.errors import BackendUnavailableError, UsageError

ENV = "TTSCLI_TEST_PICK_BACKEND"
LINUX_AMD = {("linux", "AuthenticAMD"): "onnx"}


def pick(asked=None, **kw):
    return pick_mlx_or_onnx(asked, what="The widget", env_name=ENV, measured=kw.pop("measured", {}),
                            gpu_means_mlx=False, **kw)


def test_asked_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv(ENV, "onnx")
    assert pick("MLX") == "mlx"
    monkeypatch.setenv(ENV, "mlx")
    assert pick("onnx") == "onnx"
    assert pick() == "mlx"


def test_bad_names_are_one_line(monkeypatch):
    with pytest.raises(UsageError, match=r"The widget runs on mlx or onnx, not 'tpu': choose mlx or onnx"):
        pick("tpu")
    monkeypatch.setenv(ENV, "coreml")
    with pytest.raises(UsageError, match=f"{ENV}=coreml: choose mlx or onnx"):
        pick()


def test_missing_onnxruntime_names_the_way_out(monkeypatch):
    monkeypatch.setattr(onnx_pkg, "onnx_available", lambda: (False, "onnxruntime is not installed"))
    with pytest.raises(BackendUnavailableError,
                       match="The widget on onnx: onnxruntime is not installed; or choose mlx"):
        pick("onnx")
    monkeypatch.setenv(ENV, "onnx")
    with pytest.raises(BackendUnavailableError, match=f"or set {ENV}=mlx"):
        pick()
    monkeypatch.delenv(ENV)
    assert pick() == "mlx"          # a default never lands on what is not installed
