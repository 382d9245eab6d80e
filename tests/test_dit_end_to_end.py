"""A diffusion generation end to end: text encoders and VAE decoders from their published configs, video and
linear-attention DiTs, the host's launches (eager vs torch.compile), step caching, and the floor that more GPUs do
not lower; hand-computed toy cases, published sizes, invariants, and the validation figure."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from plait.cost.compute import gemm_time_s
from plait.cost.flops import Gemm
from plait.errors import ConfigError
from plait.hardware.catalog import get_accelerator, get_cluster
from plait.hardware.figure import Figure
from plait.validate.datasets import dataset_path
from plait.workloads.dit.components import (
    VaeDecoder,
    text_encoder,
    vae_decode_flops_and_bytes,
    vae_decode_s,
    vae_decoder,
)
from plait.workloads.dit.cost import DitPlan, estimate_dit
from plait.workloads.dit.model import read_dit
from plait.workloads.dit.pipeline import end_to_end, step_kernels

ROOT = Path(__file__).resolve().parents[1]
H100 = get_cluster("dgx-h100-ib")


def _model(name: str):  # type: ignore[no-untyped-def]
    return read_dit(ROOT / "examples" / f"{name}.toml")


def _e2e(spec, job, plan, cluster=H100):  # type: ignore[no-untyped-def]
    return end_to_end(spec, job, plan, cluster, estimate_dit(spec, job, plan, cluster))


def test_a_toy_decoder_is_its_hand_counted_convolutions() -> None:
    """Two levels (16 then 8 channels), one ResNet block each, a 2x upsampling, 3x3 convolutions, decoding a 4-channel
    8x8 latent to 16x16 RGB: conv_in, two convolutions, the upsampling convolution at 16x16, two convolutions and a
    1x1 shortcut from 16 to 8 channels, conv_out; FLOPs 2 x pixels x C_out x 9 C_in each."""
    toy = VaeDecoder(name="toy", latent_channels=4, block_out_channels=(8, 16), layers=(1, 1), spatial_up=(2,),
                     temporal_up=(1,), kernel=(3, 3), upsample="conv", mid_resnets=0, mid_attention=False,
                     block_bytes=Figure(value=30.0, source="assumed: a test"), source="t")
    gemms, traffic = vae_decode_flops_and_bytes(toy, 16, 16, 1)
    by_hand = 2 * (64 * 16 * 9 * 4 + 2 * 64 * 16 * 9 * 16 + 256 * 16 * 9 * 16
                   + 256 * 8 * 9 * 16 + 256 * 8 * 9 * 8 + 256 * 8 * 16 + 256 * 3 * 9 * 8)
    assert sum(g.flops for g in gemms) == by_hand
    assert traffic == 30.0 * (64 * 16 + 256 * 8)  # each ResNet block's output values: 8x8 at 16, 16x16 at 8
    deep = replace(toy, deep_levels=1, deep_block_bytes=Figure(value=300.0, source="assumed: a test"))
    assert vae_decode_flops_and_bytes(deep, 16, 16, 1) == (gemms, 300.0 * 64 * 16 + 30.0 * 256 * 8)  # the first decoded


def test_a_video_decoder_grows_the_frames_back() -> None:
    """A causal 3-D decoder of 4x temporal compression decodes 13 latent frames to the 49 it was given: its last
    level runs on all 49 frames at full size (CogVideoX VAE: 720x480, 49 frames)."""
    gemms, _ = vae_decode_flops_and_bytes(vae_decoder("cogvideox"), 720, 480, 49)
    assert gemms[-1].m == 49 * 720 * 480 and gemms[-1].n == 3 and gemms[-1].k == 27 * 128


@pytest.mark.parametrize("side, published_s", [(1024, 0.0976), (2048, 0.4372)])
def test_a_flux_vae_decode_matches_a_published_measurement(side: int, published_s: float) -> None:
    """FLUX.2's VAE decoder (diffusers AutoencoderKLFlux2 defaults, huggingface/diffusers@58eb52c0
    models/autoencoders/autoencoder_kl_flux2.py: diffusers' Decoder of block_out_channels (128, 256, 512, 512),
    layers_per_block 2 and a mid attention, as FLUX.1's, from 32 latent channels) on one H200: 97.6 ms at 1024^2 and
    437.2 ms at 2048^2, the default lossless decode timed by its component harness (sgl-project/sglang PR #33451,
    'FLUX.2 VAE decoder fast path', description table). Within 15%."""
    vae = replace(vae_decoder("flux"), latent_channels=32)
    predicted = vae_decode_s(vae, side, side, 1, get_accelerator("h200"))
    assert predicted == pytest.approx(published_s, rel=0.15)


@pytest.mark.parametrize("name, vocab, published, rel", [
    ("t5-xxl", 32128, 4.76e9, 0.02),          # T5 v1.1 XXL encoder (Raffel et al.; FLUX.1's 4.7B text encoder)
    ("clip-l", 49408, 123e6, 0.02),           # CLIP ViT-L/14 text transformer (Radford et al., 2021: 123M)
    ("gemma-2-2b", 256000, 2.61e9, 0.02),     # Gemma 2 2B (Gemma Team, arXiv 2408.00118, Table 2: 2.6B)
    ("llava-llama-3-8b", 128256, 8.03e9, 0.02),  # Llama 3 8B (Meta, 8.03B)
])
def test_text_encoder_shapes_match_their_published_sizes(name: str, vocab: int, published: float,
                                                         rel: float) -> None:
    """Each layer's projections and MLP, plus the token embedding (and Llama's untied output head, which the
    encoder does not run), against the published parameter count."""
    enc = text_encoder(name)
    layer = (enc.hidden * enc.heads_dim * 2 + enc.hidden * enc.kv_dim * 2
             + enc.hidden * enc.ffn * (3 if enc.glu else 2))
    embeddings = vocab * enc.hidden * (2 if name == "llava-llama-3-8b" else 1)
    assert enc.layers * layer + embeddings == pytest.approx(published, rel=rel)


@pytest.mark.parametrize("example, published, rel", [
    ("sana-1600m-4k", 1.6e9, 0.03),        # Xie et al., arXiv 2410.10629, Table 1 (Sana-1.6B)
    ("hunyuanvideo-720p", 13e9, 0.05),     # Kong et al., arXiv 2412.03603, abstract ("13 billion parameters")
    ("consisid-480p", 5e9, 0.05),          # CogVideoX-5B (Yang et al., arXiv 2408.06072), ConsisID's base
    ("cogvideox-5b-480p", 5e9, 0.05),      # the same paper: CogVideoX-5B itself
])
def test_video_and_linear_dits_match_their_published_sizes(example: str, published: float, rel: float) -> None:
    """The blocks against the published size (ConsisID: its CogVideoX-5B blocks, its face cross-attentions apart)."""
    spec, _ = _model(example)
    assert spec.params() - spec.side_attention_params() == pytest.approx(published, rel=rel)


def test_consisid_face_cross_attention_is_counted_by_hand() -> None:
    """ConsisID: a face cross-attention after blocks 0, 2, ..., 40 of 42 (21 calls), each Q (3072 -> 2048) and output
    (2048 -> 3072) projections on the video tokens and K, V (2048 -> 2 x 2048) on the face tokens: 21 x (2 x 3072 x
    2048 + 2 x 2048^2) parameters; eager, each launches 15 kernels beside the 42 blocks' 62 and the step's kernels
    outside the blocks; compiled, two per GEMM call (five) beside the blocks' two per GEMM call and attention (8 + 1);
    and it adds exactly its two GEMMs per call and pass to the device's step."""
    spec, job = _model("consisid-480p")
    assert spec.side_attention_calls == 21
    assert spec.side_attention_params() == 21 * (2 * 3072 * 2048 + 2 * 2048**2)
    assert step_kernels(spec, job, DitPlan()) == 42 * 62 + 21 * 15 + spec.step_extra_kernels
    assert step_kernels(spec, replace(job, compiled=True), DitPlan()) == 42 * 2 * 9 + 21 * 2 * 5
    without = replace(spec, side_attention_every=0, side_attention_width=0)
    acc, tokens = H100.accelerator, job.image_tokens(spec)
    two_gemms = gemm_time_s(Gemm(tokens, 2048, 3072), acc, "bf16") + gemm_time_s(Gemm(tokens, 3072, 2048), acc, "bf16")
    with_s, without_s = (estimate_dit(s, job, DitPlan(), H100).step_s for s in (spec, without))
    assert with_s - without_s == pytest.approx(21 * job.passes * two_gemms, rel=1e-9)


