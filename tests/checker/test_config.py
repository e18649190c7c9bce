"""[tool.gradguard] in pyproject.toml: read by the CLI, overridden by the command line, unknown keys refused."""

import json

import pytest
from click.testing import CliRunner

from gradguard.checker.cli import main
from gradguard.checker.config import KEYS, ConfigError, check_kwargs, load_config, validate

RULES = '''
import numpy as np
from gradguard import rrule, arrays

def total(x):
    return x.sum()

@rrule(total, arrays(shape=(2, 3)))
def total_rrule(x):
    return x.sum(), lambda ybar: (np.full(x.size, ybar),)
'''


def test_every_key_maps_onto_one_check_keyword_through_one_table():
    values = validate({"select": "GG1, GG2", "ignore": ["GG203"], "seed": 3, "max-examples": 7, "timeout": 0,
                       "jobs": 2, "unused-cotangent": "none", "cache-dir": ".gg-cache", "cache": False})
    assert check_kwargs(values) == {
        "select": ["GG1", "GG2"], "ignore": ["GG203"], "seed": 3, "max_examples": 7, "rule_timeout_s": None,
        "jobs": 2, "unused_cotangent": "none", "cache_dir": ".gg-cache", "use_cache": False,
    }
    assert {KEYS[k].option for k in ("unused-cotangent", "cache-dir")} == {"unused_cotangent", "cache_dir"}


def test_an_unknown_key_is_an_error_naming_it_with_close_matches():
    with pytest.raises(ConfigError, match=r"unknown key 'max_examples'\. Did you mean 'max-examples'\?"):
        validate({"max_examples": 3})
    with pytest.raises(ConfigError, match=r"got seed = 'one', but seed must be an integer >= 0"):
        validate({"seed": "one"})


def test_the_nearest_pyproject_with_the_table_is_found_from_a_subfolder(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.gradguard]\npaths = ["src/rules"]\nseed = 4\n')
    (tmp_path / "src" / "rules").mkdir(parents=True)
    config = load_config(start=tmp_path / "src" / "rules")
    assert config.values["seed"] == 4 and config.paths() == [tmp_path.resolve() / "src" / "rules"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "total.py").write_text(RULES)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "demo"\n\n[tool.gradguard]\npaths = ["src"]\nselect = ["GG104"]\nseed = 5\n'
        'max-examples = 3\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_cli_reads_the_config_and_the_command_line_overrides_it(project):
    result = CliRunner().invoke(main, ["check", "--json", "r.json"])
    assert result.exit_code == 1, result.output
    settings = json.loads((project / "r.json").read_text())["settings"]
    assert (settings["seed"], settings["max_examples"], settings["checks"]) == (5, 3, ["GG104"])
    result = CliRunner().invoke(main, ["check", "--seed", "9", "--select", "GG101", "--json", "r.json"])
    assert result.exit_code == 0, result.output
    settings = json.loads((project / "r.json").read_text())["settings"]
    assert (settings["seed"], settings["max_examples"], settings["checks"]) == (9, 3, ["GG101"])


def test_the_cli_refuses_an_unknown_key_with_exit_2(project):
    (project / "pyproject.toml").write_text('[tool.gradguard]\nselct = ["GG1"]\n')
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 2
    assert "unknown key 'selct'. Did you mean 'select'?" in result.output
