"""Typed configuration loading: YAML files and ``--set a.b=value`` overrides into nested dataclasses.

The dataclasses live with their domains (``common/<domain>/config.py``, composed by :mod:`common.config`); this module
only knows how to turn plain
mappings into them, so every bad key or value fails at start-up with a message naming the key.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Mapping, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration key or value is invalid; the message names the key."""


def parse_override(expr: str) -> tuple[str, Any]:
    """Split ``a.b=value`` into (``"a.b"``, parsed value); values are parsed as YAML scalars/lists."""
    if "=" not in expr:
        raise ConfigError(f"--set expects key=value, got {expr!r}")
    key, raw = expr.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set expects key=value, got {expr!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw  # not YAML: keep the literal string (e.g. a path with a colon)
    return key, value


def apply_overrides(tree: dict, overrides: list[str]) -> dict:
    """Return a copy of ``tree`` with each ``a.b=value`` override set; intermediate mappings are created."""
    result = _deep_copy(tree)
    for expr in overrides:
        key, value = parse_override(expr)
        node = result
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                # A scalar shorthand (e.g. inputs.labeled: PATH) is widened to a mapping when a sub-key is set.
                child = {} if child is None else ({"path": child} if isinstance(child, str) else child)
                node[part] = child
            node = child
        node[parts[-1]] = value
    return result


def load_yaml(path: str | Path) -> dict:
    """Read one YAML file into a mapping (an empty file gives ``{}``)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        with path.open(encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}:{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data


EXTENDS = "extends"


def load_tree(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict:
    """Read a config file with what it ``extends``: a file may name other config files (a path or a list of
    paths, relative to its own folder) whose trees it is laid over, in order, mapping by mapping (a later file's
    scalar or list replaces an earlier one's). ``conf/cluster_demo.yaml`` is the demo's world with a cluster's
    platform settings, without copying either. Raises :class:`ConfigError` for a cycle or a bad ``extends``."""
    path = Path(path).resolve()
    if path in _seen:
        raise ConfigError(f"{path}: {EXTENDS} makes a cycle ({' -> '.join(p.name for p in _seen + (path,))})")
    tree = load_yaml(path)
    bases = tree.pop(EXTENDS, None) or []
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise ConfigError(f"{path}: {EXTENDS} must be a file name or a list of file names, got {bases!r}")
    merged: dict = {}
    for base in bases:  # each a freshly read tree: nothing below is shared with another caller
        merged = _merge(merged, load_tree(path.parent / base, _seen + (path,)))
    return _merge(merged, tree)


def from_mapping(cls: type[T], data: Mapping[str, Any] | None, prefix: str = "") -> T:
    """Build dataclass ``cls`` from ``data``, checking every key and value against the type hints.

    Unknown keys and values of the wrong type or outside a ``Literal`` raise :class:`ConfigError`
    naming the dotted key and what is allowed.
    """
    data = dict(data or {})
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = prefix.rstrip(".") or "<top level>"
        raise ConfigError(
            f"unknown config key {prefix}{unknown[0]!s} (in {where}); allowed keys: {', '.join(sorted(fields))}"
        )
    for name, value in data.items():
        if isinstance(value, Mapping):
            data[name] = _over_section_default(fields[name], hints[name], value)
    kwargs = {name: _coerce(hints[name], value, f"{prefix}{name}") for name, value in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        # Sections used in several places (a T5 model, a fine-tune) name their keys "*.key"; "*" is
        # where this one sits (cga.model, query_reformulation.fine_tune, ...).
        message = str(exc)
        if message.startswith("*"):
            raise ConfigError(prefix.rstrip(".") + message[1:]) from None
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{prefix.rstrip('.') or cls.__name__}: {exc}") from exc


def _over_section_default(f: dataclasses.Field, tp: Any, value: Mapping[str, Any]) -> Mapping[str, Any]:
    """``value`` laid over what a section's own default changes from its class's defaults: a section whose
    default is ``FastTextConfig(loss="ova", lr=0.2)`` keeps one-vs-all when a config sets only its epochs.
    Without a default factory, or for a class that cannot be built without arguments, ``value`` as is."""
    if not dataclasses.is_dataclass(tp) or f.default_factory is dataclasses.MISSING:
        return value
    try:
        plain, own = tp(), f.default_factory()
    except (TypeError, ValueError):
        return value
    changed = {
        g.name: to_mapping(getattr(own, g.name))
        for g in dataclasses.fields(tp)
        if g.init and getattr(own, g.name) != getattr(plain, g.name)
    }
    # A class may say that a key, when given, voids parts of the default (a model named by a checkpoint
    # path is no longer the default's scratch model).
    for key, voided in getattr(tp, "SECTION_RESETS", {}).items():
        if key in value:
            for name in voided:
                changed.pop(name, None)
    return _merge(changed, value)


def _merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        merged[key] = (
            _merge(merged[key], value)
            if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping)
            else value
        )
    return merged


def to_mapping(obj: Any) -> Any:
    """Turn a config dataclass tree back into plain dicts/lists (for logging and hashing)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_mapping(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: to_mapping(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_mapping(v) for v in obj]
    return obj


# Words that mark a key as a credential (whole words of the key's last part: ``sas_token``, ``AWS_SECRET_ACCESS_KEY``,
# ``clientSecret``; not ``max_new_tokens``, a count).
SECRET_WORDS = frozenset(
    {
        "token",
        "password",
        "passwd",
        "pwd",
        "secret",
        "credential",
        "credentials",
        "apikey",
        "api_key",
        "access_key",
        "account_key",
        "private_key",
        "sas",
        "authorization",
    }
)
MASK = "***"


def is_secret_key(name: str) -> bool:
    """True when the last part of a dotted key names a credential (see :data:`SECRET_WORDS`)."""
    last = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name).rsplit(".", 1)[-1]).lower()
    words = [w for w in re.split(r"[^a-z0-9]+", last) if w]
    pairs = {f"{a}_{b}" for a, b in zip(words, words[1:])}
    return bool(SECRET_WORDS & (set(words) | pairs))


def mask_secrets(tree: Any, name: str = "") -> Any:
    """``tree`` (a mapping, list or value) with every credential replaced by ``***``: values under keys that
    :func:`is_secret_key`, and the password of ``scheme://user:password@host`` URIs. For logs and printouts."""
    if isinstance(tree, Mapping):
        return {k: mask_secrets(v, f"{name}.{k}" if name else str(k)) for k, v in tree.items()}
    if isinstance(tree, list):
        return [mask_secrets(v, name) for v in tree]
    if name and is_secret_key(name) and tree not in (None, ""):
        return MASK
    if isinstance(tree, str) and "://" in tree:
        return re.sub(r"(://[^/:@\s]+:)[^/@\s]+@", rf"\1{MASK}@", tree)
    return tree


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested mappings into ``{"a.b.c": value}`` (lists stay values)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(option, value, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{key}: {value!r} fits none of {tp}")
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{key}: {value!r} is not allowed; allowed values: {', '.join(map(repr, allowed))}")
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if isinstance(value, str) and hasattr(tp, "from_shorthand"):
            return tp.from_shorthand(os.path.expandvars(value))
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return from_mapping(tp, value, f"{key}.")
    if origin in (list, tuple, typing.Sequence):
        if value is None:
            raise ConfigError(f"{key}: expected a list, got null")
        items = value if isinstance(value, (list, tuple)) else [value]
        (item_tp, *_) = get_args(tp) or (Any,)
        return [_coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(items)]
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        _, val_tp = get_args(tp) or (str, Any)
        return {str(k): _coerce(val_tp, v, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if isinstance(value, (dict, list)) or value is None:
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        # ${VAR} lets cluster configs take bucket names and secrets scopes from the environment.
        return os.path.expandvars(str(value))
    raise ConfigError(f"{key}: unsupported config type {tp}")


def _deep_copy(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _deep_copy(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_deep_copy(v) for v in tree]
    return tree