def test_video_tokens_are_latent_frames_times_patches() -> None:
    """HunyuanVideo at 1280x720, 129 frames: a causal VAE of 4x temporal and 8x spatial compression and 2x2 patches:
    (1 + 128 / 4) x (720 / 16) x (1280 / 16) = 33 x 45 x 80."""
    spec, job = _model("hunyuanvideo-720p")
    assert job.image_tokens(spec) == 33 * 45 * 80


def test_linear_attention_grows_linearly_and_softmax_attention_quadratically() -> None:
    """Sana's ReLU linear attention costs the same per token at any sequence length; a softmax DiT's attention per
    token grows with the sequence (Katharopoulos et al., ICML 2020, Sec. 3.2)."""
    from plait.workloads.dit.cost import _linear_attention_s

    spec, _ = _model("sana-1600m-4k")
    acc = H100.accelerator
    assert _linear_attention_s(spec, 32768, 1, acc) == pytest.approx(2 * _linear_attention_s(spec, 16384, 1, acc))


def test_eager_kernels_per_step_are_the_model_files_count() -> None:
    """FLUX.1 on one GPU, eager: 19 double-stream blocks of 96 kernels and 38 single-stream blocks of 50 (counted
    from diffusers' forward, examples/flux-1-dev-1024px.toml); compiled: two per GEMM or attention call, a
    double-stream block's 14 GEMMs (Q, K, V, output and two MLP per stream, two modulations) and a single-stream
    block's 6 (modulation, proj_mlp, Q, K, V, proj_out), each with its attention. Ulysses adds four all-to-alls per
    layer, each between two layout copies in eager."""
    spec, job = _model("flux-1-dev-1024px")
    assert step_kernels(spec, job, DitPlan()) == 19 * 96 + 38 * 50
    assert step_kernels(spec, replace(job, compiled=True), DitPlan()) == 19 * 2 * 15 + 38 * 2 * 7
    assert step_kernels(spec, job, DitPlan(ulysses=2)) == 19 * 96 + 38 * 50 + 57 * 4 * 3


