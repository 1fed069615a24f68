#!/usr/bin/env python3
"""hspmd vs PyTorch training a 1.1B Llama on one GPU: tokens/s, MFU and peak memory side by side.

The benchmark of issue 25 (docs/gpu.md): bench/llama-1b.json (hidden 2048, 22 layers, 32 heads and
4 KV heads, FFN 5632, vocabulary 32000), bf16 mixed precision, sequences of 4096 tokens, one GPU.
scripts/gpu-check.sh runs it on a device machine after the GPU tests:

    python3 bench/gpu_llama.py --hspmd BIN [--gemm-json bench.json] [--budget SECONDS] [--out DIR]
    python3 bench/gpu_llama.py --hspmd build/release/hspmd --dry-run   # on the CPU: llama-tiny, 2 steps

Sides, one process per side and round, the rounds interleaved (hspmd, then PyTorch eager), every
figure the best round's (a round's step time: the median of its steps after the warm-up ones):
  hspmd           `hspmd train --device cuda --precision bf16` on a dataset of random tokens this
                  script writes (`hspmd data prepare`); step times and the CUDA allocator's peak
                  bytes from its --metrics lines.
  torch eager     the same Llama in plain PyTorch (this file, --worker): float32 weights under
                  torch.autocast(bfloat16), scaled_dot_product_attention with the flash backend,
                  fused AdamW; peak from torch.cuda.max_memory_allocated.
  torch compile   the same under torch.compile, once after the rounds when the budget allows it
                  (it needs Triton and a C compiler; a failure is a note, not an error).
Same batch (the same documents of random tokens, one per row), same init scale (normal(0.02)
matrices and embedding, norms at 1; not the same values), same optimizer (AdamW lr 3e-4, betas
0.9/0.95, eps 1e-8, weight decay 0.1 on matrices, clipping at 1.0).

FLOPs: bench/model_flops.py. MFU against --peak-tflops (989: the H200's dense bf16) and against
the best bf16 GEMM rate measured in the same run (hspmd's cuBLASLt from bench_cuda_kernels_bench's
JSON, and torch.matmul on 8192^3).

Out of memory: when hspmd runs out of GPU memory, the table says so and the batch (one micro-batch
per step) is halved until it fits; PyTorch then runs the same smaller batch. Time: no run starts
after --budget seconds, and a run still going then is stopped (its finished steps still count).
Environment: BENCH_LLAMA_STEPS, BENCH_LLAMA_ROUNDS, BENCH_LLAMA_BATCH, BENCH_LLAMA_BUDGET and
BENCH_LLAMA_COMPILE (0 or 1) replace the defaults of --steps, --rounds, --batch, --budget, --compile.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

from model_flops import matrix_params, train_flops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H200_DENSE_BF16_TFLOPS = 989.0
WARMUP_STEPS = 1
# The optimizer every side runs.
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 3e-4, (0.9, 0.95), 1e-8, 0.1, 1.0
INIT_STD = 0.02


class OutOfMemory(Exception):
    pass


# --- the driver ----------------------------------------------------------------------------------

def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def is_out_of_memory(text):
    """A failed run's output says it ran out of device memory (hspmd's pool, CUDA, PyTorch)."""
    lowered = text.lower()
    return "out of memory" in lowered or "cudaerrormemoryallocation" in lowered


def with_batch_fallback(batch, run):
    """run(batch) at `batch`, halving it after each OutOfMemory down to 1. Returns (result, batch,
    notes): result None when even one sequence did not fit; a note per batch that did not fit."""
    notes = []
    while True:
        try:
            return run(batch), batch, notes
        except OutOfMemory as e:
            notes.append(f"out of memory at batch {batch}: {e}")
            if batch == 1:
                return None, batch, notes
            batch //= 2


def best_gemm_tflops(benchmark_json):
    """The fastest bf16 GEMM of a Google Benchmark JSON report of bench_cuda_kernels_bench (its
    gemm/bf16/M/N/K rows, counter FLOP/s), in TFLOP/s; None without such a row."""
    rates = [b["FLOP/s"] / 1e12 for b in benchmark_json.get("benchmarks", [])
             if b.get("name", "").startswith("gemm/bf16/") and "FLOP/s" in b and b.get("run_type") != "aggregate"]
    return max(rates) if rates else None


class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()


def run_process(cmd, log_path, timeout):
    """Runs cmd with its output in log_path; returns (exit code or None when stopped at the timeout,
    output). The whole process group is stopped, so nothing outlives the budget."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    with open(log_path, errors="replace") as f:
        return rc, f.read()


