"""Training options the Train page exposes: warm-up (0 included), the score function, key-norm
clipping, the MLP activation, and the head-diversity penalty on the information heads share."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core import checkpoints
from core.analysis import train as A
from core.train import Trainer, _forward, _loss, default_config, head_mi, head_mi_penalty, lr_factor, train

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = dict(n_layers=1, d_model=16, n_heads=2)


def tiny(**kw):
    return default_config("copy", "decoder", **{**TINY, **kw})


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# -- warm-up ------------------------------------------------------------------------------------

def test_no_warmup_starts_at_the_full_rate_and_a_warmup_starts_low():
    assert lr_factor(0, 100, 0) == 1.0
    assert lr_factor(0, 100, 10) == pytest.approx(0.1) and lr_factor(0, 100, 10) < 1.0
    assert lr_factor(9, 100, 10) == 1.0  # the last warm-up step reaches the peak
    cold = Trainer(tiny(), "copy", steps=6, batch_size=8, lr=2e-3, warmup=0)
    cold.run()
    warm = Trainer(tiny(), "copy", steps=6, batch_size=8, lr=2e-3, warmup=4)
    warm.run()
    assert cold.history[0]["lr"] == pytest.approx(2e-3)
    assert warm.history[0]["lr"] == pytest.approx(2e-3 / 4)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_a_bad_warmup_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="warmup"):
        Trainer(tiny(), "copy", steps=5, warmup=bad)


def test_the_settings_warmup_is_a_tenth_by_default_and_the_chosen_number_otherwise():
    assert A.TrainSettings(steps=300).warmup_steps == 30
    assert A.TrainSettings(steps=3000).warmup_steps == 100
    assert A.TrainSettings(steps=300, warmup=0).warmup_steps == 0
    assert A.TrainSettings(task="copy", arch="decoder", n_layers=1, d_model=16, n_heads=2, steps=10,
                           warmup=0).trainer().warmup == 0
    s, notes = A.clamp_settings({"warmup": -5})
    assert s.warmup == 0 and any("warm-up" in n and "-5" in n for n in notes)
    s, notes = A.clamp_settings({})
    assert s.warmup is None and notes == []


# -- score, key-norm clip, activation: into the model and the checkpoint --------------------------

@pytest.mark.parametrize("choice", [dict(score="dot"), dict(score="cosine"), dict(key_norm_clip=1.5),
                                    dict(act="relu")], ids=["dot", "cosine", "clip", "relu"])
def test_each_model_option_trains_and_reaches_the_model_and_its_checkpoint(choice):
    settings = A.TrainSettings(task="copy", arch="decoder", n_layers=1, d_model=16, n_heads=2, steps=8, **choice)
    trainer = settings.trainer()
    trainer.run()
    assert trainer.step == 8 and all(math.isfinite(r["loss"]) for r in trainer.history)
    want = {**choice, "key_norm_clip": choice.get("key_norm_clip")}  # 0 (off) in the settings is None in the model
    for name, value in want.items():
        assert getattr(trainer.model.cfg, name) == value
    model, meta = checkpoints.from_bytes(checkpoints.to_bytes(trainer.model, {"task": "copy"}), trusted=True)
    for name, value in want.items():
        assert getattr(model.cfg, name) == value and meta["config"][name] == value


def test_the_options_change_what_the_model_computes():
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    base = A.TrainSettings(task="copy", arch="decoder", n_layers=1, d_model=16, n_heads=2)
    ref = A.init_model(base.config(), seed=0)(ids)
    for change in (dict(score="dot"), dict(score="cosine"), dict(key_norm_clip=0.05), dict(act="relu")):
        cfg = A.TrainSettings(**{**base.to_dict(), **change}).config()
        assert not torch.allclose(A.init_model(cfg, seed=0)(ids), ref), change


def test_bad_choices_fall_back_with_a_note():
    s, notes = A.clamp_settings({"score": "bogus", "act": "tanh", "key_norm_clip": "x", "head_mi": 99})
    assert (s.score, s.act, s.key_norm_clip, s.head_mi) == ("scaled_dot", "gelu", 0.0, A.MAX_HEAD_MI)
    assert len(notes) == 4
    assert A.TrainSettings(score="bogus").problems() and A.TrainSettings(act="tanh").problems()


# -- the head-diversity penalty ----------------------------------------------------------------

def test_head_mi_is_symmetric_non_negative_and_zero_on_the_diagonal():
    z = torch.randn(16, 8, 4, 4, generator=gen())
    m = head_mi(z)
    assert m.shape == (4, 4) and m.dtype == torch.float64
    assert torch.equal(m, m.T) and (m >= 0).all() and (m.diagonal() == 0).all()


def test_head_mi_grows_when_two_heads_carry_the_same_signal():
    z = torch.randn(32, 8, 3, 4, generator=gen())
    independent = head_mi(z)[0, 1]
    z[:, :, 1] = z[:, :, 0] + 0.05 * torch.randn(32, 8, 4, generator=gen(1))
    copied = head_mi(z)
    assert copied[0, 1] > independent + 5  # nats
    assert copied[0, 2] == pytest.approx(float(head_mi(z)[0, 2]))  # the other pairs are untouched


def test_head_mi_of_one_coordinate_is_the_correlation_formula():
    x = torch.randn(4000, 1, 1, 1, generator=gen(), dtype=torch.float64)
    y = 0.6 * x + 0.8 * torch.randn(4000, 1, 1, 1, generator=gen(1), dtype=torch.float64)
    rho = float(torch.corrcoef(torch.stack([x.flatten(), y.flatten()]))[0, 1])
    m = head_mi(torch.cat([x, y], dim=2), ridge=0.0)
    assert float(m[0, 1]) == pytest.approx(-0.5 * math.log(1 - rho ** 2), rel=1e-6)


@pytest.mark.parametrize("make", [lambda: torch.zeros(4, 5, 3, 4), lambda: torch.ones(4, 5, 3, 4),
                                  lambda: torch.randn(4, 5, 3, 4, generator=gen()) * 1e6,
                                  lambda: torch.randn(4, 5, 1, 4, generator=gen()).expand(4, 5, 3, 4).clone()],
                         ids=["zeros", "constant", "huge", "identical-heads"])
def test_the_penalty_is_finite_and_differentiable_whatever_the_heads_output(make):
    z = make().requires_grad_(True)
    p = head_mi_penalty([z])
    assert torch.isfinite(p) and p >= 0
    p.backward()
    assert torch.isfinite(z.grad).all()


def test_the_penalty_is_zero_with_one_head_and_averages_over_layers():
    assert float(head_mi_penalty([torch.randn(4, 5, 1, 8, generator=gen())])) == 0.0
    a, b = torch.randn(8, 5, 3, 4, generator=gen()), torch.randn(8, 5, 3, 4, generator=gen(1))
    pairs = lambda m: m[torch.triu_indices(3, 3, 1).unbind()]  # noqa: E731
    both = torch.cat([pairs(head_mi(a)), pairs(head_mi(b))]).mean()
    assert float(head_mi_penalty([a, b])) == pytest.approx(float(both))


def test_lambda_zero_is_exactly_the_old_loss():
    old = Trainer(tiny(), "copy", steps=5, batch_size=8, seed=3, warmup=2)
    old_first = _loss(_forward(old.model, old.batch_for(0), "decoder"), old.batch_for(0).targets).item()
    old.run()
    new = Trainer(tiny(), "copy", steps=5, batch_size=8, seed=3, warmup=2, head_mi=0.0)
    new.run()
    assert [r["loss"] for r in new.history] == [r["loss"] for r in old.history]
    assert new.history[0]["loss"] == old_first
    assert "head_mi" not in new.history[0]
    for p, q in zip(old.model.parameters(), new.model.parameters()):
        assert torch.equal(p, q)


def test_with_lambda_the_training_loss_includes_the_penalty_and_its_gradient():
    lam = 0.5
    plain = Trainer(tiny(), "copy", steps=3, batch_size=8, seed=3, warmup=2)
    plain.run()
    pen = Trainer(tiny(), "copy", steps=3, batch_size=8, seed=3, warmup=2, head_mi=lam)
    pen.run()
    first = pen.history[0]
    assert first["head_mi"] > 0 and math.isfinite(first["head_mi"])
    assert first["loss"] == pytest.approx(first["ce"] + lam * first["head_mi"], rel=1e-5)
    assert first["ce"] == pytest.approx(plain.history[0]["loss"], rel=1e-5)  # same model and batch at step 0
    assert not all(torch.equal(p, q) for p, q in zip(plain.model.parameters(), pen.model.parameters()))


def test_the_penalty_lowers_what_heads_share():
    kw = dict(steps=40, batch_size=32, lr=3e-3, seed=0, warmup=5)
    cfg = tiny(n_heads=4, d_model=32)
    free = train(cfg, "copy", **kw).model
    pushed = train(cfg, "copy", head_mi=1.0, **kw).model
    off = ~np.eye(4, dtype=bool)
    shared = [A.head_mi_matrices(m, "copy")["self"][0][off].mean() for m in (free, pushed)]
    assert shared[1] < 0.8 * shared[0], shared


def test_a_negative_or_nan_lambda_is_refused():
    for bad in (-0.1, float("nan"), "1"):
        with pytest.raises(ValueError, match="head_mi"):
            Trainer(tiny(), "copy", steps=5, head_mi=bad)


def test_head_mi_matrices_cover_every_attention_kind_and_layer():
    s = A.TrainSettings(task="reverse", arch="encoder-decoder", n_layers=2, d_model=16, n_heads=2)
    model = A.init_model(s.config(), seed=0)
    mats = A.head_mi_matrices(model, "reverse")
    assert set(mats) == {"enc", "dec", "cross"}
    for m in mats.values():
        assert m.shape == (2, 2, 2) and np.isfinite(m).all() and (np.diagonal(m, axis1=1, axis2=2) == 0).all()
        np.testing.assert_array_equal(m, np.swapaxes(m, 1, 2))
    again = A.head_mi_matrices(model, "reverse")
    np.testing.assert_array_equal(mats["enc"], again["enc"])  # fixed examples: before and after compare
