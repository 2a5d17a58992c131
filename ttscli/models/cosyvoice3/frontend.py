"""CosyVoice3's front end: the text tokenizer (Qwen2 BPE plus CosyVoice3's added specials), and a
reference recording -> the voice prompt (speech tokens, prompt mel, x-vector).

The two reference encoders ship as ONNX graphs (``speech_tokenizer_v3.onnx``: 128-bin Whisper
log-mel of 16 kHz audio -> 25 Hz tokens; ``campplus.onnx``: Kaldi fbank -> 192-d x-vector) and
run on onnxruntime as upstream runs them; their inputs are computed with the shared S3Gen
feature code (``s3_log_mel``, ``kaldi_fbank``, ``prompt_mel`` with the mel top at Nyquist).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ttscli.errors import CheckpointError, UsageError

# upstream CosyVoice3Tokenizer's additional special tokens, in its order: each not already in the
# vocabulary gets the next id (<|endofprompt|> = 151646 on the published vocabulary)
_ARPABET = ("AA AA0 AA1 AA2 AE AE0 AE1 AE2 AH AH0 AH1 AH2 AO AO0 AO1 AO2 AW AW0 AW1 AW2 AY AY0 AY1 AY2 B CH D DH "
            "EH EH0 EH1 EH2 ER ER0 ER1 ER2 EY EY0 EY1 EY2 F G HH IH IH0 IH1 IH2 IY IY0 IY1 IY2 JH K L M N NG OW "
            "OW0 OW1 OW2 OY OY0 OY1 OY2 P R S SH T TH UH UH0 UH1 UH2 UW UW0 UW1 UW2 V W Y Z ZH")
_PINYIN = ("a ai an ang ao b c ch d e ei en eng f g h i ian in ing iu ià iàn iàng iào iá ián iáng iáo iè ié iòng "
           "ióng iù iú iā iān iāng iāo iē iě iōng iū iǎ iǎn iǎng iǎo iǒng iǔ j k l m n o ong ou p q r s sh t u uang "
           "ue un uo uà uài uàn uàng uá uái uán uáng uè ué uì uí uò uó uā uāi uān uāng uē uě uī uō uǎ uǎi uǎn uǎng "
           "uǐ uǒ vè w x y z zh à ài àn àng ào á ái án áng áo è èi èn èng èr é éi én éng ér ì ìn ìng í ín íng ò "
           "òng òu ó óng óu ù ùn ú ún ā āi ān āng āo ē ēi ēn ēng ě ěi ěn ěng ěr ī īn īng ō ōng ōu ū ūn ǎ ǎi ǎn "
           "ǎng ǎo ǐ ǐn ǐng ǒ ǒng ǒu ǔ ǔn ǘ ǚ ǜ")
SPECIAL_TOKENS = ("<|im_start|> <|im_end|> <|endofprompt|> [breath] <strong> </strong> [noise] [laughter] [cough] "
                  "[clucking] [accent] [quick_breath] <laughter> </laughter> [hissing] [sigh] [vocalized-noise] "
                  "[lipsmack] [mn] <|endofsystem|>").split() + [f"[{p}]" for p in (_ARPABET + " " + _PINYIN).split()]
END_OF_PROMPT = "<|endofprompt|>"
END_OF_PROMPT_ID = 151646
# upstream's examples put this system line before <|endofprompt|> in every mode
SYSTEM = "You are a helpful assistant."

S3_SR = 16000
MAX_REF_S = 30          # upstream's speech tokenizer refuses references longer than 30 s


def load_text_tokenizer(folder: Path):
    """``CosyVoice-BlankEN``'s Qwen2 BPE with :data:`SPECIAL_TOKENS` added as upstream adds them."""
    from ttscli.lm.tokenizer import load_tokenizer

    tok = load_tokenizer(Path(folder) / "CosyVoice-BlankEN")
    tok.add_special_tokens(["<|endoftext|>", *SPECIAL_TOKENS])
    got = tok.token_to_id(END_OF_PROMPT)
    # on Qwen's published vocabulary (<|endoftext|> = 151643) upstream's LM expects this id
    if tok.token_to_id("<|endoftext|>") == END_OF_PROMPT_ID - 3 and got != END_OF_PROMPT_ID:
        raise CheckpointError(f"{folder}/CosyVoice-BlankEN: {END_OF_PROMPT} got id {got}, upstream's LM expects "
                              f"{END_OF_PROMPT_ID}: not the published CosyVoice3 vocabulary")
    return tok


