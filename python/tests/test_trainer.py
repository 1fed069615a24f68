"""hspmd.Trainer: `hspmd train`'s options as keywords, one-process training equal to the CLI's,
tensors through DLPack without copies, errors with the CLI's messages."""
import json
import math
import re

import numpy as np
import pytest

import hspmd

OPTIONS = dict(steps=3, seq_len=64, global_batch_tokens=512, threads=1)


def cli_losses(cli, src, dataset, tmp_path, *extra):
    metrics = tmp_path / "metrics.jsonl"
    cli("train", "--model", src / "configs/llama-tiny.json", "--data", dataset, "--steps", 3, "--seq-len", 64,
        "--global-batch-tokens", 512, "--threads", 1, "--metrics", metrics, *extra)
    return [json.loads(line)["loss"] for line in metrics.read_text().splitlines() if '"loss"' in line]


def test_every_cli_option_is_a_keyword_with_the_cli_default(cli, src):
    help_text = cli("train", "--help")
    flags = set(re.findall(r"^\s+(--[a-z][a-z0-9-]*)", help_text, re.MULTILINE)) - {"--help"}
    keywords = {f[2:].replace("-", "_") for f in flags}
    options = hspmd.train_options()
    assert keywords == set(options) | {"model"}
    # Every default the help shows ("--steps INT=100", "--lr FLOAT=0.003") is the keyword's.
    shown = re.findall(r"^\s+(--[a-z0-9-]+) [A-Z]+\S*=(\S+)", help_text, re.MULTILINE)
    assert len(shown) >= 15
    for flag, default in shown:
        value = options[flag[2:].replace("-", "_")]
        assert str(value) == default or (isinstance(value, float) and value == float(default)), flag
    # Flags (no value after them in the help) default to False, and True gives the flag.
    flags_only = re.findall(r"^\s+(--[a-z0-9-]+)(?:  +\S| *$)", help_text, re.MULTILINE)
    assert {"--recompute", "--elastic", "--check-single", "--dispatch"} <= set(flags_only)
    assert all(options[f[2:].replace("-", "_")] is False for f in flags_only)
    # Each is accepted: a trainer built with every option at its default (no strategy: one process).
    model = hspmd.Model(str(src / "configs/llama-tiny.json"))
    trainer = hspmd.Trainer(model, **{k: v for k, v in options.items() if k != "strategy"})
    assert trainer.world_size == 1 and trainer.step_count == 0
    with pytest.raises(hspmd.Error, match=r"unknown option min_lrr= \(`hspmd train` has no --min-lrr"):
        hspmd.Trainer(model, min_lrr=1e-4)


def test_one_process_equals_cli(cli, src, dataset, tmp_path):
    expected = cli_losses(cli, src, dataset, tmp_path)
    # metrics= and save= act as the CLI's flags do: a JSON line per step, a checkpoint after the last.
    trainer = hspmd.Trainer(hspmd.Model(str(src / "configs/llama-tiny.json")), metrics=tmp_path / "py.jsonl",
                            save=tmp_path / "py-ckpt", **OPTIONS)
    batches = hspmd.Dataset(str(dataset)).batches(seq_len=64, global_batch_tokens=512)
    metrics = [trainer.step(next(batches)) for _ in range(3)]
    # The same tokens, one row per sequence where the CLI packs them first-fit: sums in another order.
    np.testing.assert_allclose([m.loss for m in metrics], expected, rtol=1e-6)
    lines = [json.loads(line) for line in (tmp_path / "py.jsonl").read_text().splitlines()]
    assert [x["loss"] for x in lines if "loss" in x] == [m.loss for m in metrics]
    assert json.loads((tmp_path / "py-ckpt/index.json").read_text())["state"]["step"] == 3
    assert [m.step for m in metrics] == [1, 2, 3] and all(m.grad_norm > 0 and m.tokens > 0 for m in metrics)
    with pytest.raises(hspmd.Error, match=r"all its steps \(steps=3\)"):
        trainer.step(next(batches))
    # With data=, step() without a batch reads and packs the CLI's batches itself: bit for bit.
    from_data = hspmd.Trainer(hspmd.Model(str(src / "configs/llama-tiny.json")), data=dataset, **OPTIONS)
    assert [from_data.step().loss for _ in range(3)] == expected