@pytest.mark.parametrize("plan", [DitPlan(), DitPlan(cfg=2), DitPlan(ulysses=2, ring=3), DitPlan(tp=2)])
def test_kernels_outside_the_blocks_run_once_a_step_on_every_gpu(plan: DitPlan) -> None:
    """ConsisID's Local Facial Extractor, embeddings, pipeline loop and scheduler run once per step on every GPU
    whatever the plan splits (xDiT's wrapper calls the extractor at every forward on each rank): the eager step
    launches exactly 7 more kernels with 7 more of them, and a compiled step none more."""
    spec, job = _model("consisid-480p")
    more = replace(spec, step_extra_kernels=spec.step_extra_kernels + 7)
    assert step_kernels(more, job, plan) - step_kernels(spec, job, plan) == 7
    compiled = replace(job, compiled=True)
    assert step_kernels(more, compiled, plan) == step_kernels(spec, compiled, plan)


def test_compile_is_never_slower_and_launches_fewer_kernels() -> None:
    """torch.compile removes launches and unfused pointwise traffic: end to end never slower at any Ulysses degree,
    and its host time per step is the smaller."""
    spec, job = _model("flux-1-dev-1024px")
    for plan in (DitPlan(), DitPlan(ulysses=2), DitPlan(ulysses=4)):
        eager, compiled = _e2e(spec, job, plan), _e2e(spec, replace(job, compiled=True), plan)
        assert compiled.total_s < eager.total_s
        assert compiled.pointwise_step_s == 0.0 < eager.pointwise_step_s
        assert eager.host_step_s > compiled.host_step_s


