"""VoxCPM2 (OpenBMB): a MiniCPM-4 LM planning continuous AudioVAE latents, a local diffusion
transformer drawing them patch by patch, the AudioVAE decoding them at 48 kHz."""
