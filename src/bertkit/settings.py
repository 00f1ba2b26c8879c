"""Typed, strict run configuration: nested frozen dataclasses filled from a TOML or JSON file, then
from `section.key=value` overrides on the command line. Unknown keys and wrong types fail loudly."""

from __future__ import annotations

import dataclasses
import difflib
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from .errors import BertkitError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

T = TypeVar("T")


def load(cls: type[T], file: Path | None = None, overrides: list[str] | None = None,
         flags: dict[str, Any] | None = None) -> T:
    """Gives a `cls` built from defaults < `file` < `flags` (named options, dotted keys) < `overrides`."""
    tree: dict[str, Any] = {}
    if file is not None:
        tree = read_file(file)
    for key, value in (flags or {}).items():
        if value is not None:
            _set(tree, key, value)
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise BertkitError(f"override {item!r} is not key=value (e.g. optim.lr=1e-4)")
        _set(tree, key.strip(), _parse_scalar(raw.strip()))
    return build(cls, tree, source=str(file) if file else "")


def read_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise BertkitError(f"{path}: no such config file")
    try:
        if path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
        else:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BertkitError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'} ({e})") from None
    if not isinstance(data, dict):
        raise BertkitError(f"{path}: expected a table of settings")
    return data


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = tree
    for p in parents:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise BertkitError(f"config key {dotted!r}: {p!r} is a value, not a section")
    node[last] = value


def _parse_scalar(raw: str) -> Any:
    """key=value values: TOML/JSON literals (numbers, true/false, lists, quoted strings), else a string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def build(cls: type[T], tree: dict[str, Any], source: str, prefix: str = "", base: Any = None) -> T:
    """Gives cls(**tree), recursing into nested dataclasses; every key and type checked. Keys the tree
    leaves out keep their values in `base` (a nested section's own default, e.g. fine-tuning's optim.lr
    of 2e-5), else the class defaults."""
    if not isinstance(tree, dict):
        raise BertkitError(f"{_at(source)}{prefix.rstrip('.') or 'config'} must be a table, got {tree!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {} if base is None else {name: getattr(base, name) for name in fields}
    for key, value in tree.items():
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else f" (known: {', '.join(fields)})"
            raise BertkitError(f"{_at(source)}unknown key {prefix}{key}{hint}")
        kwargs[key] = _coerce(hints[key], value, source, f"{prefix}{key}", _default(fields[key]))
    try:
        return cls(**kwargs)
    except BertkitError as e:
        raise BertkitError(f"{_at(source)}{e}") from None


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def _coerce(hint: Any, value: Any, source: str, key: str, default: Any = None) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, source, prefix=f"{key}.", base=default if dataclasses.is_dataclass(default) else None)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, source, key)
            except BertkitError as e:
                errors.append(str(e))
        raise BertkitError(errors[0])
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise BertkitError(f"{_at(source)}{key} must be a list, got {value!r}")
        inner = args[0] if args else Any
        items = [_coerce(inner, v, source, key) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise BertkitError(f"{_at(source)}{key} must be a table, got {value!r}")
        k_hint, v_hint = args or (Any, Any)
        return {_coerce(k_hint, k, source, key): _coerce(v_hint, v, source, f"{key}.{k}") for k, v in value.items()}
    if hint is Any:
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is Path and isinstance(value, (str, Path)):
        return Path(value)
    if hint in (int, float, str, bool) and not (isinstance(value, hint) and not (hint is int and isinstance(value, bool))):
        raise BertkitError(f"{_at(source)}{key} must be {hint.__name__}, got {value!r}")
    return value


def to_dict(obj: Any) -> dict[str, Any]:
    """A JSON-ready dict of a settings object (paths as strings)."""
    return json.loads(json.dumps(dataclasses.asdict(obj), default=str))


def _at(source: str) -> str:
    """The prefix of an error message: the settings file it is in, if any."""
    return f"{source}: " if source else ""


def check(condition: bool, message: str) -> None:
    """Raises BertkitError(message) unless condition: for __post_init__ range checks."""
    if not condition:
        raise BertkitError(message)
