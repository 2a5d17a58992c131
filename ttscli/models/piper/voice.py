"""Any Piper voice as a model: a ``X.onnx`` with its ``X.onnx.json`` beside it, named by path
(``-m ./en_US-lessac-medium.onnx``), by a folder (``--model-dir DIR`` holding one voice) or by
name from the Hugging Face cache of rhasspy/piper-voices (``-m piper:en_US-lessac-medium``).

The voice's JSON says everything the registry would: sample rate, espeak-ng voice, phoneme map,
speakers and inference defaults, so a voice needs no registry file. Light (json and pathlib
only): the registry reads voices through it before anything heavy loads.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ttscli.errors import CheckpointError, ModelNotFoundError, UsageError
from ttscli.registry import ModelSpec

HF_REPO = "rhasspy/piper-voices"
PREFIX = "piper:"
PHONEME_TYPES = ("espeak",)       # piper-tts's other front ends (pinyin, text, ...) are not here
INFERENCE = {"noise_scale": 0.667, "length_scale": 1.0, "noise_w": 0.8}


@dataclass(frozen=True)
class Voice:
    """What a voice's ``.onnx.json`` says, checked."""

    onnx: Path
    sample_rate: int
    espeak_voice: str
    phoneme_id_map: dict
    num_speakers: int = 1
    speaker_id_map: dict = field(default_factory=dict)
    inference: dict = field(default_factory=lambda: dict(INFERENCE))
    quality: str = ""
    language: str = ""            # e.g. "de_DE"
    language_name: str = ""       # e.g. "German (Germany)"

    @property
    def name(self) -> str:
        return self.onnx.name[: -len(".onnx")]

    @property
    def speakers(self) -> list[str]:
        """Speaker names in id order."""
        return sorted(self.speaker_id_map, key=self.speaker_id_map.get)

    def speaker_id(self, voice: str | None) -> int | None:
        """The ``sid`` for ``--voice`` (a speaker name or a number below ``num_speakers``); None
        for a single-speaker voice (whose graph has no ``sid``), speaker 0 when a multi-speaker
        voice is given none."""
        if self.num_speakers <= 1:
            return None
        if voice is None:
            return 0
        if voice.strip().isdigit() and int(voice) < self.num_speakers:
            return int(voice)
        by_name = {k.lower(): v for k, v in self.speaker_id_map.items()}
        if voice.lower() in by_name:
            return by_name[voice.lower()]
        raise UsageError(f"{self.name} has no speaker {voice!r} (it has {', '.join(self.speakers) or 'no names'}; "
                         f"or a number 0..{self.num_speakers - 1})")


def config_path(onnx: Path) -> Path:
    """Where piper-tts looks for a voice's config: ``X.onnx.json`` beside ``X.onnx``."""
    return onnx.with_name(onnx.name + ".json")


def read_voice(onnx: Path) -> Voice:
    """The voice at ``onnx`` (its JSON beside it); CheckpointError naming the file when it is
    missing, unreadable, or a kind of voice ttscli cannot speak with."""
    onnx = Path(onnx)
    if not onnx.is_file():
        raise ModelNotFoundError(f"Piper voice not found: {onnx}")
    cfg = config_path(onnx)
    if not cfg.is_file():
        raise ModelNotFoundError(f"Piper voice {onnx.name} has no config: {cfg} is missing "
                                 "(it ships beside the .onnx as <voice>.onnx.json)")
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"cannot read {cfg}: {err}") from None
    return _voice(onnx, data, cfg)


def _voice(onnx: Path, data: dict, cfg: Path) -> Voice:
    kind = data.get("phoneme_type", "espeak")
    if kind not in PHONEME_TYPES:
        raise CheckpointError(f"{onnx.name}: phoneme_type {kind!r} is not supported here (espeak voices only)")
    try:
        id_map = data["phoneme_id_map"]
        espeak = data.get("espeak", {}).get("voice")
        rate = int(data["audio"]["sample_rate"])
        speakers = int(data.get("num_speakers", 1))
        speaker_map = {str(k): int(v) for k, v in (data.get("speaker_id_map") or {}).items()}
        inference = {k: float(data.get("inference", {}).get(k, v)) for k, v in INFERENCE.items()}
        language = data.get("language", {}) or {}
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise CheckpointError(f"{cfg}: not a Piper voice config ({type(err).__name__}: {err})") from None
    if not isinstance(id_map, dict) or not id_map or not espeak or rate <= 0 or speakers < 1:
        raise CheckpointError(f"{cfg}: not a Piper voice config (needs phoneme_id_map, espeak.voice, "
                              "audio.sample_rate and num_speakers >= 1)")
    bad = [k for k, v in speaker_map.items() if not 0 <= v < speakers]
    if bad:
        raise CheckpointError(f"{cfg}: speaker {bad[0]!r} has an id outside 0..{speakers - 1}")
    native = language.get("name_english", "")
    country = language.get("country_english", "")
    return Voice(onnx=onnx, sample_rate=rate, espeak_voice=str(espeak), phoneme_id_map=id_map,
                 num_speakers=speakers, speaker_id_map=speaker_map, inference=inference,
                 quality=str(data.get("audio", {}).get("quality", "")), language=str(language.get("code", "")),
                 language_name=f"{native} ({country})" if native and country else native)


