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


@pytest.fixture
def madpipe_bin():
    """The madpipe command (MADPIPE_BIN, else build/madpipe); the test is skipped without it."""
    path = os.environ.get("MADPIPE_BIN") or str(REPO / "build" / "madpipe")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)) and not shutil.which(path):
        pytest.skip(f"no madpipe command at {path} (set MADPIPE_BIN)")
    return path
