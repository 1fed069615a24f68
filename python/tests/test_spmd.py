"""The SPMD example (examples/python/train_spmd.py) under `hspmd launch -n 4` with a heterogeneous
strategy, switched to another before step 3: its losses are `hspmd train`'s with the same options
(the same worker and tokens; the script's sequences are one row each where the CLI packs them, so
sums run in another order) and one process's (up to float rounding, the bound of
`hspmd train --check-single`);
its DLPack shards are the checkpoint's tensors; a gathered weight is the one-process weight."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import hspmd
from conftest import SOURCE_DIR, read_checkpoint

STRATEGY = SOURCE_DIR / "examples/strategies/local-hetero-4.json"
SWITCH = SOURCE_DIR / "examples/strategies/local-tp2-pp2.json"
STEPS, SEQ_LEN, BATCH_TOKENS = 4, 64, 512


def test_spmd_script_under_launch(cli, src, dataset, tmp_path):
    out = tmp_path / "py"
    out.mkdir()
    script = [sys.executable, src / "examples/python/train_spmd.py", "--data", dataset, "--model",
              src / "configs/llama-tiny.json", "--strategy", STRATEGY, "--steps", STEPS, "--seq-len", SEQ_LEN,
              "--global-batch-tokens", BATCH_TOKENS, "--threads", 1, "--switch", f"3:{SWITCH}", "--out", out]
    done = subprocess.run([os.environ["HSPMD_BIN"], "launch", "-n", "4", "--", *map(str, script)],
                          capture_output=True, text=True, check=False, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("loss") == STEPS  # rank 0 reports
    assert "switched to local-tp2-pp2" in done.stdout
    losses = json.loads((out / "losses.json").read_text())

    metrics = tmp_path / "cli.jsonl"
    cli("train", "--model", src / "configs/llama-tiny.json", "--data", dataset, "--nproc", 4, "--strategy", STRATEGY,
        "--steps", STEPS, "--seq-len", SEQ_LEN, "--global-batch-tokens", BATCH_TOKENS, "--threads", 1,
        "--switch", f"3:{SWITCH}", "--metrics", metrics)
    cli_losses = [json.loads(line)["loss"] for line in metrics.read_text().splitlines() if '"loss"' in line]
    np.testing.assert_allclose(losses, cli_losses, rtol=1e-6)  # one row per sequence, the CLI packs

    single = hspmd.Trainer(hspmd.Model(str(src / "configs/llama-tiny.json")), steps=STEPS, seq_len=SEQ_LEN,
                           global_batch_tokens=BATCH_TOKENS, threads=1)
    batches = hspmd.Dataset(str(dataset)).batches(seq_len=SEQ_LEN, global_batch_tokens=BATCH_TOKENS)
    single_losses = [single.step(next(batches)).loss for _ in range(STEPS)]
    np.testing.assert_allclose(losses, single_losses, rtol=1e-5)

    # Each rank's shards, seen through DLPack, are what the checkpoint holds for that region.
    saved = read_checkpoint(out / "ckpt")
    seen = {}
    for rank in range(4):
        with np.load(out / f"shards-rank{rank}.npz") as shards:
            for key in shards.files:
                name, region = key.split("@")
                seen[(name, tuple(tuple(r) for r in json.loads(region)))] = shards[key]
    assert seen.keys() == saved.keys()
    for key, array in saved.items():
        np.testing.assert_array_equal(seen[key], array, err_msg=str(key))

    # The gathered embedding is the one-process run's, up to float rounding.
    np.testing.assert_allclose(np.load(out / "embed_tokens.npy"), single.gather("model.embed_tokens.weight"),
                               rtol=1e-4, atol=1e-6)


def test_finetune_example_from_a_save_pretrained_directory(cli, src, dataset, tmp_path):
    """examples/python/finetune_hf.py starts from exported weights: its loss before fine-tuning is the
    exported run's (loaded, not fresh), and its steps train on the Python pipeline's batches."""
    ckpt, hf = tmp_path / "ckpt", tmp_path / "hf"
    cli("train", "--model", src / "configs/llama-tiny.json", "--data", dataset, "--steps", 4, "--seq-len", 64,
        "--global-batch-tokens", 512, "--threads", 1, "--warmup", 0, "--lr", 0.01, "--save", ckpt)
    cli("checkpoint", "export", ckpt, "--to-hf", hf)
    text = tmp_path / "lines.txt"
    text.write_text("\n".join(f"line {i}: in the beginning" for i in range(100)) + "\n")
    command = [sys.executable, src / "examples/python/finetune_hf.py", "--hf", hf, "--text", text, "--steps", 2,
               "--seq-len", 64, "--batch-tokens", 256, "--threads", 1]
    done = subprocess.run(list(map(str, command)),
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    before = float(re.search(r"held-out loss before: (\S+)", done.stdout)[1])
    fresh = hspmd.Trainer(hspmd.Model(str(hf)), seq_len=64, global_batch_tokens=256, threads=1)
    loaded = hspmd.Trainer(hspmd.Model(str(hf)), init_weights=hf, seq_len=64, global_batch_tokens=256, threads=1)
    held_out = [np.concatenate([[256], np.frombuffer(f"line {i}: in the beginning".encode(), np.uint8), [257]])
                for i in range(64)]
    assert before == pytest.approx(loaded.evaluate(held_out), rel=1e-4)
    assert before != pytest.approx(fresh.evaluate(held_out), rel=1e-2)
    assert len(re.findall(r"^step +\d+  loss ", done.stdout, re.MULTILINE)) == 2


ELASTIC_SCRIPT = """
import json, sys
import hspmd
src, data, out = sys.argv[1:4]
process = hspmd.init()
trainer = hspmd.Trainer(hspmd.Model(src + "/configs/llama-tiny.json"), src + "/examples/strategies/local-dp2-pp2.json",
                        elastic=True, cluster=src + "/examples/clusters/local-hetero-4.json",
                        profile=src + "/examples/profiles/local-hetero-4-llama-tiny.json", heartbeat_timeout=3,
                        **json.loads(sys.argv[4]))
