"""synth-control's panel structure read from Arrow (issue 24) equals the former pandas reader's.

The plan reads the unit and time columns as an Arrow table (no pandas: the dry run's start-up);
the release hands the pandas frame it read. Both must give the layout the former pandas reader
(:mod:`cli_tests.synth_layout_reference`) gave — the same values, as the receipt, the plan and the
counterfactual table render them — and the same refusals (class, hence exit code, and message),
over int/float/text/date/datetime unit and time columns, CSV and Parquet, the treatment time given
as each type, missing values, duplicates and unbalanced panels.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from cli_tests.synth_layout_reference import build_layout as reference_layout
from dpcausal.commands.synth_control import layout
from dpcausal.commands.synth_control.layout import build_layout
from dpcausal.commands.synth_control.panel import PanelLayout, plain_value, unit_key
from dpcausal.commands.synth_control.spec import SynthControlSpec
from dpcausal.errors import DataError, SpecError
from dpcausal.io.tables import read_arrow, read_table


@pytest.fixture(autouse=True, params=["python", "hashed"])
def factorizer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: text columns factorized by Python (small panels) and by
    ``pyarrow.compute`` (from :data:`layout.HASHED_ROWS` rows)."""
    monkeypatch.setattr(layout, "HASHED_ROWS", 0 if request.param == "hashed" else 10**9)
    return str(request.param)


pytestmark = pytest.mark.filterwarnings(  # pandas parses "2020Q3" as a date (both readers)
    "ignore:Parsing .* as a quarterly string is deprecated")

UTC = dt.UTC

TIMES: dict[str, tuple[pa.DataType, list[Any]]] = {
    "int": (pa.int64(), [2001, 2002, 2003, 2004]),
    "int32": (pa.int32(), [2001, 2002, 2003, 2004]),
    "uint16": (pa.uint16(), [2001, 2002, 2003, 2004]),
    "uint64_large": (pa.uint64(), [2**63 + k * 2**53 for k in range(4)]),  # sorted, not counted
    "float": (pa.float64(), [0.5, 1.5, 2.5, 3.5]),
    "text": (pa.string(), ["2020Q1", "2020Q2", "2020Q3", "2020Q4"]),
    "date": (pa.date32(), [dt.date(2020, m, 1) for m in range(1, 5)]),
    "datetime": (pa.timestamp("s"), [dt.datetime(2020, m, 1) for m in range(1, 5)]),
    "datetime_ns": (pa.timestamp("ns"), [dt.datetime(2020, m, 1, 12, 30) for m in range(1, 5)]),
    "nanoseconds": (pa.timestamp("ns"), [1_583_020_800_000_000_000 + k * 86_400_000_000_001
                                         for k in range(-2, 2)]),
    "zoned": (pa.timestamp("us", tz="Europe/Paris"),
              [dt.datetime(2020, m, 1, tzinfo=UTC) for m in range(1, 5)]),
    "far_future": (pa.timestamp("s"), [dt.datetime(2300 + k, 1, 1) for k in range(4)]),
    "bool": (pa.bool_(), [False, True]),
    "text_prefixes": (pa.string(), ["2020", "2020\x00", "2020a", "2020é", "2020\x00a", "202"]),
    "large_text": (pa.large_string(), ["b", "ab", "a", "é"]),
    "long_text": (pa.string(), ["x" * 70 + c for c in "dcba"]),  # compared as Python strings
    "dictionary": (pa.dictionary(pa.int32(), pa.string()), ["2020Q2", "2020Q1", "2020Q4"]),
}
"""Time columns (type, periods in order)."""

TREATMENT: list[Any] = [
    2003, 2003.0, 2.5, "2003", "2020Q3", "2020-03-01", "2020-03-01T00:00:00", "2020-03-01 12:00",
    "March 2020", "2020/03/01", "2020-03", dt.date(2020, 3, 1), dt.datetime(2020, 3, 1),
    dt.datetime(2020, 3, 1, tzinfo=UTC), 0, True, "True", "1970-01-01", "2020a", "ab",
    "x" * 70 + "c", 2**63 + 2**54, "2302-01-01",
]
"""Treatment times of every type the spec takes (most refused by most columns)."""

UNITS: dict[str, tuple[pa.DataType, list[Any], Any]] = {
    "int": (pa.int64(), [10, 20, 30], 10),
    "float": (pa.float64(), [1.0, 2.5, 3.0], 1),
    "text": (pa.string(), ["CA", "S01", "S02"], "CA"),
    "date": (pa.date32(), [dt.date(2021, 1, d) for d in (1, 2, 3)], "2021-01-01"),
    "datetime": (pa.timestamp("s"), [dt.datetime(2021, 1, d) for d in (1, 2, 3)],
                 "2021-01-01 00:00:00"),
}
"""Unit columns (type, ids, the target as a spec gives it)."""


