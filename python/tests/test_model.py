"""hspmd.Model: the facts `hspmd model info` prints, from a config file, a save_pretrained directory or a dict."""
import json
import re

import pytest

import hspmd

MODELS = ["configs/llama-tiny.json", "tests/runtime/hf_fixtures/supported/untied",
          "tests/runtime/hf_fixtures/supported/head_dim"]


def model_info_facts(text):
    """The layer count, vocabulary, parameter count and printed shapes of `hspmd model info`."""
    arch = re.search(r"^architecture: Llama, (\d+) layers, .* vocab (\d+)$", text, re.M)
    count = re.search(r"^parameters: (\d+)$", text, re.M)
    shapes = {m[1]: tuple(int(d) for d in m[2].split(", "))
              for m in re.finditer(r"^  (\S+)\s+\[([\d, ]+)\]$", text, re.M)}
    return int(arch[1]), int(arch[2]), int(count[1]), shapes


@pytest.mark.parametrize("path", MODELS)
def test_model_facts_equal_model_info(src, cli, path):
    layers, vocab, count, shapes = model_info_facts(cli("model", "info", src / path))
    m = hspmd.Model(str(src / path))
    assert m.model_type == "llama"
    assert (m.num_layers, m.vocab_size, m.num_parameters) == (layers, vocab, count)
    params = dict(m.parameters())
    assert sum(numel(s) for s in params.values()) == count
    for name, shape in shapes.items():  # model info prints layer 0 for every layer
        assert params[name] == shape
        if ".layers.0." in name:
            assert all(params[name.replace(".layers.0.", f".layers.{l}.")] == shape for l in range(layers))


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def test_model_from_dict_equals_model_from_file(src):
    path = src / "configs/llama-tiny.json"
    from_file = hspmd.Model(str(path))
    from_dict = hspmd.Model.from_dict(json.loads(path.read_text()))
    assert from_dict.config() == from_file.config()
    assert from_dict.parameters() == from_file.parameters()


def test_refused_config_raises_the_cli_message(src, cli_error):
    path = src / "tests/runtime/hf_fixtures/refused/gelu"
    expected = cli_error("model", "info", path)
    with pytest.raises(hspmd.Error) as raised:
        hspmd.Model(str(path))
    assert str(raised.value) == expected


def test_missing_config_raises_hspmd_error(tmp_path):
    with pytest.raises(hspmd.Error, match="config.json"):
        hspmd.Model(str(tmp_path))
