"""Preset files shipped as package data: the repository's topologies/ and schedules/ folders.

A wheel installs them as the packages ``simtrain.presets.topologies`` and
``simtrain.presets.schedules``; an editable install reads them from the checkout.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any


def preset_dir(kind: str) -> Any:
    """The folder (a Traversable) holding the ``kind`` presets: "topologies" or "schedules"."""
    try:
        return resources.files(f"simtrain.presets.{kind}")
    except ModuleNotFoundError:  # editable install: the mapped package is not importable
        return Path(__file__).resolve().parents[2] / kind
