"""Allocates 50 GB at import time and touches it."""

import numpy as np

hoard = np.ones(50 * 2**30 // 8)
