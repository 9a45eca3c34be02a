"""What an imported training job becomes: simtrain settings, the keys left out, and one error for
the keys simtrain cannot simulate.

A framework reader (:mod:`~simtrain.importers.torchtitan`, :mod:`~simtrain.importers.megatron`) walks
the job's keys and tells a :class:`JobReader` what each one is: a setting (:meth:`JobReader.set`,
whose name must be one of :data:`simtrain.settings.SETTINGS`),
a key with no effect on one simulated step (:meth:`JobReader.ignore`: logging, paths, checkpoints,
data, learning rate) or a key that changes the step in a way simtrain does not model
(:meth:`JobReader.unsupported`). :meth:`JobReader.result` then names every unsupported key in one
error, or returns the :class:`Imported` job. Settings given as flags take precedence over the
job's: an unsupported key that only decides settings the flags give is no error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from simtrain.errors import SpecError
from simtrain.settings import lookup, setting
from simtrain.specs.model import ModelSpec, list_models, load_model


@dataclass(frozen=True)
class Imported:
    """A training job of another framework as simtrain settings."""

    framework: str  # "torchtitan" or "Megatron-LM"
    source: str  # the file read, or "arguments"
    settings: dict[str, Any]  # simtrain settings (keys of simtrain.settings.SETTINGS)
    ignored: tuple[str, ...]  # the job's keys with no effect on one simulated step

    def pick(self, *names: str) -> dict[str, Any]:
        """The job's value of each setting named (None where it gives none; a misspelt name raises)."""
        return {name: lookup(self.settings, name) for name in names}


class JobReader:
    """Collects the settings, ignored keys and unsupported keys of one job (see the module
    docstring); ``flags`` are the settings given on the command line."""

    def __init__(self, framework: str, source: str, flags: Mapping[str, Any]):
        self.framework, self.source, self.flags = framework, source, dict(flags)
        self._values: dict[str, Any] = {}  # the job's settings, each written by set()
        self.ignored: list[str] = []
        self._unsupported: list[str] = []

    @property
    def settings(self) -> Mapping[str, Any]:
        """The settings the job gives so far (read-only: :meth:`set` writes them)."""
        return MappingProxyType(self._values)

    def set(self, name: str, value: Any) -> None:
        """The job gives setting ``name`` the value ``value``; a misspelt name is a
        :class:`SpecError` at once (:func:`simtrain.settings.setting`)."""
        self._values[setting(name).name] = value

    def set_default(self, name: str, value: Any) -> None:
        """:meth:`set`, unless the job already gives ``name``."""
        if setting(name).name not in self._values:
            self.set(name, value)

    def update(self, values: Mapping[str, Any] | None = None, **more: Any) -> None:
        """:meth:`set` of each setting of ``values`` and ``more``."""
        for name, value in {**(values or {}), **more}.items():
            self.set(name, value)

    def own(self, name: str) -> Any:
        """The job's own value of setting ``name`` (flags aside); None where it gives none."""
        return lookup(self._values, name)

    def value(self, name: str) -> Any:
        """A setting as the run will see it: the flag's, else the job's, else the default."""
        for table in (self.flags, self._values):
            if lookup(table, name) is not None:
                return lookup(table, name)
        return setting(name).default

    def ignore(self, key: str) -> None:
        """``key`` does not change one simulated step."""
        self.ignored.append(key)

    def unsupported(self, key: str, why: str, decides: tuple[str, ...] = ()) -> None:
        """``key`` changes the step in a way simtrain does not model (``why``); no error when the
        flags give every setting it ``decides``."""
        if not decides or any(self.flags.get(name) is None for name in decides):
            self._unsupported.append(f"{key} ({why})")

    def model(self) -> ModelSpec:
        """The model of the run (the flag's or the job's)."""
        return load_model(self.value("model"))

    def result(self) -> Imported:
        """The imported job; a :class:`SpecError` naming every unsupported key otherwise."""
        if self._unsupported:
            raise SpecError(f"{self.source}: {self.framework} keys simtrain cannot simulate: "
                            f"{'; '.join(self._unsupported)}")
        return Imported(self.framework, self.source, dict(self._values), tuple(self.ignored))


def stage_split(layers_per_stage: list[int]) -> dict[str, int] | None:
    """The ``first_stage_layers``/``last_stage_layers`` settings that give these layer counts per
    pipeline chunk: none for an even split, both when the middle chunks are even; None when
    simtrain cannot split the layers this way (uneven middle chunks).

    >>> stage_split([20, 20, 20, 20]), stage_split([19, 21, 21, 19]), stage_split([20, 21, 20, 19])
    ({}, {'first_stage_layers': 19, 'last_stage_layers': 19}, None)
    """
    if len(set(layers_per_stage)) <= 1:
        return {}
    if len(set(layers_per_stage[1:-1])) > 1:
        return None
    return {"first_stage_layers": layers_per_stage[0], "last_stage_layers": layers_per_stage[-1]}


def _architecture(spec: ModelSpec) -> dict[str, Any]:
    """The figures a launch line gives of a model, as :func:`match_model` compares them."""
    return {"layers": spec.layers, "hidden": spec.hidden, "heads": spec.heads,
            "kv_heads": spec.kv_heads or spec.heads,
            "ffn": spec.ffn, "num_experts": spec.num_experts, "top_k": spec.top_k,
            "moe_ffn": spec.moe_ffn or spec.ffn, "gated_mlp": spec.gated_mlp}


def match_model(given: Mapping[str, Any]) -> str:
    """The model preset whose architecture has every value in ``given`` (keys of
    :func:`_architecture`); a :class:`SpecError` naming the closest preset and how it differs
    when none or several match.

    >>> match_model({"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8})
    'llama3-70b'
    """
    diffs = {}
    for name in list_models():
        arch = _architecture(load_model(name))
        diffs[name] = {k: (v, arch[k]) for k, v in given.items() if arch[k] != v}
    exact = [name for name, d in diffs.items() if not d]
    if len(exact) == 1:
        return exact[0]
    shown = ", ".join(f"{k} {v}" for k, v in given.items())
    if exact:
        raise SpecError(f"{shown}: the presets {', '.join(exact)} have them all; give --model")
    closest = min(diffs, key=lambda n: len(diffs[n]))
    how = ", ".join(f"{k} {v} against {w}" for k, (v, w) in diffs[closest].items())
    raise SpecError(f"{shown}: no model preset has them all (closest: {closest}, with {how}); give "
                    f"--model NAME|FILE (a model TOML or a Hugging Face config.json)")
