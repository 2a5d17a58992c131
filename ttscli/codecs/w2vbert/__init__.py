"""w2v-BERT 2.0 semantic features (``facebook/w2v-bert-2.0``), a shared codec front end: IndexTTS2
(and the MaskGCT lineage) take a middle hidden state of this self-supervised Conformer as their
50 Hz speech representation.

* :mod:`.features`: :func:`seamless_inputs` / :func:`seamless_features`, transformers'
  ``SeamlessM4TFeatureExtractor`` in numpy (16 kHz audio -> ``[T, 160]`` rows and their mask);
  :class:`SeamlessArgs` reads ``preprocessor_config.json``.
* :mod:`.model`: :class:`Wav2Vec2BertModel` (MLX, named as the published ``model.safetensors``),
  ``model(features, layer, mask)`` = transformers' ``hidden_states[layer]`` running only
  ``layer`` layers; :func:`load_w2vbert` (strict, float32, optionally a shortened stack),
  :func:`random_w2vbert` (real size, random weights), :func:`semantic_features` (audio -> one
  hidden state, optionally normalised), :func:`read_stats` (``wav2vec2bert_stats.pt``).
"""
from .features import SeamlessArgs, seamless_features, seamless_inputs
from .model import (
    W2VBertArgs,
    Wav2Vec2BertModel,
    load_w2vbert,
    random_w2vbert,
    read_stats,
    semantic_features,
)

__all__ = ["SeamlessArgs", "W2VBertArgs", "Wav2Vec2BertModel", "load_w2vbert", "random_w2vbert", "read_stats",
           "seamless_features", "seamless_inputs", "semantic_features"]
