"""The embedded voice's seeded graph, kept in ttscli's cache: a later load reads it without
editing the graph again (no `onnx` import) and gives the same audio to the bit; a stale,
damaged or unwritable cache still loads the voice."""
import logging
import os
import shutil

import numpy as np
import pytest

from ttscli.models.piper import onnx_vits
from ttscli.models.piper.load import default_voice_dir, find_onnx

pytest.importorskip("onnxruntime")

IDS = [1, 20, 35, 3, 59, 25, 3, 61, 100, 3, 2]


def speak(model) -> np.ndarray:
    audio, _ = model(IDS, 0.667, 1.0, 0.8, np.random.default_rng(3))
    return audio


@pytest.fixture(scope="module")
def voice():
    return find_onnx(default_voice_dir())


@pytest.fixture(scope="module")
def reference(voice):
    """Built in memory each time, as before there was a cache."""
    return speak(onnx_vits.OnnxVitsModel(voice))


def no_edit(*args, **kwargs):
    raise AssertionError("the graph was edited again instead of read from the cache")


def test_a_second_load_reads_the_cache_and_sounds_the_same(voice, reference, tmp_path, monkeypatch):
    first = onnx_vits.OnnxVitsModel(voice, tmp_path)
    assert (tmp_path / onnx_vits.GRAPH_FILE).is_file()
    monkeypatch.setattr(onnx_vits, "seeded_graph", no_edit)
    second = onnx_vits.OnnxVitsModel(voice, tmp_path)
    assert first.channels == second.channels == 192
    np.testing.assert_array_equal(speak(first), reference)
    np.testing.assert_array_equal(speak(second), reference)


def test_a_changed_source_rebuilds_the_cache(voice, tmp_path):
    source = tmp_path / "voice" / voice.name
    source.parent.mkdir()
    shutil.copy(voice, source)
    cache = tmp_path / "cache"
    onnx_vits.OnnxVitsModel(source, cache)
    built = (cache / onnx_vits.GRAPH_FILE).stat().st_mtime_ns
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))   # the same name and size, touched
    onnx_vits.OnnxVitsModel(source, cache)
    assert (cache / onnx_vits.GRAPH_FILE).stat().st_mtime_ns != built


def test_a_damaged_cache_is_rebuilt(voice, reference, tmp_path, caplog):
    (tmp_path / onnx_vits.GRAPH_FILE).write_bytes(b"not a graph")
    with caplog.at_level(logging.WARNING, logger=onnx_vits.__name__):
        model = onnx_vits.OnnxVitsModel(voice, tmp_path)
    assert "rebuilding the cached seeded graph" in caplog.text
    np.testing.assert_array_equal(speak(model), reference)
    assert (tmp_path / onnx_vits.GRAPH_FILE).stat().st_size > 1 << 20


def test_an_unwritable_cache_still_loads_the_voice(voice, reference, tmp_path):
    (tmp_path / "file").write_text("a file where the cache folder would go")
    model = onnx_vits.OnnxVitsModel(voice, tmp_path / "file" / "cache")
    np.testing.assert_array_equal(speak(model), reference)
