"""The shape of a cost, not a speed: how work grows with its input (speeds are for ``skillflow bench``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def growth(call: Callable[[str], Any], text: str) -> float:
    """How many times longer ``call`` takes on ``text`` than on its first tenth, each the best of three (as
    ``timeit`` reports: other tests of a parallel run only add noise): about 10 when the work grows linearly,
    about 100 when it grows with the square, so a slow or loaded machine does not change it."""

    def best(t: str) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            call(t)
            times.append(time.perf_counter() - start)
        return min(times)

    return best(text) / max(best(text[: len(text) // 10]), 1e-4)
