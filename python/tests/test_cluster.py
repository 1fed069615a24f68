"""hspmd.Cluster and hspmd.Profile: read from a spec or a dict; generated like `hspmd cluster`."""
import json

import pytest

import hspmd


def test_cluster_from_file_and_dict_agree(src):
    path = src / "examples/clusters/local-hetero-4.json"
    c = hspmd.Cluster.from_file(str(path))
    d = hspmd.Cluster.from_dict(json.loads(path.read_text()))
    spec = json.loads(path.read_text())
    assert c.name == d.name == spec["name"]
    assert c.num_devices == len(spec["devices"])
    assert [(x.id, x.node, x.type, x.memory) for x in c.devices] == \
           [(x["id"], x["node"], x["type"], x["memory"]) for x in spec["devices"]]
    assert [(x.id, x.type) for x in d.devices] == [(x.id, x.type) for x in c.devices]
    assert c.tier(0, 0) == "local"
    assert c.bandwidth(0, 1) == d.bandwidth(0, 1) > 0


def test_generated_cluster_equals_hspmd_cluster(src, tmp_path, cli):
    like = src / "examples/clusters/paper-16h800-32h20.json"
    out = tmp_path / "c.json"
    cli("cluster", "--kinds", "H800:24,H20:40", "--like", like, "--per-node", 8, "--out", out)
    written = hspmd.Cluster.from_file(str(out))
    generated = hspmd.Cluster.generate("H800:24,H20:40", hspmd.Cluster.from_file(str(like)), per_node=8)
    assert generated.name == written.name == "generated-64"
    assert [(x.id, x.node, x.type, x.memory, x.peak_flops) for x in generated.devices] == \
           [(x.id, x.node, x.type, x.memory, x.peak_flops) for x in written.devices]
    assert generated.tier(0, 8) == "inter-node"
    assert generated.bandwidth(0, 8) == written.bandwidth(0, 8)


def test_bad_cluster_key_raises_hspmd_error(src):
    spec = json.loads((src / "examples/clusters/local-hetero-4.json").read_text())
    spec["devices"][0].pop("node")
    spec["devices"][0]["nod"] = 0
    with pytest.raises(hspmd.Error, match="nod"):
        hspmd.Cluster.from_dict(spec, source="c.json")


def test_profile_reads_its_source(src):
    p = hspmd.Profile.from_file(str(src / "examples/profiles/local-hetero-4-llama-tiny.json"))
    assert p.source.startswith("measured")
    assert json.loads(p.to_json())["source"] == p.source