def random_text_tokenizer():
    """Random weights ship no tokenizer: UTF-8 bytes, with <|endofprompt|> whole at its real id."""
    from ttscli.text import ByteTokenizer

    return ByteTokenizer({END_OF_PROMPT: END_OF_PROMPT_ID})


VOICE_FORMAT = "ttscli-cosyvoice3-voice"


@dataclass
class Voice:
    """A voice prompt as upstream's ``frontend_zero_shot`` makes it: ``tokens [P]`` (25 Hz),
    ``feat [2P, 80]`` the prompt mel, ``embedding [192]``, and the reference transcript (None:
    cross-lingual, the LM gets no reference)."""
    tokens: np.ndarray
    feat: np.ndarray
    embedding: np.ndarray
    text: str | None = None
    text_ids: list[int] | None = None      # a stored speaker's transcript, already tokenized

    def save(self, path: Path) -> Path:
        from ttscli import voicefile

        meta = {"format": VOICE_FORMAT, "version": "1"}
        if self.text is not None:
            meta["text"] = self.text
        return voicefile.save(path, {"tokens": np.asarray(self.tokens, np.int64),
                                     "feat": np.asarray(self.feat, np.float32),
                                     "embedding": np.asarray(self.embedding, np.float32)}, meta)

    @classmethod
    def load(cls, path: Path, speech_tokens: int) -> Voice:
        """A saved voice, checked against this checkpoint's codebook (one line naming what is off)."""
        from ttscli import voicefile

        tensors, meta = voicefile.load(path, VOICE_FORMAT, "CosyVoice3")
        try:
            tokens = np.asarray(tensors["tokens"], np.int64).reshape(-1)
            feat = np.asarray(tensors["feat"], np.float32)
            emb = np.asarray(tensors["embedding"], np.float32).reshape(-1)
        except KeyError as e:
            raise UsageError(f"{path}: saved voice lacks {e}") from None
        if feat.ndim != 2 or feat.shape != (2 * tokens.shape[0], 80) or emb.shape != (192,) or not tokens.size:
            raise UsageError(f"{path}: saved voice has tokens {tokens.shape}, feat {feat.shape}, embedding "
                             f"{emb.shape}; expected [P], [2P, 80], [192]")
        if tokens.min() < 0 or tokens.max() >= speech_tokens:
            raise UsageError(f"{path}: saved voice has speech tokens outside this model's {speech_tokens}")
        return cls(tokens, feat, emb, meta.get("text"))


