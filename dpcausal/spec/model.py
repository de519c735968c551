"""The base model of every spec section, and the value types sections share.

Kept apart from :mod:`dpcausal.spec.base` so that section modules the common spec itself uses
(:mod:`dpcausal.spec.preprocess`) can build on it without an import cycle.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from typing import Any

from pydantic import BaseModel, ConfigDict


@functools.cache
def _module_classes(module: str) -> dict[str, ast.ClassDef]:
    """Every class statement of ``module``'s source, by qualified name (``__qualname__``)."""
    found: dict[str, ast.ClassDef] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(prefix + node.name, node)
                walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                walk(node.body, f"{prefix}{node.name}.<locals>.")

    walk(ast.parse(inspect.getsource(sys.modules[module])).body, "")
    return found


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each annotated attribute of ``cls``'s own body (not its bases'), as
    pydantic's ``use_attribute_docstrings`` reads it: a string statement right after
    ``name: type [= value]``, cleaned by :func:`inspect.cleandoc`."""
    node = _module_classes(cls.__module__).get(cls.__qualname__)
    docs: dict[str, str] = {}
    if node is None:
        return docs
    for before, stmt in zip(node.body, node.body[1:], strict=False):
        if (isinstance(before, ast.AnnAssign) and isinstance(before.target, ast.Name)
                and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)):
            docs[before.target.id] = inspect.cleandoc(stmt.value.value)
    return docs


def _field_description(cls: type[BaseModel], name: str) -> str | None:
    """The docstring of field ``name`` from the class that declares it last (the first class in
    the MRO whose own annotations hold it), as pydantic would have attached it."""
    for klass in cls.__mro__:
        if name in vars(klass).get("__annotations__", {}):
            return field_docs(klass).get(name)
    return None


def _schema_descriptions(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """JSON Schema hook: each field's ``description`` is the docstring under it, and a
    description is one line of prose (docstrings wrap at 100 columns).

    The docstrings are read here, when a schema is asked for (``dpcausal schema``, the docs), not
    when the models are built (pydantic's ``use_attribute_docstrings``): reading and parsing the
    source of every spec module cost every run ~0.04 CPU-s of its start-up (issue 24).
    """
    props = schema.get("properties", {})
    for name, field in cls.model_fields.items():
        prop = props.get(field.alias or name, props.get(name))
        if isinstance(prop, dict) and "description" not in prop:
            doc = _field_description(cls, name)
            if doc:
                prop["description"] = doc
    for node in (schema, *props.values()):
        if isinstance(node.get("description"), str):
            node["description"] = " ".join(node["description"].split())


class StrictModel(BaseModel):
    """A frozen model that rejects unknown keys.

    The docstring under each field is its ``description``: what ``dpcausal schema`` and the docs
    show (attached when a schema is generated, :func:`_schema_descriptions`). Every field must
    have one (a test checks): its unit, its default and what it does to privacy and utility.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_schema_descriptions)


ArmLabel = bool | int | float | str
"""A value of a treatment column (or a level of a categorical column): a number, a boolean or a
string, as it appears in the data."""
