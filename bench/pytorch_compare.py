#!/usr/bin/python3
"""hspmd vs PyTorch CPU: same Llama, same initial weights, same batch, same optimizer, same threads.

Run through bench/pytorch_compare.sh: it builds bench_pytorch_compare_bench, makes sure Debian's
python3-torch (1.13) is installed for /usr/bin/python3 and creates a virtual environment with
PyTorch 2.x from PyPI. For each size and each of --rounds rounds, one after the other:
  1. bench_pytorch_compare_bench trains with hspmd and writes init.safetensors, batch.safetensors and
     hspmd.json (losses, step times, peak memory, sgemm GFLOP/s); then again with --precision bf16
     (bf16 mixed precision, docs/mixed-precision.md) into hspmd-bf16.json;
  2. this script, as a worker process per PyTorch side (--worker), loads the same weights and batch
     into a PyTorch Llama written here (Hugging Face conventions: RMSNorm, rotate-half RoPE, GQA,
     SwiGLU), runs the same steps and measures the same figures in its own process. The sides:
       torch 1.13 fp32   Debian's, plain causal softmax attention (it has no SDPA)
       torch 2.x fp32    scaled_dot_product_attention(is_causal=True)
       torch 2.x bf16    the same under torch.autocast("cpu", bfloat16)
  3. every fp32 side's step losses must agree with hspmd's within relative 1e-4. bf16 sides are
     compared with hspmd bf16 (tokens/s ratio and losses; their losses only differ in rounding).
The host may be shared and noisy, so the sides are interleaved within each round and every figure
is the best round's: a side's round time is the median of its steps after the first (a warm-up).

FLOPs of one training step (the same count for all): bench/model_flops.py, 6 x (matrix params
except the embedding) x tokens + causal attention 6 x S^2 x (Nq x D) per sequence and layer.
Peak memory: resident-set high-water mark above the RSS before the model was built (its largest
value over the rounds).
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

from model_flops import train_flops

torch = None  # imported by the worker only: the driver runs under any Python
F = None

DTYPE_NAMES = {"F32": "float32", "F64": "float64", "BF16": "bfloat16", "I32": "int32", "I64": "int64"}



def load_safetensors(path):
    """Reads a safetensors file: 8-byte header length, JSON header, data section."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=getattr(torch, DTYPE_NAMES[info["dtype"]]))
        out[name] = t.reshape(info["shape"]).clone()
    return out


