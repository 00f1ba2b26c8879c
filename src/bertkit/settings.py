"""Typed, strict run configuration: nested frozen dataclasses filled from a TOML or JSON file, then
from `section.key=value` overrides on the command line. Unknown keys and wrong types fail loudly.

A setting is declared once, as a field: its type, its default, and with `option(...)` its command-line
flag, help and allowed values. The command line (`add_options`), the checks (`Settings.__post_init__`) and
docs/commands.md all follow from that one declaration:

    @dataclass(frozen=True)
    class TrainSettings(Settings):
        epochs: int = option(3, "passes over the training data", check=positive)
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .errors import BertkitError
from .fileio import atomic_write_text, read_json

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
    if path.suffix == ".json":
        return read_json(path, "a table of settings")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BertkitError(f"{path}: not valid TOML ({e})") from None


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
    except SettingError as e:  # a field's own check: named by its whole key
        raise BertkitError(f"{_at(source)}{prefix}{e}") from None
    except BertkitError as e:
        raise BertkitError(f"{_at(source)}{e}") from None


def _default(f: dataclasses.Field) -> Any:
    """A field's default value (None when it has none: a required field)."""
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


SAVED = "settings.json"  # a run folder's resolved settings (a model folder's config.json is its BertConfig)


def save(run_dir: Path, obj: Any) -> None:
    """Writes a run's resolved settings to RUN/settings.json, which `--resume` reads back."""
    atomic_write_text(run_dir / SAVED, json.dumps(to_dict(obj), indent=2) + "\n")


def saved(run_dir: Path | None) -> Path | None:
    """The settings a run folder saved, if any: settings.json (config.json in a run made before it had that name)."""
    if run_dir is None:
        return None
    return next((run_dir / name for name in (SAVED, "config.json") if (run_dir / name).is_file()), None)


def _at(source: str) -> str:
    """The prefix of an error message: the settings file it is in, if any."""
    return f"{source}: " if source else ""


def check(condition: bool, message: str) -> None:
    """Raises BertkitError(message) unless condition: for __post_init__ range checks."""
    if not condition:
        raise BertkitError(message)


# ---- one declaration per setting --------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    """A condition a setting's value must meet, and how the error says it ("must be positive")."""

    test: Callable[[Any], bool]
    says: str
    values: tuple[Any, ...] | None = None  # a closed set of values: also the command line's choices

    def __call__(self, value: Any) -> bool:
        return value is None or self.test(value)


positive = Check(lambda v: v > 0, "must be positive")
non_negative = Check(lambda v: v >= 0, "must be >= 0")


def one_of(*values: Any) -> Check:
    return Check(lambda v: v in values, f"must be one of {', '.join(map(str, values))}", values)


def between(low: float, high: float, *, closed: bool = False) -> Check:
    """(low, high), or [low, high] when `closed`."""
    if closed:
        return Check(lambda v: low <= v <= high, f"must be in [{low:g}, {high:g}]")
    return Check(lambda v: low < v < high, f"must be in ({low:g}, {high:g})")


PRECISIONS = one_of("fp32", "bf16", "fp16")  # fp16 with loss scaling (CUDA)
DEVICES = one_of("auto", "cpu", "cuda")


def option(default: Any = dataclasses.MISSING, help: str | None = None, *, flag: str | None = None,
           check: Check | None = None, metavar: str | None = None, parse: Callable[[str], Any] | None = None,
           const: Any = None, nargs: str | None = None, shows: str | None = None, secret: bool = False) -> Any:
    """A settings field, declared once: its default, and what the rest of bertkit derives from it.

    Args:
        help: the command-line help; a field with help is a flag of every command whose settings hold it.
        flag: the flag's name (default: "--" and the field's name, dashed).
        check: the condition its value must meet (`positive`, `one_of(...)`, ...), checked whenever the settings
            are built, and, for `one_of`, the flag's choices.
        metavar, nargs: as argparse's; nargs="?" makes the value optional (--grid alone: `parse("")`).
        parse: turns the flag's text into the value (default: the field's type).
        const: the flag takes no value and sets this one (e.g. False for --no-header).
        shows: the default as the help says it, when it is not the field's default value (e.g. "the task's").
        secret: left out of the settings' repr (an API key), so that no log or traceback shows it.
    """
    meta = {"help": help, "flag": flag, "check": check, "metavar": metavar, "parse": parse, "const": const,
            "nargs": nargs, "shows": shows}
    return dataclasses.field(default=default, metadata=meta, repr=not secret)