def test_text_encoders_and_vae_set_a_floor_more_gpus_do_not_lower() -> None:
    """The parts that run once on one GPU are the same under every plan, so four GPUs give less than 4x end to end
    even where the denoising loop scales (Amdahl)."""
    spec, job = _model("flux-1-dev-1024px")
    job = replace(job, compiled=True)
    one, four = _e2e(spec, job, DitPlan()), _e2e(spec, job, DitPlan(ulysses=4))
    assert one.text_encode_s == four.text_encode_s > 0 and one.vae_decode_s == four.vae_decode_s > 0
    assert one.total_s / four.total_s < one.denoise_s / four.denoise_s < 4.0


def test_classifier_free_guidance_doubles_the_passes_and_never_shortens_the_text_encoding() -> None:
    spec, job = _model("consisid-480p")
    on, off = _e2e(spec, job, DitPlan()), _e2e(spec, replace(job, cfg=False), DitPlan())
    assert on.text_encode_s >= off.text_encode_s and on.denoise_s > 1.8 * off.denoise_s


def test_step_caching_skips_all_blocks_but_the_first_on_its_hits() -> None:
    """cache_skip f: the denoising loop keeps 1 - f (L - 1) / L of its blocks' time (first-block cache); text encoders
    and VAE are untouched."""
    spec, job = _model("flux-1-dev-1024px")
    plain, cached = _e2e(spec, job, DitPlan()), _e2e(spec, replace(job, cache_skip=0.5), DitPlan())
    layers = 19 + 38
    assert cached.denoise_s == pytest.approx(plain.denoise_s * (1 - 0.5 * (layers - 1) / layers))
    assert cached.vae_decode_s == plain.vae_decode_s and cached.text_encode_s == plain.text_encode_s


def test_step_caching_keeps_the_kernels_outside_the_blocks() -> None:
    """A cache hit skips blocks, not the pipeline's loop, scheduler or ConsisID's Local Facial Extractor: with half
    the steps hitting, the loop keeps 1 - f (L - 1) / L of the blocks' time and all of the step's kernels outside
    them, each at the eager host's 10 + 13.3 us."""
    spec, job = _model("consisid-480p")
    plain, cached = _e2e(spec, job, DitPlan()), _e2e(spec, replace(job, cache_skip=0.5), DitPlan())
    outside_s = job.steps * spec.step_extra_kernels * 23.3e-6
    kept = 1 - 0.5 * (42 - 1) / 42
    assert cached.denoise_s == pytest.approx((plain.denoise_s - outside_s) * kept + outside_s)


