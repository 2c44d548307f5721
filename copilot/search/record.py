"""A whole record as the evidence scorer reads it: its text, its thread turns, its tables.

Retrieval finds *chunks*; the line that answers is often in another chunk of the same record (a
200-line ELOG entry of pasted ``ceph health detail`` with the fix near the end, a 15-comment Jira
thread). So evidence lines are drawn from the whole record of every source shown — the
small-to-big pattern of sentence-window retrieval (LlamaIndex's ``SentenceWindowNodeParser``,
LangChain's ``ParentDocumentRetriever``): match small units, show them with the context that makes
them readable. The record is read back from the lexical store's chunks (:func:`record_text`,
chunk overlaps removed), so nothing new is indexed at ingest.

A record has structure, and each :class:`EvidenceUnit` keeps its place in it:

- **Turns.** A Jira comment (``[when who] body``, :mod:`ingestion.loaders.jira`) or a dated diary
  line starts a turn; turns are in time order. A turn that says an earlier attempt did not hold
  ("reverted", "rolled back", "didn't help") marks the latest earlier turn that acted as
  ``superseded``, so "how was it finally fixed" prefers the fix that stuck (:mod:`copilot.search.highlights`).
- **Tables.** Column output (``ceph osd df tree``, ``df -h``, ``condor_q -hold``) is read row by
  row, each cell paired with its column header by position: ``ID 37 · … · %USE 89.62 · NAME osd.37``,
  so the line shown carries the row the question names and the value it asks for.
- **Command output.** A line printed under a shell prompt (``[root@gw02 ~]# openssl x509 …``)
  keeps that prompt as its context, so the host a value belongs to is shown beside it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from copilot.search.literals import literal_weight
from ingestion.documents import Chunk

#: A Jira comment as the loaders render it (``[2026-09-03T10:12 Ana Silva] body``), or a diary line
#: that starts with a date (``2026-09-03 10:12 site admin: …``, ``--- 2026-09-03 …``).
_TURN = re.compile(r"^\s*(?:\[\d{4}-\d\d-\d\d[^\]]*\]|(?:[-=*]{2,}\s*)?\d{4}-\d\d-\d\d[T ]\d\d:\d\d)")
#: What a turn says when an earlier attempt did not hold.
_UNDOES = re.compile(
    r"\b(?:revert(?:ed|ing)?|roll(?:ed|ing)? (?:it |this |that |them )?back|rollback|backed (?:it |this )?out|undid|"
    r"undone|(?:did ?n[o']t|does ?n[o']t|didn't|doesn't) (?:help|hold|work|fix|stick|last)|no (?:effect|improvement)|"
    r"(?:came|is|was|are) back|re-?appeared|recurred|still (?:failing|broken|seeing|happening|there|down|hanging)|"
    r"not (?:the|a) (?:real )?(?:fix|cause)|wrong (?:fix|guess|track)|red herring)\b", re.IGNORECASE)
#: What a turn says when it acts (a fix attempt).
_ACTS = re.compile(
    r"\b(?:fix(?:ed)?|set|added|changed|raised|lowered|increased|restarted|applied|deployed|replaced|rebooted|"
    r"reseated|swapped|upgraded|downgraded|patched|enabled|disabled|moved|ran|bumped|tuned|workaround)\b"
    r"|`[^`]+`|^\s*[$#] ", re.IGNORECASE | re.MULTILINE)
#: A shell prompt line: ``[root@gw02 ~]# cmd``, ``user@host:~$ cmd``, ``gw02# cmd``, ``$ cmd``, ``# cmd``
#: (a root prompt: ``#`` then a lower-case command word, unlike a Markdown heading).
_PROMPT = re.compile(r"^\s*(?:\[[\w.-]+@[\w.-]+[^\]]*\][#$]|[\w.-]+@[\w.-]+:\S*[#$]|[a-z][\w.-]*\d[\w.-]*[#$>]|\$"
                     r"|#(?= [a-z]))\s+\S")
#: A prompt that names its host: ``[root@gw02 ~]#``, ``ops@gw02:~$``, ``gw02#``.
_PROMPT_HOST = re.compile(r"^\s*(?:\[[\w.-]+@[\w.-]+|[\w.-]+@[\w.-]+:|[a-z][\w.-]*\d[\w.-]*[#$>])")
#: A header cell: upper case (``%USE``, ``HOLD_REASON``, ``RAW``), or a capitalised column word.
_HEADER_CELL = re.compile(r"^(?:%?[A-Z][A-Z0-9_%/.()-]*%?|[A-Z][A-Za-z]+%?|[a-z]+%)$")
#: A unit token that belongs to the number before it (``1.8 TiB``).
_UNIT = re.compile(r"^(?:[KMGTPE]i?B|B|%|ms|s|days?|hrs?)$")
#: A record of at most this many chunks (~200 KB) gives evidence lines from all of it; a longer one from
#: the chunks within :data:`RECORD_WINDOW` of those retrieval matched.
MAX_RECORD_CHUNKS = 200
RECORD_WINDOW = 8
#: Context shown beside a unit is cut to this many characters.
MAX_CONTEXT_CHARS = 90
#: A unit of fewer words holding no literal is no evidence (a signature: "ADCoS shifter").
MIN_WORDS = 3
#: A unit longer than this (characters) is windowed at whitespace.
MAX_UNIT_CHARS = 320

_META = re.compile(r"^(subject|author|from|to|type|category|in reply to|reply to|date|status|labels|site|priority|"
                   r"assignee|reporter|attachment|encoding|resolution|severity|affected site|id|title)\s*:",
                   re.IGNORECASE)
_LIST_OR_STAMP = re.compile(r"^(?:[-*•>#|]|\d+[.)]\s|\d{4}-\d\d-\d\d|\[\d{4}-|\d\d:\d\d)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[\"'`])")
_WORD = re.compile(r"\w+")


def _joins(prev: str, nxt: str) -> bool:
    """Whether physical line ``nxt`` continues the logical line ending with ``prev``."""
    stripped = nxt.strip()
    if not stripped or prev.rstrip().endswith((".", "!", "?", ";")) or _META.match(stripped):
        return False
    if prev.rstrip().endswith(":"):  # "Freed space with:" introduces the command on the next line
        return True
    if _LIST_OR_STAMP.match(stripped):
        return False
    if stripped[0].islower():
        return True
    # an indented command / error string introduced by a plain line ("They deployed", "reason string:")
    return nxt[:1].isspace() and not prev[:1].isspace()


def _window(unit: str) -> list[str]:
    """``unit`` cut at whitespace into pieces of at most :data:`MAX_UNIT_CHARS` (a longer
    single token stays whole)."""
    if len(unit) <= MAX_UNIT_CHARS:
        return [unit]
    pieces, current = [], ""
    for token in unit.split(" "):
        if current and len(current) + 1 + len(token) > MAX_UNIT_CHARS:
            pieces.append(current)
            current = token
        else:
            current = f"{current} {token}" if current else token
    return pieces + ([current] if current else [])


def evidence_units(body: str, title: str = "") -> list[str]:
    """Split plain text (no table, no prompt output) into evidence units, in text order.

    Hard-wrapped prose is re-joined and split into sentences, a log or shift-log line stays one
    unit, an indented command or error string stays whole inside the sentence that introduces it.
    Units are only ever split at whitespace, so a command, path or error string is never cut
    mid-token. Header-like lines (``Subject:``, ``Author:``, ``Status: …``) are not evidence: the
    source card shows them already.

    Args:
        body: the text.
        title: the document's title: a line that only repeats it (``OPS-103: <title>``) is
            no evidence.
    Returns:
        Units with whitespace collapsed; metadata, title and blank lines dropped.
    """
    title = " ".join(title.split())
    logical: list[list[str]] = []
    after_blank = False  # a blank line follows the current logical line
    for line in body.splitlines():
        if not line.strip():
            after_blank = True
            continue
        current = logical[-1] if logical else []
        # across a blank line, only an indented block continues a line ending in ":" (its command)
        joins = bool(current) and (line[:1].isspace() and current[-1].rstrip().endswith(":") if after_blank
                                   else _joins(current[-1], line))
        if joins:
            current.append(line)
        else:
            logical.append([] if _META.match(line.strip()) else [line])
        after_blank = False
    units: list[str] = []
    for lines in logical:
        text = " ".join(" ".join(line.split()) for line in lines)
        words = len(_WORD.findall(text))
        repeats_title = title and text.endswith(title) and len(text) <= len(title) + 24
        if words < 2 or words < MIN_WORDS and not literal_weight(text) or repeats_title:
            continue
        for sentence in _SENTENCE_END.split(text):
            units.extend(_window(sentence.strip()))
    return units


@dataclass(frozen=True)
class EvidenceUnit:
    """One line or sentence of a record, with its place in it.

    Attributes:
        text: the unit as shown (a table row with each cell after its column header).
        turn: the thread turn it belongs to (0: before the first comment or dated line).
        turns: how many turns the record has (1 when it is no thread).
        superseded: a later turn says this turn's attempt did not hold (reverted, didn't help).
        context: what makes it readable out of place: the shell prompt that printed it; ``""`` for none.
        columns: for a table row, the column names it was read with (else empty).
        title: the record's title (what every unit of it is about).
        undoes: its turn says an earlier attempt did not hold ("reverted", "didn't help").
    """

    text: str
    turn: int = 0
    turns: int = 1
    superseded: bool = False
    context: str = ""
    columns: tuple[str, ...] = ()
    title: str = ""
    undoes: bool = False

    @property
    def shown(self) -> str:
        """The unit as the prompt and the API show it: its text, a superseded attempt marked as such,
        and its context."""
        text = f"{self.text} (later reverted)" if self.superseded else self.text
        return f"{text} (output of `{self.context}`)" if self.context else text


def bounded_record(chunks: Sequence[Chunk], matched: Sequence[int]) -> tuple[Chunk, ...]:
    """The chunks of a record that its evidence lines are drawn from: all of them, or for a record of
    more than :data:`MAX_RECORD_CHUNKS` chunks (a whole exported log file) those within
    :data:`RECORD_WINDOW` chunks of a ``matched`` chunk index, so the cost of a question stays bounded."""
    if len(chunks) <= MAX_RECORD_CHUNKS:
        return tuple(chunks)
    return tuple(c for c in chunks if any(abs(c.index - m) <= RECORD_WINDOW for m in matched))


def record_text(chunks: Sequence[Chunk]) -> str:
    """A record's body read back from its chunks (headers removed, in chunk order), each chunk's
    overlap with the one before removed (the splitter repeats up to ``overlap_tokens`` of text)."""
    text = ""
    for chunk in sorted(chunks, key=lambda c: c.index):
        body = chunk.text.split("\n", 1)[1].strip() if "\n" in chunk.text else ""
        text = _join_overlapping(text, body) if text else body
    return text


def _join_overlapping(a: str, b: str) -> str:
    """``a`` then ``b`` without the longest prefix of ``b`` that ends ``a`` (at least 12 characters)."""
    probe = b[:12]
    if len(probe) == 12:
        at = a.find(probe, max(0, len(a) - 4000))
        while at >= 0:
            if b.startswith(a[at:]):
                return a + b[len(a) - at:]
            at = a.find(probe, at + 1)
    return f"{a}\n{b}"


def split_turns(lines: Sequence[str]) -> list[list[str]]:
    """``lines`` cut where a turn starts (:data:`_TURN`): one list of lines per turn, in order;
    a record with fewer than 3 turn starts is one turn."""
    starts = [i for i, line in enumerate(lines) if _TURN.match(line)]
    if len(starts) < 3:
        return [list(lines)]
    bounds = ([0] if starts[0] > 0 else []) + starts + [len(lines)]
    return [list(lines[a:b]) for a, b in zip(bounds, bounds[1:])]


def superseded_turns(turns: Sequence[Sequence[str]]) -> set[int]:
    """The turns whose attempt a later turn undoes: for each turn that says an attempt did not hold
    (:data:`_UNDOES`), the latest earlier turn that acted (:data:`_ACTS`)."""
    out: set[int] = set()
    for k, turn in enumerate(turns):
        if k and _UNDOES.search("\n".join(turn)):
            acted = next((j for j in range(k - 1, -1, -1) if _ACTS.search("\n".join(turns[j]))), None)
            if acted is not None:
                out.add(acted)
    return out


@dataclass(frozen=True)
class Table:
    """A block of column output: the header line and its rows (line indexes into the segment)."""

    header: int
    rows: tuple[int, ...]


def _cells(line: str) -> list[tuple[int, int, str]]:
    """Whitespace-separated cells of ``line`` as (start, end, text); a unit after a number joins it."""
    cells: list[tuple[int, int, str]] = []
    for m in re.finditer(r"\S+", line):
        if cells and _UNIT.match(m.group()) and re.search(r"\d$", cells[-1][2]):
            s, _, t = cells[-1]
            cells[-1] = (s, m.end(), line[s:m.end()])
        else:
            cells.append((m.start(), m.end(), m.group()))
    return cells


def _is_header(line: str) -> bool:
    """A line of column names: at least 3, three in four shaped like one (:data:`_HEADER_CELL`), and an
    upper-case name or columns aligned by runs of spaces."""
    cells = [c for _, _, c in _cells(line)]
    return len(cells) >= 3 and sum(bool(_HEADER_CELL.match(c)) for c in cells) >= 0.75 * len(cells) \
        and (any(c.isupper() and len(c) > 1 for c in cells) or len(re.findall(r"\S {2,}(?=\S)", line)) >= 2)


def _is_row(line: str) -> bool:
    """A line of column output: two cells or more, with a digit or aligned by a run of spaces."""
    return len(_cells(line)) >= 2 and bool(re.search(r"\d|\S {2,}\S", line.strip()))


def find_tables(lines: Sequence[str]) -> list[Table]:
    """Column-output blocks of ``lines``: a header line (:func:`_is_header`) followed by at least two
    rows (:func:`_is_row`), up to the first line that is none (a blank or a prompt line)."""
    tables, i = [], 0
    while i < len(lines):
        if _is_header(lines[i]):
            rows, j = [], i + 1
            while j < len(lines) and _is_row(lines[j]) and not _PROMPT.match(lines[j]) and not _is_header(lines[j]):
                rows.append(j)
                j += 1
            if len(rows) >= 2:
                tables.append(Table(i, tuple(rows)))
                i = j
                continue
        i += 1
    return tables


def render_row(header: str, row: str) -> str:
    """``row`` with each cell after the column header it stands under, cells copied verbatim:
    ``ID 37 · CLASS hdd · … · %USE 89.62 · … · NAME osd.37``.

    Cells pair with the column names in order when they are as many as the names (a name may hold a
    single space: ``RAW USE``; or each word is a name: ``Used Avail``); else each cell goes under the
    name its span overlaps most (the nearest when none does), kept in column order, and names that
    took no cell join the next that did.
    """
    cells = _cells(row)
    for names in ([m.group() for m in re.finditer(r"\S+(?: \S+)*", header)], [c for _, _, c in _cells(header)]):
        if len(names) == len(cells):
            return " · ".join(f"{name} {text}" for name, (_, _, text) in zip(names, cells))
    labels = _cells(header)
    taken: dict[int, list[str]] = {}
    for start, end, text in cells:
        nearest = min(range(len(labels)), key=lambda k: _distance(labels[k], start, end))
        taken.setdefault(max(nearest, max(taken, default=0)), []).append(text)  # cells stay in column order
    parts, pending = [], []
    for k, (_, _, name) in enumerate(labels):
        if k not in taken:
            pending.append(name)
            continue
        parts.append(" ".join(pending + [name]) + " " + " ".join(taken[k]))
        pending = []
    return " · ".join(parts)


def _distance(label: tuple[int, int, str], start: int, end: int) -> tuple[int, int]:
    """How far the cell ``[start, end)`` stands from a column name: more overlap is nearer, then a smaller gap."""
    overlap = min(end, label[1]) - max(start, label[0])
    return (-overlap, 0) if overlap > 0 else (1, max(label[0] - end, start - label[1]))


def context_of(prompt: str) -> str:
    """A shell prompt line as the context of its output, cut to :data:`MAX_CONTEXT_CHARS`."""
    text = " ".join(prompt.split())
    return text if len(text) <= MAX_CONTEXT_CHARS else text[: MAX_CONTEXT_CHARS - 1] + "…"


def is_prompt(line: str) -> bool:
    """Whether ``line`` is a shell prompt with a command (``[root@gw02 ~]# systemctl …``)."""
    return bool(_PROMPT.match(line))


def record_units(text: str, title: str = "") -> list[EvidenceUnit]:
    """Cut a record's text into evidence units, in text order, each with its place in the record
    (turn, superseded, table header, prompt context; see the module docstring).

    Args:
        text: the record's body (:func:`record_text`, or a chunk body).
        title: the document's title (a line that only repeats it is no evidence).
    Returns:
        The units; metadata, title and blank lines dropped (:func:`evidence_units`).
    """
    turns = split_turns(text.splitlines())
    undone = superseded_turns(turns)
    return [EvidenceUnit(unit, k, len(turns), k in undone, context, columns, title,
                         bool(k and _UNDOES.search("\n".join(turn))))
            for k, turn in enumerate(turns) for unit, context, columns in _turn_units(turn, title)]


def _turn_units(lines: Sequence[str], title: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """One turn's units with their context: table rows rendered with their headers and the prompt that
    printed them; output under a prompt that names its host (``[root@gw02 ~]#``) with that prompt, up
    to a blank line; the rest as :func:`evidence_units` cuts it."""
    tables = {t.header: t for t in find_tables(lines)}
    out: list[tuple[str, str, tuple[str, ...]]] = []
    plain: list[str] = []
    prompt = ""

    def flush(context: str = "") -> None:
        out.extend((unit, context, ()) for unit in evidence_units("\n".join(plain), title))
        plain.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if i in tables:
            flush(prompt if _PROMPT_HOST.match(prompt) else "")
            table = tables[i]
            columns = tuple(c for _, _, c in _cells(line))
            out.extend((render_row(line, lines[r]), prompt, columns) for r in table.rows)
            i = table.rows[-1] + 1
            continue
        if is_prompt(line):
            flush(prompt if _PROMPT_HOST.match(prompt) else "")
            plain.append(line)
            flush()
            prompt = context_of(line)
        elif not line.strip() and prompt:  # the output under a prompt ends at a blank line
            flush(prompt if _PROMPT_HOST.match(prompt) else "")
            prompt = ""
        else:
            plain.append(line)
        i += 1
    flush(prompt if _PROMPT_HOST.match(prompt) else "")
    return out
