"""Read public YAML/JSON side documents (policy libraries, public model files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dpcausal.errors import SpecError


def read_document(path: Path | None, what: str = "document") -> Any:
    """Parse ``path`` with ``yaml.safe_load`` (JSON is a subset of YAML); errors name the file."""
    if path is None:
        raise SpecError(f"no {what} given; name it in the spec")
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError as exc:
        raise SpecError(f"{p}: {what} not found; check the path (relative paths are from the "
                        "current directory)") from exc
    except OSError as exc:
        raise SpecError(f"{p}: cannot read the {what}: {exc.strerror}") from exc
    try:
        doc = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p}: the {what} is not UTF-8 text") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"{p}: the {what} is not valid YAML/JSON{where}: {problem}") from exc
    if doc is None:
        raise SpecError(f"{p}: the {what} is empty")
    return doc
