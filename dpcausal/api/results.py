"""What the API returns: a :class:`Plan` (the dry run) and a :class:`Release` (its outputs as
DataFrames and dicts, their intervals, the receipt, a picture)."""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcausal.api import render

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from dpcausal.accounting.ledger import LedgerState
    from dpcausal.accounting.plan import PrivacyPlan
    from dpcausal.errors import PrivacyError
    from dpcausal.planner import TargetReport


@dataclass(frozen=True)
class Plan:
    """A run's privacy plan, from the spec, the data's schema and row count alone (no value read).

    ``str(plan)`` is the table ``dpcausal <command> --dry-run`` prints; :meth:`to_dict` the object
    ``--dry-run --json`` prints.

    Attributes
    ----------
    command
        The release command.
    n_rows
        The data's row count (public under every command's neighbouring relation).
    privacy
        Every mechanism the run draws from (``privacy.events``), its total cost (``privacy.cost``),
        its guarantee and the public assumptions, and the predicted accuracies
        (``privacy.accuracy``).
    ledger
        The dataset's spend before and after this run and its cap (None: the spec names no
        ledger; the run is receipted but not capped).
    refusal
        Why the ledger (cap exceeded) or the accuracy guard (``accuracy.max_halfwidth``) refuses
        this plan, or None; :func:`dpcausal.release` raises it (exit code 3 on the command line).
    target
        With ``target_halfwidth``: the smallest ε (and n) whose predicted half-width meets it.
    dry_run
        True for :func:`dpcausal.plan`; False for a release's own plan.
    """

    command: str
    n_rows: int
    privacy: PrivacyPlan
    ledger: LedgerState | None = None
    refusal: PrivacyError | None = None
    target: TargetReport | None = None
    dry_run: bool = True

    @property
    def epsilon(self) -> float:
        """The run's total ε (what the ledger is charged)."""
        return self.privacy.cost.epsilon

    @property
    def delta(self) -> float:
        """The run's total δ."""
        return self.privacy.cost.delta

    @property
    def ok(self) -> bool:
        """Whether neither the ledger nor the accuracy guard refuses the plan."""
        return self.refusal is None

    def check(self) -> Plan:
        """Raise :attr:`refusal` if there is one (a :class:`~dpcausal.PrivacyError`); else return
        the plan."""
        if self.refusal is not None:
            raise self.refusal
        return self

    @property
    def events(self) -> pd.DataFrame:
        """One row per mechanism: stage, kind, ε, δ, sensitivity (and its norm), noise scale and
        the public parameters it was derived from."""
        import pandas as pd

        return pd.DataFrame([e.to_dict() for e in self.privacy.events])

    @property
    def accuracy(self) -> pd.DataFrame:
        """The predicted (1 − α) half-widths of the released quantities (one row each; the
        headline quantity is flagged)."""
        import pandas as pd

        return pd.DataFrame([a.to_dict() for a in self.privacy.accuracy])

    def to_dict(self) -> dict[str, Any]:
        """The plan as ``dpcausal <command> --dry-run --json`` prints it (without the refusal,
        which is :attr:`refusal`)."""
        from dpcausal.pipeline import plan_document

        return plan_document(self.privacy, self.n_rows, self.ledger, self.target,
                             dry_run=self.dry_run)

    def __str__(self) -> str:
        return render.text(lambda console: render.print_plan(self, console)).rstrip("\n")

    def __repr__(self) -> str:
        refused = f", refused: {type(self.refusal).__name__}" if self.refusal else ""
        return (f"<dpcausal.Plan {self.command}: {len(self.privacy.events)} mechanism(s), "
                f"ε={self.epsilon:g}, δ={self.delta:g}, {self.n_rows} rows{refused}>")

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


