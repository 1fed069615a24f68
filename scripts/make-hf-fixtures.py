#!/usr/bin/env python3
"""Golden Hugging Face fixtures for hspmd's model-fidelity tests (tests/runtime/hf_fidelity_test.cc).

Made with transformers 5.24.0, torch 2.15.0 and safetensors 0.8.0 from PyPI (CPU, float32):

    python3 -m venv /tmp/venv-hf && /tmp/venv-hf/bin/pip install torch transformers safetensors
    /tmp/venv-hf/bin/python scripts/make-hf-fixtures.py tests/runtime/hf_fixtures

For each supported variant, a directory written by save_pretrained (config.json, model.safetensors)
plus expected.json: the token documents, transformers' per-token losses (the causal-LM shift),
their token-weighted mean, the first logits of document 0 and RoPE's inverse frequencies. Tests compare against these files,
so CI needs no torch. Refused variants get a config.json only: hspmd must refuse them before it
reads any weight. The model is tiny (a few tens of KiB per variant) and its weights are drawn
with a large spread, so that a RoPE, norm or head mistake moves the loss well beyond 1e-5.

Rerunning rewrites every fixture; the header of expected.json records the versions that made it.
"""
import json
import os
import shutil
import sys

import safetensors
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

BASE = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=96,
    max_position_embeddings=128,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)

# name -> (config overrides, edit of the saved config.json or None)
SUPPORTED = {
    "untied": ({}, None),
    "tied": ({"tie_word_embeddings": True}, None),
    "mha_eps": ({"num_key_value_heads": 4, "rms_norm_eps": 0.05}, None),
    "head_dim": ({"head_dim": 12}, None),
    "theta": ({"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}, None),
    # head dim 8 at theta 10000: wavelengths 6.3, 63, 628, 6283; with 64 original positions and
    # frequency factors 1 and 4, the first is kept, the second blended, the others divided by 8
    "llama3": ({"head_dim": 8, "rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                  "original_max_position_embeddings": 64}}, None),
    "linear": ({"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}}, None),
    "bf16": ({}, "bf16"),
    # YaRN: head dim 16 puts pairs on both sides of the ramp and in it; factor 4 gives cos/sin
    # scale 0.1 ln 4 + 1; the second variant sets mscale / mscale_all_dim and beta_fast instead
    "yarn": ({"head_dim": 16, "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                 "original_max_position_embeddings": 32}}, None),
    "yarn_mscale": ({"head_dim": 16, "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0,
                                                        "factor": 8.0, "original_max_position_embeddings": 16,
                                                        "mscale": 0.9, "mscale_all_dim": 0.5, "beta_fast": 16.0,
                                                        "truncate": False}}, None),
    # biases on q/k/v/o (attention_bias) and on gate/up/down (mlp_bias), drawn non-zero
    "attention_bias": ({"attention_bias": True}, None),
    "mlp_bias": ({"mlp_bias": True, "tie_word_embeddings": True}, None),
    # the transformers < 5 generation of the keys: top-level rope_theta and rope_scaling
    "legacy_llama3": ({"head_dim": 8, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
                                                         "factor": 8.0, "low_freq_factor": 1.0,
                                                         "high_freq_factor": 4.0,
                                                         "original_max_position_embeddings": 64}}, "legacy"),
}

REFUSED = {
    "gelu": {"hidden_act": "gelu"},
    "float16": {"dtype": "float16"},
    "dynamic": {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}},
    "longrope": {"head_dim": 4, "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0,
                                                    "short_factor": [1.0, 1.0], "long_factor": [2.0, 2.0],
                                                    "original_max_position_embeddings": 64}},
    "gemma2": {},
}

DOC_LENGTHS = [48, 21]


def draw_weights(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.4 * torch.randn(p.shape, generator=gen))


def to_legacy(config_path):
    """Rewrite rope_parameters as transformers < 5 wrote it: rope_theta + rope_scaling."""
    with open(config_path) as f:
        c = json.load(f)
    rope = c.pop("rope_parameters")
    c["rope_theta"] = rope.pop("rope_theta")
    c["rope_scaling"] = rope if rope.get("rope_type", "default") != "default" else None
    c["torch_dtype"] = c.pop("dtype")
    with open(config_path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)


def make_supported(out, name, overrides, edit, seed):
    config = LlamaConfig(**{**BASE, **overrides})
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).float().eval()
    draw_weights(model, seed)
    if edit == "bf16":
        model = model.to(torch.bfloat16)  # stored as bfloat16
    model.save_pretrained(os.path.join(out, name))
    if edit == "legacy":
        to_legacy(os.path.join(out, name, "config.json"))
    gen_cfg = os.path.join(out, name, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)
    # The reference is what a user of transformers gets from the directory: from_pretrained reads
    # the config as written (the legacy keys included), recomputes RoPE's buffers, and evaluates
    # the stored (possibly bfloat16-rounded) weights in float32.
    model = LlamaForCausalLM.from_pretrained(os.path.join(out, name), dtype=torch.float32).eval()

    gen = torch.Generator().manual_seed(seed + 1000)
    docs = [torch.randint(0, config.vocab_size, (n,), generator=gen) for n in DOC_LENGTHS]
    token_losses = []
    logits0 = None
    with torch.no_grad():
        for i, doc in enumerate(docs):
            logits = model(input_ids=doc[None, :]).logits[0].float()
            losses = torch.nn.functional.cross_entropy(logits[:-1], doc[1:], reduction="none")
            token_losses.append(losses.tolist())
            if i == 0:
                logits0 = logits[:4, :8].tolist()
            hf_loss = model(input_ids=doc[None, :], labels=doc[None, :]).loss.item()
            assert abs(hf_loss - losses.mean().item()) <= 1e-6 * abs(hf_loss), (name, hf_loss)
    flat = [x for doc in token_losses for x in doc]
    expected = {
        "made_by": {"transformers": transformers.__version__, "torch": torch.__version__,
                    "safetensors": safetensors.__version__, "script": "scripts/make-hf-fixtures.py"},
        "documents": [d.tolist() for d in docs],
        "token_losses": token_losses,
        "mean_loss": sum(flat) / len(flat),
        "logits_doc0_first4_tokens_first8_vocab": logits0,
        "rope_inv_freq": model.model.rotary_emb.inv_freq.tolist(),
    }
    with open(os.path.join(out, name, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    print(f"{name}: mean loss {expected['mean_loss']:.6f} over {len(flat)} labelled tokens")


def make_refused(out, name, overrides):
    if name == "gemma2":  # another architecture: soft-capped attention logits, its own norms
        config = transformers.Gemma2Config(**BASE)
    else:
        config = LlamaConfig(**{**BASE, **overrides})
    os.makedirs(os.path.join(out, name), exist_ok=True)
    config.save_pretrained(os.path.join(out, name))
    print(f"{name}: config only (refused)")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make-hf-fixtures.py OUT_DIR")
    torch.set_num_threads(1)
    out = sys.argv[1]
    shutil.rmtree(out, ignore_errors=True)
    supported = os.path.join(out, "supported")
    refused = os.path.join(out, "refused")
    for i, (name, (overrides, edit)) in enumerate(SUPPORTED.items()):
        make_supported(supported, name, overrides, edit, seed=100 + i)
    for name, overrides in REFUSED.items():
        make_refused(refused, name, overrides)


if __name__ == "__main__":
    main()
