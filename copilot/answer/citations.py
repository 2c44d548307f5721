"""Citation markers ``[n]`` in answers: find them, drop those that name no source.

A marker is ``[n]`` or a list ``[n, m]`` (``,`` or ``;``), numbers of 1–3 digits. A
number outside ``1..n_sources`` names nothing: it is removed from its marker, and a marker
left empty is removed with the whitespace before it (at most :data:`MAX_GAP` characters of it).
:class:`CitationFilter` does the same on a stream of text deltas, holding back only a marker still
being written (and trailing whitespace), so the streamed deltas add up to the final, checked text.

Every pattern is linear in the text: the whitespace before a marker is bounded, so a run of
spaces is never rescanned from each of its positions, and the filter checks each delta's text once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Whitespace before a marker removed with it, at most (characters).
MAX_GAP = 64
_MARKER = re.compile(rf"(\s{{0,{MAX_GAP}}})\[(\d{{1,3}}(?:\s*[,;]\s*\d{{1,3}})*)\]")
_PARTIAL = re.compile(rf"\s{{0,{MAX_GAP}}}\[[\d\s,;]{{0,24}}$|\s{{1,{MAX_GAP}}}$")
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
    held: str = ""  # raw text not yet checked: a marker still being written, trailing whitespace
    parts: list[str] = field(default_factory=list)  # the checked text, delta by delta
    invalid: list[int] = field(default_factory=list)

    def push(self, delta: str) -> str:
        """Add a raw delta; return the checked text that is now final."""
        self.held += delta
        partial = _PARTIAL.search(self.held)
        return self._emit(partial.start() if partial else len(self.held))

    def finish(self) -> str:
        """The rest of the checked text once the answer is complete."""
        return self._emit(len(self.held))

    @property
    def text(self) -> str:
        """The checked text emitted so far (the whole answer after :meth:`finish`)."""
        return "".join(self.parts)

    def _emit(self, upto: int) -> str:
        # Markers and the whitespace before them are held back until complete, so each piece of
        # text is checked once and the checked text only grows (tests/test_citations.py checks it
        # by property); only the held tail is kept, so a long answer is never copied per delta.
        delta, invalid = check_citations(self.held[:upto], self.n_sources)
        self.held = self.held[upto:]
        self.invalid = list(dict.fromkeys(self.invalid + invalid))
        self.parts.append(delta)
        return delta
