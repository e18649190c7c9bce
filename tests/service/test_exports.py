"""Every service module declares its public surface, and every name in ``__all__`` exists."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from gradguard import service

OTHERS = {"gradguard.service.sandbox", "gradguard.service._sandbox_main", "gradguard.service.client", "gradguard.service.client_cli"}
MODULES = sorted(m.name for m in pkgutil.walk_packages(service.__path__, "gradguard.service.")
                 if not m.name.startswith(("gradguard.service.migrations", "gradguard.service.sandbox.")) and m.name not in OTHERS)


@pytest.mark.parametrize("name", MODULES)
def test_module_has_docstring_and_all(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__, f"{name} has no docstring"
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names missing objects: {missing}"


def test_the_service_modules_are_all_listed() -> None:
    assert {"gradguard.service.app", "gradguard.service.crud", "gradguard.service.models", "gradguard.service.api.projects", "gradguard.service.executors.celery"} <= set(
        MODULES)
