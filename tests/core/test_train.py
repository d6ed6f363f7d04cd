"""The training loop: it learns, it is reproducible, it stops and resumes, it evaluates honestly."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from core import checkpoints
from core.tasks import IGNORE, get_task
from core.train import Trainer, default_config, evaluate, format_width, lr_factor, main, train

TINY = dict(n_layers=1, d_model=32, n_heads=2)


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(task="copy", arch="decoder", **kw):
    """A one-layer, d_model 32 config for fast tests."""
    return default_config(task, arch, **{**TINY, **kw})


def losses(result):
    return [r["loss"] for r in result.history]


def test_training_lowers_the_loss():
    result = train(tiny(), "copy", steps=40, batch_size=32, lr=3e-3, seed=0, warmup=5)
    first, last = losses(result)[:5], losses(result)[-5:]
    assert sum(last) / 5 < 0.9 * sum(first) / 5
    assert result.steps == 40 and not result.stopped_early
    assert not result.model.training  # handed back in eval mode


def test_same_seed_same_history_different_seed_different():
    a = train(tiny(), "copy", steps=12, batch_size=16, seed=3, warmup=2)
    b = train(tiny(), "copy", steps=12, batch_size=16, seed=3, warmup=2)
    c = train(tiny(), "copy", steps=12, batch_size=16, seed=4, warmup=2)
    assert losses(a) == losses(b)
    assert losses(a) != losses(c)


def test_training_leaves_the_global_rng_alone():
    before = torch.random.get_rng_state()
    train(tiny(), "copy", steps=2, batch_size=8, seed=0)
    assert torch.equal(before, torch.random.get_rng_state())


def test_callback_returning_false_stops_early():
    seen = []

    def callback(info):
        seen.append(info.step)
        return info.step < 10

    result = train(tiny(), "copy", steps=100, batch_size=8, callback=callback, log_every=5)
    assert result.stopped_early and result.steps == 10
    assert seen == [5, 10]
    assert len(result.history) == 10


def test_callback_sees_progress_and_the_last_step():
    infos = []
    train(tiny(), "copy", steps=7, batch_size=8, callback=infos.append, log_every=3)
    assert [i.step for i in infos] == [3, 6, 7]
    assert all(i.total == 7 and i.elapsed >= 0 and 0 <= i.accuracy <= 1 for i in infos)


def test_two_chunks_equal_one_run():
    whole = Trainer(tiny(), "copy", steps=20, batch_size=16, seed=1, warmup=4)
    whole.run(20)
    chunked = Trainer(tiny(), "copy", steps=20, batch_size=16, seed=1, warmup=4)
    assert not chunked.run(8)
    assert chunked.run(12)
    assert chunked.step == 20 and chunked.done
    assert losses(chunked) == pytest.approx(losses(whole), rel=1e-5, abs=1e-6)
    for p, q in zip(whole.model.parameters(), chunked.model.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_length_range_trains_on_several_lengths():
    trainer = Trainer(tiny("induction"), "induction", steps=30, batch_size=4, length=(2, 10))
    widths = {trainer.batch_for(step).tokens.shape[1] for step in range(30)}
    assert len(widths) >= 4 and max(widths) <= format_width("induction", "decoder", 10)
    with pytest.raises(ValueError, match="length"):
        Trainer(tiny("induction"), "induction", length=(10, 2))


def test_lr_schedule_warms_up_then_decays():
    factors = [lr_factor(s, 100, 10) for s in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))
    assert factors[-1] == pytest.approx(0.1, abs=0.01)


class LabelStub(nn.Module):
    """A 'model' that outputs the task's own labels as one-hot logits: a perfect predictor."""

    def __init__(self, task, arch):
        super().__init__()
        self.task, self.arch = task, arch

    def forward(self, tokens, tgt=None):
        vocab = self.task.vocab
        rows = []
        for i, row in enumerate(tokens):
            tgt_row = None if tgt is None else vocab.decode(tgt[i])
            labels = torch.tensor(self.task.label(vocab.decode(row), self.arch, tgt_row))  # [pos_out]
            rows.append(labels)
        labels = torch.stack(rows)  # [batch pos_out]
        logits = torch.zeros(*labels.shape, len(vocab))  # [batch pos_out vocab]
        scored = labels != IGNORE
        logits[scored] = nn.functional.one_hot(labels[scored], len(vocab)).float()
        return logits


@pytest.mark.parametrize("task,arch", [("induction", "decoder"), ("sort", "decoder"),
                                       ("reverse", "encoder-decoder"), ("agreement", "encoder"),
                                       ("brackets", "encoder"), ("future-legality", "encoder")])
def test_evaluate_a_perfect_predictor_is_one(task, arch):
    stub = LabelStub(get_task(task), arch)
    assert evaluate(stub, task, n_samples=50, batch_size=16, arch=arch) == 1.0


def test_evaluate_an_untrained_model_is_poor():
    model = Trainer(tiny("sort"), "sort", steps=1).model
    assert evaluate(model, "sort", n_samples=64) < 0.2


def test_bad_pairs_raise_value_error():
    with pytest.raises(ValueError, match="induction"):
        train(tiny(arch="encoder"), "induction", steps=1)
    with pytest.raises(ValueError, match="arch"):
        default_config("agreement", "decoder")
    with pytest.raises(ValueError, match="vocab_size"):
        train(tiny("induction", vocab_size=10), "induction", steps=1)
    with pytest.raises(ValueError, match="src_vocab_size"):
        train(tiny("reverse", "encoder-decoder", src_vocab_size=5), "reverse", steps=1)
    with pytest.raises(ValueError, match="max_len"):
        train(tiny("induction", pos="learned", max_len=15), "induction", steps=1)
    with pytest.raises(ValueError, match="unknown task"):
        train(tiny(), "no-such-task", steps=1)
    with pytest.raises(ValueError, match="steps"):
        train(tiny(), "copy", steps=0)


def test_default_config_fits_the_task():
    cfg = default_config("induction", "decoder", pos="learned", length=(2, 10))
    assert cfg.vocab_size == len(get_task("induction").vocab)
    assert cfg.max_len == 21  # <bos> + 2 * 10 letters: exactly what training needs
    assert default_config("reverse", "encoder-decoder", d_model=32).d_model == 32


def test_cli_trains_and_saves(tmp_path, capsys):
    out = tmp_path / "copy.safetensors"
    code = main(["--task", "copy", "--arch", "decoder", "--layers", "1", "--d-model", "32", "--heads", "2",
                 "--steps", "5", "--batch-size", "8", "--eval-samples", "16", "--out", str(out)])
    assert code == 0
    model, meta = checkpoints.load(out)
    assert meta["task"] == "copy" and meta["steps"] == 5 and meta["config"]["d_model"] == 32
    assert "accuracy" in capsys.readouterr().out
