"""The notes' clusters and models, loaded once per module."""

from __future__ import annotations

import pytest

from simtrain.specs.model import load_model
from simtrain.topology.cluster import load_topology


@pytest.fixture(scope="module")
def seed64():
    return load_topology("seed-h100")


@pytest.fixture(scope="module")
def seed1024():
    return load_topology("seed-h100", nodes=128)


@pytest.fixture(scope="module")
def llama70b():
    return load_model("llama3-70b")


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama3-8b")