def long_table(units: tuple[pa.DataType, list[Any]], times: tuple[pa.DataType, list[Any]],
               seed: int = 0) -> dict[str, list[Any]]:
    """Every (unit, time) once, in a shuffled row order."""
    rows = [(u, t) for u in units[1] for t in times[1]]
    order = np.random.default_rng(seed).permutation(len(rows))
    return {"unit": [rows[i][0] for i in order], "time": [rows[i][1] for i in order],
            "y": [float(i) for i in range(len(rows))]}


def write(tmp_path: Path, fmt: str, columns: dict[str, list[Any]],
          types: dict[str, pa.DataType]) -> Path:
    arrays = {}
    for name, values in columns.items():
        kind = types.get(name, pa.float64())
        if pa.types.is_timestamp(kind) and values and isinstance(
                next((v for v in values if v is not None), None), int):
            arrays[name] = pa.array(values, pa.int64()).cast(kind)
        else:
            arrays[name] = pa.array(values, kind)
    table = pa.table(arrays)
    path = tmp_path / f"panel.{fmt}"
    if fmt == "parquet":
        pq.write_table(table, path)
    else:
        pacsv.write_csv(table, path)
    return path


def make_spec(path: Path, layout: str = "long", **section: Any) -> SynthControlSpec:
    cols = {"unit": "unit", "time": "time", "outcome": "y"} if layout == "long" else {
        "time": "time"}
    return SynthControlSpec.model_validate({
        "data": {"path": str(path), "columns": cols}, "bounds": {"outcome": [0, 100]},
        "privacy": {"epsilon": 1.0},
        "synth_control": {"layout": layout, "target": section.pop("target", "CA"),
                          "treatment_time": section.pop("treatment_time", 2003), **section},
    })


def summary(layout: PanelLayout) -> tuple[Any, ...]:
    """What leaves the process of a layout: its plan details and rendered values (the receipt,
    the counterfactual table's time column, the weights' unit column), their text (plot titles,
    unit matching) and the values themselves (the release's row matching)."""
    return (layout.to_dict(), layout.t0, [plain_value(t) for t in layout.times],
            [plain_value(u) for u in (layout.target, *layout.donors)],
            [str(t) for t in layout.times], [unit_key(u) for u in (layout.target, *layout.donors)],
            list(layout.times), [layout.target, *layout.donors])


def outcome(read: Any, spec: SynthControlSpec, path: Path, builder: Any) -> tuple[Any, ...]:
    try:
        return ("ok", *summary(builder(spec, read(path), path)))
    except (DataError, SpecError) as exc:
        return (type(exc).__name__, exc.exit_code, str(exc))


def assert_same(spec: SynthControlSpec, path: Path) -> tuple[Any, ...]:
    """The plan's layout (Arrow), the release's (its pandas frame) and the former one agree."""
    columns = ["unit", "time"] if spec.synth_control.layout == "long" else ["time"]

    def frame(p: Path) -> Any:
        return read_table(p, columns, "panel structure")

    def arrow(p: Path) -> Any:
        return read_arrow(p, columns, "panel structure")

    before = outcome(frame, spec, path, reference_layout)
    assert outcome(arrow, spec, path, build_layout) == before
    assert outcome(frame, spec, path, build_layout) == before
    return before


@pytest.mark.parametrize(("time_kind", "fmt"), [
    (kind, fmt) for kind in sorted(TIMES) for fmt in ("csv", "parquet")
    if (kind, fmt) != ("dictionary", "parquet")  # the former reader failed: the test below
])
def test_time_types_and_treatment_times_match_pandas(tmp_path: Path, fmt: str,
                                                     time_kind: str) -> None:
    times = TIMES[time_kind]
    path = write(tmp_path, fmt, long_table(UNITS["text"][:2], times),
                 {"unit": pa.string(), "time": times[0]})
    results = {repr(t): assert_same(make_spec(path, treatment_time=t), path)[0]
               for t in TREATMENT}
    assert "ok" in results.values(), results  # each column type is usable with some treatment time


