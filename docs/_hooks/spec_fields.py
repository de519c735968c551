"""Markdown tables of every field of a command's spec, from the models' JSON Schema (their
field descriptions are the docstrings under each field): never written by hand."""

from __future__ import annotations

import json
from typing import Any

Schema = dict[str, Any]


def _ref_name(node: Schema) -> str | None:
    ref = node.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _constraints(node: Schema) -> str:
    bounds = [(key, op) for key, op in (("exclusiveMinimum", ">"), ("minimum", "≥"),
                                         ("exclusiveMaximum", "<"), ("maximum", "≤"),
                                         ("minLength", "length ≥"), ("maxLength", "length ≤"))
              if key in node]
    parts = [f"{op} {node[key]:g}" if isinstance(node[key], float) else f"{op} {node[key]}"
             for key, op in bounds]
    if "pattern" in node:
        parts.append(f"matching `{node['pattern']}`")
    return f" ({', '.join(parts)})" if parts else ""


def type_text(node: Schema, defs: Schema) -> str:
    """A field's JSON Schema type in words (``number (> 0)``, ``list of string``...)."""
    name = _ref_name(node)
    if name is not None:
        return "a mapping (fields below)" if defs.get(name, {}).get("properties") else name
    if "anyOf" in node:
        kinds = [type_text(n, defs) for n in node["anyOf"] if n.get("type") != "null"]
        return " or ".join(dict.fromkeys(kinds))
    if "enum" in node:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    kind = node.get("type")
    if kind == "array":
        if "prefixItems" in node:
            return "[" + ", ".join(type_text(n, defs) for n in node["prefixItems"]) + "]"
        return "list of " + type_text(node.get("items", {}), defs) + _constraints(node)
    if kind == "object":
        values = node.get("additionalProperties")
        return ("mapping of name → " + type_text(values, defs)) if isinstance(values, dict) \
            else "mapping"
    if node.get("format") == "path":
        return "path"
    return (kind or "any") + _constraints(node)


def _nested(node: Schema) -> list[str]:
    """The $defs names a field's value may be a mapping of (itself, or a branch of a union)."""
    names = [_ref_name(node)] + [_ref_name(n) for n in node.get("anyOf", [])]
    return [n for n in names if n is not None]


def _default(node: Schema, required: bool) -> str:
    if required:
        return "**required**"
    if "default" not in node:
        return "—"
    value = node["default"]
    return "none" if value is None else f"`{json.dumps(value, ensure_ascii=False)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rows(model: Schema, defs: Schema, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted name, type, default, description) of every field of ``model``, depth first."""
    out = []
    required = set(model.get("required", []))
    for name, node in model.get("properties", {}).items():
        dotted = f"{prefix}{name}"
        out.append((dotted, type_text(node, defs), _default(node, name in required),
                    node.get("description", "")))
        for sub in _nested(node):
            out += rows(defs[sub], defs, f"{dotted}.")
    return out


def field_tables(schema: Schema) -> str:
    """One table per top-level section of the spec (``data``, ``bounds``..., the command's)."""
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    blocks = []
    for name, node in schema["properties"].items():
        need = "required" if name in required else "optional"
        blocks.append(f"### `{name}` ({need})\n\n{_cell(node.get('description', ''))}\n")
        table = ["| field | type | default | description |", "|---|---|---|---|"]
        for sub in _nested(node):
            for dotted, kind, default, text in rows(defs[sub], defs, f"{name}."):
                table.append(f"| `{dotted}` | {_cell(kind)} | {_cell(default)} | {_cell(text)} |")
        if len(table) > 2:
            blocks.append("\n".join(table) + "\n")
    return "\n".join(blocks)
