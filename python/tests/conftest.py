"""Shared fixtures: the source tree, the built `hspmd` program, and running it.

ctest sets HSPMD_BIN (the CLI the results are compared with) and PYTHONPATH (the built module);
run by hand: HSPMD_BIN=build/release/hspmd PYTHONPATH=build/release/python pytest python/tests
"""
import os
import pathlib
import subprocess

import pytest

SOURCE_DIR = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def src():
    """The repository root, for its configs and example files."""
    return SOURCE_DIR


def _binary():
    path = os.environ.get("HSPMD_BIN")
    if not path:
        pytest.fail("HSPMD_BIN must name the built hspmd program (ctest sets it)")
    return path


@pytest.fixture
def cli():
    """cli(*args) runs `hspmd args...` and returns its stdout; it must succeed."""

    def run(*args):
        done = subprocess.run([_binary(), *map(str, args)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"hspmd {' '.join(map(str, args))} failed:\n{done.stderr}"
        return done.stdout

    return run


@pytest.fixture
def cli_error():
    """cli_error(*args) runs `hspmd args...`, which must fail, and returns hspmd's one-line message."""

    def run(*args):
        done = subprocess.run([_binary(), *map(str, args)], capture_output=True, text=True, check=False)
        assert done.returncode == 1, f"hspmd {' '.join(map(str, args))} should fail:\n{done.stdout}"
        prefix = "hspmd: error: "
        lines = [line for line in done.stderr.splitlines() if line.startswith(prefix)]
        assert len(lines) == 1, done.stderr
        return lines[0][len(prefix):]

    return run


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """The bundled corpus as a token dataset (hspmd data prepare), made once per test session."""
    out = tmp_path_factory.mktemp("kjv") / "data"
    done = subprocess.run([_binary(), "data", "prepare", "--input", SOURCE_DIR / "data/corpus/kjv-genesis-2kings.txt",
                           "--output", out, "--append-eos"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return out


def read_checkpoint(path):
    """{(name, region): array} of a sharded checkpoint (runtime/sharded_checkpoint.h), read with NumPy:
    index.json says which safetensors file holds which region of which tensor."""
    import json
    import struct

    import numpy as np

    path = pathlib.Path(path)
    index = json.loads((path / "index.json").read_text())
    files = {}
    out = {}
    for name, tensor in index["tensors"].items():
        for shard in tensor["shards"]:
            if shard["file"] not in files:
                raw = (path / shard["file"]).read_bytes()
                (size,) = struct.unpack("<Q", raw[:8])
                files[shard["file"]] = (json.loads(raw[8:8 + size]), raw[8 + size:])
            header, data = files[shard["file"]]
            entry = header[shard["key"]]
            assert entry["dtype"] == "F32"
            begin, end = entry["data_offsets"]
            region = tuple(tuple(r) for r in shard["region"])
            out[(name, region)] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(entry["shape"])
    return out
