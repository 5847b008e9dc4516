"""A progress bar that reports examples/s and (prompt) tokens/s."""

from __future__ import annotations

import time
from typing import Any


class Progress:
    """Wraps ``tqdm`` (or nothing, when disabled) with a tokens/s counter.

    Tokens are the prompt tokens of the examples finished, counted in full even when a shared
    prefix was computed once: the rate is the throughput a per-example forward pass would need
    to match.

    Args:
        total: examples to process.
        enabled: show a bar.
        desc: the bar's label.
    """

    def __init__(self, total: int, *, enabled: bool = True, desc: str = "extract"):
        self.start = time.perf_counter()
        self.examples = 0
        self.tokens = 0
        self.bar: Any = None
        if enabled and total > 0:
            from tqdm.auto import tqdm  # noqa: PLC0415

            self.bar = tqdm(total=total, desc=desc, unit="ex", dynamic_ncols=True, smoothing=0.1)

    def update(self, examples: int, tokens: int) -> None:
        self.examples += examples
        self.tokens += tokens
        if self.bar is not None:
            elapsed = max(time.perf_counter() - self.start, 1e-9)
            self.bar.set_postfix_str(f"{self.tokens / elapsed:,.0f} tok/s", refresh=False)
            self.bar.update(examples)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
