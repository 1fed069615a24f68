"""hspmd.plan and hspmd.explain_switch: what `hspmd plan` and `hspmd explain --switch` print, as results."""
import re

import pytest

import hspmd

TINY = "configs/llama-tiny.json"
CLUSTER = "examples/clusters/local-hetero-4.json"
PROFILE = "examples/profiles/local-hetero-4-llama-tiny.json"


def test_plan_equals_cli(cli, src, tmp_path):
    out = tmp_path / "planned.json"
    text = cli("plan", "--model", src / TINY, "--cluster", src / CLUSTER, "--profile", src / PROFILE,
               "--global-batch", 8, "--seq-len", 64, "--out", out)
    r = hspmd.plan(hspmd.Model(str(src / TINY)), hspmd.Cluster.from_file(str(src / CLUSTER)),
                   hspmd.Profile.from_file(str(src / PROFILE)), global_batch=8, seq_len=64)
    assert r.strategy == hspmd.Strategy.from_file(str(out))
    step = float(re.search(r"predicted step time: (\S+) s", text)[1])
    assert r.prediction.step_seconds == pytest.approx(step, rel=5e-4)  # printed with 4 digits
    assert str(r) in text  # the plan and its prediction, as the CLI describes them
    assert [x.rank for x in r.prediction.ranks] == sorted(r.strategy.ranks)


def test_plan_errors_are_the_cli_messages(cli_error, src, tmp_path):
    expected = cli_error("plan", "--model", src / TINY, "--cluster", src / CLUSTER, "--profile", src / PROFILE,
                         "--seq-len", 64, "--out", tmp_path / "x.json")
    with pytest.raises(hspmd.Error) as e:
        hspmd.plan(hspmd.Model(str(src / TINY)), hspmd.Cluster.from_file(str(src / CLUSTER)),
                   hspmd.Profile.from_file(str(src / PROFILE)), global_batch=0, seq_len=64)
    assert str(e.value) == expected


@pytest.mark.parametrize("states", ["params", "params+adam"])
def test_explain_switch_equals_cli(cli, src, states):
    a, b = "examples/strategies/local-hetero-4.json", "examples/strategies/local-cp2-then-tp2.json"
    text = cli("explain", "--switch", src / a, src / b, "--model", src / TINY, "--cluster", src / CLUSTER,
               "--states", states)
    r = hspmd.explain_switch(hspmd.Strategy.from_file(str(src / a)), hspmd.Strategy.from_file(str(src / b)),
                             hspmd.Model(str(src / TINY)), hspmd.Cluster.from_file(str(src / CLUSTER)), states=states)
    assert f"switch {r.source} -> {r.target}" in text and r.states == states
    m = re.search(r"table entries (\d+), messages (\d+), sent .* \((\d+) bytes\)", text)
    assert (r.table_entries, r.messages, r.sent_bytes) == (int(m[1]), int(m[2]), int(m[3]))
    assert f"({r.tensors} tensors, float32)" in text
    pairs = [(int(p[1]), int(p[2]), int(p[3]), int(p[4]), p[5])
             for p in re.finditer(r"^  (\d+) -> (\d+): .* \((\d+) bytes\), (\d+) messages?, (\S+)$", text, re.MULTILINE)]
    assert pairs and pairs == [(p.sender, p.receiver, p.bytes, p.messages, p.tier) for p in r.pairs]
    assert sum(s.bytes for s in r.senders) == r.sent_bytes == sum(r.sent_by_tier.values())
    senders = [int(x[1]) for x in re.finditer(r"^  rank (\d+) ", text, re.MULTILINE)]
    assert senders == [s.rank for s in r.senders]


def test_explain_switch_bf16_params_equals_cli(cli, src):
    # A bf16-only switch: each step's bf16 parameters out and float32 gradients back, beside the full
    # switch of weights and Adam moments, as `hspmd explain --switch --states bf16-params` prints them.
    a, b = "examples/strategies/local-hetero-4.json", "examples/strategies/local-cp2-then-tp2.json"
    text = cli("explain", "--switch", src / a, src / b, "--model", src / TINY, "--cluster", src / CLUSTER,
               "--states", "bf16-params")
    r = hspmd.explain_switch(hspmd.Strategy.from_file(str(src / a)), hspmd.Strategy.from_file(str(src / b)),
                             hspmd.Model(str(src / TINY)), hspmd.Cluster.from_file(str(src / CLUSTER)),
                             states="bf16-params")
    assert isinstance(r, hspmd.Bf16SwitchExplanation) and r.states == "bf16-params"
    assert f"switch {r.source} -> {r.target}, states bf16-params" in text
    for label, move in [("params out (bf16, 2 bytes an element)", r.params_out),
                        ("grads back (float32, 4 bytes an element)", r.grads_back),
                        ("weights and Adam moments", r.full)]:
        m = re.search(re.escape(label) + r": (\d+) messages, .* \((\d+) bytes\): intra-node .* \((\d+) bytes\), "
                      r"inter-node .* \((\d+) bytes\); local copies", text)
        assert m, label
        assert (move.messages, move.sent_bytes) == (int(m[1]), int(m[2])), label
        tiers = (move.sent_by_tier.get("intra-node", 0), move.sent_by_tier.get("inter-node", 0))
        assert tiers == (int(m[3]), int(m[4])), label
        assert sum(s.bytes for s in move.senders) == move.sent_bytes == sum(p.bytes for p in move.pairs)
    assert r.params_out.sent_bytes > 0 and r.grads_back.sent_bytes > 0
    assert r.step_bytes == r.params_out.sent_bytes + r.grads_back.sent_bytes
    assert "per step: " in text and f"({r.step_bytes} bytes)" in text
    with pytest.raises(hspmd.Error, match="healthy run"):
        hspmd.explain_switch(hspmd.Strategy.from_file(str(src / a)), hspmd.Strategy.from_file(str(src / b)),
                             hspmd.Model(str(src / TINY)), hspmd.Cluster.from_file(str(src / CLUSTER)),
                             states="bf16-params", dead=[1])
