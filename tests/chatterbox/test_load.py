"""Chatterbox loaders: the published file names and layout, strict, and conds.pt read without
ever running pickled code."""
import os
import pickle
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlx.core")

from ttscli.errors import CheckpointError, UsageError
from ttscli.models.chatterbox.conds import Conditionals
from ttscli.models.chatterbox.load import load_conds, load_t3, load_voice_encoder
from ttscli.torchfile import TorchFileError

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "chatterbox" / "tiny"


def test_default_voice_from_conds_pt():
    c = load_conds(TINY)
    assert c.speaker_emb.shape == (1, 256) and c.speaker_emb.dtype == np.float32
    assert c.prompt_tokens.shape == (1, 150) and c.prompt_tokens.max() < 6561
    assert c.exaggeration == 0.5
    assert set(c.gen) >= {"prompt_token", "prompt_token_len", "prompt_feat", "embedding"}
    assert c.gen["prompt_feat"].shape[1] == 2 * c.gen["prompt_token"].shape[1]


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_conds_pt_is_refused_unrun(tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(TINY, folder)
    marker = tmp_path / "pwned"
    # a conds.pt whose pickle calls os.system while being loaded (what torch.load without
    # weights_only would run)
    with zipfile.ZipFile(folder / "conds.pt", "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"t3": {"speaker_emb": _Payload(marker)}, "gen": {}}, protocol=2))
        zf.writestr("archive/version", "3\n")
    with pytest.raises(TorchFileError, match=r"conds.pt.*refused"):
        load_conds(folder)
    assert not marker.exists()


def test_saved_voice_round_trip(tmp_path):
    c = load_conds(TINY)
    c.exaggeration = 0.7
    c.save(tmp_path / "v.safetensors")
    d = Conditionals.load(tmp_path / "v.safetensors")
    assert d.exaggeration == pytest.approx(0.7)
    assert np.array_equal(d.speaker_emb, c.speaker_emb) and np.array_equal(d.prompt_tokens, c.prompt_tokens)
    for k, v in c.gen.items():
        assert np.array_equal(d.gen[k], v), k


def test_saved_voice_of_another_kind_is_refused(tmp_path):
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(3, np.float32)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(UsageError, match="is not a ttscli Chatterbox voice file"):
        Conditionals.load(tmp_path / "other.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"junk")
    with pytest.raises(UsageError, match="is not a readable voice file"):
        Conditionals.load(tmp_path / "junk.safetensors")


def _rewrite(folder: Path, name: str, edit) -> None:
    from safetensors.numpy import load_file, save_file

    w = load_file(str(folder / name))
    edit(w)
    save_file(w, str(folder / name))


@pytest.mark.parametrize("edit,message", [
    (lambda w: w.pop("cond_enc.perceiver.attn.to_q.bias"), "missing 1: cond_enc.perceiver.attn.to_q.bias"),
    (lambda w: w.__setitem__("extra.weight", np.zeros(2, np.float32)), "unexpected 1: extra.weight"),
    (lambda w: w.__setitem__("tfmr.norm.weight", np.zeros(3, np.float32)), "mis-shaped 1: tfmr.norm.weight"),
])
def test_t3_loads_strictly(tmp_path, edit, message):
    folder = tmp_path / "ckpt"
    shutil.copytree(TINY, folder)
    _rewrite(folder, "t3_cfg.safetensors", edit)
    with pytest.raises(CheckpointError, match=message.replace(".", r"\.")):
        load_t3(folder)


def test_voice_encoder_loads_strictly(tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(TINY, folder)
    _rewrite(folder, "ve.safetensors", lambda w: w.pop("similarity_bias"))
    with pytest.raises(CheckpointError, match="missing 1: similarity_bias"):
        load_voice_encoder(folder)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="no t3_cfg.safetensors"):
        load_t3(tmp_path)


def test_published_t3_layout():
    """The random-weight model at the published size has exactly LAYOUT.md's 292 tensors."""
    from mlx import nn
    from mlx.utils import tree_flatten

    from ttscli.models.chatterbox.config import T3Args
    from ttscli.models.chatterbox.t3 import T3

    model = T3(T3Args())
    shapes = {k: v.shape for k, v in tree_flatten(model.parameters())}
    assert len(shapes) == 292
    assert sum(int(np.prod(s)) for s in shapes.values()) == 532_405_248
    assert shapes["speech_pos_emb.emb.weight"] == (4100, 1024)
    assert shapes["cond_enc.perceiver.pre_attention_query"] == (1, 32, 1024)
    assert isinstance(model.tfmr.layers[0].self_attn.q_proj, nn.Linear)