def read_step_metrics(path):
    """The step records of an `hspmd train --metrics` file; a line cut off by a stopped run is left out."""
    steps = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if "event" not in record and "step" in record:
                    steps.append(record)
    return steps


def last_lines(text, n=3):
    return " | ".join(line.strip() for line in text.strip().splitlines()[-n:])


class Side:
    """One row of the table: its rounds' results, the best of them."""

    def __init__(self, name):
        self.name = name
        self.rounds = []  # dicts: step_seconds, losses, peak_bytes, batch, ...
        self.notes = []
        self.wall_seconds = None  # of its last process: whether another fits in the budget

    def record(self, result):
        timed = result["step_seconds"][WARMUP_STEPS:] or result["step_seconds"]
        result["step_time"] = median(timed)
        self.rounds.append(result)

    def best(self):
        return min(self.rounds, key=lambda r: r["step_time"]) if self.rounds else None

    def peak(self):
        peaks = [r["peak_bytes"] for r in self.rounds if r.get("peak_bytes") is not None]
        return max(peaks) if peaks else None


class Bench:
    def __init__(self, args):
        self.args = args
        with open(args.config) as f:
            self.config = json.load(f)
        self.deadline = Deadline(args.budget)
        self.work = args.out
        self.data = os.path.join(self.work, "data")
        self.ids_path = os.path.join(self.work, "ids.jsonl")
        self.hspmd = Side("hspmd")
        self.torch_sides = []
        self.notes = []
        self.gemm = {}  # source -> TFLOP/s
        self.torch_version = None
        self.batch = args.batch  # hspmd's, after any fallback; PyTorch runs the same

    # The dataset: batch x steps documents of seq random tokens, one per packed row.
    def make_data(self):
        a = self.args
        rng = random.Random(a.seed)
        vocab = self.config["vocab_size"]
        with open(self.ids_path, "w") as f:
            for _ in range(a.batch * a.steps):
                f.write(json.dumps({"input_ids": [rng.randrange(vocab) for _ in range(a.seq)]}) + "\n")
        rc, out = run_process([a.hspmd, "data", "prepare", "--input", self.ids_path, "--output", self.data,
                               "--format", "jsonl-ids", "--vocab-size", str(vocab)],
                              os.path.join(self.work, "prepare.log"), self.deadline.left())
        if rc != 0:
            raise SystemExit(f"gpu_llama: hspmd data prepare failed (exit {rc}): {last_lines(out)}")

    def run_hspmd(self, batch, r):
        a = self.args
        metrics = os.path.join(self.work, f"hspmd-b{batch}-r{r}.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        cmd = [a.hspmd, "train", "--model", a.config, "--data", self.data, "--steps", str(a.steps), "--seq-len",
               str(a.seq), "--global-batch-tokens", str(batch * a.seq), "--precision", "bf16", "--device",
               a.device, "--lr", str(LR), "--min-lr", str(LR), "--warmup", "0", "--weight-decay",
               str(WEIGHT_DECAY), "--clip", str(CLIP), "--seed", str(a.seed), "--metrics", metrics]
        if a.device == "cpu":
            cmd += ["--threads", str(a.threads)]
        start = time.monotonic()
        rc, out = run_process(cmd, metrics + ".log", self.deadline.left())
        self.hspmd.wall_seconds = time.monotonic() - start
        steps = read_step_metrics(metrics)
        if rc not in (0, None) and is_out_of_memory(out):
            raise OutOfMemory(last_lines(out, 1))
        if rc is None:
            self.hspmd.notes.append(f"round {r + 1}: stopped at the budget after {len(steps)} of {a.steps} steps")
        elif rc != 0:
            self.hspmd.notes.append(f"round {r + 1}: exit {rc}: {last_lines(out)}")
        if len(steps) <= WARMUP_STEPS:
            return None
        return {"batch": batch, "step_seconds": [s["step_seconds"] for s in steps],
                "losses": [s["loss"] for s in steps], "peak_bytes": max(s["peak_bytes"] for s in steps)}

    def run_torch(self, side, mode, batch, r):
        a = self.args
        result_path = os.path.join(self.work, f"torch-{mode}-b{batch}-r{r}.json")
        if os.path.exists(result_path):
            os.remove(result_path)
        cmd = [a.python, os.path.abspath(__file__), "--worker", "--mode", mode, "--device", a.device, "--config",
               a.config, "--ids", self.ids_path, "--batch", str(batch), "--seq", str(a.seq), "--steps",
               str(a.steps + (1 if mode == "compile" else 0)), "--threads", str(a.threads), "--seed", str(a.seed),
               "--out", result_path]
        start = time.monotonic()
        rc, out = run_process(cmd, result_path + ".log", self.deadline.left())
        side.wall_seconds = time.monotonic() - start
        result = None
        if os.path.exists(result_path):
            with open(result_path) as f:
                result = json.load(f)
        if result and result.get("oom"):
            side.notes.append(f"round {r + 1}: out of memory at batch {batch}: {result['error']}")
            return None
        if result and result.get("error"):
            side.notes.append(f"round {r + 1}: {result['error']}")
            return None
        if rc is None:
            side.notes.append(f"round {r + 1}: stopped at the budget")
            return None
        if rc != 0 or result is None:
            side.notes.append(f"round {r + 1}: exit {rc}: {last_lines(out)}")
            return None
        for note in result.get("notes", []):
            if note not in side.notes:
                side.notes.append(note)
        if result.get("gemm_tflops"):
            source = f"torch.matmul bf16 {result['gemm_shape']}"
            self.gemm[source] = max(result["gemm_tflops"], self.gemm.get(source, 0))
        return result

    def fits(self, side, what):
        """Whether another run of side fits in what is left of the budget (its last run's length,
        or 10% of the budget before its first); a note when it does not."""
        need = side.wall_seconds if side.wall_seconds is not None else 0.1 * self.args.budget
        if self.deadline.left() > need:
            return True
        self.notes.append(f"budget: {what} not run ({self.deadline.left():.1f} s left, a run took "
                          f"{need:.1f} s)")
        return False

    def probe_torch(self):
        a = self.args
        if not a.python:
            self.notes.append("no interpreter given (--python ''): the PyTorch rows are left out")
            return
        probe = subprocess.run([a.python, "-c", "import torch; print(torch.__version__); "
                                "print(torch.cuda.is_available())"], capture_output=True, text=True)
        if probe.returncode != 0:
            self.notes.append(f"no PyTorch for {a.python}: the PyTorch rows are left out")
            return
        version, cuda = probe.stdout.split()[:2]
        if a.device.startswith("cuda") and cuda != "True":
            self.notes.append(f"torch {version} sees no CUDA device: the PyTorch rows are left out")
            return
        self.torch_version = version.split("+")[0]
        self.torch_sides = [(Side(f"torch {self.torch_version} eager"), "eager")]

    def run(self):
        a = self.args
        os.makedirs(self.work, exist_ok=True)
        self.make_data()
        self.probe_torch()
        hspmd_runs = True  # until a run fails: the next one would fail alike
        for r in range(a.rounds):
            if hspmd_runs and not self.fits(self.hspmd, f"round {r + 1}"):
                break
            if hspmd_runs:
                result, batch, notes = with_batch_fallback(self.batch, lambda b: self.run_hspmd(b, r))
                self.hspmd.notes += notes
                if result is not None:
                    self.hspmd.record(result)
                    self.batch = batch
                else:
                    hspmd_runs = False  # PyTorch goes on (at the full batch if not even one sequence fit)
            for side, mode in self.torch_sides:
                if self.fits(side, f"round {r + 1} of {side.name}"):
                    result = self.run_torch(side, mode, self.batch, r)
                    if result is not None:
                        side.record(result)
        if self.torch_version and a.compile:
            side = Side(f"torch {self.torch_version} compile")
            self.torch_sides.append((side, "compile"))
            eager = self.torch_sides[0][0]
            # Compiling takes longer than an eager run: at least twice its time must be left.
            side.wall_seconds = 2 * eager.wall_seconds if eager.wall_seconds else None
            if self.fits(side, side.name):
                result = self.run_torch(side, "compile", self.batch, 0)
                if result is not None:
                    side.record(result)
        if a.gemm_json:
            try:
                with open(a.gemm_json) as f:
                    rate = best_gemm_tflops(json.load(f))
                if rate:
                    self.gemm["hspmd cuBLASLt bf16 (bench_cuda_kernels_bench, best Llama shape)"] = rate
            except (OSError, ValueError) as e:
                self.notes.append(f"no GEMM rate from {a.gemm_json}: {e}")

    # --- the report ------------------------------------------------------------------------------

    def rows(self):
        """Every side's figures, as written to results.json and printed."""
        a = self.args
        gemm = max(self.gemm.values()) if self.gemm else None
        hspmd_best = self.hspmd.best()
        out = []
        for side in [self.hspmd] + [s for s, _ in self.torch_sides]:
            best = side.best()
            row = {"side": side.name, "rounds": len(side.rounds), "notes": side.notes}
            if best is not None:
                flops = train_flops(self.config, best["batch"], a.seq)
                tokens = best["batch"] * a.seq
                achieved = flops / best["step_time"] / 1e12
                row.update({"batch": best["batch"], "step_time": best["step_time"], "tokens_per_second":
                            tokens / best["step_time"], "flops_per_step": flops, "tflops": achieved,
                            "mfu_peak": achieved / a.peak_tflops, "mfu_gemm": achieved / gemm if gemm else None,
                            "peak_bytes": side.peak(), "losses": best["losses"]})
                if hspmd_best is not None and hspmd_best["batch"] == best["batch"]:
                    row["hspmd_over_side_tokens"] = best["step_time"] / hspmd_best["step_time"]
                    if side.peak() and self.hspmd.peak() is not None:
                        row["hspmd_over_side_peak"] = self.hspmd.peak() / side.peak()
            out.append(row)
        return out

    def report(self, device_name):
        a = self.args
        rows = self.rows()
        gemm = max(self.gemm.values()) if self.gemm else None
        config_name = os.path.relpath(a.config, ROOT) if a.config.startswith(ROOT) else a.config
        params = model_parameters(self.config)
        lines = [f"hspmd vs PyTorch training on {device_name}: Llama of {count(params)} parameters ({config_name}), "
                 f"bf16 mixed precision, batch {self.batch} x {a.seq} tokens",
                 f"{a.steps} steps per run ({WARMUP_STEPS} warm-up), best of {a.rounds} interleaved rounds; model "
                 f"FLOPs per step {train_flops(self.config, self.batch, a.seq):.3e} (6 x "
                 f"{count(matrix_params(self.config))} matrix parameters x tokens + attention; bench/model_flops.py)",
                 f"MFU: against {a.peak_tflops:g} TFLOP/s (--peak-tflops) and against the best bf16 GEMM measured here"
                 f" ({'%.4g TFLOP/s' % gemm if gemm else 'none measured'})",
                 "",
                 f"{'side':24} | {'batch':>5} {'step s':>8} {'tokens/s':>10} {'hspmd/side':>10} | {'TFLOP/s':>8} "
                 f"{'MFU peak':>8} {'MFU GEMM':>8} | {'peak GiB':>8} {'hspmd/side':>10} | losses (first, last)"]
        for row in rows:
            if "step_time" not in row:
                lines.append(f"{row['side']:24} | no result")
                continue
            ratio = row.get("hspmd_over_side_tokens")
            peak = row["peak_bytes"]
            peak_ratio = row.get("hspmd_over_side_peak")
            lines.append(
                f"{row['side']:24} | {row['batch']:5d} {row['step_time']:8.3f} {row['tokens_per_second']:10.0f} "
                f"{fmt(ratio, '10.2f')} | {row['tflops']:8.4g} {row['mfu_peak'] * 100:7.2f}% "
                f"{fmt(row['mfu_gemm'] and row['mfu_gemm'] * 100, '7.2f')}{'%' if row['mfu_gemm'] else ' '} | "
                f"{fmt(peak and peak / 2 ** 30, '8.3f')} {fmt(peak_ratio, '10.2f')} | "
                f"{row['losses'][0]:.4f}, {row['losses'][-1]:.4f}")
        lines.append("")
        lines.append("hspmd/side: tokens/s of hspmd over the side's (above 1: hspmd faster); peak memory of hspmd "
                     "over the side's (below 1: hspmd smaller). Peak: the high-water mark of hspmd's pool "
                     "(bytes in use; on a GPU its CUDA pool), PyTorch's torch.cuda.max_memory_allocated (a GPU "
                     "only).")
        for source, rate in sorted(self.gemm.items()):
            lines.append(f"bf16 GEMM: {source}: {rate:.4g} TFLOP/s")
        for row in rows:
            for note in row["notes"]:
                lines.append(f"note: {row['side']}: {note}")
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines), rows


