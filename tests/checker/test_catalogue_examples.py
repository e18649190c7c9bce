"""The catalogue's examples are documentation users copy: each check's broken example gets its finding,
and its fixed example passes every check."""

from __future__ import annotations

import pytest

from gradguard.checker import check, catalogue

PRELUDE = "import numpy as np\nimport jax\nimport jax.numpy as jnp\n" \
          "from gradguard import arrays, constant, jax_rule, rrule\n\n"
ENTRIES = {entry.id: entry for entry in catalogue()}


def _needs_torch(entry) -> None:  # type: ignore[no-untyped-def]
    if entry.kinds == ("torch",):
        pytest.importorskip("torch", reason="PyTorch is not installed: pip install 'gradguard[torch]'")


def _module(tmp_path, name: str, body: str):  # type: ignore[no-untyped-def]
    path = tmp_path / f"{name}.py"
    path.write_text(PRELUDE + body + "\n")
    return path


@pytest.mark.parametrize("check_id", sorted(ENTRIES))
def test_every_entry_has_a_complete_pair_of_examples(check_id: str) -> None:
    entry = ENTRIES[check_id]
    assert entry.broken_example and entry.fixed_example and entry.broken_example != entry.fixed_example


@pytest.mark.slow
@pytest.mark.parametrize("check_id", sorted(ENTRIES))
def test_broken_example_gets_its_finding_and_fixed_example_passes(check_id: str, tmp_path) -> None:
    entry = ENTRIES[check_id]
    _needs_torch(entry)
    given = entry.given_example + "\n\n" if entry.given_example else ""
    broken = check(str(_module(tmp_path, "broken_example", given + entry.broken_example)))
    assert not broken.load_errors, broken.load_errors[0].traceback
    assert len(broken.rules) == 1
    assert check_id in {f.check_id for f in broken.findings}, [f"{f.check_id}: {f.message}" for f in broken.findings]

    fixed = check(str(_module(tmp_path, "fixed_example", given + entry.fixed_example)))
    assert not fixed.load_errors, fixed.load_errors[0].traceback
    assert len(fixed.rules) == 1
    errors = [f"{f.check_id}: {f.message}" for f in fixed.findings if f.severity == "error"]
    assert fixed.passed and errors == [], errors
    assert check_id not in {f.check_id for f in fixed.findings}


def test_a_helper_between_the_decorator_and_its_check_is_refused() -> None:
    """A helper defined between GG503's @check(...) and its function became the check: every rule's GG503 ended in an
    internal error and the checks after it never ran. The registry now refuses a private function."""
    import pytest

    from gradguard.checker.checks.registry import CHECKS, check

    def _helper(ctx):
        return []

    with pytest.raises(ValueError, match=r"@check\('GG999'\) decorates the private function"):
        check("GG999", family="context", title="t")(_helper)
    assert "GG999" not in CHECKS
    assert all(not info.fn.__name__.startswith("_") for info in CHECKS.values())
