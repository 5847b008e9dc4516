"""One interval as text, the way every table of the report writes it."""

from __future__ import annotations

from typing import Any

__all__ = ["format_interval"]


def format_interval(iv: dict[str, Any] | None, digits: int = 3) -> str:
    """``"0.412 [0.351, 0.470]"``; ``"-"`` when undefined.

    Notes follow in parentheses: the share of undefined bootstrap resamples when there were
    any; the reason when no interval is given (too few groups, too many undefined resamples);
    for a per-document mean, how many test documents had a defined metric.
    """
    if not iv or iv.get("estimate") is None:
        return "-" if not iv or iv.get("docs") is None else f"- ({iv['docs_defined']}/{iv['docs']} docs defined)"
    text = f"{iv['estimate']:.{digits}f}"
    notes = []
    if iv.get("reason"):
        notes.append(f"no interval: {iv['reason']}")
    elif iv.get("low") is not None and iv.get("high") is not None:
        text += f" [{iv['low']:.{digits}f}, {iv['high']:.{digits}f}]"
        if iv.get("nan_share"):
            notes.append(f"{iv['nan_share']:.1%} of resamples undefined")
    if iv.get("docs") is not None:
        notes.append(f"{iv['docs_defined']}/{iv['docs']} docs defined")
    return text + (f" ({'; '.join(notes)})" if notes else "")
