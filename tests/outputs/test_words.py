"""Counts in words: singular for one, plural otherwise, irregular plurals."""

from __future__ import annotations

import pytest

from simtrain.outputs.words import counted

pytestmark = pytest.mark.quick


def test_singular_for_exactly_one():
    assert counted(1, "micro-batch") == "1 micro-batch"
    assert counted(1, "node") == "1 node"
    assert counted(1.0, "rank") == "1 rank"


def test_plural_otherwise():
    assert counted(0, "node") == "0 nodes"
    assert counted(16, "micro-batch") == "16 micro-batches"
    assert counted(2048, "rank") == "2,048 ranks"
    assert counted(0.5, "node") == "0.5 nodes"
