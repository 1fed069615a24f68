"""hspmd.Strategy: read from a file, a dict or JSON; written back; errors as the CLI gives them."""
import json

import pytest

import hspmd


def test_strategy_from_file_reads_pipelines_and_stages(src):
    s = hspmd.Strategy.from_file(str(src / "examples/strategies/local-hetero-4.json"))
    assert s.name == "local-hetero-4"
    assert s.zero1
    assert s.ranks == [0, 1, 2, 3]
    assert [(p.micro_batch_size, p.num_micro_batches, len(p.stages)) for p in s.pipelines] == [(2, 2, 1), (1, 4, 2)]
    second = s.pipelines[1].stages[1]
    assert (second.ranks, second.first_layer, second.last_layer, second.tp, second.cp) == ([3], 2, 3, 1, 1)


def test_strategy_round_trips_through_json_and_dict(src):
    for name in ["local-hetero-4.json", "local-cp2-tp2.json", "local-cp2-then-tp2.json"]:
        s = hspmd.Strategy.from_file(str(src / "examples/strategies" / name))
        assert hspmd.Strategy.from_json(s.to_json()) == s
        d = s.to_dict()
        assert d == json.loads(s.to_json())
        assert hspmd.Strategy.from_dict(d) == s
        d["zero"] = 0 if d["zero"] else 1
        assert hspmd.Strategy.from_dict(d) != s


def test_strategy_dict_matches_file(src):
    path = src / "examples/strategies/local-hetero-4.json"
    assert hspmd.Strategy.from_dict(json.loads(path.read_text())) == hspmd.Strategy.from_file(str(path))


def test_misspelled_strategy_key_raises_the_cli_message(src, tmp_path, cli_error):
    d = json.loads((src / "examples/strategies/local-hetero-4.json").read_text())
    d["pipelines"][1]["stages"][0]["tpp"] = 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    expected = cli_error("explain", "--strategy", bad, "--model", src / "configs/llama-tiny.json")
    assert "tpp" in expected
    with pytest.raises(hspmd.Error) as raised:
        hspmd.Strategy.from_file(str(bad))
    assert str(raised.value) == expected
    with pytest.raises(hspmd.Error) as raised:
        hspmd.Strategy.from_dict(d, source=str(bad))
    assert str(raised.value) == expected


def test_validate_names_the_uncovered_layer(src):
    s = hspmd.Strategy.from_file(str(src / "examples/strategies/local-hetero-4.json"))
    s.validate(4)
    with pytest.raises(hspmd.Error, match="layer"):
        s.validate(6)
