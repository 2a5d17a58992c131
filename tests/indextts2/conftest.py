import pytest


@pytest.fixture(scope="session", autouse=True)
def onnx_graph_cache(tmp_path_factory):
    """The GPT's and S2Mel's onnxruntime graphs (the defaults on a Linux CPU) are built into a
    cache of the test session's, not the user's."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TTSCLI_CACHE", str(tmp_path_factory.mktemp("indextts2-cache")))
    yield
    mp.undo()
