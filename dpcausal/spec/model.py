"""The base model of every spec section, and the value types sections share.

Kept apart from :mod:`dpcausal.spec.base` so that section modules the common spec itself uses
(:mod:`dpcausal.spec.preprocess`) can build on it without an import cycle.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


def _one_line_descriptions(schema: dict[str, Any]) -> None:
    """JSON Schema hook: a description is one line of prose (docstrings wrap at 100 columns)."""
    for node in (schema, *schema.get("properties", {}).values()):
        if isinstance(node.get("description"), str):
            node["description"] = " ".join(node["description"].split())


class StrictModel(BaseModel):
    """A frozen model that rejects unknown keys.

    The docstring under each field is its ``description`` (``use_attribute_docstrings``): what
    ``dpcausal schema``, the docs and error messages show. Every field must have one (a test
    checks): its unit, its default and what it does to privacy and utility.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True,
                              json_schema_extra=_one_line_descriptions)


ArmLabel = bool | int | float | str
"""A value of a treatment column (or a level of a categorical column): a number, a boolean or a
string, as it appears in the data."""
