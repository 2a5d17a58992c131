"""BigVGAN v2 (NVIDIA's universal vocoder, as published at ``nvidia/bigvgan_v2_*``): log-mel ->
waveform. A shared codec: it imports no family (IndexTTS2 uses the 22 kHz, 80-band, 256x model).

* :class:`BigVGANArgs` is the published ``config.json`` (:data:`V2_22KHZ_80BAND_256X`: the
  22 kHz, 80-band, 256x model's values);
* :func:`load_bigvgan` reads the published folder (``config.json`` + ``bigvgan_generator.pt``,
  weight-normed, loaded strictly) into a :class:`BigVGAN`;
* :func:`random_bigvgan` builds one at a config's size with random weights (bench, tests);
* ``BigVGAN(mel)`` maps ``[B, T, num_mels]`` (channels-last log mel) to ``[B, T * hop]`` float32.
"""
from .config import V2_22KHZ_80BAND_256X, BigVGANArgs
from .model import BigVGAN, load_bigvgan, random_bigvgan

__all__ = ["V2_22KHZ_80BAND_256X", "BigVGAN", "BigVGANArgs", "load_bigvgan", "random_bigvgan"]