class SettingError(BertkitError):
    """A field's value fails its declared check; `settings.build` names it by its whole key."""


class Settings:
    """Base of settings dataclasses: checks every field declared with `option(check=...)` on construction.
    A subclass with checks across fields defines __post_init__ and calls this one first."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            check = f.metadata.get("check")
            value = getattr(self, f.name)
            if check is not None and not check(value):
                raise SettingError(f"{f.name} {check.says}, got {value!r}")


def add_options(parser: argparse.ArgumentParser, cls: type, prefix: str = "", defaults: Any = None,
                skip: tuple[str, ...] = ()) -> None:
    """Adds a flag for every field of `cls` (and its nested settings) declared with help; each flag's dest is
    the setting's dotted key, its default None (not given: the file's value or the default stands)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        default = getattr(defaults, f.name) if defaults is not None else _default(f)
        inner = _settings_class(hints[f.name])
        if inner is not None and f.metadata.get("help") is None:
            add_options(parser, inner, f"{key}.", default if dataclasses.is_dataclass(default) else None, skip)
            continue
        if f.metadata.get("help") is not None and key not in skip:
            flag = f.metadata["flag"] or "--" + f.name.replace("_", "-")
            parser.add_argument(flag, **_flag(f, hints[f.name], key, default, flag))


def _flag(f: dataclasses.Field, hint: Any, key: str, default: Any, flag: str) -> dict[str, Any]:
    """argparse's keywords for the flag of field `f` (its setting `key`)."""
    meta = f.metadata
    if meta["shows"]:
        shown = f" (default: {meta['shows']})"
    else:
        shown = "" if default is None or default is False else f" (default {_show(default)})"
    kwargs: dict[str, Any] = {"dest": key, "default": None, "help": meta["help"] + shown}
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        kwargs["required"] = True
    kind = _scalar(hint)
    if meta["const"] is not None or kind is bool:
        return kwargs | {"action": "store_const", "const": True if meta["const"] is None else meta["const"]}
    kwargs["type"] = _parser(meta["parse"]) if meta["parse"] else kind
    if meta["nargs"]:
        kwargs |= {"nargs": meta["nargs"], **({"const": ""} if meta["nargs"] == "?" else {})}
    check = meta["check"]
    if check is not None and check.values is not None:
        kwargs["choices"] = list(check.values)  # argparse shows them: {fp32,bf16,fp16}
    else:
        kwargs["metavar"] = meta["metavar"] or flag.lstrip("-").replace("-", "_").upper()
    return kwargs


def given(args: argparse.Namespace, cls: type, prefix: str = "") -> dict[str, Any]:
    """The settings the command line gave, by dotted key (flags from `add_options`, left out when not given)."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        inner = _settings_class(hints[f.name])
        if inner is not None and f.metadata.get("help") is None:
            out |= given(args, inner, f"{key}.")
        elif getattr(args, key, None) is not None:
            out[key] = getattr(args, key)
    return out


def _parser(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`parse` as argparse takes it: its BertkitError becomes argparse's one-line usage error."""
    def run(text: str) -> Any:
        try:
            return parse(text)
        except BertkitError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    run.__name__ = parse.__name__
    return run


def _settings_class(hint: Any) -> type | None:
    """The settings dataclass a field holds (also when optional), else None."""
    optional = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else ()
    return next((arg for arg in (hint, *optional) if dataclasses.is_dataclass(arg)), None)  # type: ignore[return-value]


def _scalar(hint: Any) -> Any:
    """The type a flag's text becomes: int, float, Path, bool or str (optional types unwrapped; a list or tuple's
    items for a flag of several values)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        hint = args[0]
    if typing.get_origin(hint) in (list, tuple) and typing.get_args(hint):
        hint = typing.get_args(hint)[0]
    return hint if hint in (int, float, Path, bool) else str


def _show(value: Any) -> str:
    return f"{value:g}".replace("e-0", "e-") if isinstance(value, float) else str(value)
