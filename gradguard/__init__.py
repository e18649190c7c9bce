"""gradguard: is this custom differentiation rule right, and where is it safe to use?

The public API::

    from gradguard import rrule, arrays, check

    @rrule(square, arrays(shape=(3,)))
    def square_rrule(x):
        return x * x, lambda ybar: (2 * x * ybar,)

    report = check(square_rrule)
    assert report.passed

The distribution installs one top-level package, ``gradguard``; the repository's
``checker/``, ``engines/``, ``service/`` and ``web/`` folders are its subpackages
``gradguard.checker``, ``gradguard.engines``, ``gradguard.service`` and ``gradguard.web``
(``package-dir`` in pyproject.toml).
"""

from gradguard.checker import *  # noqa: F401,F403 - the public API is the checker's
from gradguard.checker import __all__, __version__  # noqa: F401
