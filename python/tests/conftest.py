"""Shared fixtures: the repository's shipped profiles and the madpipe command."""

import os
import pathlib
import shutil

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PROFILES = REPO / "configs" / "profiles"


@pytest.fixture
def resnet50():
    return PROFILES / "resnet50.json"


def find_madpipe():
    """The madpipe command (MADPIPE_BIN, else build/madpipe); skips the test without it. For
    fixtures of a wider scope than madpipe_bin's."""
    path = os.environ.get("MADPIPE_BIN") or str(REPO / "build" / "madpipe")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)) and not shutil.which(path):
        pytest.skip(f"no madpipe command at {path} (set MADPIPE_BIN)")
    return path


@pytest.fixture
def madpipe_bin():
    """The madpipe command (MADPIPE_BIN, else build/madpipe); the test is skipped without it."""
    return find_madpipe()


def chain_profile(forward_ms, backward_ms, output_bytes=1024, weight_bytes=4096, name="chain"):
    """A madpipe.profile/1 dict of a chain with the given per-layer times."""
    return {
        "format": "madpipe.profile/1", "name": name, "input_bytes": output_bytes,
        "layers": [{"name": f"layer{i}", "forward_ms": f, "backward_ms": b, "weight_bytes": weight_bytes,
                    "output_bytes": output_bytes} for i, (f, b) in enumerate(zip(forward_ms, backward_ms))],
    }


@pytest.fixture
def non_contiguous_profile():
    """The thesis's three-layer chain: on 2 GPUs, MadPipe puts layers 0 and 2 on one GPU."""
    return chain_profile([0.5, 1, 0.5], [0.5, 1, 0.5], name="thesis3")
