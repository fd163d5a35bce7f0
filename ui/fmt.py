"""Short human-readable strings for times, configurations and sizes (chart labels, tables), and
escaping of user-supplied text (graph and layer names, messages that quote them) for markdown and
plotly."""

from __future__ import annotations

import html as _html
import string
from typing import Sequence

__all__ = ["fmt_time", "fmt_count", "fmt_words", "fmt_bytes", "fmt_percent", "fmt_fit", "round_sig", "config_str",
           "compact_config", "dims_str", "visible", "md", "plotly_text"]

# Markdown gives meaning to every ASCII punctuation character somewhere (emphasis, links, images,
# Streamlit's :directives[...] and :emoji:); CommonMark lets each be escaped with a backslash.
_MD_ESCAPES = {ord(c): "\\" + c for c in string.punctuation}


def visible(text: object) -> str:
    r"""``str(text)`` with control characters (newlines, terminal escapes) shown as ``\x1b``-style escapes.

    >>> visible("fc1\x1b[31m")
    'fc1\\x1b[31m'
    """
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def md(text: object) -> str:
    r"""``text`` shown literally inside Streamlit markdown: punctuation escaped, control characters visible.

    >>> md("![x](http://host/x.png)")
    '\\!\\[x\\]\\(http\\:\\/\\/host\\/x\\.png\\)'
    """
    return visible(text).translate(_MD_ESCAPES)


def plotly_text(text: object) -> str:
    """``text`` shown literally in plotly labels and hover text (which read ``<b>``, ``<br>``, ``<a>``).

    >>> plotly_text("<b>fc</b>")
    '&lt;b&gt;fc&lt;/b&gt;'
    """
    return _html.escape(visible(text), quote=False)


def fmt_time(seconds: float) -> str:
    """A duration with 3 significant digits and a fitting unit: ns to s, then min, h and days from 1,000 s (where
    seconds would need an exponent).

    >>> fmt_time(0.0123)
    '12.3 ms'
    >>> fmt_time(0)
    '0 s'
    >>> fmt_time(6.36e6)
    '73.6 days'
    """
    s = float(seconds)
    if s == 0:
        return "0 s"
    a = abs(s)
    if a >= 1000:
        for scale, unit in ((86400.0, "days"), (3600.0, "h"), (60.0, "min")):
            if a >= scale:
                return f"{s / scale:.3g} {unit}"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if a >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s:.3g} s"


_SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def fmt_count(n: float) -> str:
    """A count with 3 significant digits and a k/M/G/T suffix, or a power of ten from 10¹⁵ up.

    >>> fmt_count(1_500_000)
    '1.5M'
    >>> fmt_count(8.72e62)
    '8.72×10⁶²'
    """
    n = float(n) + 0.0  # + 0.0: no negative zero
    if abs(n) >= 1e15:  # past T, a suffix reads worse than the exponent ("8.72e+50T")
        mantissa, exponent = f"{n:.2e}".split("e")
        return f"{float(mantissa):.3g}×10{str(int(exponent)).translate(_SUPERSCRIPTS)}"
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}" if n != int(n) else str(int(n))


def fmt_words(n: float) -> str:
    """A count for a title, its scale in words: ``fmt_words(1e9) == '1 billion'``, ``fmt_words(2.5e12) ==
    '2.5 trillion'``, ``fmt_words(300_000) == '300,000'`` (3 significant figures from a million up)."""
    for scale, word in ((1e12, "trillion"), (1e9, "billion"), (1e6, "million")):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {word}"
    return f"{n:,.0f}" if n == int(n) else f"{n:.3g}"


def fmt_bytes(n: float) -> str:
    """A size in bytes: ``fmt_bytes(2048) == '2 KiB'``."""
    n = float(n)
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.3g} B"


def fmt_percent(fraction: float, digits: int = 1) -> str:
    """``fraction`` as a percentage with ``digits`` decimals, never "-0.0%" (a rounding residue of 0).

    >>> fmt_percent(0.1234)
    '12.3%'
    >>> fmt_percent(-1e-17)
    '0.0%'
    """
    text = f"{float(fraction):.{digits}%}"
    return f"{0:.{digits}%}" if float(text[:-1]) == 0 else text


def fmt_fit(need_bytes: float, capacity_bytes: float | None) -> str:
    """Whether ``need_bytes`` (a plan's memory per device, its reserve included) fits ``capacity_bytes``, with
    the margin in GB (1e9 bytes), 3 significant figures.

    >>> fmt_fit(75.4e9, 80e9), fmt_fit(81.25e9, 80e9), fmt_fit(1e9, None)
    ('fits 80 GB, 4.6 GB to spare', 'exceeds 80 GB by 1.25 GB', 'no memory limit')
    """
    if capacity_bytes is None:
        return "no memory limit"
    margin = capacity_bytes - need_bytes
    if margin >= 0:
        return f"fits {capacity_bytes / 1e9:.3g} GB, {margin / 1e9:.3g} GB to spare"
    return f"exceeds {capacity_bytes / 1e9:.3g} GB by {-margin / 1e9:.3g} GB"


def round_sig(x: float | None, digits: int = 3) -> float | None:
    """``x`` rounded to ``digits`` significant figures for a table (10.3333 -> 10.3, 0.9666 -> 0.967), without
    negative zero; None stays None.

    >>> round_sig(10.3333), round_sig(0.96666), round_sig(123456.0), round_sig(-0.0)
    (10.3, 0.967, 123000.0, 0.0)
    """
    return None if x is None else float(f"{float(x):.{digits}g}") + 0.0


def config_str(config: Sequence[int]) -> str:
    """The full configuration tuple as in the paper's Table II: ``(1, 4, 8)``."""
    return "(" + ", ".join(str(int(f)) for f in config) + ")"


def compact_config(dims: Sequence[str], config: Sequence[int]) -> str:
    """Only the split dimensions, e.g. ``n4·c8``; ``1`` when nothing is split.

    >>> compact_config(("b", "n", "c"), (1, 4, 8))
    'n4·c8'
    >>> compact_config(("b", "n", "c"), (1, 1, 1))
    '1'
    """
    parts = [f"{d}{int(f)}" for d, f in zip(dims, config) if int(f) > 1]
    return "·".join(parts) if parts else "1"


def dims_str(dims: Sequence[str], sizes: Sequence[int] | None = None) -> str:
    """Dimensions, with sizes when given: ``b=32 n=64`` or ``b n``."""
    if sizes is None:
        return " ".join(dims)
    return " ".join(f"{d}={int(s)}" for d, s in zip(dims, sizes))
