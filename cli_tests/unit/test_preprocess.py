"""Declared, row-local preprocessing (issue #20): model columns and their derived bounds, the
checks that report every bad cell of every column at once, and the transform itself."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from dpcausal import preprocess
from dpcausal.commands.owl.spec import OwlSpec
from dpcausal.errors import DataError, MissingBoundsError, SpecError
from dpcausal.preprocess import Preprocessor
from dpcausal.preprocess.rules import product_bound

SECRET = "Smith-John-1957"


def spec(rules: dict[str, Any] | None = None, interactions: list[list[str]] | None = None,
         bounds: Any = None, covariates: list[str] | None = None) -> OwlSpec:
    """An owl spec with covariates age, income, region, smoker (text arms)."""
    doc: dict[str, Any] = {
        "data": {"path": "d.csv", "columns": {
            "outcome": "y", "treatment": "arm",
            "covariates": covariates or ["age", "income", "region", "smoker"]}},
        "bounds": {"outcome": [0.0, 10.0],
                   "covariates": bounds if bounds is not None else
                   {"age": [18.0, 90.0], "income": [0.0, 250000.0]}},
        "privacy": {"epsilon": 1.0},
        "owl": {"treated": "drug", "control": "placebo", "propensity": 0.5, "gamma": 10.0},
    }
    if rules is not None or interactions is not None:
        doc["preprocess"] = {"covariates": rules or {}, "interactions": interactions or []}
    return OwlSpec.model_validate(doc)


RULES = {
    "income": {"transform": "log1p", "missing": {"fill": 40000}},
    "region": {"levels": ["north", "south", "NA"], "unseen": "other",
               "missing": {"indicator": True}},
    "smoker": {"levels": ["yes", "no"], "reference": "no"},
}


def frame(**over: Any) -> pd.DataFrame:
    base = pd.DataFrame({
        "age": [30, 45, 60, 75],
        "income": [20000.0, None, 1e6, 0.0],
        "region": ["north", "NA", None, "islands"],
        "smoker": ["yes", "no", "no", "yes"],
        "arm": ["drug", "placebo", "drug", "placebo"],
        "y": [1.0, 2.0, 3.0, 4.0],
    })
    for k, v in over.items():
        base[k] = v
    return base


# ------------------------------------------------------------------ model columns and bounds


def test_model_columns_and_bounds_follow_from_the_declared_ones() -> None:
    prep = preprocess.for_spec(spec(RULES, [["age", "smoker"], ["log1p(income)", "region=north"]]))
    got = {m.name: m.bound for m in prep.columns}
    log_hi = math.log1p(250000.0)
    assert got == {
        "age": (18.0, 90.0),
        "log1p(income)": (0.0, log_hi), "income=(missing)": (0.0, 1.0),
        "region=north": (0.0, 1.0), "region=south": (0.0, 1.0), "region=NA": (0.0, 1.0),
        "region=(other)": (0.0, 1.0), "region=(missing)": (0.0, 1.0),
        "smoker=yes": (0.0, 1.0),  # the reference level 'no' has no column
        "age*smoker=yes": (0.0, 90.0),
        "log1p(income)*region=north": (0.0, log_hi),
    }
    model = prep.model_spec(spec(RULES))
    assert model.preprocess is None
    assert model.data.columns.covariates[:3] == ["age", "log1p(income)", "income=(missing)"]
    assert model.bounds.covariate("region=(other)") == (0.0, 1.0)


def test_product_bounds_by_interval_arithmetic() -> None:
    assert product_bound([(-2.0, 3.0), (-1.0, 4.0)]) == (-8.0, 12.0)
    assert product_bound([(-2.0, -1.0), (-3.0, -2.0)]) == (2.0, 6.0)
    assert product_bound([(0.0, 1.0), (-5.0, 2.0), (1.0, 2.0)]) == (-10.0, 4.0)
    prep = preprocess.for_spec(spec(interactions=[["a", "b"]], covariates=["a", "b"],
                                    bounds={"a": [-2.0, 3.0], "b": [-1.0, 4.0]}))
    assert prep.columns[-1].name == "a*b" and prep.columns[-1].bound == (-8.0, 12.0)


def test_without_a_preprocess_section_the_spec_is_unchanged() -> None:
    s = spec()
    prep = preprocess.for_spec(s)
    assert not prep.active and prep.model_spec(s) is s
    f = frame(income=[1.0, 2.0, 3.0, 4.0], region=[1.0, 2.0, 3.0, 4.0], smoker=[0, 1, 0, 1])
    assert prep.transform(f) is f


@pytest.mark.parametrize(("rules", "interactions", "bounds", "error", "match"), [
    ({"sex": {"levels": ["f", "m"]}}, None, None, SpecError, "'sex' not in data.columns"),
    ({"region": {"levels": ["a"]}}, None, {"age": [18, 90], "income": [0, 9], "region": [0, 1]},
     SpecError, r"bounds.covariates.region: region is categorical"),
    ({"income": {"transform": "log1p"}}, None, {"age": [18, 90], "income": [-1, 9]},
     SpecError, "log1p needs the bound of income above -1"),
    ({"income": {"transform": "log1p"}}, None, {"age": [18, 90]}, MissingBoundsError,
     "no bound for income: the bound of log1p.income. follows from it"),
    ({"income": {"missing": {"fill": -5}}}, None, None, SpecError,
     r"missing.fill: -5 is outside bounds.covariates.income"),
    (None, [["age", "weight"]], None, SpecError, "'weight' is neither a covariate"),
    (None, [["age", "age"]], None, SpecError, "multiplies distinct covariates"),
    (None, [["age", "income"]], {"age": [18, 90]}, MissingBoundsError, "no bound for income"),
    ({"region": {"levels": ["x"]}}, [["region=x", "age"], ["age", "region=x"]], None, None, ""),
    ({"region": {"levels": ["north"]}, "smoker": {"levels": ["north"]}}, None, None, None, ""),
])
def test_refusals_name_the_field_and_the_fix(rules: Any, interactions: Any, bounds: Any,
                                             error: Any, match: str) -> None:
    s = spec(rules, interactions, bounds)
    if error is None:  # distinct names: accepted
        preprocess.for_spec(s)
        return
    with pytest.raises(error, match=match):
        preprocess.for_spec(s)


def test_a_model_name_made_twice_is_refused() -> None:
    s = spec({"region": {"levels": ["x"]}}, None, {"age": [18, 90], "income": [0, 9],
                                                    "region=x": [0, 1]},
             covariates=["age", "income", "region", "region=x"])
    with pytest.raises(SpecError, match=r"region=x would be made twice"):
        preprocess.for_spec(s)


@pytest.mark.parametrize(("rule", "match"), [
    ({"levels": ["a", "a"]}, "levels repeat 'a'"),
    ({"levels": [1, "1"]}, "levels repeat '1'"),
    ({"levels": ["a"], "reference": "b"}, "reference must be one of the declared levels"),
    ({"levels": ["a", "b"], "missing": {"fill": "c"}}, "missing.fill must be one of"),
    ({"levels": ["a"], "transform": "log1p"}, "transform is for numeric columns"),
    ({"unseen": "other"}, "unseen and reference are for categorical"),
    ({"missing": {"fill": "zero"}}, "must be a finite number"),
    ({"missing": {"indicator": True}}, "must be a finite number"),
    ({"levels": ["a"], "missing": {"indicator": False}}, "give a fill level, or keep"),
    ({"levels": ["a"], "reference": "a"}, "would have no model column"),
])
def test_rule_validation(rule: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        spec({"region": rule})


# ------------------------------------------------------------------ the transform


def test_transform_values() -> None:
    prep = preprocess.for_spec(spec(RULES, [["age", "smoker"]]))
    out = prep.transform(frame())
    np.testing.assert_allclose(out["log1p(income)"],
                               np.log1p([20000.0, 40000.0, 250000.0, 0.0]))  # filled, clipped
    assert out["income=(missing)"].tolist() == [0, 1, 0, 0]
    assert out["region=north"].tolist() == [1, 0, 0, 0]
    assert out["region=NA"].tolist() == [0, 1, 0, 0]  # a declared level named NA stays a level
    assert out["region=(missing)"].tolist() == [0, 0, 1, 0]
    assert out["region=(other)"].tolist() == [0, 0, 0, 1]
    assert out["smoker=yes"].tolist() == [1, 0, 0, 1]
    assert out["age*smoker=yes"].tolist() == [30, 0, 0, 75]
    assert list(out["region"]) == list(frame()["region"])  # the raw columns stay


def test_numeric_levels_and_text_codes() -> None:
    s = spec({"region": {"levels": [1, 2, 3]}, "smoker": {"levels": [True, False]}})
    prep = preprocess.for_spec(s)
    numbers = frame(region=[1.0, 2.0, 3.0, 1.0], smoker=[True, False, True, True])
    out = prep.transform(numbers)
    assert out["region=2"].tolist() == [0, 1, 0, 0] and out["smoker=true"].tolist() == [1, 0, 1, 1]
    text = frame(region=["1", "2", "3", "1"], smoker=["true", "false", "true", "true"])
    pd.testing.assert_frame_equal(prep.transform(text)[prep.names], out[prep.names])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rows_are_transformed_alone_and_stay_in_their_bounds(data: st.DataObject) -> None:
    """Row-local: each row's model columns depend on that row alone (the transform of a row on
    its own equals its row in the whole table); and the derived columns lie in their bounds
    whatever the values (out of bounds, unseen levels, missing cells)."""
    n = data.draw(st.integers(1, 12))
    levels = st.sampled_from(["north", "south", "NA", "islands", "", None])
    f = frame().iloc[[0] * n].reset_index(drop=True)
    f["age"] = data.draw(st.lists(st.floats(-1e6, 1e6), min_size=n, max_size=n))
    f["income"] = data.draw(st.lists(st.one_of(st.none(), st.floats(-10.0, 1e9)), min_size=n,
                                     max_size=n))
    f["region"] = data.draw(st.lists(levels, min_size=n, max_size=n))
    f["smoker"] = data.draw(st.lists(st.sampled_from(["yes", "no"]), min_size=n, max_size=n))
    prep = preprocess.for_spec(spec(RULES, [["age", "smoker"], ["age", "log1p(income)"]]))
    assert not prep.problems(f)
    whole = prep.transform(f)[prep.names]
    for i in range(n):
        alone = prep.transform(f.iloc[[i]])[prep.names]
        pd.testing.assert_frame_equal(alone, whole.iloc[[i]])
    for m in prep.columns:
        if m.kind != "number":  # numeric value columns are clipped by the methods
            assert m.bound is not None
            assert whole[m.name].between(*m.bound).all(), m.name


# ------------------------------------------------------------------ every problem at once


def bad_frame() -> pd.DataFrame:
    f = frame().iloc[[0, 1, 2, 3] * 3].reset_index(drop=True)
    f["income"] = [1.0] * 12
    f = f.astype({"age": object, "income": object, "y": object})
    f.loc[[2, 7], "age"] = None
    f.loc[5, "age"] = SECRET
    f.loc[4, "y"] = math.inf
    f.loc[[6, 9], "arm"] = SECRET
    f.loc[[1, 8], "smoker"] = SECRET
    f.loc[10, "income"] = -math.inf
    f.loc[11, "region"] = SECRET
    return f


def test_every_bad_cell_of_every_column_in_one_error_without_values() -> None:
    rules = {**RULES, "region": {"levels": ["north", "south", "NA"],
                                 "missing": {"indicator": True}}}
    prep = preprocess.for_spec(spec(rules))
    with pytest.raises(DataError) as info:
        prep.check(bad_frame(), "d.csv")
    msg = str(info.value)
    assert SECRET not in msg
    assert info.value.column == "age"
    lines = msg.splitlines()[1:]
    assert lines == [
        "  - column 'age' has 2 missing, NaN or infinite value(s) (first at data row 3); "
        "dpcausal never drops rows: fix or remove them before the run (a rule that depends only "
        "on each row itself, applied to every row), or declare preprocess.covariates.age.missing:"
        " {fill: VALUE} for missing cells",
        "  - column 'age' has 1 non-numeric value(s) (first at data row 6); the column must be "
        "numeric, or declare it categorical: preprocess.covariates.age.levels",
        "  - column 'income' has 1 infinite value(s) (first at data row 11); values must be "
        "finite (a missing cell is filled, an infinite one is refused)",
        "  - column 'region' has 3 value(s) that are none of its declared levels (first at data "
        "row 4); declare every level in preprocess.covariates.region.levels (from the codebook, "
        "never from the data; text is compared exactly, case and spaces included), or set "
        "unseen: other",
        "  - column 'smoker' has 2 value(s) that are none of its declared levels (first at data "
        "row 2); declare every level in preprocess.covariates.smoker.levels (from the codebook, "
        "never from the data; text is compared exactly, case and spaces included), or set "
        "unseen: other",
        "  - column 'y' has 1 missing, NaN or infinite value(s) (first at data row 5); dpcausal "
        "never drops rows: fix or remove them before the run (a rule that depends only on each "
        "row itself, applied to every row)",
        "  - column 'arm' has 2 value(s) that are neither the treated value 'drug' nor the "
        "control value 'placebo' (first at data row 7); recode the column, or set "
        "owl.treated/control to the labels the file uses; owl takes two arms only (the "
        "paper has no multi-arm method, spec owl §4.3): collapse any other arm into these "
        "two, by a rule applied to every row",
    ]


@pytest.mark.parametrize("size", [1, 2, 5, 12])
def test_batches_add_up_to_the_whole_table(size: int) -> None:
    """The engines check each batch and add the counts: the same error as the whole table."""
    prep = preprocess.for_spec(spec(RULES))
    f = bad_frame()
    whole = prep.problems(f)
    found = preprocess.Problems()
    for start in range(0, len(f), size):
        found.merge(prep.problems(f.iloc[start:start + size].reset_index(drop=True), start))
    assert str(prep.error(found, "d.csv")) == str(prep.error(whole, "d.csv"))


def test_missing_categorical_and_null_tokens() -> None:
    prep = preprocess.for_spec(spec({"region": {"levels": ["north"]}}))
    f = frame(region=["north", "", "NA", None])
    found = prep.problems(f)
    assert [(p.what, p.count, p.first) for p in found.found.values() if p.column == "region"
            ] == [("missing value(s)", 3, 1)]
    prep = preprocess.for_spec(spec({"region": {"levels": ["north"],
                                                "missing": {"fill": "north"}}}))
    out = prep.transform(f)
    assert out["region=north"].tolist() == [1, 1, 1, 1]
    assert out["region=(missing)"].tolist() == [0, 1, 1, 1]


def test_side_table_needs_raw_columns_and_refuses_a_model_name() -> None:
    prep = preprocess.for_spec(spec(RULES))
    with pytest.raises(DataError, match=r"lacks the covariate column.s. smoker"):
        prep.side_table(frame().drop(columns="smoker"), "new.csv", "rows to score")
    with pytest.raises(DataError, match="already has a column 'region=north'"):
        prep.side_table(frame().assign(**{"region=north": 1}), "new.csv", "rows to score")
    bad = frame().assign(arm=SECRET)  # the roles are not checked in a side table
    assert "region=north" in prep.side_table(bad, "new.csv", "rows to score")


def test_description_round_trip() -> None:
    prep = preprocess.for_spec(spec(RULES, [["age", "smoker"]]))
    again = Preprocessor.from_description(prep.describe())
    assert again.names == prep.names and again.bounds() == prep.bounds()
    pd.testing.assert_frame_equal(again.transform(frame()), prep.transform(frame()))
    doc = prep.describe()
    doc["model_columns"] = doc["model_columns"][:-1]
    with pytest.raises(ValueError, match="do not follow from its rules"):
        Preprocessor.from_description(doc)


def test_raw_columns_and_a_clash_with_another_role() -> None:
    prep = preprocess.for_spec(spec(RULES, [["age", "smoker"]]))
    assert prep.raw_columns([*prep.names, "y", "arm"]) == ["age", "income", "region", "smoker",
                                                           "y", "arm"]
    with pytest.raises(SpecError, match="'smoker=yes' is both a model covariate"):
        prep.raw_columns([*prep.names, "smoker=yes"])
