"""fp16's dynamic loss scaling (plait.run.loss_scale; Micikevicius et al. 2018, Sec. 3.2, with torch.amp.GradScaler's
default constants): the scaled loss's gradients come back to the unscaled ones, an overflow halves the scale, and
2000 finite steps in a row double it."""

from __future__ import annotations

import torch

from plait.run.loss_scale import LossScale, loss_scale_for


def test_the_unscaled_gradients_are_the_unscaled_losss() -> None:
    torch.manual_seed(0)
    w = torch.randn(4, 3, requires_grad=True)
    x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
    loss_fn = torch.nn.functional.cross_entropy
    loss_fn(x @ w, y).backward()
    plain = w.grad.clone()
    w.grad = None
    scale = LossScale()
    scale.wrap(loss_fn)(x @ w, y).backward()
    assert torch.allclose(w.grad, plain * 2.0**16)
    scale.unscale([w])
    assert torch.allclose(w.grad, plain, rtol=1e-6)


def test_an_overflow_halves_the_scale_and_2000_finite_steps_double_it() -> None:
    scale = LossScale()
    scale.update(False)
    assert scale.scale == 2.0**15
    for _ in range(1999):
        scale.update(True)
    assert scale.scale == 2.0**15
    scale.update(True)
    assert scale.scale == 2.0**16 and scale.finite_steps == 0
    scale.update(True)
    scale.update(False)  # an overflow restarts the count
    assert scale.scale == 2.0**15 and scale.finite_steps == 0


def test_only_fp16_runs_scale() -> None:
    assert loss_scale_for("fp16", False) is not None
    assert loss_scale_for("fp16", True) is None  # --full-precision trains fp32
    assert all(loss_scale_for(p, False) is None for p in ("bf16", "fp32", "tf32", "fp8"))


def test_a_checkpoint_keeps_the_scale_and_its_count(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A save after an overflow and 3 finite steps resumes at 2^15 with 3 steps counted (it restarted at 2^16 with
    none before); a checkpoint of a run without a scale leaves the resumed scale at its initial value. One rank,
    gloo, in this process."""
    import torch.distributed as dist

    from plait.run import checkpoint

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.AdamW(model.parameters())
        identity = checkpoint.RunIdentity(plan={}, model="toy", steps=10, seed=0)
        scale = LossScale()
        for finite in (False, True, True, True):
            scale.update(finite)
        checkpoint.Saver(tmp_path / "fp16", identity, keep=1).save(model, optimizer, 4, scale)
        checkpoint.Saver(tmp_path / "bf16", identity, keep=1).save(model, optimizer, 4)
        resumed = LossScale()
        assert checkpoint.load(tmp_path / "fp16" / "step-00000004", model, optimizer, resumed) == 4
        assert (resumed.scale, resumed.finite_steps) == (2.0**15, 3)
        fresh = LossScale()
        checkpoint.load(tmp_path / "bf16" / "step-00000004", model, optimizer, fresh)
        assert (fresh.scale, fresh.finite_steps) == (2.0**16, 0)
    finally:
        dist.destroy_process_group()
