"""ttscli.backends.coreml: availability and the input checks in front of Core ML."""
import sys

import numpy as np
import pytest

from ttscli.backends.coreml import CoreMLModel, coreml_available, require_coreml
from ttscli.errors import BackendUnavailableError, UsageError


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the non-macOS answer")
def test_not_available_off_macos_with_one_clear_line():
    ok, why = coreml_available()
    assert not ok and why.startswith("Core ML needs macOS 15+")
    with pytest.raises(BackendUnavailableError, match=r"^Core ML needs macOS 15\+ .*--code-decoder-backend mlx$"):
        require_coreml()


class _Recorder:
    def __init__(self):
        self.calls = []

    def predict(self, feed, state=None):
        self.calls.append((feed, state))
        return {"y": np.ones(2, np.float16)}


def _model(stateful=True):
    m = object.__new__(CoreMLModel)
    m.path = type("P", (), {"name": "x.mlpackage"})()
    m.model = _Recorder()
    m.inputs = {"a": {"name": "a", "shape": [1, 3], "dtype": "float32"},
                "p": {"name": "p", "shape": [1], "dtype": "int32"}}
    m.stateful = stateful
    return m


def test_predict_checks_names_shapes_and_state_then_casts():
    m = _model()
    with pytest.raises(UsageError, match="missing input 'p'"):
        m.predict({"a": np.zeros((1, 3))}, state="s")
    with pytest.raises(UsageError, match=r"input 'a' has shape \[3\], expected \[1, 3\]"):
        m.predict({"a": np.zeros(3), "p": np.zeros(1)}, state="s")
    with pytest.raises(UsageError, match="stateful"):
        m.predict({"a": np.zeros((1, 3)), "p": np.zeros(1)})
    out = m.predict({"a": np.zeros((1, 3), np.float64), "p": np.array([4.0])}, state="s")
    feed, state = m.model.calls[-1]
    assert feed["a"].dtype == np.float32 and feed["p"].dtype == np.int32 and feed["p"][0] == 4
    assert state == "s" and out["y"].shape == (2,)
