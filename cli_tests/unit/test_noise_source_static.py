"""Static check (AST) that no module outside dpcausal/mechanisms/ draws privacy noise (DESIGN §1.3).

Methods, learners, engines and the audit ask the run's NoiseGuard to release a value; they never
call a mechanism's sampler with a generator, never reach the privacy generator, never hold a
``noise_rng``, and never sample the laws privacy noise is made of. Gaussian draws are common in
public randomness (random features, simulations, audit searches), so each function outside
mechanisms/ that makes one is listed below with its reason: a new one fails this test until a
reviewer has checked that it is not privacy noise.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "dpcausal"

SAMPLERS = {"release", "release_many", "release_weights", "release_weights_many", "sample_noise",
            "sample", "resample"}
"""A mechanism's drawing methods: outside mechanisms/ they may only be called without a
generator (i.e. on the guard: ``noise.release(mechanism, value)``)."""
NOISE_LAWS = {"laplace", "gumbel", "gamma", "exponential", "standard_exponential",
              "standard_gamma"}
GAUSSIAN = {"normal", "standard_normal", "multivariate_normal"}
PRIVATE_NAMES = {"noise_generator", "noise_rng", "ChaCha", "randomgen", "_rng"}
PRIVATE_ATTRIBUTES = {"_rng", "bit_generator"}

PUBLIC_GAUSSIAN = {  # (module, function) → why the draw is public randomness, not privacy noise
    ("commands/cate/rff_features.py", "draw"): "random Fourier frequencies from the public rff_seed",
    ("commands/common/linear_rule.py", "random_fourier_projection"): "RFF from the public seed",
    ("commands/select_policy/library.py", "default_rare_threshold"): "public library constant",
    ("commands/select_policy/library.py", "paper160"): "public library generator (seeded)",
    ("commands/two_stage/audit.py", "privacy_loss"): "audit: a random search direction",
}
PUBLIC_SIMULATION = {  # mechanism samplers called with a public generator, on public data only
    ("commands/owl/tune.py", "tune_gamma"): "Algorithm 2 on the public tuning file (seeded)",
}


def _functions(tree: ast.AST) -> dict[ast.AST, str]:
    """Map every node to the name of the innermost function that contains it."""
    owner: dict[ast.AST, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else name
            owner[child] = inner
            visit(child, inner)

    visit(tree, "<module>")
    return owner


def _violations(package: Path = PACKAGE) -> list[str]:
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        if package / "mechanisms" in path.parents:
            continue
        rel = path.relative_to(package).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        owner = _functions(tree)
        for node in ast.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', '?')} ({owner.get(node, '<module>')})"
            key = (rel, owner.get(node, "<module>"))
            if isinstance(node, ast.Name | ast.arg) and (getattr(node, "id", None) or
                                                       getattr(node, "arg", None)) in PRIVATE_NAMES:
                found.append(f"{where}: names the privacy generator")
            if isinstance(node, ast.ImportFrom) and (
                    (node.module or "").startswith(("dpcausal.mechanisms._rng", "randomgen"))
                    or any(a.name in PRIVATE_NAMES for a in node.names)):
                found.append(f"{where}: imports the privacy generator")
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES:
                found.append(f"{where}: reaches into the guard's generator (.{node.attr})")
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            attr = node.func.attr
            has_rng = any(k.arg == "rng" for k in node.keywords)
            if attr in SAMPLERS and has_rng and key not in PUBLIC_SIMULATION:
                found.append(f"{where}: calls a mechanism's {attr}(rng=...) past the noise guard")
            if attr in NOISE_LAWS:
                found.append(f"{where}: draws from {attr}(), a privacy-noise law")
            if attr in GAUSSIAN and key not in PUBLIC_GAUSSIAN:
                found.append(f"{where}: an unreviewed Gaussian draw {attr}()")
    return found


def test_no_module_outside_mechanisms_draws_privacy_noise() -> None:
    assert _violations() == []


def test_the_allowlists_are_live() -> None:
    """Every allowlisted function still exists and still draws (no stale exemptions)."""
    draws: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text())
        owner = _functions(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    node.func.attr in GAUSSIAN or node.func.attr in SAMPLERS):
                draws.add((rel, owner.get(node, "<module>")))
    assert set(PUBLIC_GAUSSIAN) <= draws
    assert set(PUBLIC_SIMULATION) <= draws


def test_the_check_catches_a_raw_draw(tmp_path: Path) -> None:
    """The check is not vacuous: each forbidden pattern is reported (and mechanisms/ is exempt)."""
    (tmp_path / "methods").mkdir()
    (tmp_path / "mechanisms").mkdir()
    (tmp_path / "methods" / "bad.py").write_text(
        "from dpcausal.mechanisms._rng import noise_generator\n"
        "def run(spec, frame, plan, side, *, rng, noise_rng):\n"
        "    theta = mech.release(theta_hat, rng=noise_rng)\n"
        "    b = rng.laplace(0.0, 1.0, 3)\n"
        "    z = rng.standard_normal(3)\n"
        "    g = noise._rng\n"
        "    return noise.release(mech, theta)\n")
    (tmp_path / "mechanisms" / "ok.py").write_text("def f(rng):\n    return rng.laplace()\n")
    found = _violations(tmp_path)
    assert len(found) == 7, found
    for what in ("imports the privacy generator", "names the privacy generator", "(._rng)",
                 "release(rng=...) past the noise guard", "laplace(), a privacy-noise law",
                 "unreviewed Gaussian draw standard_normal()"):
        assert any(what in f for f in found), (what, found)