def fmt(value, spec):
    width = int(spec.split(".")[0])
    return format(value, spec) if value is not None else "n/a".rjust(width)


def model_parameters(config):
    """All parameters: the matrices, the embedding (unless tied), and the norms."""
    h = config["hidden_size"]
    embedding = 0 if config.get("tie_word_embeddings") else config["vocab_size"] * h
    norms = (2 * config["num_hidden_layers"] + 1) * h
    return matrix_params(config) + embedding + norms


def count(n):
    """1.10B, 16.8M, 123K."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return str(n)


def device_name(device):
    if device == "cpu":
        return "the CPU (dry run)"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
        names = out.stdout.strip().splitlines()
        index = int(device.split(":")[1]) if ":" in device else 0
        return names[index] if out.returncode == 0 and len(names) > index else device
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return device


# --- the PyTorch side (--worker): one process per side and round ----------------------------------

def worker(args):
    import torch
    import torch.nn.functional as F

    result = {"notes": []}
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    torch.manual_seed(args.seed)
    if not cuda:
        torch.set_num_threads(args.threads)
    with open(args.config) as f:
        c = json.load(f)
    h, nq, nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or h // nq
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    # torch >= 2.5 takes grouped-query heads as they are; before, k and v are repeated per query head.
    gqa_native = sdpa is not None and tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)
    attn = {"flash": False, "gqa": gqa_native}  # what SDPA is asked for (below)

    def attention(q, k, v):
        if attn["gqa"]:
            return sdpa(q, k, v, is_causal=True, enable_gqa=True)
        k, v = k.repeat_interleave(nq // nkv, dim=1), v.repeat_interleave(nq // nkv, dim=1)
        if sdpa is not None:
            return sdpa(q, k, v, is_causal=True)
        # torch 1.x (Debian's, for the dry run): the plain causal softmax.
        s = q.shape[2]
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = (q @ k.transpose(-1, -2)) * d ** -0.5
        return torch.softmax(scores.masked_fill(mask, float("-inf")).float(), dim=-1).to(q.dtype) @ v

    class RMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(h))

        def forward(self, x):
            x32 = x.float()
            return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + c["rms_norm_eps"]) * self.weight

    def linear(i, o):
        return torch.nn.Linear(i, o, bias=False)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.input_norm, self.post_norm = RMSNorm(), RMSNorm()
            self.q, self.k, self.v, self.o = linear(h, nq * d), linear(h, nkv * d), linear(h, nkv * d), linear(nq * d, h)
            f = c["intermediate_size"]
            self.gate, self.up, self.down = linear(h, f), linear(h, f), linear(f, h)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            y = self.input_norm(x)
            q = self.q(y).view(b, s, nq, d).transpose(1, 2)
            k = self.k(y).view(b, s, nkv, d).transpose(1, 2)
            v = self.v(y).view(b, s, nkv, d).transpose(1, 2)
            # cos and sin in the activations' dtype: float32 ones would make q and k float32 and keep
            # SDPA off its bf16 flash kernel.
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            a = attention(q, k, v).transpose(1, 2).reshape(b, s, nq * d)
            x = x + self.o(a)
            y = self.post_norm(x)
            return x + self.down(F.silu(self.gate(y)) * self.up(y))

    def rope(x, cos, sin):  # rotate-half, as hspmd and Hugging Face
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    class Llama(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(c["vocab_size"], h)
            self.layers = torch.nn.ModuleList(Block() for _ in range(c["num_hidden_layers"]))
            self.norm = RMSNorm()
            self.head = linear(h, c["vocab_size"])

        def forward(self, ids, targets, cos, sin):
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x, cos, sin)
            logits = self.head(self.norm(x)).float()  # the loss in float32
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1), ignore_index=-100)

    try:
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        if hasattr(torch.device, "__enter__"):  # torch >= 2.0: built in place, no host copy
            with device:
                model = Llama()
        else:
            model = Llama().to(device)
        with torch.no_grad():  # hspmd's init: normal(0.02) matrices and embedding, norms at 1
            for p in model.parameters():
                if p.dim() >= 2:
                    p.normal_(0.0, INIT_STD)
        params = list(model.parameters())
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        try:
            opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, **({"fused": True} if cuda else {}))
        except (TypeError, RuntimeError) as e:
            result["notes"].append(f"fused AdamW refused ({e}); the default AdamW")
            opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS)
        step_model = model
        if args.mode == "compile":
            step_model = torch.compile(model)

        docs = []
        with open(args.ids) as f:
            for line in f:
                if line.strip():
                    docs.append(json.loads(line)["input_ids"])
        inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        freqs = torch.outer(torch.arange(args.seq, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().float().to(device), emb.sin().float().to(device)
        # What SDPA runs, fastest first: the flash kernel on the grouped heads, the flash kernel on k
        # and v repeated per query head, whatever SDPA picks. A refusal in step 1 moves down the list.
        choices = [{"flash": False, "gqa": gqa_native}]
        if cuda:
            try:
                from torch.nn.attention import SDPBackend, sdpa_kernel
                choices = ([{"flash": True, "gqa": True}] if gqa_native else []) + [{"flash": True, "gqa": False}] + choices
            except ImportError:
                result["notes"].append("torch.nn.attention.sdpa_kernel missing: SDPA picks its backend")
        attn.update(choices.pop(0))

        def train_step(i):
            rows = [docs[(i * args.batch + r) % len(docs)] for r in range(args.batch)]
            ids = torch.tensor(rows, dtype=torch.int64, device=device)
            targets = torch.full_like(ids, -100)
            targets[:, :-1] = ids[:, 1:]  # the next token inside each row; none after the last
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                if attn["flash"]:
                    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                        loss = step_model(ids, targets, cos, sin)
                else:
                    loss = step_model(ids, targets, cos, sin)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, CLIP)
            opt.step()
            return loss

        losses, times = [], []
        for i in range(args.steps):
            while True:
                start = time.perf_counter()
                try:
                    loss = train_step(i)
                    break
                except RuntimeError as e:
                    if not choices or i > 0 or "out of memory" in str(e).lower():
                        raise
                    result["notes"].append(f"SDPA refused {attn} ({str(e).strip().splitlines()[0][:200]}); "
                                           f"now {choices[0]}")
                    attn.update(choices.pop(0))
                    opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
            if cuda:
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
        if sdpa is None:
            result["notes"].append("attention: no SDPA in this torch, a plain causal softmax")
        else:
            result["notes"].append(f"SDPA: {'the flash backend' if attn['flash'] else 'its own choice of backend'}, "
                                   f"{'grouped heads (enable_gqa)' if attn['gqa'] else 'k and v repeated per head'}")
        result.update({"batch": args.batch, "losses": losses, "step_seconds": times,
                       "peak_bytes": torch.cuda.max_memory_allocated(device) if cuda else None})
        model = step_model = opt = params = groups = None  # the GPU's memory for the GEMM below
        result["gemm_tflops"], result["gemm_shape"] = gemm_tflops(torch, device)
    except Exception as e:  # noqa: BLE001: the driver reports any failure as a note of this side
        oom = "out of memory" in str(e).lower()
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        result = {"oom": oom, "error": f"{'torch.compile: ' if args.mode == 'compile' and not oom else ''}"
                                       f"{type(e).__name__}: {first[:300]}"}
    result["version"] = torch.__version__
    with open(args.out, "w") as f:
        json.dump(result, f)


def gemm_tflops(torch, device):
    """The best of 10 bf16 products (8192^3 on a GPU, 256^3 on the CPU), in TFLOP/s."""
    n = 8192 if device.type == "cuda" else 256
    if device.type == "cuda":
        torch.cuda.empty_cache()
    a = torch.randn(n, n, device=device).to(torch.bfloat16)
    b = torch.randn(n, n, device=device).to(torch.bfloat16)
    best = float("inf")
    for i in range(13):
        start = time.perf_counter()
        torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= 3:  # after the warm-up (cuBLAS picks its algorithm)
            best = min(best, time.perf_counter() - start)
    return 2.0 * n ** 3 / best / 1e12, f"{n}^3"


# --- the command line ------------------------------------------------------------------------------

def env_default(name, value, kind=int):
    return kind(os.environ[name]) if os.environ.get(name) else value


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hspmd", help="the hspmd binary (or a wrapper that runs it)")
    ap.add_argument("--dry-run", action="store_true",
                    help="on the CPU: configs/llama-tiny.json, batch 2 x 64, 2 steps, 2 rounds (checks the script)")
    ap.add_argument("--device", default=None, help="cuda (default), cuda:N, or cpu")
    ap.add_argument("--config", default=None, help="model config (default bench/llama-1b.json)")
    ap.add_argument("--batch", type=int, default=None, help="sequences per step, one micro-batch (default 2)")
    ap.add_argument("--seq", type=int, default=None, help="tokens per sequence (default 4096)")
    ap.add_argument("--steps", type=int, default=None, help="steps per run, the first a warm-up (default 3)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 2)")
    ap.add_argument("--budget", type=float, default=None, help="seconds for everything (default 180)")
    ap.add_argument("--compile", type=int, choices=(0, 1), default=None,
                    help="also run torch.compile (default 1 on a GPU, 0 on the CPU)")
    ap.add_argument("--gemm-json", default=None, help="bench_cuda_kernels_bench's --benchmark_out JSON")
    ap.add_argument("--peak-tflops", type=float, default=H200_DENSE_BF16_TFLOPS,
                    help="the device's dense bf16 peak for MFU (default: the H200's 989)")
    ap.add_argument("--python", default=sys.executable, help="interpreter with PyTorch ('' leaves PyTorch out)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads of both sides in a CPU run")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default=None, help="working directory: data, logs, results.json (default: a new "
                                                "temporary one, removed at the end)")
    # Worker mode (run by the driver): one PyTorch side, one round.
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("eager", "compile"), help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return args
    dry = args.dry_run
    defaults = {"device": "cpu" if dry else "cuda",
                "config": os.path.join(ROOT, "configs/llama-tiny.json" if dry else "bench/llama-1b.json"),
                "batch": env_default("BENCH_LLAMA_BATCH", 2),
                "seq": 64 if dry else 4096,
                "steps": env_default("BENCH_LLAMA_STEPS", 2 if dry else 3),
                "rounds": env_default("BENCH_LLAMA_ROUNDS", 2),
                "budget": env_default("BENCH_LLAMA_BUDGET", 120.0 if dry else 180.0, float),
                "compile": env_default("BENCH_LLAMA_COMPILE", 0 if dry else 1)}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not args.hspmd:
        ap.error("--hspmd is required")
    if args.steps <= WARMUP_STEPS:
        ap.error(f"--steps must exceed the {WARMUP_STEPS} warm-up step(s)")
    if args.batch < 1 or args.rounds < 1:
        ap.error("--batch and --rounds must be at least 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    temporary = args.out is None
    if temporary:
        import tempfile
        args.out = tempfile.mkdtemp(prefix="hspmd-gpu-llama.")
    try:
        bench = Bench(args)
        bench.run()
        text, rows = bench.report(device_name(args.device))
        print(text, flush=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({"batch": bench.batch, "seq": args.seq, "gemm_tflops": bench.gemm, "rows": rows}, f, indent=1)
        return 0 if bench.hspmd.best() is not None else 1
    finally:
        if temporary:
            shutil.rmtree(args.out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
