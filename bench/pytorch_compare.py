#!/usr/bin/python3
"""hspmd vs PyTorch CPU: same Llama, same initial weights, same batch, same optimizer, same threads.

Run through bench/pytorch_compare.sh (it builds bench_pytorch_compare_bench and makes sure Debian's
python3-torch is installed for /usr/bin/python3). For each size:
  1. bench_pytorch_compare_bench trains with hspmd and writes init.safetensors, batch.safetensors and
     hspmd.json (losses, step times, peak memory, sgemm GFLOP/s);
  2. this script loads the same weights and batch into a PyTorch Llama written here (Hugging Face
     conventions: RMSNorm, rotate-half RoPE, GQA, SwiGLU), runs the same steps and measures the same
     figures in this process;
  3. checks that every step's loss agrees within relative 1e-4, and prints one table.

FLOPs of one training step (the same count for both): 3 x forward, forward = 2 x (matrix params
except the embedding) x tokens + causal attention 2 x S^2 x (Nq x D) per sequence and layer.
Peak memory: resident-set high-water mark above the RSS before the model was built.
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

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "I32": torch.int32, "I64": torch.int64}


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
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=DTYPES[info["dtype"]])
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

    def __init__(self, config, weights):
        self.c = config
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
            # torch 1.13 (Debian) has no scaled_dot_product_attention: the plain causal softmax.
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
        logits = x @ head.t()
        targets = torch.full_like(ids, -100)
        targets[:, :-1] = ids[:, 1:]  # next token inside each row; none after the last
        return F.cross_entropy(logits.view(b * s, -1), targets.view(-1), ignore_index=-100)


def torch_run(config, weights, ids, steps):
    rss_before = proc_status_bytes("VmRSS")
    reset = reset_peak_rss()
    model = Llama(config, weights)
    params = list(model.w.values())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    losses, times = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
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


def train_flops(config, batch, seq):
    h, f, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    nq, nkv = config["num_attention_heads"], config["num_key_value_heads"]
    d = h // nq
    per_layer = h * nq * d * 2 + h * nkv * d * 2 + 3 * h * f  # q, o, k, v, gate, up, down
    matrix_params = layers * per_layer + config["vocab_size"] * h  # + lm_head (tied or not)
    tokens = batch * seq
    forward = 2 * matrix_params * tokens + layers * batch * 2 * seq * seq * nq * d
    return 3 * forward


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def compare(binary, config_path, batch, seq, steps, threads):
    with open(config_path) as f:
        config = json.load(f)
    with tempfile.TemporaryDirectory(prefix="hspmd_pytorch_compare.") as out:
        subprocess.run([binary, "--config", config_path, "--batch", str(batch), "--seq", str(seq), "--steps",
                        str(steps), "--threads", str(threads), "--out", out], check=True)
        with open(os.path.join(out, "hspmd.json")) as f:
            ours = json.load(f)
        weights = load_safetensors(os.path.join(out, "init.safetensors"))
        ids = load_safetensors(os.path.join(out, "batch.safetensors"))["input_ids"]
    theirs = torch_run(config, weights, ids, steps)
    theirs["sgemm_gflops"] = torch_sgemm_gflops()

    rel = [abs(a - b) / abs(b) for a, b in zip(ours["losses"], theirs["losses"])]
    flops = train_flops(config, batch, seq)
    tokens = batch * seq
    row = {"name": os.path.basename(config_path), "params": ours["parameters"], "batch": f"{batch}x{seq}"}
    for side, r in (("hspmd", ours), ("torch", theirs)):
        t = median(r["step_seconds"][1:]) if steps > 1 else r["step_seconds"][0]  # step 1 is warm-up
        row[side] = {"tok_s": tokens / t, "peak_mib": r["peak_rss_bytes"] / 2 ** 20,
                     "gflops": flops / t / 1e9, "sgemm": r["sgemm_gflops"], "peak_reset": r["peak_reset"]}
    row["max_rel_loss_diff"] = max(rel)
    row["losses_hspmd"], row["losses_torch"] = ours["losses"], theirs["losses"]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True, help="path of bench_pytorch_compare_bench")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=4, help="training steps per side (the first is a warm-up)")
    ap.add_argument("--sizes", default="tiny,16m", help="comma-separated: tiny (configs/llama-tiny.json, 8x128), "
                    "16m (bench/llama-16m.json, 4x512)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sizes = {"tiny": (os.path.join(root, "configs/llama-tiny.json"), 8, 128),
             "16m": (os.path.join(root, "bench/llama-16m.json"), 4, 512)}
    rows = [compare(args.binary, *sizes[s], args.steps, args.threads) for s in args.sizes.split(",")]

    print(f"\nhspmd vs PyTorch {torch.__version__} (CPU), {args.threads} threads, {args.steps} steps "
          f"(first is warm-up), same weights and batch")
    print(f"{'model':18} {'params':>8} {'batch':>7} | {'tok/s hspmd':>11} {'torch':>8} {'ratio':>6} | "
          f"{'peak MiB hspmd':>14} {'torch':>7} {'ratio':>6} | {'GFLOP/s hspmd':>13} {'/sgemm':>6} "
          f"{'torch':>7} {'/sgemm':>6} | {'max rel loss diff':>17}")
    ok = True
    for r in rows:
        h, t = r["hspmd"], r["torch"]
        agree = r["max_rel_loss_diff"] <= 1e-4
        ok &= agree
        print(f"{r['name']:18} {r['params'] / 1e6:7.2f}M {r['batch']:>7} | {h['tok_s']:11.0f} {t['tok_s']:8.0f} "
              f"{h['tok_s'] / t['tok_s']:6.2f} | {h['peak_mib']:14.1f} {t['peak_mib']:7.1f} "
              f"{h['peak_mib'] / max(t['peak_mib'], 1e-9):6.2f} | {h['gflops']:13.1f} {h['gflops'] / h['sgemm']:6.2f} "
              f"{t['gflops']:7.1f} {t['gflops'] / t['sgemm']:6.2f} | {r['max_rel_loss_diff']:11.2e} "
              f"{'ok' if agree else 'FAIL'}")
    for r in rows:
        print(f"losses {r['name']}: hspmd {['%.6f' % x for x in r['losses_hspmd']]}")
        print(f"{'':{len('losses ' + r['name'])}}  torch {['%.6f' % x for x in r['losses_torch']]}")
    print(f"sgemm 1024^3 GFLOP/s: hspmd (OpenBLAS) {rows[0]['hspmd']['sgemm']:.1f}, torch {rows[0]['torch']['sgemm']:.1f}")
    if not all(r["hspmd"]["peak_reset"] and r["torch"]["peak_reset"] for r in rows):
        print("note: /proc/self/clear_refs was not writable; peak memory includes earlier high-water marks")
    if not ok:
        print("FAIL: losses differ by more than relative 1e-4", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
