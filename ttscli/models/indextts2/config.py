"""IndexTTS2's ``config.yaml``: the sizes of every component and the names of the folder's files.

The file is plain YAML (read with ``yaml.safe_load``, never a loader that builds objects). Each
component reads its own section into its own dataclass (``GPTArgs``, ``ConditionArgs``,
``SemanticCodecArgs``, ``S2MelArgs``), so this module keeps the sections as they are and the
file names around them. ``release_config.yaml`` is the published file (``IndexTeam/IndexTTS-2``),
used for ``--random-weights`` at the real size.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttscli.errors import CheckpointError

RELEASE = Path(__file__).with_name("release_config.yaml")
EMOTIONS = ("happy", "angry", "sad", "afraid", "disgusted", "melancholic", "surprised", "calm")
EMO_NUM = (3, 17, 2, 8, 4, 5, 10, 24)     # rows per emotion in feat1.pt / feat2.pt


@dataclass
class IndexTTS2Args:
    gpt: dict[str, Any]
    semantic_codec: dict[str, Any]
    s2mel: dict[str, Any]
    gpt_checkpoint: str = "gpt.pth"
    s2mel_checkpoint: str = "s2mel.pth"
    w2v_stat: str = "wav2vec2bert_stats.pt"
    emo_matrix: str = "feat2.pt"
    spk_matrix: str = "feat1.pt"
    emo_num: tuple[int, ...] = EMO_NUM
    qwen_emo_path: str = "qwen0.6bemo4-merge/"
    bpe_model: str = "bpe.model"
    version: float = 2.0
    source: str = "config.yaml"
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def feature_width(self) -> int:
        """The w2v-BERT feature width the conditioners and the codec read (1024 published;
        the test fixtures narrow it and say so in the ``gpt`` section)."""
        return int(self.gpt.get("feature_width", 1024))

    @property
    def mel_sample_rate(self) -> int:
        return int(self.s2mel.get("preprocess_params", {}).get("sr", 22050))


def _section(d: dict, name: str, source: str) -> dict:
    v = d.get(name)
    if not isinstance(v, dict):
        raise CheckpointError(f"{source}: no {name!r} section (an IndexTTS2 config.yaml has gpt, semantic_codec "
                              "and s2mel)")
    return v


def parse(d: Any, source: str = "config.yaml") -> IndexTTS2Args:
    if not isinstance(d, dict):
        raise CheckpointError(f"{source}: not a YAML mapping")
    emo_num = tuple(int(n) for n in d.get("emo_num", EMO_NUM))
    if len(emo_num) != len(EMOTIONS):
        raise CheckpointError(f"{source}: emo_num has {len(emo_num)} counts, expected {len(EMOTIONS)}")
    names = {k: str(d[k]) for k in ("gpt_checkpoint", "s2mel_checkpoint", "w2v_stat", "emo_matrix", "spk_matrix",
                                     "qwen_emo_path") if k in d}
    bpe = d.get("dataset", {}).get("bpe_model", "bpe.model") if isinstance(d.get("dataset"), dict) else "bpe.model"
    return IndexTTS2Args(gpt=_section(d, "gpt", source), semantic_codec=_section(d, "semantic_codec", source),
                         s2mel=_section(d, "s2mel", source), emo_num=emo_num, bpe_model=str(bpe),
                         version=float(d.get("version", 2.0)), source=source, raw=d, **names)


def read_args(folder: Path | None) -> IndexTTS2Args:
    """``folder/config.yaml``, or the published sizes (``folder`` None: random weights)."""
    import yaml

    path = RELEASE if folder is None else Path(folder) / "config.yaml"
    if not path.is_file():
        raise CheckpointError(f"{folder}: no config.yaml (an IndexTTS2 folder holds config.yaml, gpt.pth, s2mel.pth, "
                              "bpe.model, wav2vec2bert_stats.pt, feat1.pt, feat2.pt)")
    try:
        d = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise CheckpointError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    return parse(d, str(path))
