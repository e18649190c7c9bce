"""The real-world corpus tests group their cases per module (every seed of a module on one worker) with
pytest-xdist's ``xdist_group`` mark; registered here too, so that the tests also collect with ``-p no:xdist``
under ``--strict-markers``."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "xdist_group(name): run the cases of one group on one xdist worker")