class ReferenceEncoder:
    """The ONNX speech tokenizer and x-vector of a checkpoint folder, on onnxruntime's CPU provider."""

    def __init__(self, folder: Path):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = 1     # upstream's setting for both graphs

        def session(name):
            path = Path(folder) / name
            if not path.is_file():
                raise CheckpointError(f"{folder}: no {name} (cloning needs campplus.onnx and speech_tokenizer_v3.onnx)")
            return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])

        self.tokenizer = session("speech_tokenizer_v3.onnx")
        self.campplus = session("campplus.onnx")

    def tokens(self, wav16: np.ndarray) -> np.ndarray:
        from ttscli.codecs.s3gen.frontend import s3_log_mel

        feat = s3_log_mel(wav16, 128).T[None]
        ins = self.tokenizer.get_inputs()
        out = self.tokenizer.run(None, {ins[0].name: feat, ins[1].name: np.array([feat.shape[2]], np.int32)})[0]
        return np.asarray(out, np.int64).reshape(-1)

    def embedding(self, wav16: np.ndarray) -> np.ndarray:
        from ttscli.codecs.s3gen.xvector import kaldi_fbank

        f = kaldi_fbank(wav16)
        f = f - f.mean(axis=0, keepdims=True)
        out = self.campplus.run(None, {self.campplus.get_inputs()[0].name: f[None]})[0]
        return np.asarray(out, np.float32).reshape(-1)

    def voice(self, wav: np.ndarray, sample_rate: int, text: str | None) -> Voice:
        """Upstream ``frontend_zero_shot``: tokens and x-vector at 16 kHz, the mel at 24 kHz, then
        both cut to whole tokens (two mel frames per token)."""
        from ttscli.audio import resample
        from ttscli.codecs.s3gen.frontend import prompt_mel

        wav = np.asarray(wav, np.float32).reshape(-1)
        if wav.shape[0] > MAX_REF_S * sample_rate:
            raise UsageError(f"the reference is {wav.shape[0] / sample_rate:.1f} s; CosyVoice3's speech tokenizer "
                             f"takes at most {MAX_REF_S} s: trim it")
        wav16 = wav if sample_rate == S3_SR else resample(wav, sample_rate, S3_SR)
        wav24 = wav if sample_rate == 24000 else resample(wav, sample_rate, 24000)
        tokens = self.tokens(wav16)
        feat = prompt_mel(wav24, fmax=None)
        n = min(feat.shape[0] // 2, tokens.shape[0])
        if n < 1:
            raise UsageError("the reference is too short to give CosyVoice3 one speech token (40 ms)")
        return Voice(tokens[:n], feat[: 2 * n], self.embedding(wav16), text)


def load_speakers(path: Path, speech_tokens: int) -> dict[str, Voice]:
    """Upstream's speaker store ``spk2info.pt`` (``CosyVoice.add_zero_shot_spk`` + ``save_spkinfo``:
    per speaker id, ``frontend_zero_shot``'s tensors without the text) as voices, in file order."""
    from ttscli import torchfile

    try:
        table = torchfile.load(path)
    except torchfile.TorchFileError as e:
        raise CheckpointError(str(e)) from None
    if not isinstance(table, dict):
        raise CheckpointError(f"{path}: holds a {type(table).__name__}, not upstream's speaker table")
    out = {}
    for name, info in table.items():
        try:
            tokens = np.asarray(info["flow_prompt_speech_token"], np.int64).reshape(-1)
            feat = np.asarray(info["prompt_speech_feat"], np.float32).reshape(-1, 80)
            emb = np.asarray(info["flow_embedding"], np.float32).reshape(-1)
            text_ids = np.asarray(info["prompt_text"]).reshape(-1).tolist() if "prompt_text" in info else None
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"{path}: speaker {name!r} lacks or mis-shapes {e}") from None
        if feat.shape[0] != 2 * tokens.shape[0] or emb.shape != (192,) or not tokens.size \
                or tokens.min() < 0 or tokens.max() >= speech_tokens:
            raise CheckpointError(f"{path}: speaker {name!r} has tokens {tokens.shape}, mel {feat.shape}, x-vector "
                                  f"{emb.shape}; expected [P] within {speech_tokens} ids, [2P, 80], [192]")
        # upstream's LM sees the stored speech tokens only with a transcript (zero-shot)
        out[str(name)] = Voice(tokens, feat, emb, None, text_ids or None)
    return out


def random_voice(speech_tokens: int, n: int = 50, seed: int = 0) -> Voice:
    """A stand-in voice prompt for random weights (no ONNX encoders): 2 s of random tokens and mel."""
    rng = np.random.default_rng(seed)
    return Voice(rng.integers(0, speech_tokens, n).astype(np.int64),
                 (rng.standard_normal((2 * n, 80)) - 4.0).astype(np.float32),
                 rng.standard_normal(192).astype(np.float32), "")
