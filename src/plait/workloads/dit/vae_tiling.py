"""A VAE decode in overlapping spatial tiles, as diffusers' ``enable_vae_tiling`` runs it.

diffusers' tiled decoders (``AutoencoderKL.tiled_decode``, ``AutoencoderKLMochi.tiled_decode``,
``AutoencoderDC.tiled_decode``; huggingface/diffusers@3f329a426a, models/autoencoders/autoencoder_kl_mochi.py
lines 1087-1124) cut the latent into tiles of ``tile_latent_min = tile_sample_min // spatial_compression_ratio``
latent pixels a side whose starts are ``tile_latent_stride = tile_sample_stride // spatial_compression_ratio``
apart (``for i in range(0, height, tile_latent_stride)``, the same along the width), decode each tile on its own
(``self.decoder(z[:, :, :, i : i + tile_latent_min, j : j + tile_latent_min])``: a tile at the edge is what is left,
``min(tile, side - start)``), then blend the overlaps (a few pointwise passes, left out). The overlapping pixels are
decoded twice or more, so a tiled decode does more work than a whole one; each tile is costed as a decode of its own
size (:func:`plait.workloads.dit.components.vae_decode_s`), at that smaller size's efficiency.

HunyuanVideo's causal 3-D VAE also tiles in time (Tencent-Hunyuan/HunyuanVideo@fa14b00,
hyvideo/vae/autoencoder_kl_causal_3d.py, ``temporal_tiled_decode``, lines 500-530): with ``tile_latent_min_tsize =
sample_tsize // time_compression_ratio`` latent frames and a quarter's overlap (``tile_overlap_factor`` 0.25, line
132), runs start every ``int(tile_latent_min_tsize * 0.75)`` latent frames and each takes ``tile_latent_min_tsize + 1``
of them (``z[:, :, i : i + self.tile_latent_min_tsize + 1]``; the last what is left), decoding ``1 + t (n - 1)``
frames from ``n`` latent frames (``t``: the frames a latent frame stands for); each run is then decoded in spatial
tiles as above (``spatial_tiled_decode``). The run's first frame, dropped after the first run, is decoded all the same.
"""

from __future__ import annotations

from plait.hardware.accelerator import Accelerator
from plait.workloads.dit.components import VaeDecoder, vae_decode_s


def tile_sides(side: int, tile: int, stride: int) -> list[int]:
    """The latent sizes of the tiles along one side of ``side`` latent pixels (module docstring)."""
    return [min(tile, side - start) for start in range(0, side, stride)]


def tiled_vae_decode_s(vae: VaeDecoder, width: int, height: int, frames: int, downsample: int, tile_px: int,
                       stride_px: int, acc: Accelerator, tile_frames: int = 0, stride_frames: int = 0,
                       temporal: int = 1) -> float:
    """The decode of a ``width x height`` output of ``frames`` frames in tiles of ``tile_px`` every ``stride_px``
    pixels (``downsample``: the VAE's pixels per latent pixel), and, with ``tile_frames``, in runs of that many frames
    every ``stride_frames`` (``temporal``: frames per latent frame after the first); untiled (``tile_px`` 0) or a
    latent no larger than a tile: one decode (module docstring)."""
    latent_frames = 1 + (frames - 1) // temporal
    run, step = tile_frames // temporal, stride_frames // temporal
    if run and latent_frames > run:
        return sum(tiled_vae_decode_s(vae, width, height, 1 + temporal * (n - 1), downsample, tile_px, stride_px, acc)
                   for n in (min(run + 1, latent_frames - start) for start in range(0, latent_frames, step)))
    tile, stride = tile_px // downsample, stride_px // downsample
    latent_w, latent_h = width // downsample, height // downsample
    if not tile or (latent_w <= tile and latent_h <= tile):
        return vae_decode_s(vae, width, height, frames, acc)
    return sum(vae_decode_s(vae, w * downsample, h * downsample, frames, acc)
               for h in tile_sides(latent_h, tile, stride) for w in tile_sides(latent_w, tile, stride))