batches = hspmd.Dataset(data).batches(seq_len=64, global_batch_tokens=256)
losses = [trainer.step(next(batches)).loss for _ in range(trainer.step_count, 5)]
if process.rank == 0:
    open(out, "w").write(json.dumps(losses))
"""


def test_elastic_script_survives_a_dead_worker(src, dataset, tmp_path):
    """elastic=True as `hspmd train --elastic`: rank 2 is killed (SIGKILL) in the backward pass of
    step 3; the survivors re-plan, move the state from its replicas and finish the run with the
    losses of one process."""
    options = dict(steps=5, seq_len=64, global_batch_tokens=256, warmup=2, lr=2.5e-4, min_lr=2.5e-5, threads=1)
    script = tmp_path / "elastic.py"
    script.write_text(ELASTIC_SCRIPT)
    out = tmp_path / "losses.json"
    done = subprocess.run([os.environ["HSPMD_BIN"], "launch", "-n", "4", "--elastic", "--heartbeat-timeout", "3", "--",
                           sys.executable, str(script), str(src), str(dataset), str(out), json.dumps(options)],
                          capture_output=True, text=True, check=False, env=os.environ | {"HSPMD_FAULT": "2:3:backward"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "HSPMD_FAULT: killing myself (SIGKILL) in backward of step 3" in done.stdout + done.stderr
    losses = json.loads(out.read_text())
    single = hspmd.Trainer(hspmd.Model(str(src / "configs/llama-tiny.json")), **options)
    batches = hspmd.Dataset(str(dataset)).batches(seq_len=64, global_batch_tokens=256)
    np.testing.assert_allclose(losses, [single.step(next(batches)).loss for _ in range(5)], rtol=1e-5)
