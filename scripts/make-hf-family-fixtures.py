#!/usr/bin/env python3
"""Golden Hugging Face fixtures of the decoder families (Qwen2, Qwen3, Mistral, Gemma 3) for
tests/runtime/hf_family_fidelity_test.cc.

Made with transformers 5.24.0, torch 2.15.0 and safetensors 0.8.0 from PyPI (CPU, float32,
eager attention):

    python3 -m venv /tmp/venv-hf && /tmp/venv-hf/bin/pip install torch transformers safetensors
    /tmp/venv-hf/bin/python scripts/make-hf-family-fixtures.py tests/runtime/hf_family_fixtures [VARIANT ...]

(torch from PyPI brings its CUDA libraries too; the fixtures are made on the CPU.) With variant names,
only those are rewritten and the others left as they are (each variant's seed is its place in
VARIANTS, so a variant added at the end leaves the others' draws alike).

For each variant, a directory written by save_pretrained (config.json, model.safetensors) plus
  expected.json     the token documents, transformers' per-token losses (the causal-LM shift) and
                    their token-weighted mean;
  grads.safetensors d mean_loss / d every parameter (float32, by Hugging Face name; a tied head's
                    gradient is in model.embed_tokens.weight), the mean taken over the labelled
                    tokens of all documents together, as hspmd's packed batch normalizes.
refused/<name>/config.json: configs hspmd refuses (Gemma3ForConditionalGeneration).
Each document runs as its own sequence, so hspmd (which packs them into one batch) must restart
positions and attention at document boundaries to match. Gemma's pad id (0) occurs as an input token in
"gemma3_softcap": transformers' nn.Embedding(padding_idx) gives its row no gradient from the
lookup, which hspmd must match (docs/model-config.md). Sliding windows are shorter than the
documents. The models are tiny and their weights drawn with a large spread, so that a norm, RoPE,
window or head mistake moves the loss well beyond 1e-5. Tests compare against these files, so CI
needs no torch. Rerunning rewrites every fixture; expected.json records the versions that made it.
"""
import json
import os
import shutil
import sys

import safetensors
import safetensors.torch
import torch
import transformers
from transformers import AutoModelForCausalLM

BASE = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=96,
    max_position_embeddings=128,
    rms_norm_eps=1e-6,
)