def test_batches_of_any_array_kind(src):
    model = hspmd.Model(str(src / "configs/llama-tiny.json"))
    rng = np.random.default_rng(0)
    batch = [rng.integers(0, 260, n) for n in (5, 64, 17)]  # int64, any lengths up to seq_len
    a = hspmd.Trainer(model, **OPTIONS)
    b = hspmd.Trainer(model, **OPTIONS)
    assert a.evaluate(batch) == b.evaluate([x.astype(np.int32).tolist() for x in batch])
    # Sequences do not see each other: the batch's loss is the label-weighted mean of each one's alone.
    alone = [(a.evaluate([x]), len(x) - 1) for x in batch]
    assert a.evaluate(batch) == pytest.approx(sum(l * n for l, n in alone) / sum(n for _, n in alone), rel=1e-6)
    m = a.step(batch)
    assert m.tokens == 86 and m.label_tokens == 83  # each sequence whole: its last token has no label
    with pytest.raises(hspmd.Error, match="sequence 1 of the batch has 65 tokens, more than seq_len 64"):
        a.step([batch[0], np.zeros(65, np.int32)])
    with pytest.raises(hspmd.Error, match=r"token id 260 at position 0 is outside the model's vocabulary \[0, 260\)"):
        a.step([np.array([260, 1])])


def test_shards_are_hspmds_memory(src):
    """Writes through numpy.from_dlpack reach what hspmd trains, and hspmd's updates are seen there."""
    model = hspmd.Model(str(src / "configs/llama-tiny.json"))
    batch = [np.arange(2, 60) % 260, np.arange(7, 40)]
    trainer = hspmd.Trainer(model, **OPTIONS)
    state = trainer.state_dict()
    assert set(state) == {f"{n}{s}" for n, _ in model.parameters() for s in ("", ".exp_avg", ".exp_avg_sq")}
    embed = state["model.embed_tokens.weight"]
    assert embed.global_shape == (260, 128) and embed.slices == (slice(0, 260), slice(0, 128))
    view = np.from_dlpack(embed)
    before = view.copy()
    trainer.step(batch)
    assert not np.array_equal(view, before)  # the optimizer's update, seen without taking the shard again
    np.testing.assert_array_equal(trainer.gather("model.embed_tokens.weight"), view)
    # Zero embeddings make every hidden state zero, so every logit is equal: the loss is ln(vocab).
    view[:] = 0
    assert trainer.evaluate(batch) == pytest.approx(math.log(260), rel=1e-6)


def test_torch_sees_hspmds_memory(src):
    torch = pytest.importorskip("torch")
    model = hspmd.Model(str(src / "configs/llama-tiny.json"))
    trainer = hspmd.Trainer(model, **OPTIONS)
    with torch.no_grad():
        torch.from_dlpack(trainer.state_dict()["model.embed_tokens.weight"]).zero_()
    assert trainer.evaluate([np.arange(1, 50)]) == pytest.approx(math.log(260), rel=1e-6)


def test_errors_carry_the_cli_message(cli_error, src, dataset):
    expected = cli_error("train", "--model", src / "configs/llama-tiny.json", "--data", dataset, "--seq-len", 4096)
    with pytest.raises(hspmd.Error) as e:
        hspmd.Trainer(hspmd.Model(str(src / "configs/llama-tiny.json")), seq_len=4096)
    assert str(e.value) == expected
    with pytest.raises(hspmd.Error, match=r"use ranks 0..3 but the run has 1 workers"):
        hspmd.Trainer(hspmd.Model(str(src / "configs/llama-tiny.json")), src / "examples/strategies/local-hetero-4.json")


def test_save_and_load_continue_the_run(src, tmp_path):
    """Trainer.load(dir) continues where save(dir) left off: the losses of the uninterrupted run."""
    model = hspmd.Model(str(src / "configs/llama-tiny.json"))
    rng = np.random.default_rng(1)
    batches = [[rng.integers(0, 260, n) for n in (30, 64, 9)] for _ in range(3)]
    whole = hspmd.Trainer(model, **OPTIONS)
    expected = [whole.step(b).loss for b in batches]
    first = hspmd.Trainer(model, **OPTIONS)
    first.step(batches[0])
    first.save(str(tmp_path / "ckpt"))
    resumed = hspmd.Trainer.load(str(tmp_path / "ckpt"))  # the model and options from the checkpoint
    assert resumed.step_count == 1
    assert [resumed.step(b).loss for b in batches[1:]] == expected[1:]
