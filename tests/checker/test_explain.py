"""`gradguard explain`: plain text reflowed to the width, examples verbatim, close matches for a wrong id."""

from click.testing import CliRunner

from gradguard.checker.checks import CHECKS, catalogue
from gradguard.checker.cli import main
from gradguard.checker.explain import explain_text


def test_explanations_carry_no_rst_markup_and_every_prose_line_fits_the_width():
    for info in catalogue():
        text = explain_text(info, width=80)
        prose = text.split("\nGiven:")[0].split("\nBroken:")[0]
        assert "``" not in prose and ":func:`" not in prose, info.id
        assert all(len(line) <= 80 for line in prose.splitlines()), info.id
        assert not any(line.startswith(" ") for line in prose.splitlines()), info.id  # no ragged indentation


def test_examples_are_printed_exactly_as_written():
    info = CHECKS["GG404"]
    text = explain_text(info, width=60)
    assert "\n".join("    " + ln if ln else "" for ln in info.broken_example.splitlines()) in \
        "\n".join(ln.rstrip() for ln in text.splitlines())


def test_an_unknown_id_gets_close_ids_and_checks_whose_title_mentions_the_words():
    result = CliRunner().invoke(main, ["explain", "GG2O1"])
    assert result.exit_code == 2 and "Did you mean GG201" in result.output
    result = CliRunner().invoke(main, ["explain", "stale residuals"])
    assert result.exit_code == 2 and "Checks about it: GG404 (stale residuals" in result.output
    result = CliRunner().invoke(main, ["explain", "zzzz"])
    assert "Run `gradguard explain` with no id to list them all." in result.output
