"""Burns CPU forever at import time."""

n = 0
while True:
    n += 1
