"""One interval as text, the way every table of the report writes it."""

from __future__ import annotations

from typing import Any

__all__ = ["format_interval", "format_p"]


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


def format_p(p: float | None, n_boot: int | None = None) -> str:
    """A p-value as printed: two significant digits, or ``"<0.001"`` (``1 / n_boot``) where it lies
    below what the bootstrap that gave its standard error resolves (a Wald p-value of 1e-60 from
    1,000 resamples says no more than one below 0.001)."""
    if p is None:
        return "-"
    if n_boot and p < 1.0 / n_boot:
        return f"<{1.0 / n_boot:.2g}"
    return f"{p:.2g}"

