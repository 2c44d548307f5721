"""Citation markers ``[n]`` in answers: find them, drop those that name no source.

A marker is ``[n]`` or a list ``[n, m]`` (``,`` or ``;``), numbers of 1–3 digits. A
number outside ``1..n_sources`` names nothing: it is removed from its marker, and a marker
left empty is removed with the whitespace before it. :class:`CitationFilter` does the same
on a stream of text deltas, holding back only a marker still being written (and trailing
whitespace), so the streamed deltas add up to the final, checked text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_MARKER = re.compile(r"(\s*)\[(\d{1,3}(?:\s*[,;]\s*\d{1,3})*)\]")
_PARTIAL = re.compile(r"\s*\[[\d\s,;]{0,24}$|\s+$")
_NUMBER = re.compile(r"\d+")


def cited_numbers(text: str) -> list[int]:
    """Numbers cited in ``text``, in order of first appearance, without repeats."""
    found = [int(x) for m in _MARKER.finditer(text) for x in _NUMBER.findall(m.group(2))]
    return list(dict.fromkeys(found))


def check_citations(text: str, n_sources: int) -> tuple[str, list[int]]:
    """``text`` with citations of sources that do not exist removed, and those numbers.

    Returns:
        ``(checked_text, invalid_numbers)``; ``invalid_numbers`` in order, without repeats.
    """
    invalid: list[int] = []

    def fix(m: re.Match[str]) -> str:
        numbers = [int(x) for x in _NUMBER.findall(m.group(2))]
        valid = [x for x in numbers if 1 <= x <= n_sources]
        invalid.extend(x for x in numbers if x not in valid)
        if not valid:
            return ""
        return f"{m.group(1)}[{', '.join(str(x) for x in valid)}]" if len(valid) < len(numbers) else m.group(0)

    return _MARKER.sub(fix, text), list(dict.fromkeys(invalid))


def strip_citations(text: str) -> str:
    """``text`` with every citation marker removed (earlier answers in a chat history)."""
    return check_citations(text, 0)[0]


@dataclass
class CitationFilter:
    """Checks citations in a streamed answer (see :func:`check_citations`).

    Args:
        n_sources: how many sources the answer may cite.
    """

    n_sources: int
    raw: str = ""
    emitted: str = ""
    invalid: list[int] = field(default_factory=list)

    def push(self, delta: str) -> str:
        """Add a raw delta; return the checked text that is now final."""
        self.raw += delta
        partial = _PARTIAL.search(self.raw)
        return self._emit(self.raw[: partial.start()] if partial else self.raw)

    def finish(self) -> str:
        """The rest of the checked text once the answer is complete."""
        return self._emit(self.raw)

    @property
    def text(self) -> str:
        """The checked text emitted so far (the whole answer after :meth:`finish`)."""
        return self.emitted

    def _emit(self, raw: str) -> str:
        checked, self.invalid = check_citations(raw, self.n_sources)
        # Markers and the whitespace before them are held back until complete, so the
        # checked text only grows (tests/test_citations.py checks it by property).
        delta = checked[len(self.emitted):]
        self.emitted = checked
        return delta
