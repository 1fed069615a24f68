"""Model FLOPs of one training step of a Llama-style decoder (the count every MFU figure here uses).

    train_flops(config, batch, seq) = 6 * N * tokens + 6 * layers * batch * seq^2 * heads * head_dim

N: the matrix parameters the tokens go through: per layer q, k, v, o (hidden x heads*head_dim and
hidden x kv_heads*head_dim, twice each), gate, up and down (3 x hidden x ffn), plus the lm head
(vocab x hidden, counted tied or not); the embedding is a lookup and norms are vectors, so neither
counts. 6 = 2 (multiply + add) x 3 (forward, and backward's two products). Causal attention,
forward: Q K^T and P V over the lower triangle, 2 products x 2 x (seq^2 / 2) x heads x head_dim per
sequence and layer = 2 x seq^2 x heads x head_dim; training is 3 x that. Softmax, norms, RoPE and
the optimizer are left out (elementwise, a few FLOPs per element).
"""


def matrix_params(config):
    """N above: the parameters of the matrix products a token goes through."""
    h, f, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    nq, nkv = config["num_attention_heads"], config["num_key_value_heads"]
    d = config.get("head_dim") or h // nq
    per_layer = 2 * h * nq * d + 2 * h * nkv * d + 3 * h * f  # q and o, k and v, gate, up and down
    return layers * per_layer + config["vocab_size"] * h


def attention_flops(config, batch, seq):
    """Causal attention's matrix products in one training step (forward and backward)."""
    nq = config["num_attention_heads"]
    d = config.get("head_dim") or config["hidden_size"] // nq
    return 3 * config["num_hidden_layers"] * batch * 2 * seq * seq * nq * d


def train_flops(config, batch, seq):
    """FLOPs of one training step on `batch` sequences of `seq` tokens."""
    return 6 * matrix_params(config) * batch * seq + attention_flops(config, batch, seq)