@pytest.mark.parametrize("text, rule", [
    ("cache_skip = 1.0", "cache_skip=1.0 must be in [0, 1)"),
    ("frames = 0", "frames=0"),
    ("height = 100", "height=100 must be a positive multiple of vae_downsample x patch = 16"),
    ('output = "png"', "output='png' must be one of pil, tensor"),
])
def test_bad_jobs_are_one_line(tmp_path: Path, text: str, rule: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text((ROOT / "examples" / "flux-1-dev-1024px.toml").read_text().replace("cfg = false",
                                                                                        f"cfg = false\n{text}"))
    with pytest.raises(ConfigError, match=rule.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")) as caught:
        read_dit(path)
    assert "\n" not in str(caught.value)


def test_an_unknown_component_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text((ROOT / "examples" / "flux-1-dev-1024px.toml").read_text().replace('vae = "flux"', 'vae = "sd"'))
    with pytest.raises(ConfigError, match="vae 'sd' must be one of") as caught:
        read_dit(path)
    assert "\n" not in str(caught.value)


def test_the_published_latencies_are_predicted_end_to_end() -> None:
    """plait/validate/data/dit_latency.csv: every row is predicted (69; ParaAttention's, which state no size, at
    the defaults of the diffusers pipelines their example calls); the FLUX.1 rows, compiled
    (the denoiser's own work) and eager (its host's dispatch too), within 15% on average, on each of the two
    implementations (xDiT on H100, ParaAttention on A100); all rows within 15% on average (Sana's and ConsisID's
    unexplained extra remains)."""
    from plait.validate.classic import mape
    from plait.workloads.dit.validate import validate_dit

    results = validate_dit(dataset_path("dit"))
    predicted = [r for r in results if r.error_pct is not None]
    assert len(predicted) == len(results) == 69
    compiled = [r for r in predicted if "compile=yes" in r.label]
    assert len(compiled) == 9 and mape(compiled) < 15.0
    for source in ("XDIT_DOC_FLUX_H100", "PARAATTN_README_A100"):
        eager = [r for r in predicted if r.source == source and "FLUX" in r.label and "compile=no" in r.label]
        assert len(eager) in (6, 3) and mape(eager) < 15.0
    assert mape(predicted) < 15.0


def test_a_video_plan_exports_frames_and_compile_to_xdit() -> None:
    from plait.workloads.dit.xdit import xdit_arguments

    spec, job = _model("hunyuanvideo-720p")
    args = xdit_arguments(spec, replace(job, compiled=True), DitPlan(ulysses=8))
    assert args[args.index("--height") + 1] == "720" and args[args.index("--width") + 1] == "1280"
    assert args[args.index("--num_frames") + 1] == "129" and "--use_torch_compile" in args


@pytest.mark.parametrize("keys, rule", [("side_attention_every = 2", "must both be 0 or both be >= 1"),
                                        ("side_attention_width = -1", "must both be 0 or both be >= 1"),
                                        ("step_extra_kernels = -1", "step_extra_kernels=-1 must be >= 0")])
def test_a_side_attention_needs_both_keys_and_counts_are_not_negative(tmp_path: Path, keys: str, rule: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text((ROOT / "examples" / "flux-1-dev-1024px.toml").read_text().replace(
        "eager_kernels = 96", f"eager_kernels = 96\n{keys}"))
    with pytest.raises(ConfigError, match=rule):
        read_dit(path)


def test_plait_run_refuses_a_side_attention_it_does_not_build(tmp_path: Path) -> None:
    """plait run's CPU DiT has no side cross-attention: a file with one is refused in one line, not run without."""
    from tests.inprocess import cli

    path = tmp_path / "side.toml"
    path.write_text((ROOT / "examples" / "dit-tiny.toml").read_text().replace(
        "vae_downsample = 8", "vae_downsample = 8\nside_attention_every = 1\nside_attention_width = 32"))
    code, _, err = cli(["run", "--model", str(path), "--parallel", "cfg=2", "--dry-run"])
    assert code == 2 and "has no side cross-attention" in err and "\n" not in err.strip()


def test_a_tensor_parallel_side_attention_all_reduces_its_output() -> None:
    """ConsisID on tp=2: each of the 21 face cross-attentions splits its inner width over the two GPUs and
    all-reduces its output over the video tokens (Megatron's row-parallel output; Shoeybi et al., arXiv 1909.08053,
    Sec. 3): the step grows by exactly those two half-width GEMMs and that all-reduce per call and pass."""
    from plait.cost.links import collective_s

    spec, job = _model("consisid-480p")
    without = replace(spec, side_attention_every=0, side_attention_width=0)
    plan, acc, tokens = DitPlan(tp=2), H100.accelerator, job.image_tokens(spec)
    half = gemm_time_s(Gemm(tokens, 1024, 3072), acc, "bf16") + gemm_time_s(Gemm(tokens, 3072, 1024), acc, "bf16")
    reduce = float(collective_s(H100, "all_reduce", 2, 1, tokens * 3072 * 2 * job.passes))
    with_s, without_s = (estimate_dit(s, job, plan, H100).step_s for s in (spec, without))
    assert with_s - without_s == pytest.approx(21 * (job.passes * half + reduce), rel=1e-9)


@pytest.mark.parametrize("rotary, mlp, kind, extra_bytes", [
    # 1 layer, H = 8, r = 4, 4 image tokens (32 px / 16 a side), 2 text tokens, one pass:
    # rotary on Q and K of the 4 video tokens, 22 B a value (46 moved by the six fp32 kernels, 24 charged):
    # 2 x 4 x 8 x 22 = 1408; the GELU on 4H over all 6 joined tokens: 6 x 2 x 3 x 8 x 2 B = 576
    ("image", "plain", "joint", 1408 + 576),
    ("all", "plain", "joint", 2 * 6 * 8 * 22 + 576),  # rotary on the 2 text tokens too
    ("none", "plain", "joint", 576),
    # SwiGLU: the gate's SiLU (2 rH) and the product (3 rH) against two H-wide kernels: (5 x 4 - 4) H a token
    ("none", "swiglu", "joint", 6 * 16 * 8 * 2),
    # Sana's GLUMBConv adds SiLU on the whole 2 rH (4 rH - 2 H), on its 4 image tokens only
    ("none", "glumbconv", "linear", 4 * (16 + 14) * 8 * 2),
])
def test_eager_pointwise_traffic_beyond_the_blocks_width_is_counted_by_hand(
        rotary: str, mlp: str, kind: str, extra_bytes: float) -> None:
    """Eager kernels that move more than one bf16 read and write of the block's width (diffusers' fp32
    ``apply_rotary_emb``, the MLP's activation on its inner width), on a toy block; Ulysses halves each GPU's share,
    a compiled run fuses them away."""
    from plait.cost.compute import memory_bytes_per_s
    from plait.workloads.dit.eager_traffic import extra_step_bytes
    from plait.workloads.dit.model import DitJob, DitSpec
    from plait.workloads.dit.pipeline import pointwise_step_s

    spec = DitSpec(name="toy", kind=kind, hidden=8, layers=1, heads=1, mlp_ratio=4.0, patch=2, vae_downsample=8,
                   text_tokens=2, mlp=mlp, rotary_fp32=rotary)  # type: ignore[arg-type]
    job = DitJob(resolution=32, cfg=False, steps=1)
    assert extra_step_bytes(spec, job, DitPlan()) == extra_bytes
    assert extra_step_bytes(spec, job, DitPlan(ulysses=2)) == extra_bytes / 2
    eager_s = pointwise_step_s(spec, job, DitPlan(), H100)
    assert eager_s * memory_bytes_per_s(H100.accelerator) == pytest.approx(extra_bytes, rel=1e-12)  # no counted kernels
    assert _e2e(spec, replace(job, compiled=True), DitPlan()).pointwise_step_s == 0.0


def test_batched_linear_attention_copies_k_and_q_in_fp32() -> None:
    """A toy linear-attention block (1 layer, H = 8, 4 image tokens): with classifier-free guidance on one GPU both
    passes run in one forward and torch.matmul copies fp32 K and Q before its batched products, 2 x (4 + 4) B a
    value: 1 x 4 x 8 x 16 B a pass more than the two passes' own traffic. CFG-parallel (one pass a GPU) and Ulysses
    (xDiT's explicit copies) do not add it."""
    from plait.workloads.dit.eager_traffic import extra_step_bytes
    from plait.workloads.dit.model import DitJob, DitSpec

    spec = DitSpec(name="toy", kind="linear", hidden=8, layers=1, heads=1, mlp_ratio=4.0, patch=2, vae_downsample=8,
                   text_tokens=2, mlp="glumbconv")
    one_pass = DitJob(resolution=32, cfg=False, steps=1)
    both = replace(one_pass, cfg=True)
    per_pass = extra_step_bytes(spec, one_pass, DitPlan())
    assert extra_step_bytes(spec, both, DitPlan()) == 2 * (per_pass + 4 * 8 * 16)
    assert extra_step_bytes(spec, both, DitPlan(cfg=2)) == per_pass
    assert extra_step_bytes(spec, both, DitPlan(ulysses=2)) == per_pass  # two passes on half the tokens