@dataclass(frozen=True)
class Release:
    """One release: charged to the ledger (when the spec names one) and receipted.

    Every value here is private (post-processing of noised values and public parameters).

    Attributes
    ----------
    command
        The release command.
    plan
        The plan the run was checked and drawn against.
    receipt
        The receipt: the release's line in the ledger, byte for byte what ``receipt.json`` holds
        (``outputs`` lists the SHA-256 of every file in :attr:`files`).
    tables
        The released tables as DataFrames, by name (``recommendations``, ``cate``,
        ``counterfactual``...): the files ``<name>.csv``. A released column ``q`` has its noise
        interval in ``q_noise_lo`` / ``q_noise_hi``.
    documents
        The released JSON documents, by file name (``rule.json``, ``selection.json``,
        ``effect.json``...).
    figures
        The released pictures (PNG bytes), by file name; :meth:`plot` shows one.
    summary
        The public facts of the release the command line prints (``--json``: ``summary``).
    files
        Every released file's bytes, by name, as hashed in the receipt (``receipt.json`` apart).
    paths
        Where the release was published (the receipt last); empty while it is only in memory
        (:meth:`save` publishes it).
    """

    command: str
    plan: Plan
    receipt: dict[str, Any]
    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    documents: Mapping[str, Any] = field(default_factory=dict)
    figures: Mapping[str, bytes] = field(default_factory=dict)
    summary: Mapping[str, Any] = field(default_factory=dict)
    files: Mapping[str, bytes] = field(default_factory=dict)
    paths: tuple[Path, ...] = ()

    @property
    def dp_guarantee(self) -> bool:
        """False for a run with a test noise seed or an uncertified mode (the receipt says so)."""
        return bool(self.receipt.get("dp_guarantee"))

    @property
    def intervals(self) -> pd.DataFrame:
        """Every released number of the JSON documents with its (1 − α) interval, one row each.

        Columns: ``document``, ``quantity`` (its path in the document, e.g.
        ``intervals.coefficients_original_units.x1``), ``estimate``, ``lo``, ``hi``, ``level``,
        ``kind`` (``noise``; ``total`` where sampling error is included too), ``law``, ``bound``
        (True: coverage at least ``level``), ``clamped`` (True where the value was moved onto a
        public bound). Tables carry theirs in ``<column>_noise_lo`` / ``_hi`` columns.
        """
        import pandas as pd

        rows = []
        for name, doc in self.documents.items():
            for where, record in _interval_records(doc, ""):
                for key in ("interval", "total_interval"):
                    iv = record.get(key)
                    if isinstance(iv, dict):
                        rows.append({"document": name, "quantity": where,
                                     "estimate": record["estimate"], "lo": iv["lo"],
                                     "hi": iv["hi"], "level": iv["level"], "kind": iv["kind"],
                                     "law": iv["law"], "bound": iv["bound"],
                                     "clamped": "clamped" in record})
        columns = ["document", "quantity", "estimate", "lo", "hi", "level", "kind", "law",
                   "bound", "clamped"]
        return pd.DataFrame(rows, columns=columns)

    def to_dict(self) -> dict[str, Any]:
        """What ``dpcausal <command> --json`` prints: the receipt, the output paths and the
        summary."""
        return {**self.receipt, "output_paths": [str(p) for p in self.paths],
                "summary": dict(self.summary)}

    def save(self, out: str | PathLike[str]) -> list[Path]:
        """Publish the release into the directory ``out``, whole, as the command line does: the
        files and ``receipt.json`` are staged, then renamed in place (the previous release there
        stays until the new one is complete). Spends nothing: the release was charged when it was
        made. Returns the written paths (the receipt last).

        Raises
        ------
        OutputError
            ``out`` cannot be written (exit code 5 on the command line); nothing was written.
        """
        from dpcausal.io.release_dir import ReleaseDir
        from dpcausal.publishing import publish

        return publish(ReleaseDir(Path(out)), dict(self.files), self.receipt)

    def plot(self, name: str | None = None, *, ax: Axes | None = None) -> Figure:
        """The release's picture as a matplotlib figure (no pyplot state: ``fig.savefig(...)``;
        a notebook displays it).

        Parameters
        ----------
        name
            Which figure (a file name of :attr:`figures`); default: the first. A command that
            releases no picture (``select-policy``) gets its released numbers drawn with their
            noise intervals (:attr:`intervals`).
        ax
            Draw into this axes instead of a new figure.

        Raises
        ------
        ValueError
            ``name`` is not a released figure, or the release has neither a figure nor an
            interval to draw.
        """
        if name is not None and name not in self.figures:
            raise ValueError(f"{self.command} released no figure named {name!r}; it released: "
                             f"{', '.join(self.figures) or 'none'}")
        if self.figures:
            return _show_png(self.figures[name or next(iter(self.figures))], ax)
        return _draw_intervals(self, ax)

    def __str__(self) -> str:
        def draw(console: Any) -> None:
            render.print_plan(self.plan, console)
            for line in render.summary_lines(dict(self.summary)):
                console.print(line, markup=False)
            where = ", ".join(map(str, self.paths)) if self.paths else \
                "in memory only (Release.save(DIR) publishes it)"
            console.print(f"released: {where}", markup=False)

        return render.text(draw).rstrip("\n")

    def __repr__(self) -> str:
        where = str(self.paths[-1].parent) if self.paths else "in memory"
        return (f"<dpcausal.Release {self.command}: ε={self.plan.epsilon:g}, "
                f"δ={self.plan.delta:g}, {len(self.files)} file(s), {where}>")

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def _interval_records(doc: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, record) of every ``{"estimate", "interval" | "total_interval"}`` in ``doc``."""
    if isinstance(doc, dict):
        if "estimate" in doc and ("interval" in doc or "total_interval" in doc):
            yield where, doc
            return
        for key, value in doc.items():
            yield from _interval_records(value, f"{where}.{key}" if where else str(key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _interval_records(value, f"{where}[{i}]")


def _new_axes(ax: Axes | None, size: tuple[float, float], dpi: float) -> Axes:
    if ax is not None:
        return ax
    from matplotlib.figure import Figure

    return Figure(figsize=size, dpi=dpi).add_axes((0.0, 0.0, 1.0, 1.0))


def _show_png(png: bytes, ax: Axes | None) -> Figure:
    from matplotlib.image import imread

    image = imread(io.BytesIO(png), format="png")
    dpi = 100.0
    axes = _new_axes(ax, (image.shape[1] / dpi, image.shape[0] / dpi), dpi)
    axes.imshow(image, interpolation="none")
    axes.set_axis_off()
    return axes.get_figure()  # type: ignore[return-value]


def _draw_intervals(release: Release, ax: Axes | None) -> Figure:
    """The released numbers with their intervals, as horizontal error bars (top to bottom)."""
    import numpy as np

    iv = release.intervals
    if iv.empty:
        raise ValueError(f"{release.command} released no figure and no number with an interval "
                         "to draw")
    axes = _new_axes(ax, (7.0, 0.35 * len(iv) + 1.8), 100.0)
    if ax is None:
        axes.set_position((0.35, 0.2, 0.6, 0.7))
    est = iv["estimate"].to_numpy(dtype=float)
    err = np.vstack([est - iv["lo"].to_numpy(dtype=float), iv["hi"].to_numpy(dtype=float) - est])
    pos = np.arange(len(iv))[::-1]
    level = float(iv["level"].iloc[0])
    axes.errorbar(est, pos, xerr=err, fmt="o", capsize=3, markersize=4,
                  label=f"released ± {level * 100:g}% interval")
    axes.set_yticks(pos, list(iv["quantity"]))
    axes.legend(loc="best", fontsize=7)
    axes.set_title(f"{release.command}, ε = {release.plan.epsilon:g}: released values",
                   fontsize=9)
    return axes.get_figure()  # type: ignore[return-value]
