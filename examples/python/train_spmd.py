"""SPMD training from Python on the bundled corpus, like a torchrun script.

Every process runs this same script and passes the same global batches; hspmd trains each rank's
part of the strategy. One process:

    python3 examples/python/train_spmd.py --data runs/kjv
    hspmd launch -n 4 -- python3 examples/python/train_spmd.py --data runs/kjv \\
        --strategy examples/strategies/local-hetero-4.json

(runs/kjv: `hspmd data prepare --input data/corpus/kjv-genesis-2kings.txt --output runs/kjv --append-eos`;
the README of this folder shows the output.)
"""
import argparse
import json
import pathlib

import numpy as np

import hspmd

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--data", required=True, help="token dataset (hspmd data prepare)")
parser.add_argument("--model", default="configs/llama-tiny.json", help="model config.json")
parser.add_argument("--strategy", default=None, help="strategy file (default: one process)")
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--seq-len", type=int, default=64)
parser.add_argument("--global-batch-tokens", type=int, default=1024)
parser.add_argument("--switch", default=None, metavar="STEP:STRATEGY.json",
                    help="before step STEP, move the run to another strategy (as `hspmd train --switch`)")
parser.add_argument("--threads", type=int, default=0, help="kernel threads per process (0: all cores)")
parser.add_argument("--out", default=None,
                    help="folder for what the tests compare: losses, this rank's shards, a gathered weight, a checkpoint")
args = parser.parse_args()

process = hspmd.init()  # rank, world size and the run's store, from `hspmd launch`
trainer = hspmd.Trainer(hspmd.Model(args.model), args.strategy, steps=args.steps, seq_len=args.seq_len,
                        global_batch_tokens=args.global_batch_tokens, threads=args.threads)
# The batches `hspmd train` reads with the same options; any list of token-id arrays would do.
batches = hspmd.Dataset(args.data).batches(seq_len=args.seq_len, global_batch_tokens=args.global_batch_tokens)

switch_step, switch_to = args.switch.split(":", 1) if args.switch else (0, None)
losses = []
for step in range(1, args.steps + 1):
    if step == int(switch_step):
        report = trainer.switch(switch_to)  # collective: weights and AdamW moments, one fused BSR
        if process.rank == 0:
            print(f"switched to {report.target}: {report.sent_bytes} bytes sent in {report.messages} messages")
    m = trainer.step(next(batches))
    losses.append(m.loss)
    if process.rank == 0:
        print(f"step {m.step:3d}  loss {m.loss:.4f}  grad norm {m.grad_norm:.3f}  {m.tokens} tokens  {m.seconds:.2f}s",
              flush=True)

if args.out:
    out = pathlib.Path(args.out)
    # This rank's shards as hspmd holds them (through DLPack), keyed by name and region.
    shards = {f"{name}@{[[s.start, s.stop] for s in shard.slices]}": np.from_dlpack(shard)
              for name, shard in trainer.state_dict().items()}
    np.savez(out / f"shards-rank{process.rank}.npz", **shards)
    embed = trainer.gather("model.embed_tokens.weight", rank=0)  # collective; the whole tensor on rank 0
    trainer.save(str(out / "ckpt"))
    if process.rank == 0:
        np.save(out / "embed_tokens.npy", embed)
        (out / "losses.json").write_text(json.dumps(losses))
