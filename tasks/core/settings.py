"""Typed settings: one frozen dataclass per config block, built once from the composed config.

Each block of ``conf/`` (``encoder``, ``fusion``, ``finetune``, ``cache``, ``checkpoint``, ``distill``,
``task``, and each task's ``data`` and ``head``) is read by exactly one ``Settings`` subclass, which
lives next to the code it configures. Defaults live in ``conf/`` only: every field without a
default must be present in the block, and a key the class does not know is an error that names it
(a typo such as ``finetune.lr`` never passes silently). Fields that default to ``None`` are the
optional ones (set only by some presets, e.g. ``fusion.layers`` for ``fusion=layers``).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

from sesame.tasks.core.errors import ConfigError, UserError

S = TypeVar("S", bound="Settings")


def plain(block: Any) -> Any:
    """A resolved, plain-Python copy of a (Dict|List)Config; other values as they are."""
    if isinstance(block, (DictConfig, ListConfig)):
        try:
            return OmegaConf.to_container(block, resolve=True, throw_on_missing=True)
        except MissingMandatoryValue as err:
            raise ConfigError(f"{err.full_key} is not set (???): give it a value") from None
        except InterpolationResolutionError as err:  # a resolver's own UserError is the real message
            cause = err.__cause__ or err.__context__
            if isinstance(cause, UserError):
                raise cause from None
            raise ConfigError(f"{err.full_key}: {err.msg}") from None
    return block


@dataclass(frozen=True)
class Settings:
    """Base of every settings block. Subclasses are frozen dataclasses whose fields mirror one config block."""

    #: The config key of the block, for error messages (``"data"``, ``"head"``, ``"finetune"``, ...).
    group: typing.ClassVar[str] = ""

    @classmethod
    def from_config(cls: type[S], block: Mapping[str, Any] | DictConfig | None) -> S:
        """Build from ``cfg.<group>``: unknown keys and missing required keys are a :class:`ConfigError`."""
        raw = plain(block) if block is not None else {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{cls.group}: expected a block of settings, got {raw!r}")
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(raw) - set(fields))
        if unknown:
            keys = ", ".join(f"{cls.group}.{k}" for k in unknown)
            raise ConfigError(
                f"unknown setting {keys} for {cls.__name__}; known: {', '.join(sorted(fields))}. Fix: remove it or correct its name"
            )
        missing = [
            name for name, f in fields.items()
            if name not in raw and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            keys = ", ".join(f"{cls.group}.{k}" for k in missing)
            raise ConfigError(f"missing setting {keys}. Fix: add it (see the presets in conf/)")
        hints = typing.get_type_hints(cls)
        values = {name: _coerce(value, hints.get(name), f"{cls.group}.{name}") for name, value in raw.items()}
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def checked_value(value: Any, hint: Any, key: str) -> Any:
    """``value`` of the setting ``key`` checked against the type ``hint`` (as a block's fields are), a
    :class:`ConfigError` naming the key otherwise: for the top-level keys no block holds (``seed``)."""
    return _coerce(value, hint, key)


def _allows_none(hint: Any) -> bool:
    return hint is None or hint is typing.Any or (
        typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint))


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Light type checking: ints/floats/bools/strs as declared (YAML ``5e-5`` is a str in some loaders)."""
    if value is None:
        if _allows_none(hint) or not isinstance(hint, type) and typing.get_origin(hint) is None:
            return None
        # A setting with no "off" value: null would reach the code as None and fail there.
        raise ConfigError(f"{key}=null: expected {_name(hint)}; this setting cannot be null. Fix: give it a value "
                          "(see its preset in conf/)")
    if hint is None:
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(options) == 1:  # ``X | None``: X's own message (it says what is wrong with the value)
            return _coerce(value, options[0], key)
        for option in options:
            try:
                return _coerce(value, option, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}={value!r}: expected {' or '.join(_name(o) for o in options)}")
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}={value!r}: expected a list")
        args = typing.get_args(hint)
        item = args[0] if args else None
        return tuple(_coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value))
    if hint is typing.Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={value!r}: expected true or false")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={value!r}: expected an integer")
    if hint is float:
        number: float | None = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            raise ConfigError(f"{key}={value!r}: expected a number")
        # NaN passes every range check below (each comparison is false), infinity most; no setting means either.
        if not math.isfinite(number):
            raise ConfigError(f"{key}={value!r}: expected a finite number. Fix: give a number such as 0.1 or 1e-5")
        return number
    if hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # YAML reads data.label_names=[0,1] as numbers; they name labels "0", "1"
        raise ConfigError(f"{key}={value!r}: expected a string")
    if isinstance(hint, type) and isinstance(value, hint):
        return value
    if isinstance(hint, type) and hint not in (str, int, float, bool):
        return value
    raise ConfigError(f"{key}={value!r}: expected {_name(hint)}")


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", str(hint))