# name -> (config class, config overrides, edit of the saved config.json or None)
VARIANTS = {
    # head_dim 8 is not hidden / heads (4): q_norm / k_norm over 8 values per head
    "qwen3": (transformers.Qwen3Config, {"head_dim": 8, "tie_word_embeddings": False}, None),
    # biases on q/k/v/o, tied embeddings, layer 1 sliding (max_window_layers 1) with a window of 8
    "qwen3_bias_sliding": (transformers.Qwen3Config, {"head_dim": 8, "attention_bias": True, "tie_word_embeddings": True,
                                                      "use_sliding_window": True, "sliding_window": 8,
                                                      "max_window_layers": 1}, None),
    # Qwen2: q/k/v biases without an o_proj bias, RoPE theta 1e6 in the transformers < 5 keys
    "qwen2": (transformers.Qwen2Config, {"tie_word_embeddings": False,
                                         "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}},
              "legacy_rope"),
    # every layer slides with a window of 8
    "mistral": (transformers.MistralConfig, {"sliding_window": 8, "tie_word_embeddings": False}, None),
    # local (window 8, theta 1e4) then global (theta 1e6) layer, head_dim 8, query_pre_attn_scalar
    # 12 (not head_dim), tied embeddings
    "gemma3": (transformers.Gemma3TextConfig, {"head_dim": 8, "query_pre_attn_scalar": 12, "sliding_window": 8,
                                               "layer_types": ["sliding_attention", "full_attention"]}, None),
    # three layers (two local), final logits soft-capped at 2, attention biases, untied, linear RoPE
    # scaling on the global layers
    "gemma3_softcap": (transformers.Gemma3TextConfig,
                       {"num_hidden_layers": 3, "head_dim": 8, "query_pre_attn_scalar": 8, "sliding_window": 6,
                        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
                        "final_logit_softcapping": 2.0, "attention_bias": True, "tie_word_embeddings": False,
                        "rope_parameters": {
                            "full_attention": {"rope_type": "linear", "rope_theta": 100000.0, "factor": 4.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 1000.0}}}, None),
    # a model like "gemma3" in the transformers < 5 keys: rope_theta, rope_local_base_freq,
    # sliding_window_pattern instead of layer_types, torch_dtype
    "gemma3_legacy": (transformers.Gemma3TextConfig, {"head_dim": 8, "query_pre_attn_scalar": 12, "sliding_window": 8,
                                                      "layer_types": ["sliding_attention", "full_attention"]},
                      "legacy_gemma3"),
    # Qwen2 as the Qwen2.5 checkpoints write it (transformers < 5 keys, tied embeddings), with
    # use_sliding_window and no layer_types: transformers makes the layers from max_window_layers
    # (1) on slide (window 8); that derivation is what this variant checks
    "qwen2_sliding": (transformers.Qwen2Config, {"tie_word_embeddings": True, "use_sliding_window": True,
                                                 "sliding_window": 8, "max_window_layers": 1},
                      "legacy_rope_no_layer_types"),
}

DOC_LENGTHS = [48, 21]


def draw_weights(model, gemma, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                # Gemma's norms scale by (1 + weight)
                p.copy_((0.0 if gemma else 1.0) + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.4 * torch.randn(p.shape, generator=gen))


def edit_config(path, edit):
    with open(path) as f:
        c = json.load(f)
    if edit in ("legacy_rope", "legacy_rope_no_layer_types"):
        if edit == "legacy_rope_no_layer_types":
            c.pop("layer_types")
        rope = c.pop("rope_parameters")
        c["rope_theta"] = rope["rope_theta"]
        c["rope_scaling"] = None
        c["torch_dtype"] = c.pop("dtype")
    elif edit == "legacy_gemma3":
        rope = c.pop("rope_parameters")
        c["rope_theta"] = rope["full_attention"]["rope_theta"]
        c["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
        c["rope_scaling"] = None
        c.pop("layer_types")
        c.pop("_sliding_window_pattern")
        c["sliding_window_pattern"] = 2
        c["torch_dtype"] = c.pop("dtype")
    with open(path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)


def make_variant(out, name, config_class, overrides, edit, seed):
    config = config_class(**{**BASE, **overrides})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).float()
    draw_weights(model, config_class is transformers.Gemma3TextConfig, seed)
    directory = os.path.join(out, name)
    model.save_pretrained(directory)
    if edit:
        edit_config(os.path.join(directory, "config.json"), edit)
    gen_cfg = os.path.join(directory, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)
    # The reference is what a user of transformers gets from the directory.
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager")
    model.train()  # no dropout in these configs; gradients as in fine-tuning

    gen = torch.Generator().manual_seed(seed + 1000)
    docs = [torch.randint(0, config.vocab_size, (n,), generator=gen) for n in DOC_LENGTHS]
    labelled = sum(n - 1 for n in DOC_LENGTHS)
    token_losses = []
    total = 0.0
    model.zero_grad()
    for doc in docs:
        logits = model(input_ids=doc[None, :]).logits[0].float()
        losses = torch.nn.functional.cross_entropy(logits[:-1], doc[1:], reduction="none")
        token_losses.append(losses.tolist())
        (losses.sum() / labelled).backward()
        total += losses.sum().item()
        hf_loss = model(input_ids=doc[None, :], labels=doc[None, :]).loss.item()
        assert abs(hf_loss - losses.mean().item()) <= 1e-6 * abs(hf_loss), (name, hf_loss)
    grads = {n: p.grad.detach().clone().contiguous() for n, p in model.named_parameters()}
    safetensors.torch.save_file(grads, os.path.join(directory, "grads.safetensors"))
    expected = {
        "made_by": {"transformers": transformers.__version__, "torch": torch.__version__,
                    "safetensors": safetensors.__version__, "script": "scripts/make-hf-family-fixtures.py",
                    "attn_implementation": "eager"},
        "documents": [d.tolist() for d in docs],
        "token_losses": token_losses,
        "mean_loss": total / labelled,
    }
    with open(os.path.join(directory, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    print(f"{name}: mean loss {expected['mean_loss']:.6f} over {labelled} labelled tokens, {len(grads)} gradients")


# Config-only directories of what hspmd refuses, each as transformers writes it.
def make_refused(out):
    # Gemma3ForConditionalGeneration (model_type "gemma3": text_config + vision_config)
    config = transformers.Gemma3Config(
        text_config={**BASE, "head_dim": 8, "sliding_window": 8},
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           image_size=28, patch_size=14),
        mm_tokens_per_image=4)
    config.architectures = ["Gemma3ForConditionalGeneration"]  # as the model's save_pretrained writes
    directory = os.path.join(out, "refused", "gemma3_multimodal")
    shutil.rmtree(directory, ignore_errors=True)
    config.save_pretrained(directory)
    print("refused/gemma3_multimodal: config.json")


def main():
    if len(sys.argv) < 2 or any(v not in VARIANTS and v != "refused" for v in sys.argv[2:]):
        sys.exit("usage: make-hf-family-fixtures.py OUT_DIR [VARIANT ...] (variants: " + ", ".join(VARIANTS) +
                 ", refused)")
    torch.set_num_threads(1)
    out = sys.argv[1]
    only = set(sys.argv[2:])
    if not only:
        shutil.rmtree(out, ignore_errors=True)
    for i, (name, (config_class, overrides, edit)) in enumerate(VARIANTS.items()):
        if not only or name in only:
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)
            make_variant(out, name, config_class, overrides, edit, seed=300 + i)
    if not only or "refused" in only:
        make_refused(out)


if __name__ == "__main__":
    main()
