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
