"""Crashes the interpreter itself (a segmentation fault), not just a Python exception."""

import ctypes

ctypes.string_at(0)
