import pytest


@pytest.fixture(scope="session", autouse=True)
def onnx_graph_cache(tmp_path_factory):
    """The LocDiT's onnxruntime graph (the default flow_estimator on a Linux CPU) is built into
    a cache of the test session's, not the user's."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TTSCLI_CACHE", str(tmp_path_factory.mktemp("voxcpm2-cache")))
    yield
    mp.undo()
