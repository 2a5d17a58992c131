"""What codec LMs share: the decoder-only LM (Qwen3 / Llama blocks, RoPE variants), per-request
KV caches, the code-decoder protocol and samplers. Nothing here imports a model family."""
from ttscli.lm.cache import ConcatCache, KVCache, make_cache  # noqa: F401
from ttscli.lm.config import LMArgs, RopeArgs  # noqa: F401
from ttscli.lm.decoder import CodeDecoder, MLXCodeDecoder  # noqa: F401
from ttscli.lm.model import DecoderLayer, DecoderLM, create_causal_mask  # noqa: F401
from ttscli.lm.sample import KeyStream, SamplingParams, logit_bias, sample  # noqa: F401