def test_dictionary_time_column_reads_as_its_values(tmp_path: Path) -> None:
    """A dictionary-encoded (pandas categorical) Parquet time column: the former reader failed
    on it (a ValueError: exit 1, an internal error); now it is read as its values, as the same
    column of plain text is (in the plan and in the release)."""
    kind, periods = TIMES["dictionary"]
    columns = long_table(UNITS["text"][:2], (kind, periods))
    coded = write(tmp_path, "parquet", columns, {"unit": pa.string(), "time": kind})
    (tmp_path / "plain").mkdir()
    plain = write(tmp_path / "plain", "parquet", columns,
                  {"unit": pa.string(), "time": pa.string()})
    coded_spec = make_spec(coded, treatment_time="2020Q2")
    with pytest.raises(ValueError, match="reshape"):
        outcome(lambda p: read_table(p, ["unit", "time"]), coded_spec, coded, reference_layout)
    expected = assert_same(make_spec(plain, treatment_time="2020Q2"), plain)
    assert expected[0] == "ok"
    for read in (read_arrow, read_table):
        assert outcome(lambda p, r=read: r(p, ["unit", "time"]), coded_spec, coded,
                       build_layout) == expected


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("unit_kind", sorted(UNITS))
def test_unit_types_match_pandas(tmp_path: Path, fmt: str, unit_kind: str) -> None:
    kind, ids, target = UNITS[unit_kind]
    path = write(tmp_path, fmt, long_table((kind, ids), TIMES["int"]),
                 {"unit": kind, "time": pa.int64()})
    assert assert_same(make_spec(path, target=target), path)[0] == "ok"
    donors = [ids[2]] if unit_kind in ("int", "text") else None
    if donors is not None:  # explicit donors, in their own order
        assert assert_same(make_spec(path, target=target, donors=donors), path)[0] == "ok"
    assert assert_same(make_spec(path, target="nowhere"), path)[0] == "SpecError"


def _broken(columns: dict[str, list[Any]], case: str) -> dict[str, list[Any]]:
    out = {k: list(v) for k, v in columns.items()}
    if case == "missing_unit":
        out["unit"][3] = None
    elif case == "missing_time":
        out["time"][5] = None
    elif case == "missing_time_unused_unit":  # only the used units' rows are read for periods
        out["time"][next(i for i, u in enumerate(out["unit"]) if u == "S02")] = None
    elif case == "duplicate":
        for k in out:
            out[k].append(out[k][2])
    elif case == "unbalanced":
        for k in out:
            del out[k][4]
    elif case == "many_unbalanced":
        keep = [i for i, u in enumerate(out["unit"]) if u != "S01" or i % 4 == 0]
        out = {k: [v[i] for i in keep] for k, v in out.items()}
    return out


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("time_kind", ["int", "float", "text", "date", "datetime"])
@pytest.mark.parametrize("case", ["missing_unit", "missing_time", "missing_time_unused_unit",
                                  "duplicate", "unbalanced", "many_unbalanced"])
def test_refusals_match_pandas(tmp_path: Path, fmt: str, time_kind: str, case: str) -> None:
    times = TIMES[time_kind]
    treatment = {"int": 2003, "float": 2.5, "text": "2020Q3", "date": "2020-03",
                 "datetime": "2020-03-01"}[time_kind]
    columns = _broken(long_table(UNITS["text"][:2], times), case)
    path = write(tmp_path, fmt, columns, {"unit": pa.string(), "time": times[0]})
    spec = make_spec(path, treatment_time=treatment,
                     donors=["S01"] if case == "missing_time_unused_unit" else None)
    result = assert_same(spec, path)
    assert result[0] == ("ok" if case == "missing_time_unused_unit" else "DataError"), result


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("time_kind", ["int", "float", "text", "date", "datetime", "nanoseconds"])
@pytest.mark.parametrize("case", ["ok", "duplicate", "missing"])
def test_wide_layout_matches_pandas(tmp_path: Path, fmt: str, time_kind: str, case: str) -> None:
    kind, periods = TIMES[time_kind]
    order = [2, 0, 3, 1]
    columns: dict[str, list[Any]] = {"time": [periods[i] for i in order],
                                     "CA": [1.0, 2.0, 3.0, 4.0], "S01": [5.0, 6.0, 7.0, 8.0]}
    if case == "duplicate":
        columns = {k: [*v, v[1]] for k, v in columns.items()}
    elif case == "missing":
        columns["time"][2] = None
    path = write(tmp_path, fmt, columns, {"time": kind})
    for treatment in (2003, 2.5, "2020Q3", "2020-03", "2020-03-01", dt.date(2020, 3, 1)):
        assert_same(make_spec(path, "wide", treatment_time=treatment), path)
