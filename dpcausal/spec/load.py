"""Load a YAML spec into a command's model, turning every problem into one actionable sentence."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dpcausal.errors import SpecError

M = TypeVar("M", bound=BaseModel)


class SpecLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also reads the scientific forms people write as numbers.

    YAML 1.1 (PyYAML) takes a float only with a dot and a signed exponent, so ``1e9``, ``1.0e9``
    and ``5e-7`` arrive as text and a numeric field refuses them. This loader adds YAML 1.2's
    float form (``[-+]?(.digits|digits[.digits])([eE][-+]?digits)``) to the YAML 1.1 ones; quoted
    scalars and anything else that is not a number stay strings, and are still refused by a
    numeric field. Only spec files use it (``yaml.safe_load`` elsewhere is unchanged).
    """


SpecLoader.yaml_implicit_resolvers = {
    first: list(resolvers) for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)$"),
    list("-+0123456789."),
)


def _field_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            # pydantic names union branches ("tuple[float, float]", "function-after[...]"): skip them
            if "[" in item or item.startswith(("function-", "tuple", "dict", "list")):
                continue
            parts.append(("." if parts else "") + item)
    return "".join(parts) or "(top level)"


def format_validation_error(path: Path | str, exc: ValidationError) -> str:
    """One line per distinct problem: ``file: dotted.field: message (got ...)``."""
    lines: list[str] = []
    for err in exc.errors():
        where = _field_path(tuple(err["loc"]))
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling (see 'dpcausal schema')"
        elif err["type"] == "missing":
            msg = "required field is missing"
        else:
            msg = msg.removeprefix("Value error, ")
            if "input" in err and not isinstance(err["input"], dict | list):
                msg += f" (got {err['input']!r})"
        line = f"{path}: {where}: {msg}"
        if line not in lines:
            lines.append(line)
    return "\n".join(lines[:8]) + (f"\n... and {len(lines) - 8} more" if len(lines) > 8 else "")


def read_spec_bytes(path: Path) -> bytes:
    """Read the spec file, mapping OS errors to SpecError."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise SpecError(f"{path}: spec file not found; check the --spec path", file=path) from exc
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the spec file: {exc.strerror}", file=path) from exc


def parse_spec(raw: bytes, path: Path | str) -> dict[str, Any]:
    """The spec document in ``raw`` (the bytes of ``path``): a YAML mapping of sections."""
    try:
        doc = yaml.load(raw.decode("utf-8"), Loader=SpecLoader)  # a SafeLoader subclass
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: the spec is not UTF-8 text", file=path) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"{path}: invalid YAML{where}: {problem}", file=path) from exc
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: the spec must be a YAML mapping of sections (data, bounds, ...)",
                        file=path)
    return doc


def _json_default(value: Any) -> Any:
    """A value JSON cannot write: a NumPy scalar as its Python number (a spec built in Python),
    anything else (a date from YAML, a Path) as text."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        return item()
    return str(value)


def validate_spec(doc: dict[str, Any], model: type[M], path: Path | str) -> M:
    """``doc`` validated as ``model``, strictly, through JSON: YAML's ``true`` is not a number,
    ``"5"`` is not a float, ``yes`` is not a boolean; lists still become tuples (bounds) and
    strings paths. ``path`` names the spec in the errors (a file, or the API's ``<owl spec>``)."""
    try:
        return model.model_validate_json(json.dumps(doc, default=_json_default), strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]["loc"] if exc.errors() else ()
        file = path if isinstance(path, Path) else None
        raise SpecError(format_validation_error(path, exc), file=file,
                        field=_field_path(tuple(first))) from exc


def load_spec(path: Path, model: type[M]) -> tuple[M, str]:
    """Parse ``path`` with ``yaml.safe_load`` and validate it as ``model``.

    Returns the model and the SHA-256 of the file's bytes (recorded in the receipt).
    """
    raw = read_spec_bytes(path)
    spec = validate_spec(parse_spec(raw, path), model, path)
    return spec, hashlib.sha256(raw).hexdigest()
