"""Issue 24: the ℓ2-Laplace norm quantile a plan reports is solved without scipy for integer
dimensions (a dry run then does not import scipy.special); it must agree with scipy's
``gammaincinv`` to rounding, and the other cases still go to scipy."""

from __future__ import annotations

import pytest
from scipy import special

from dpcausal.mechanisms.noise_law import erlang_upper_quantile, l2_laplace_norm_quantile


@pytest.mark.parametrize("dim", [1, 2, 3, 7, 11, 21, 101, 2000, 10_000])
@pytest.mark.parametrize("tail", [0.5, 0.1, 0.05, 1e-3, 1e-8, 1e-30])
def test_erlang_quantile_agrees_with_scipy(dim: int, tail: float) -> None:
    want = float(special.gammainccinv(dim, tail))
    assert erlang_upper_quantile(dim, tail) == pytest.approx(want, rel=1e-13, abs=0)


@pytest.mark.parametrize(("dim", "level"), [(11, 0.95), (3, 0.5), (11, 0.2), (2.5, 0.95)])
def test_norm_quantile_is_scipys_gammaincinv(dim: float, level: float) -> None:
    want = 3.0 * float(special.gammaincinv(dim, level))
    assert l2_laplace_norm_quantile(dim, 3.0, level) == pytest.approx(want, rel=1e-13, abs=0)  # type: ignore[arg-type]


def test_erlang_quantile_refuses_a_tail_it_does_not_solve() -> None:
    with pytest.raises(ValueError, match="tail"):
        erlang_upper_quantile(3, 0.7)