def proc_status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Llama:
    """The hspmd Llama, functionally, over a dict of Hugging Face named tensors."""

    def __init__(self, config, weights, sdpa):
        self.c = config
        self.sdpa = sdpa
        self.w = {k: v.clone().requires_grad_(True) for k, v in weights.items()}

    def rms_norm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c["rms_norm_eps"]) * w

    def rope(self, x, cos, sin):  # x [B, N, S, D], rotate-half convention
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def loss(self, ids):
        c, w = self.c, self.w
        b, s = ids.shape
        h, nq, nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        d = h // nq
        inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        freqs = torch.outer(torch.arange(s, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().float(), emb.sin().float()
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)  # key after query: masked
        x = F.embedding(ids, w["model.embed_tokens.weight"])
        for layer in range(c["num_hidden_layers"]):
            p = f"model.layers.{layer}."
            y = self.rms_norm(x, w[p + "input_layernorm.weight"])
            q = (y @ w[p + "self_attn.q_proj.weight"].t()).view(b, s, nq, d).transpose(1, 2)
            k = (y @ w[p + "self_attn.k_proj.weight"].t()).view(b, s, nkv, d).transpose(1, 2)
            v = (y @ w[p + "self_attn.v_proj.weight"].t()).view(b, s, nkv, d).transpose(1, 2)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            k = k.repeat_interleave(nq // nkv, dim=1)  # query head i uses kv head i // (nq / nkv)
            v = v.repeat_interleave(nq // nkv, dim=1)
            if self.sdpa:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # torch 1.13 (Debian) has no scaled_dot_product_attention: the plain causal softmax
                scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
                a = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
            a = a.transpose(1, 2).reshape(b, s, h)
            x = x + a @ w[p + "self_attn.o_proj.weight"].t()
            y = self.rms_norm(x, w[p + "post_attention_layernorm.weight"])
            g = y @ w[p + "mlp.gate_proj.weight"].t()
            u = y @ w[p + "mlp.up_proj.weight"].t()
            x = x + (F.silu(g) * u) @ w[p + "mlp.down_proj.weight"].t()
        x = self.rms_norm(x, w["model.norm.weight"])
        head = w["model.embed_tokens.weight"] if c.get("tie_word_embeddings") else w["lm_head.weight"]
        logits = (x @ head.t()).float()  # the loss in float32 under autocast too
        targets = torch.full_like(ids, -100)
        targets[:, :-1] = ids[:, 1:]  # next token inside each row; none after the last
        return F.cross_entropy(logits.view(b * s, -1), targets.view(-1), ignore_index=-100)


# --- the PyTorch side: one worker process per side and round -----------------------------------

def torch_run(config, weights, ids, steps, sdpa, bf16):
    rss_before = proc_status_bytes("VmRSS")
    reset = reset_peak_rss()
    model = Llama(config, weights, sdpa)
    params = list(model.w.values())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    losses, times = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if bf16:  # mixed precision: float32 weights and optimizer, bf16 matmuls and attention
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model.loss(ids)
        else:
            loss = model.loss(ids)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    hwm = proc_status_bytes("VmHWM")
    return {"losses": losses, "step_seconds": times, "peak_rss_bytes": max(hwm - rss_before, 0), "peak_reset": reset}


def torch_sgemm_gflops(n=1024):
    a, b = torch.rand(n, n), torch.rand(n, n)
    best = 1e30
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best / 1e9


def worker(args):
    global torch, F
    import torch as torch_module
    import torch.nn.functional as functional
    torch, F = torch_module, functional
    torch.set_num_threads(args.threads)
    with open(args.config) as f:
        config = json.load(f)
    weights = load_safetensors(os.path.join(args.data, "init.safetensors"))
    ids = load_safetensors(os.path.join(args.data, "batch.safetensors"))["input_ids"]
    result = torch_run(config, weights, ids, args.steps, sdpa=args.mode != "fp32", bf16=args.mode == "bf16")
    result["sgemm_gflops"] = torch_sgemm_gflops()
    result["version"] = torch.__version__
    with open(args.out, "w") as f:
        json.dump(result, f)


# --- the driver ------------------------------------------------------------------------------------

class Side:
    """One column of the table: hspmd, or a PyTorch interpreter in one mode."""

    def __init__(self, name, python=None, mode=None):
        self.name, self.python, self.mode = name, python, mode
        self.best = None  # the round with the shortest step time
        self.peak = 0
        self.max_rel_loss_diff = 0.0

    def record(self, result, hspmd_losses):
        t = median(result["step_seconds"][1:]) if len(result["step_seconds"]) > 1 else result["step_seconds"][0]
        result["step_time"] = t
        if self.best is None or t < self.best["step_time"]:
            self.best = result
        self.peak = max(self.peak, result["peak_rss_bytes"])
        rel = [abs(a - b) / abs(b) for a, b in zip(result["losses"], hspmd_losses)]
        self.max_rel_loss_diff = max([self.max_rel_loss_diff] + rel)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def compare(binary, sides, config_path, batch, seq, args):
    """Runs every side once per round, interleaved; prints the table so far after each round (a long
    run on a busy host can be stopped early and still leave results); returns the table row."""
    hspmd, hspmd_bf16 = Side("hspmd"), Side("hspmd bf16")
    with open(config_path) as f:
        config = json.load(f)
    row = {"name": os.path.basename(config_path), "batch": f"{batch}x{seq}", "tokens": batch * seq,
           "flops": train_flops(config, batch, seq), "sides": [hspmd, hspmd_bf16] + [Side(*s) for s in sides]}
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="hspmd_pytorch_compare.") as out:
            ours = {}
            for precision in ("fp32", "bf16"):
                with tempfile.TemporaryDirectory(dir=out) as own:
                    subprocess.run([binary, "--config", config_path, "--batch", str(batch), "--seq", str(seq),
                                    "--steps", str(args.steps), "--threads", str(args.threads), "--precision",
                                    precision, "--out", own], check=True)
                    with open(os.path.join(own, "hspmd.json")) as f:
                        ours[precision] = json.load(f)
                    if precision == "fp32":  # the weights and batch every side loads
                        for name in ("init.safetensors", "batch.safetensors"):
                            os.replace(os.path.join(own, name), os.path.join(out, name))
            hspmd.record(ours["fp32"], ours["fp32"]["losses"])
            hspmd_bf16.record(ours["bf16"], ours["fp32"]["losses"])
            for side in row["sides"][2:]:
                result_path = os.path.join(out, "torch.json")
                subprocess.run([side.python, os.path.abspath(__file__), "--worker", "--mode", side.mode, "--config",
                                config_path, "--data", out, "--steps", str(args.steps), "--threads",
                                str(args.threads), "--out", result_path], check=True)
                with open(result_path) as f:
                    side.record(json.load(f), ours["bf16" if side.mode == "bf16" else "fp32"]["losses"])
        if r + 1 < args.rounds:
            print_table([row], args, r + 1)
    return row


def print_table(rows, args, rounds_done):
    """Prints the table of the best rounds so far; returns whether every fp32 side agreed with hspmd."""
    print(f"\nhspmd vs PyTorch (CPU), {args.threads} threads, {args.steps} steps per round (first is warm-up), "
          f"best of {rounds_done} interleaved rounds, same weights and batch")
    print(f"{'model':16} {'batch':>7} {'side':26} | {'tok/s':>8} {'hspmd/side':>10} | {'peak MiB':>8} "
          f"{'side/hspmd':>10} | {'GFLOP/s':>7} {'/sgemm':>6} | {'max rel loss diff':>17}")
    print("(bf16 autocast rows are measured against hspmd bf16; the hspmd bf16 row against hspmd fp32)")
    ok = True
    for r in rows:
        for side in r["sides"]:
            # fp32 sides against hspmd, bf16 sides against hspmd bf16 (hspmd bf16 itself: against hspmd).
            bf16_side = "bf16" in side.name and not side.name.startswith("hspmd")
            hspmd = r["sides"][1 if bf16_side else 0]
            h_tok = r["tokens"] / hspmd.best["step_time"]
            b = side.best
            tok = r["tokens"] / b["step_time"]
            gflops = r["flops"] / b["step_time"] / 1e9
            fp32 = "bf16" not in side.name
            agree = side.max_rel_loss_diff <= (1e-4 if fp32 else 5e-2)
            ok &= agree or not fp32
            print(f"{r['name']:16} {r['batch']:>7} {side.name:26} | {tok:8.0f} {h_tok / tok:10.2f} | "
                  f"{side.peak / 2 ** 20:8.1f} {side.peak / max(hspmd.peak, 1):10.2f} | {gflops:7.1f} "
                  f"{gflops / b['sgemm_gflops']:6.2f} | {side.max_rel_loss_diff:11.2e} "
                  f"{'' if side.name == 'hspmd' else ('ok' if agree else ('FAIL' if fp32 else 'differs'))}")
    for r in rows:
        for side in r["sides"]:
            print(f"losses {r['name']} {side.name}: {['%.6f' % x for x in side.best['losses']]}")
    print("sgemm 1024^3 GFLOP/s (best round): " +
          ", ".join(f"{s.name} {s.best['sgemm_gflops']:.1f}" for s in rows[0]["sides"]))
    if not all(s.best["peak_reset"] for r in rows for s in r["sides"]):
        print("note: /proc/self/clear_refs was not writable; peak memory includes earlier high-water marks")
    return ok


def find_sides(args):
    sides = []
    torch2_modes = (("fp32 SDPA", "sdpa"),) + (() if args.no_torch_bf16 else (("bf16 autocast", "bf16"),))
    for python, modes in ((args.torch1_python, (("fp32", "fp32"),)), (args.torch2_python, torch2_modes)):
        if not python:
            continue
        probe = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                               text=True)
        if probe.returncode != 0:
            print(f"note: {python} has no torch; its rows are left out", file=sys.stderr)
            continue
        version = probe.stdout.strip().split("+")[0]
        sides += [(f"torch {version} {label}", python, mode) for label, mode in modes]
    return sides


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", help="path of bench_pytorch_compare_bench")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=4, help="training steps per side and round (the first is a warm-up)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; each figure is the best round's")
    ap.add_argument("--sizes", default="tiny,16m", help="comma-separated: tiny (configs/llama-tiny.json, 8x128), "
                    "16m (bench/llama-16m.json, 4x512)")
    ap.add_argument("--torch1-python", default="/usr/bin/python3", help="interpreter with Debian's torch 1.13 ('' skips)")
    ap.add_argument("--torch2-python", default="", help="interpreter with PyTorch 2.x ('' skips)")
    ap.add_argument("--no-torch-bf16", action="store_true",
                    help="leave out the bf16 autocast side (on a CPU without bf16 instructions it is ~25x slower)")
    # Worker mode (run by the driver): one PyTorch side, one round.
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("fp32", "sdpa", "bf16"), help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if not args.binary:
        ap.error("--binary is required")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sizes = {"tiny": (os.path.join(root, "configs/llama-tiny.json"), 8, 128),
             "16m": (os.path.join(root, "bench/llama-16m.json"), 4, 512)}
    sides = find_sides(args)
    rows = [compare(args.binary, sides, *sizes[s], args) for s in args.sizes.split(",")]

    ok = print_table(rows, args, args.rounds)
    if not ok:
        print("FAIL: fp32 losses differ from hspmd's by more than relative 1e-4", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
