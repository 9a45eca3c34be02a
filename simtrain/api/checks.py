"""The Python API's argument checks: a value of the wrong type, an unknown field or an unknown
choice is a one-line :class:`~simtrain.errors.SpecError` naming the argument, what was given and
what is valid, before any work (the CLI's own checks cover what comes from the command line).
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from typing import Any

from simtrain.errors import SpecError
from simtrain.specs.strict import shown


def type_name(value: Any) -> str:
    """``value``'s type as a message shows it: ``list [1, 2]``, ``None``."""
    return "None" if value is None else f"{type(value).__name__} {shown(value)}"


def check_instance(function: str, argument: str, value: Any, kind: type | tuple[type, ...], hint: str = "") -> Any:
    """``value`` itself, if it is a ``kind``; a :class:`SpecError` naming ``function``'s argument
    otherwise (``hint`` says where a right value comes from)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds):
        names = " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
        raise SpecError(f"{function}: {argument} must be {names}, got {type_name(value)}" + (f"; {hint}" if hint else ""))
    return value


def check_settings(function: str, settings: Any) -> dict[str, Any]:
    """``settings`` as a dict of named settings (None: none); a :class:`SpecError` for anything
    that is not a mapping of strings to values."""
    if settings is None:
        return {}
    if not isinstance(settings, Mapping):
        raise SpecError(f"{function}: settings must be a dict of settings (e.g. {{\"tp\": 2, \"gbs\": 64}}), got "
                        f"{type_name(settings)}")
    for key in settings:
        if not isinstance(key, str):
            raise SpecError(f"{function}: a setting's name must be a str, got {type_name(key)}")
    return dict(settings)


def check_choice(function: str, argument: str, value: Any, choices: tuple[str, ...]) -> str:
    """``value``, one of ``choices``; a :class:`SpecError` naming them otherwise."""
    if not isinstance(value, str) or value not in choices:
        raise SpecError(f"{function}: {argument} = {shown(value)}: must be one of {', '.join(choices)}")
    return value


def check_path(function: str, argument: str, value: Any) -> Any:
    """``value``, a file path (str or os.PathLike)."""
    return check_instance(function, argument, value, (str, os.PathLike))


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` has type ``hint`` (a class, a union, a generic such as dict[str, Any] by
    its origin, Any); a bool is no int."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    cls = origin or hint
    if hint is type(None):
        return value is None
    if cls in (int, float) and isinstance(value, bool):
        return False
    if cls is float and isinstance(value, int):
        return True
    return isinstance(value, cls) if isinstance(cls, type) else True


def check_fields(function: str, cls: type, changes: Mapping[str, Any], hint: str = "") -> None:
    """Every key of ``changes`` a field of dataclass ``cls`` and every value of the field's type;
    a :class:`SpecError` naming the first that is not (``hint`` says what to do instead)."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    for name, value in changes.items():
        if name not in names:
            raise SpecError(f"{function}: {shown(name)} is not a field of {cls.__name__} (fields: "
                            f"{', '.join(names)})" + (f"; {hint}" if hint else ""))
        if not _fits(value, hints[name]):
            shown_hint = getattr(hints[name], "__name__", None) or str(hints[name]).replace("simtrain.", "")
            raise SpecError(f"{function}: {name} must be {shown_hint}, got {type_name(value)}")