def voice_spec(onnx: Path, model_id: str | None = None) -> ModelSpec:
    """A registry entry for the voice at ``onnx``, built from its JSON."""
    voice = read_voice(onnx)
    languages = [voice.espeak_voice.lower()]
    if voice.language and voice.language.replace("_", "-").lower() not in languages:
        languages.append(voice.language.replace("_", "-").lower())
    what = ", ".join(x for x in (voice.language_name or voice.language, voice.quality and f"{voice.quality} quality",
                                 f"{voice.num_speakers} speaker{'s' if voice.num_speakers > 1 else ''}") if x)
    multi = voice.num_speakers > 1
    # --voice takes a speaker's name or number; a voice without names lists the numbers
    voices = voice.speakers or ([str(i) for i in range(voice.num_speakers)] if multi else [])
    onnx = Path(os.path.abspath(onnx))      # not resolve(): the hub cache's files are links to blobs
    return ModelSpec(
        id=model_id or str(onnx),      # a path resolves again in another process (batch workers)
        name=f"Piper {voice.name} ({what})",
        family="piper",
        sample_rate=voice.sample_rate,
        implemented=True,
        source={"local": str(onnx), "files": [onnx.name, config_path(onnx).name], "cache_id": cache_id(onnx)},
        capabilities={"speak": True, "streaming": True, "languages": languages, "voices": voices,
                      "speakers": voice.num_speakers if multi else 0},
        backends={"vits": ["onnx"] if multi else ["mlx", "onnx"]},
        defaults=dict(voice.inference),
        license="see the voice's MODEL_CARD",
        origin=str(onnx),
    )


def cache_id(onnx: Path) -> str:
    """A voice file's folder name in ttscli's cache: its name and the file's SHA-256, so that two
    different voices with one name never share converted weights or a seeded graph."""
    from ttscli.filehash import file_sha256_cached

    return f"piper-{onnx.stem}-{file_sha256_cached(onnx)[:16]}"


def find_voice(folder: Path) -> Path:
    """The one ``.onnx`` in ``folder``; ModelNotFoundError when there is none or more than one."""
    found = sorted(Path(folder).glob("*.onnx"))
    if len(found) != 1:
        names = ", ".join(p.name for p in found[:5]) + (" ..." if len(found) > 5 else "")
        raise ModelNotFoundError(f"--model-dir {folder} should hold one Piper voice (X.onnx + X.onnx.json); "
                                 f"it has {len(found)} .onnx files{': ' + names if found else ''}"
                                 f"{'; name one with -m PATH.onnx' if found else ''}")
    return found[0]


def is_voice_path(name: str) -> bool:
    """Whether ``-m NAME`` names a voice file rather than a registry id."""
    return name.lower().endswith(".onnx")


def hub_path(name: str) -> str:
    """``en_US-lessac-medium`` -> ``en/en_US/lessac/medium/en_US-lessac-medium.onnx``, the
    layout of rhasspy/piper-voices."""
    parts = name.split("-")
    lang = parts[0]
    if len(parts) < 3 or "_" not in lang or not all(parts):
        raise UsageError(f"{PREFIX}{name}: a Piper voice name is LANG_REGION-NAME-QUALITY, "
                         f"e.g. {PREFIX}en_US-lessac-medium")
    speaker, quality = "-".join(parts[1:-1]), parts[-1]
    return f"{lang.split('_')[0]}/{lang}/{speaker}/{quality}/{name}.onnx"


def from_hub_cache(name: str) -> Path:
    """The voice ``name``'s ``.onnx`` from the local Hugging Face cache of rhasspy/piper-voices
    (both files must be there); ModelNotFoundError saying how to get it otherwise. Nothing is
    downloaded: a voice is fetched once, by the user, with the command the error gives."""
    from huggingface_hub import constants, try_to_load_from_cache

    path = hub_path(name)
    found = [try_to_load_from_cache(HF_REPO, f) for f in (path, path + ".json")]
    if all(isinstance(f, str) for f in found):
        onnx = Path(found[0])
        if config_path(onnx).is_file():
            return onnx
        raise ModelNotFoundError(f"{PREFIX}{name}: the cached {path} and {path}.json are in different snapshots; "
                                 f"download both again: huggingface-cli download {HF_REPO} {path} {path}.json")
    raise ModelNotFoundError(f"{PREFIX}{name}: not in the Hugging Face cache ({constants.HF_HUB_CACHE}); "
                             f"get it with: huggingface-cli download {HF_REPO} {path} {path}.json")


def resolve_voice(name: str) -> ModelSpec | None:
    """A registry entry for ``-m NAME`` when it names a Piper voice (a ``.onnx`` path or
    ``piper:VOICE``), else None."""
    if name.lower().startswith(PREFIX):
        return voice_spec(from_hub_cache(name[len(PREFIX):]), model_id=name)
    if is_voice_path(name):
        return voice_spec(Path(name).expanduser())
    return None


def for_model_dir(spec: ModelSpec, model_dir: Path) -> ModelSpec:
    """``--model-dir`` with a Piper model: ``spec`` itself when the folder holds its files,
    else the one voice the folder holds."""
    model_dir = Path(model_dir).expanduser()
    files = spec.source.get("files", [])
    for folder in (model_dir, model_dir / spec.source.get("subdir", "")):
        if files and all((folder / f).is_file() for f in files):
            return spec
    if not model_dir.is_dir():
        raise ModelNotFoundError(f"--model-dir {model_dir} is not a folder")
    return voice_spec(find_voice(model_dir))
