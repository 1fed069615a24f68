"""hspmd.explain: the numbers `hspmd explain --strategy` prints, as structured results."""
import re

import pytest

import hspmd

TINY = "configs/llama-tiny.json"
CLUSTER = "examples/clusters/local-hetero-4.json"
PROFILE = "examples/profiles/local-hetero-4-llama-tiny.json"
# A byte count as the CLI prints it: "128.00 KiB (131072 B)" or "768 B".
BYTES = r"(?:[\d.]+ [KMGT]iB \((\d+) B\)|(\d+) B)"
STAGE_LINE = re.compile(r"^    stage (\d+)  ranks \[([\d,-]+)\]\s+layers (\S*)\s+TP (\d+)(?:  CP (\d+))?\s+(F.*)$")


def ranks_of(text):
    """"0-1,3" -> [0, 1, 3]"""
    out = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def cli_pipelines(text):
    """[(micro-batches, sequences per micro-batch, [(ranks, layers, tp, schedule), ...]), ...]"""
    pipelines = []
    for line in text.splitlines():
        if m := re.match(r"^  pipeline \d+: (\d+) micro-batch(?:es)? of (\d+) sequences?", line):
            pipelines.append((int(m[1]), int(m[2]), []))
        elif m := STAGE_LINE.match(line):
            pipelines[-1][2].append((ranks_of(m[2]), m[3], int(m[4]), m[6].strip()))
    return pipelines


def cli_reshards(text, section):
    """[(header line, bytes per run, bytes per step), ...] of one section ("Reshards", "Gradient syncs", ...)."""
    body = text.split("\n" + section, 1)[1].split("\n\n", 1)[0]
    groups = []
    for line in body.splitlines()[1:]:
        if not line.startswith("    "):
            groups.append([line[2:], 0, 0])
        elif m := re.match(rf"^    bytes: {BYTES} per (?:run|tensor).* per step {BYTES}$", line):
            groups[-1][1:] = [int(m[1] or m[2]), int(m[3] or m[4])]
    return groups


def cli_tiers(text):
    body = text.split("\nBytes per step by link tier\n", 1)[1]
    return {m[1]: int(m[2] or m[3]) for m in re.finditer(rf"^  (\S+)\s+{BYTES}$", body, re.M) if m[1] != "total"}


def explain_both(src, cli, strategy, seq_len, cluster=None, profile=None):
    args = ["explain", "--strategy", src / strategy, "--model", src / TINY, "--seq-len", seq_len]
    kwargs = {}
    if cluster:
        args += ["--cluster", src / cluster]
        kwargs["cluster"] = hspmd.Cluster.from_file(str(src / cluster))
    if profile:
        args += ["--profile", src / profile]
        kwargs["profile"] = hspmd.Profile.from_file(str(src / profile))
    result = hspmd.explain(hspmd.Model(str(src / TINY)), hspmd.Strategy.from_file(str(src / strategy)),
                           seq_len=seq_len, **kwargs)
    return cli(*args), result


@pytest.mark.parametrize("strategy,cluster", [("examples/strategies/local-hetero-4.json", None),
                                              ("examples/strategies/local-hetero-4.json", CLUSTER),
                                              ("examples/strategies/local-cp2-then-tp2.json", None)])
def test_explain_equals_cli_numbers(src, cli, strategy, cluster):
    text, r = explain_both(src, cli, strategy, 64, cluster)
    assert cli_pipelines(text) == [
        (p.num_micro_batches, p.micro_batch_size, [(s.ranks, s.layers, s.tp, s.schedule) for s in p.stages])
        for p in r.pipelines]
    for section, groups in [("Reshards", r.activations), ("Gradient syncs", r.gradient_syncs),
                            ("Parameter gathers", r.parameter_gathers)]:
        if not groups:
            continue
        expected = [[f"{g.name}{f' ({g.occurrences}x)' if g.occurrences > 1 else ''}  {g.kind}  {g.shape}",
                     g.bytes, g.step_bytes] for g in groups]
        assert cli_reshards(text, section) == [e if e[1] else [e[0], 0, 0] for e in expected]
    assert cli_tiers(text) == r.step_bytes_by_tier
    assert str(r) in text  # the CLI prints the same report after its own first line


def test_explain_per_rank_view(src, cli):
    _, r = explain_both(src, cli, "examples/strategies/local-hetero-4.json", 64)
    assert [(x.rank, x.pipeline, x.stage, x.layers, x.tp, x.micro_batch_size, x.num_micro_batches)
            for x in r.ranks] == [(0, 0, 0, "0-3", 2, 2, 2), (1, 0, 0, "0-3", 2, 2, 2),
                                  (2, 1, 0, "0-1", 1, 1, 4), (3, 1, 1, "2-3", 1, 1, 4)]
    assert r.ranks[2].schedule == r.pipelines[1].stages[0].schedule
    assert all(x.prediction is None for x in r.ranks) and r.prediction is None


def test_explain_prediction_equals_cli(src, cli):
    text, r = explain_both(src, cli, "examples/strategies/local-hetero-4.json", 64, CLUSTER, PROFILE)
    step = float(re.search(r"^predicted step time: (\S+) s", text, re.M)[1])
    assert r.prediction.step_seconds == pytest.approx(step, rel=1e-3)
    printed = {int(m[1]): (m[2], int(m[3]), int(m[4]), float(m[5]))
               for m in re.finditer(r"^  rank (\d+) \((\S+), pipeline (\d+) stage (\d+)\): ([\d.]+) MiB", text, re.M)}
    assert set(printed) == {x.rank for x in r.ranks}
    for x in r.ranks:
        p = x.prediction
        assert (p.kind, p.pipeline, p.stage) == printed[x.rank][:3] == (p.kind, x.pipeline, x.stage)
        assert p.memory.total / 2**20 == pytest.approx(printed[x.rank][3], abs=0.006)
    assert r.prediction.fits


def test_explain_errors_are_the_cli_messages(src, cli_error):
    model = hspmd.Model(str(src / TINY))
    strategy = hspmd.Strategy.from_file(str(src / "examples/strategies/local-hetero-4.json"))
    expected = cli_error("explain", "--strategy", src / "examples/strategies/local-hetero-4.json",
                         "--model", src / TINY, "--schedule", "zigzag")
    with pytest.raises(hspmd.Error) as raised:
        hspmd.explain(model, strategy, schedule="zigzag")
    assert str(raised.value) == expected
    profile = hspmd.Profile.from_file(str(src / PROFILE))
    with pytest.raises(hspmd.Error, match="needs --cluster"):
        hspmd.explain(model, strategy, profile=profile)
