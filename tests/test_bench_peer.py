"""`ttscli bench --peer`: a peer the family does not compare with is one clear error, given before
any variant is loaded or timed (a real-size bench can take minutes)."""
from __future__ import annotations

import pytest

from ttscli import bench
from ttscli.errors import UsageError
from ttscli.registry import load_registry


@pytest.mark.parametrize("model,peer,have", [("chatterbox", "mlx-audio", "none"),
                                             ("piper-joe", "nobody", "piper-tts")])
def test_an_unknown_peer_is_refused_before_any_variant_runs(monkeypatch, model, peer, have):
    def never(*args, **kwargs):
        raise AssertionError("a variant ran before the peer was checked")

    monkeypatch.setattr(bench, "run_variant", never)
    req = bench.BenchRequest(model=model, random_weights=True, peer=peer)
    with pytest.raises(UsageError, match=f"--peer {peer}: the .* family compares with: {have}$"):
        bench.run_bench(req, load_registry())
