"""`ScoreScale`: the range of scores a judge is asked for (``lo``..``hi`` in steps of ``step``).

The papers compare the same judge on several ranges (0-4, 1-5, 2-6, 3-7, 0-5, 1-10) because a
judge's preference for particular numbers shifts its scores; the scale fixes both the
``{min}``/``{max}`` written into the prompt and the K candidate strings whose
log-probabilities are read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

__all__ = ["ScoreScale", "SCALE_PRESETS"]

_MAX_VALUES = 1000


def _format_number(x: float) -> str:
    if float(x).is_integer():
        return str(int(x))
    # Shortest decimal that round-trips, without exponent notation ("0.5", "2.25").
    text = repr(float(x))
    if "e" in text or "E" in text:
        raise ValueError(f"score value {x!r} has no plain decimal form")
    return text


@dataclass(frozen=True)
class ScoreScale:
    """Scores ``lo, lo + step, ..., hi`` (K values, K >= 2).

    Attributes:
      lo: lowest score, written as ``{min}`` in prompts.
      hi: highest score, written as ``{max}``.
      step: spacing of the candidates; ``(hi - lo) / step`` must be a whole number.

    Example:
      >>> ScoreScale(1, 5).labels
      ('1', '2', '3', '4', '5')
      >>> ScoreScale.parse("1-10").size
      10
    """

    lo: float
    hi: float
    step: float = 1

    def __post_init__(self) -> None:
        for name in ("lo", "hi", "step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"ScoreScale.{name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"ScoreScale.{name} must be finite, got {value!r}")
            # Store integral values as int so the scale prints and hashes as written ("1-5").
            value = float(value)
            object.__setattr__(self, name, int(value) if value.is_integer() else value)
        if self.step <= 0:
            raise ValueError(f"ScoreScale.step must be > 0, got {self.step}")
        if self.hi <= self.lo:
            raise ValueError(f"ScoreScale needs lo < hi, got lo={self.lo}, hi={self.hi}")
        n = (self.hi - self.lo) / self.step
        if abs(n - round(n)) > 1e-9 * max(1.0, abs(n)):
            raise ValueError(f"ScoreScale: (hi - lo) / step must be whole, got ({self.hi} - {self.lo}) / {self.step}")
        if round(n) + 1 > _MAX_VALUES:
            raise ValueError(f"ScoreScale has {round(n) + 1} values; at most {_MAX_VALUES} are supported")
        # The labels are read for every prompt rendered (``{min}``, ``{max}``): format them once.
        object.__setattr__(self, "_labels", tuple(_format_number(v) for v in self._raw_values()))

    def _raw_values(self) -> list[float]:
        n = round((self.hi - self.lo) / self.step)
        # Round away float noise from lo + k * step so that labels read "0.3", not "0.30000000000000004".
        return [round(self.lo + k * self.step, 10) for k in range(n + 1)]

    @property
    def size(self) -> int:
        """K, the number of score candidates."""
        return round((self.hi - self.lo) / self.step) + 1

    def __len__(self) -> int:
        return self.size

    @property
    def values(self) -> np.ndarray:
        """The scores as a float32 array ``[K]``."""
        return np.asarray(self._raw_values(), dtype=np.float32)

    @property
    def labels(self) -> tuple[str, ...]:
        """The scores as the strings a judge writes, ``[K]`` (``"3"``, ``"10"``, ``"2.5"``)."""
        return self._labels

    @property
    def min_label(self) -> str:
        """Text substituted for ``{min}``."""
        return self.labels[0]

    @property
    def max_label(self) -> str:
        """Text substituted for ``{max}``."""
        return self.labels[-1]

    @property
    def name(self) -> str:
        """``"1-5"``, or ``"0-1/0.25"`` when the step is not 1."""
        base = f"{self.min_label}-{self.max_label}"
        return base if self.step == 1 else f"{base}/{_format_number(self.step)}"

    def __str__(self) -> str:
        return self.name

    def index_of(self, value: float) -> int:
        """Position of a score value among `values` (raises if it is not one of them)."""
        for k, v in enumerate(self._raw_values()):
            if abs(v - value) <= 1e-9 * max(1.0, abs(v)):
                return k
        raise ValueError(f"{value!r} is not a value of scale {self.name} ({', '.join(self.labels)})")

    def to_key(self) -> dict[str, float]:
        """JSON-able description, for store keys."""
        return {"lo": self.lo, "hi": self.hi, "step": self.step}

    @classmethod
    def parse(cls, text: str) -> ScoreScale:
        """Parse ``"1-5"`` or ``"0-1/0.25"`` (the format of `name`), or a preset name."""
        if not isinstance(text, str):
            raise TypeError(f"ScoreScale.parse needs a str, got {type(text).__name__}")
        m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*-\s*(-?\d+(?:\.\d+)?)\s*(?:/\s*(\d+(?:\.\d+)?))?\s*", text)
        if m is None:
            raise ValueError(f"cannot parse score scale {text!r}; expected 'lo-hi' or 'lo-hi/step', e.g. '1-5'")
        lo, hi, step = m.group(1), m.group(2), m.group(3)
        return cls(float(lo), float(hi), float(step) if step else 1)

    @classmethod
    def preset(cls, name: str) -> ScoreScale:
        """One of the named ranges studied in the papers: see `SCALE_PRESETS`."""
        if name not in SCALE_PRESETS:
            raise ValueError(f"unknown score-scale preset {name!r}; known: {', '.join(SCALE_PRESETS)}")
        return SCALE_PRESETS[name]


SCALE_PRESETS: dict[str, ScoreScale] = {
    name: ScoreScale(lo, hi) for name, (lo, hi) in {
        "0-4": (0, 4),
        "1-5": (1, 5),
        "2-6": (2, 6),
        "3-7": (3, 7),
        "0-5": (0, 5),
        "1-10": (1, 10),
    }.items()
}
