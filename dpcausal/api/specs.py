"""Specs in Python: build one from a dict or keyword arguments, load one from a YAML file, print a
command's JSON Schema — the same pydantic models, and the same strict validation, as the CLI's
``--spec``.

A spec loaded from a file is receipted (``spec_sha256``) by the SHA-256 of the file's bytes, as by
the CLI; a spec built in Python, or changed after loading (``model_copy``), by the SHA-256 of its
canonical JSON (:func:`spec_sha256`).
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from dpcausal.commands import COMMANDS, Command, by_name
from dpcausal.errors import SpecError
from dpcausal.spec import load as spec_load

if TYPE_CHECKING:
    from dpcausal.commands.cate.spec import CateSpec
    from dpcausal.commands.owl.spec import OwlSpec
    from dpcausal.commands.select_policy.spec import SelectPolicySpec
    from dpcausal.commands.synth_control.spec import SynthControlSpec
    from dpcausal.commands.two_stage.spec import TwoStageSpec
    from dpcausal.spec.base import CommonSpec

CommandName = Literal["owl", "select-policy", "synth-control", "cate", "two-stage"]
"""The release commands, by their CLI names."""

_FILE_SHA256: dict[int, str] = {}
"""id(spec) → the SHA-256 of the file it was loaded from, while that spec object lives."""


def _remember(spec: CommonSpec, sha256: str) -> None:
    key = id(spec)
    _FILE_SHA256[key] = sha256
    weakref.finalize(spec, _FILE_SHA256.pop, key, None)


def spec_sha256(spec: CommonSpec) -> str:
    """The ``spec_sha256`` a release of ``spec`` is receipted with.

    For a spec returned by :func:`load_spec` (the very object): the SHA-256 of the file's bytes,
    as ``dpcausal <command> --spec FILE`` records. For any other spec (built by :func:`build_spec`, or a
    copy with changes): the SHA-256 of its canonical JSON (every field, defaults included, keys
    sorted, no spaces).
    """
    sha = _FILE_SHA256.get(id(spec))
    if sha is not None:
        return sha
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def command_of(spec: CommonSpec) -> Command:
    """The registry entry of the command whose spec model ``spec`` is an instance of."""
    for command in COMMANDS:
        if type(spec) is command.spec_model():
            return command
    raise TypeError(f"not a dpcausal spec: {type(spec).__name__}; build one with dpcausal.build_spec() "
                    "or dpcausal.load_spec()")


def _infer_command(doc: Mapping[str, Any], where: Path | str) -> Command:
    sections = [c for c in COMMANDS if c.section in doc]
    if len(sections) != 1:
        names = ", ".join(c.section for c in COMMANDS)
        found = ", ".join(c.section for c in sections) or "none"
        raise SpecError(f"{where}: cannot tell which command the spec is for: it needs exactly one "
                        f"of the sections {names} (found: {found}); or name the command",
                        file=where if isinstance(where, Path) else None)
    return sections[0]


@overload
def load_spec(path: str | PathLike[str], command: Literal["owl"]) -> OwlSpec: ...
@overload
def load_spec(path: str | PathLike[str], command: Literal["select-policy"]) -> SelectPolicySpec: ...
@overload
def load_spec(path: str | PathLike[str], command: Literal["synth-control"]) -> SynthControlSpec: ...
@overload
def load_spec(path: str | PathLike[str], command: Literal["cate"]) -> CateSpec: ...
@overload
def load_spec(path: str | PathLike[str], command: Literal["two-stage"]) -> TwoStageSpec: ...
@overload
def load_spec(path: str | PathLike[str], command: str | None = None) -> CommonSpec: ...


def load_spec(path: str | PathLike[str], command: str | None = None) -> CommonSpec:
    """Load and validate a YAML spec file, as ``dpcausal <command> --spec FILE`` does.

    Parameters
    ----------
    path
        The YAML spec (relative paths inside it are resolved from the current directory when the
        spec is used, as on the command line).
    command
        The command the spec is for (``"owl"``, ``"select-policy"``, ``"synth-control"``,
        ``"cate"``, ``"two-stage"``); default: the one whose section the file has.

    Returns
    -------
    CommonSpec
        The command's spec model (e.g. ``OwlSpec``); frozen. Its releases are receipted with the
        file's SHA-256.

    Raises
    ------
    SpecError
        The file is missing, not YAML, or not a valid spec (the message names the file and the
        field); exit code 2 on the command line.
    """
    where = Path(path)
    raw = spec_load.read_spec_bytes(where)
    doc = spec_load.parse_spec(raw, where)
    entry = by_name(command) if command is not None else _infer_command(doc, where)
    model = spec_load.validate_spec(doc, entry.spec_model(), where)
    _remember(model, hashlib.sha256(raw).hexdigest())
    return model


@overload
def build_spec(command: Literal["owl"], document: Mapping[str, Any] | None = None, /,
               **sections: Any) -> OwlSpec: ...
@overload
def build_spec(command: Literal["select-policy"], document: Mapping[str, Any] | None = None, /,
               **sections: Any) -> SelectPolicySpec: ...
@overload
def build_spec(command: Literal["synth-control"], document: Mapping[str, Any] | None = None, /,
               **sections: Any) -> SynthControlSpec: ...
@overload
def build_spec(command: Literal["cate"], document: Mapping[str, Any] | None = None, /,
               **sections: Any) -> CateSpec: ...
@overload
def build_spec(command: Literal["two-stage"], document: Mapping[str, Any] | None = None, /,
               **sections: Any) -> TwoStageSpec: ...
@overload
def build_spec(command: str | Mapping[str, Any] | None = None,
               document: Mapping[str, Any] | None = None, /, **sections: Any) -> CommonSpec: ...


def build_spec(command: str | Mapping[str, Any] | None = None,
               document: Mapping[str, Any] | None = None, /, **sections: Any) -> CommonSpec:
    """Build and validate a spec from a dict and/or keyword arguments (one per section).

    ``dpcausal.build_spec("owl", {"privacy": {"epsilon": 1.0}, ...})``, or
    ``dpcausal.build_spec("owl", data={...}, bounds={...}, privacy={"epsilon": 1.0}, owl={...})``; a
    keyword replaces the dict's section of that name. The validation is the YAML file's: unknown
    keys, wrong types (a string where a number belongs), missing required fields and impossible
    values are refused with the field's dotted name.

    Parameters
    ----------
    command
        The command (``"owl"``, ``"select-policy"``, ``"synth-control"``, ``"cate"``,
        ``"two-stage"``); default (or when the first argument is the document): the one whose
        section (``owl``, ``select_policy``...) is given.
    document
        The spec as a mapping of sections, as in a YAML file.
    **sections
        Sections given (or replaced) one by one: ``data``, ``bounds``, ``privacy``, ``ledger``,
        ``output``, ``accuracy``, ``engine`` and the command's own section.

    Returns
    -------
    CommonSpec
        The command's spec model; its releases are receipted with the SHA-256 of its canonical
        JSON (:func:`spec_sha256`).

    Raises
    ------
    SpecError
        The spec is not valid (exit code 2 on the command line).
    """
    if isinstance(command, Mapping):
        command, document = None, command
    doc = {**(document or {}), **sections}
    entry = by_name(command) if command is not None else _infer_command(doc, "spec")
    return spec_load.validate_spec(doc, entry.spec_model(), f"<{entry.name} spec>")


def schema(command: str) -> dict[str, Any]:
    """The JSON Schema of ``command``'s spec (``dpcausal schema COMMAND``): every field with its
    description, type, default and limits."""
    result: dict[str, Any] = by_name(command).spec_model().model_json_schema()
    return result
