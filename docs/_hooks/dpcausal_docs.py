"""MkDocs hook: the pages' generated parts, so the site cannot drift from the code or the README.

A page asks for a part with a one-line HTML comment (left as it is on GitHub, where the pages
are plain Markdown):

``<!-- dpcausal:readme HEADING -->``
    The README section under the heading ``HEADING`` (its text, without the ``#``\\ s), up to
    the next heading of the same or a higher level, its subsections demoted to sit under the
    page's own; links into ``docs/`` and to other README sections point into the site.
``<!-- dpcausal:readme-commands -->``
    The README's first ``bash`` block (install and example release, then the tests), verbatim.
``<!-- dpcausal:fields COMMAND -->``
    Every field of ``COMMAND``'s spec from the pydantic models' JSON Schema (:mod:`spec_fields`).
``<!-- dpcausal:plan CONFIG -->``
    The privacy plan of ``configs/CONFIG`` (without its ledger) on the sample data, by
    ``dpcausal.plan``: the neighbouring relation, the guarantee and every mechanism.
``<!-- dpcausal:file PATH LANGUAGE -->``
    The repository file ``PATH`` in a code block.

An unknown part, a missing heading or file fails the build (``mkdocs build --strict`` in CI).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spec_fields import field_tables

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- dpcausal:(?P<kind>[a-z-]+)(?: (?P<arg>.*?))? -->[ \t]*$", re.M)
HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
FENCE = re.compile(r"^(```|~~~)")


class DocsError(Exception):
    """A page asks for a part that does not exist."""


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading (the README's own links use these)."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def site_slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's ``toc``) gives a heading."""
    text = re.sub(r"`", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def readme_lines() -> list[str]:
    return (ROOT / "README.md").read_text(encoding="utf-8").splitlines()


def headings(lines: list[str]) -> Iterator[tuple[int, int, str]]:
    """(line index, level, text) of every heading outside code blocks."""
    fenced = False
    for i, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = HEADING.match(line)
        if m and not fenced:
            yield i, len(m.group(1)), m.group(2)


def readme_section(title: str) -> tuple[int, list[str]]:
    """The level of README heading ``title`` and the lines under it (to the next heading of the
    same or a higher level)."""
    lines = readme_lines()
    found = list(headings(lines))
    for k, (i, level, text) in enumerate(found):
        if text == title:
            end = next((j for j, lv, _ in found[k + 1:] if lv <= level), len(lines))
            return level, lines[i + 1:end]
    raise DocsError(f"README.md has no heading {title!r}")


def readme_commands() -> str:
    """The README's first bash block, verbatim, fenced."""
    lines = readme_lines()
    start = lines.index("```bash")
    end = lines.index("```", start + 1)
    return "\n".join(lines[start:end + 1])


def _demote(lines: list[str], by: int) -> list[str]:
    fenced, out = False, []
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        out.append(f"{'#' * min(6, len(m.group(1)) + by)} {m.group(2)}" if m else line)
    return out


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def _relink(text: str, page: str, anchors: dict[str, str]) -> str:
    """README links made to work from ``page`` (a path under docs/): ``docs/X`` → X relative to
    the page; ``#anchor`` of a README section → the page that includes it."""
    here = posixpath.dirname(page)

    def to(path: str) -> str:
        return posixpath.relpath(path, here or ".")

    def fix(m: re.Match[str]) -> str:
        target = m.group("target")
        if target.startswith("docs/"):
            return f"]({to(target[len('docs/'):])})"
        if target.startswith("#"):
            if target[1:] not in anchors:
                raise DocsError(f"README link {target} points to a section no page includes")
            where, _, anchor = anchors[target[1:]].partition("#")
            fragment = f"#{anchor}" if anchor else ""
            return f"]({fragment or '#'})" if where == page else f"]({to(where)}{fragment})"
        return m.group(0)

    return LINK.sub(fix, text)


def _page_level(markdown: str, at: int) -> int:
    """The level of the page's last heading before offset ``at`` (1 if none)."""
    levels = [lv for _, lv, _ in headings(markdown[:at].splitlines())]
    return levels[-1] if levels else 1


@contextlib.contextmanager
def _in_repository() -> Iterator[None]:
    old = Path.cwd()
    os.chdir(ROOT)  # the example specs' relative paths
    try:
        yield
    finally:
        os.chdir(old)


def _fmt(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def plan_part(config: str) -> str:
    """The example spec's plan: neighbours, guarantee and mechanisms, as Markdown."""
    import yaml

    import dpcausal as dpc

    path = ROOT / "configs" / config
    if not path.is_file():
        raise DocsError(f"configs/{config} does not exist")
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc.pop("ledger", None)  # the docs never read or depend on a local ledger
    with _in_repository():
        plan = dpc.plan(dpc.build_spec(doc))
    privacy = plan.privacy
    nb = privacy.neighbouring
    out = [f"Generated by `dpcausal.plan` on `configs/{config}` and its sample data "
           f"({plan.n_rows} rows) when these pages were built: what "
           f"`dpcausal {plan.command} --spec configs/{config} --dry-run` prints.", "",
           "| | |", "|---|---|",
           f"| guarantee | **{privacy.guarantee}** "
           f"({'ε-DP' if privacy.guarantee == 'pure' else '(ε, δ)-DP'}"
           f"{'' if privacy.dp_guarantee else ', NOT certified'}) |",
           f"| total ε, δ | {_fmt(plan.epsilon)}, {_fmt(plan.delta)} |"]
    out += [f"| neighbours: {key.replace('_', ' ')} | {_fmt(val)} |" for key, val in nb.items()]
    out += ["", "| stage | mechanism | ε | δ | sensitivity | noise scale |",
            "|---|---|---|---|---|---|"]
    out += [f"| {e.stage} | {e.kind} | {_fmt(e.epsilon)} | {_fmt(e.delta)} | "
            f"{_fmt(e.sensitivity)} ({e.norm}) | {_fmt(e.noise_scale)} |" for e in privacy.events]
    if privacy.accuracy:
        out += ["", "Predicted accuracy (from public inputs only; * = headline):", "",
                "| quantity | ± half-width | units | kind |", "|---|---|---|---|"]
        out += [f"| {a.quantity}{' *' if a.headline else ''} | {_fmt(a.halfwidth)} | "
                f"{a.units} | {a.kind}{' (bound)' if a.bound else ''} |"
                for a in privacy.accuracy]
    return "\n".join(out)


def file_part(arg: str) -> str:
    path, _, language = arg.partition(" ")
    full = ROOT / path
    if not full.is_file():
        raise DocsError(f"{path} does not exist")
    return f"```{language.strip()}\n{full.read_text(encoding='utf-8').rstrip()}\n```"


def expand(markdown: str, page: str, anchors: dict[str, str]) -> str:
    """``markdown`` (the page ``page``, a path under docs/) with every part filled in."""
    import dpcausal as dpc

    def part(m: re.Match[str]) -> str:
        kind, arg = m.group("kind"), (m.group("arg") or "").strip()
        if kind == "readme":
            level, lines = readme_section(arg)
            by = _page_level(markdown, m.start()) + 1 - (level + 1)
            return _relink("\n".join(_demote(lines, by)).strip("\n"), page, anchors)
        if kind == "readme-commands":
            return readme_commands()
        if kind == "fields":
            return field_tables(dpc.schema(arg))
        if kind == "plan":
            return plan_part(arg)
        if kind == "file":
            return file_part(arg)
        raise DocsError(f"{page}: unknown part <!-- dpcausal:{kind} -->")

    return MARKER.sub(part, markdown)


def anchors_of(pages: dict[str, str]) -> dict[str, str]:
    """GitHub anchor of each README heading → ``page#site-anchor`` of the page that includes it
    (a section's subsections included)."""
    lines = readme_lines()
    found = list(headings(lines))
    out: dict[str, str] = {}
    for page, text in pages.items():
        for m in MARKER.finditer(text):
            if m.group("kind") != "readme":
                continue
            title = (m.group("arg") or "").strip()
            k = next((k for k, (_, _, t) in enumerate(found) if t == title), None)
            if k is None:
                continue  # expand() reports it
            level = found[k][1]
            out.setdefault(github_slug(title), page)  # its heading is the page's own
            for _, lv, sub in found[k + 1:]:
                if lv <= level:
                    break
                out.setdefault(github_slug(sub), f"{page}#{site_slug(sub)}")
    return out


_ANCHORS: dict[str, str] = {}


def on_files(files: Any, config: Any) -> Any:
    """Before any page is rendered: which page holds each README section."""
    pages = {f.src_uri: Path(f.abs_src_path).read_text(encoding="utf-8")
             for f in files if f.src_uri.endswith(".md") and f.abs_src_path}
    _ANCHORS.clear()
    _ANCHORS.update(anchors_of(pages))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return expand(markdown, page.file.src_uri, _ANCHORS)


ROLE = re.compile(r":(?:attr|class|data|exc|func|meth|mod|obj):<code>(~)?([^<]*)</code>")


def sphinx_roles(html: str) -> str:
    """The docstrings' Sphinx roles (``:func:`dpcausal.plan```), which mkdocstrings leaves as
    text, shown as code (``~a.b.C`` as ``C``, as Sphinx does)."""
    return ROLE.sub(lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}"
                              "</code>", html)


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return sphinx_roles(html)
