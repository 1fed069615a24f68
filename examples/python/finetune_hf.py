"""Fine-tuning a Hugging Face save_pretrained directory, with a data pipeline written in Python.

The model (config.json) and its weights (*.safetensors) come from the directory; the data is any
text file, turned into token ids here in Python (byte-level: ids 0-255 are UTF-8 bytes, 256 <bos>,
257 <eos>, the tokenizer of configs/llama-tiny.json), one line per sequence, shuffled and grouped
into batches by a token budget. Runs on one process, or on N under `hspmd launch -n N` with
--strategy (every rank builds the same batches: same file, same seed).

    python3 examples/python/finetune_hf.py --hf runs/hf --text data/corpus/kjv-genesis-2kings.txt \\
        --steps 30 --save runs/finetuned
"""
import argparse

import numpy as np

import hspmd

BOS, EOS = 256, 257

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--hf", required=True, help="a save_pretrained directory (config.json + safetensors)")
parser.add_argument("--text", required=True, help="text file: one training sequence per non-empty line")
parser.add_argument("--strategy", default=None, help="strategy file (default: one process)")
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--seq-len", type=int, default=128)
parser.add_argument("--batch-tokens", type=int, default=2048, help="token budget of one global batch")
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--save", default=None, help="checkpoint directory after the last step")
args = parser.parse_args()


def sequences(path, seq_len):
    """Each non-empty line as <bos> bytes <eos>, cut to seq_len tokens."""
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if line:
            ids = np.frombuffer(line.encode("utf-8"), dtype=np.uint8).astype(np.int32)
            yield np.concatenate([[BOS], ids, [EOS]])[:seq_len].astype(np.int32)


def batches(examples, budget, rng):
    """Endless: shuffled each epoch, grouped greedily into batches of at most `budget` tokens."""
    while True:
        batch, tokens = [], 0
        for i in rng.permutation(len(examples)):
            if batch and tokens + len(examples[i]) > budget:
                yield batch
                batch, tokens = [], 0
            batch.append(examples[i])
            tokens += len(examples[i])


process = hspmd.init()
examples = list(sequences(args.text, args.seq_len))
held_out, train = examples[:64], examples[64:]  # the first lines are kept for evaluation
model = hspmd.Model(args.hf)  # the directory's config.json
trainer = hspmd.Trainer(model, args.strategy, init_weights=args.hf, steps=args.steps, seq_len=args.seq_len,
                        global_batch_tokens=args.batch_tokens, lr=args.lr, warmup=min(5, args.steps),
                        threads=args.threads)
say = print if process.rank == 0 else (lambda *a, **k: None)
say(f"{model}: {len(train)} training lines, {len(held_out)} held out")
say(f"held-out loss before: {trainer.evaluate(held_out):.4f}")
stream = batches(train, args.batch_tokens, np.random.default_rng(0))
for _ in range(args.steps):
    m = trainer.step(next(stream))
    say(f"step {m.step:3d}  loss {m.loss:.4f}  lr {m.lr:.2e}  grad norm {m.grad_norm:.3f}", flush=True)
say(f"held-out loss after:  {trainer.evaluate(held_out):.4f}")
if args.save:
    trainer.save(args.save)
    say(f"checkpoint: {args.save} (hspmd checkpoint export {args.save} --to-hf OUT for a save_pretrained copy)")
