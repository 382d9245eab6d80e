"""A VAE decode in diffusers' overlapping tiles: the tile grid by hand, the work it adds, and bad tile settings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.workloads.dit.components import vae_decode_s, vae_decoder
from plait.workloads.dit.model import check_dit, read_dit
from plait.workloads.dit.vae_tiling import tile_sides, tiled_vae_decode_s

ROOT = Path(__file__).resolve().parents[1]
A100 = get_cluster("dgx-a100-ib").accelerator


def test_mochi_at_848x480_cuts_into_the_tiles_counted_by_hand() -> None:
    """256 px tiles every 192 px at 8 px a latent pixel: 32-pixel tiles every 24. Width 848 / 8 = 106: starts
    0, 24, 48, 72, 96 -> 32, 32, 32, 32, 10 (138 of 106); height 480 / 8 = 60: starts 0, 24, 48 -> 32, 32, 12."""
    assert tile_sides(106, 32, 24) == [32, 32, 32, 32, 10]
    assert tile_sides(60, 32, 24) == [32, 32, 12]


def test_a_tiled_decode_is_its_tiles_decoded_one_by_one() -> None:
    """5 x 3 = 15 tiles: 8 of 256 x 256, 2 of 80 x 256, 4 of 256 x 96 and one 80 x 96 pixels, 49 frames each."""
    vae, frames = vae_decoder("mochi"), 49
    by_hand = (8 * vae_decode_s(vae, 256, 256, frames, A100) + 2 * vae_decode_s(vae, 80, 256, frames, A100)
               + 4 * vae_decode_s(vae, 256, 96, frames, A100) + vae_decode_s(vae, 80, 96, frames, A100))
    tiled = tiled_vae_decode_s(vae, 848, 480, frames, 8, 256, 192, A100)
    assert tiled == pytest.approx(by_hand)
    assert tiled > vae_decode_s(vae, 848, 480, frames, A100)  # the overlaps decode twice
    assert tiled_vae_decode_s(vae, 848, 480, frames, 8, 0, 0, A100) == vae_decode_s(vae, 848, 480, frames, A100)
    assert tiled_vae_decode_s(vae, 256, 256, frames, 8, 256, 192, A100) == vae_decode_s(vae, 256, 256, frames, A100)


@pytest.mark.parametrize("tile, stride", [(256, 0), (256, 300), (250, 192), (-8, 0)])
def test_bad_tiles_are_one_line(tile: int, stride: int) -> None:
    spec, job = read_dit(ROOT / "examples" / "mochi-1-480p.toml")
    with pytest.raises(ConfigError, match=f"vae_tile_px={tile} and vae_tile_stride_px={stride} must be") as caught:
        check_dit(spec, replace(job, vae_tile_px=tile, vae_tile_stride_px=stride), "job")
    assert "\n" not in str(caught.value)


def test_a_hunyuanvideo_decode_runs_in_overlapping_frame_runs_as_its_official_vae_cuts_them() -> None:
    """129 frames at 4 a latent frame after the first: 33 latent frames. Runs of 64 frames every 48 are 16 latent
    frames every 12, each taking one more (``z[:, :, i : i + 17]``): starts 0, 12, 24 -> 17, 17 and 9 latent frames,
    decoded to 1 + 4 x 16 = 65, 65 and 1 + 4 x 8 = 33 frames, each in 256 px tiles every 192 (1280 x 720: 160 x 90
    latent pixels, 7 x 4 tiles). A video no longer than a run decodes its frames at once."""
    vae, h100 = vae_decoder("hunyuan-video"), get_cluster("dgx-h100-ib").accelerator
    assert tile_sides(160, 32, 24) == [32] * 6 + [16] and tile_sides(90, 32, 24) == [32, 32, 32, 18]
    runs = tiled_vae_decode_s(vae, 1280, 720, 129, 8, 256, 192, h100, 64, 48, 4)
    by_hand = sum(tiled_vae_decode_s(vae, 1280, 720, f, 8, 256, 192, h100) for f in (65, 65, 33))
    assert runs == pytest.approx(by_hand)
    assert runs > tiled_vae_decode_s(vae, 1280, 720, 129, 8, 256, 192, h100)  # frames of the overlaps twice
    assert tiled_vae_decode_s(vae, 1280, 720, 61, 8, 256, 192, h100, 64, 48, 4) == pytest.approx(
        tiled_vae_decode_s(vae, 1280, 720, 61, 8, 256, 192, h100))  # 16 latent frames: one run


@pytest.mark.parametrize("run, stride", [(64, 0), (64, 68), (62, 48), (-4, 0)])
def test_bad_frame_runs_are_one_line(run: int, stride: int) -> None:
    spec, job = read_dit(ROOT / "examples" / "mochi-1-480p.toml")
    spec = replace(spec, vae_temporal=4)
    with pytest.raises(ConfigError, match=f"vae_tile_frames={run} and vae_tile_stride_frames={stride} must be"):
        check_dit(spec, replace(job, vae_tile_frames=run, vae_tile_stride_frames=stride), "job")
