"""Literal checking: every literal an answer states is found verbatim in a shown source, or flagged.

A *literal* is text an operator might paste or act on: a code span, a command line, a path,
a ``key=value`` setting, an error string or code, a host name, a ticket key, a date, a number
with a unit (:func:`extract_literals`). Each literal of an answer is looked up verbatim —
case-sensitive, whitespace-normalised (any run of whitespace equals one space) — in the
chunks of the sources shown with it (:func:`check_literals`):

- a *quoted literal* names the source ``n``, the chunk id and the character offsets
  ``chunk.text[start:end]`` of the match (and the evidence line it lies in, if any);
- an *unverified literal* is found in no shown source ("not in the sources — check before
  running").

A command line in prose has no marked boundaries ("restarted it with systemctl restart
x.service"), so the longest stretch of it around its technical tokens that some source holds
verbatim is what is quoted; when no stretch holding all of them is found, the command is
unverified. Everything here is linear in the answer's length except that search, which is
bounded by :data:`MAX_RUN_TOKENS` per command.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

from copilot.answer.citations import cited_numbers
from copilot.search.literals import STRIP_CHARS, TRAIL_CHARS, token_kind, trim_token
from copilot.search.sources import Source

#: A command line longer than this (tokens) is cut there.
MAX_RUN_TOKENS = 24
#: Plain words kept before a command line's first technical token or flag (its verb: ``cta-admin dr down``).
MAX_LEAD_WORDS = 3

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_VALUE = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?\s?(?:%|(?:[KMGTPE]i?B|[KMGTP](?=\s|$)|[kMGT]?bps|[KMGT]B/s|"
                    r"ms|s|sec|seconds?|mins?|minutes?|h|hours?|days?|Gb|Mb|[kKMG]Hz|W|kW|°C|C)(?![\w/]))")
_SPACED_SETTING = re.compile(r"(?<![\w.])[A-Za-z_][\w.]*[A-Za-z0-9_](?: = ?| ?= )[^\s,;'\"`)]*[^\s,;.:'\"`)]")
_TOKEN = re.compile(r"\S+")
_CITED_END = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]$")
_FLAG = re.compile(r"^--?[A-Za-z][\w-]*(?:=\S+)?$")
_PLAIN = re.compile(r"^(?:[a-z][a-z0-9_.+-]*|\d+)$")
#: Words that start a command line (a run led by one needs only one technical token).
COMMAND_VERBS = frozenset("systemctl sudo yum dnf rpm apt apt-get kubectl helm docker podman eos cta-admin xrdcp xrdfs "
                          "gfal-copy gfal-ls gfal-rm fts-rest-transfer-submit fts-set-priority voms-proxy-init ceph "
                          "rados rbd puppet ansible ansible-playbook scontrol sacct squeue sbatch condor_q condor_rm "
                          "condor_status condor_off condor_on mysql mysqldump psql pg_dump ssh scp rsync ls cat grep "
                          "tail journalctl dmesg ip ping traceroute mount umount xfs_repair fsck smartctl mdadm "
                          "megacli storcli ipmitool dcache chimera pool kill pkill service crontab openssl git make "
                          "iptables firewall-cmd nft lvextend resize2fs qdel qstat bhosts bjobs arcctl".split())
_SENTENCE_WORDS = frozenset("a an and are as at be by for from had has have if in is it its of on or that the "
                            "then this to was were which with".split())
#: One token of a line: the trimmed word, its offset in the text, its kind (None: not technical), the raw token.
_Token = tuple[str, int, str | None, str]


@dataclass(frozen=True)
class Literal:
    """A literal of an answer: ``text`` = ``answer[start:end]`` (character offsets)."""

    text: str
    kind: str  # code | command | path | setting | error | host | name | ticket | date | value
    start: int
    end: int


@dataclass(frozen=True)
class Quote:
    """A literal found verbatim (whitespace-normalised) in a shown source.

    Attributes:
        literal, kind, answer_start, answer_end: the literal and its offsets in the answer.
        n: the source's citation number.
        doc_id, chunk_id: the document and the chunk that hold it.
        start, end: character offsets in that chunk's text (``chunk.text[start:end]`` equals
            the literal up to whitespace).
        highlight: index of the source's evidence line that holds it, else ``None``.
        cited: the source the answer cites for it (the first ``[k]`` after it on its line), else
            ``None``; when that source holds it, ``n == cited``, else ``n`` is the first that does.
    """

    literal: str
    kind: str
    answer_start: int
    answer_end: int
    n: int
    doc_id: str
    chunk_id: str
    start: int
    end: int
    highlight: int | None = None
    cited: int | None = None

    @property
    def miscited(self) -> bool:
        """The answer cites another source for it than the one that holds it."""
        return self.cited is not None and self.cited != self.n

    def to_dict(self) -> dict[str, object]:
        """JSON-able fields."""
        return asdict(self)


@dataclass(frozen=True)
class Unverified:
    """A literal found in no shown source.

    Attributes:
        in_question: the question holds it (the operator named it; the sources do not).
    """

    literal: str
    kind: str
    answer_start: int
    answer_end: int
    in_question: bool = False

    def to_dict(self) -> dict[str, object]:
        """JSON-able fields."""
        return asdict(self)


@dataclass(frozen=True)
class LiteralCheck:
    """:func:`check_literals`' result: the quoted and the unverified literals, in answer order."""

    quotes: list[Quote]
    unverified: list[Unverified]


def _normalise(text: str) -> tuple[str, list[int]]:
    """``text`` with every whitespace run as one space, and each kept character's index in ``text``."""
    out: list[str] = []
    where: list[int] = []
    space = False
    for i, ch in enumerate(text):
        if ch.isspace():
            if not space and out:
                out.append(" ")
                where.append(i)
            space = True
        else:
            out.append(ch)
            where.append(i)
            space = False
    while out and out[-1] == " ":
        out.pop()
        where.pop()
    return "".join(out), where


def _squash(text: str) -> str:
    return " ".join(text.split())


class _Marks:
    """The literals found so far in ``text`` and the characters they (or skipped spans) cover."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.found: list[Literal] = []
        self.taken = [False] * len(text)

    def free(self, start: int, end: int) -> bool:
        return not any(self.taken[start:end])

    def cover(self, start: int, end: int) -> None:
        self.taken[start:end] = [True] * (end - start)

    def take(self, start: int, end: int, kind: str) -> None:
        if end > start and self.free(start, end):
            self.found.append(Literal(self.text[start:end], kind, start, end))
            self.cover(start, end)


def _take_code(marks: _Marks) -> None:
    """Fenced blocks (line by line) and inline code spans; each whole span is covered."""
    text = marks.text
    for m in _FENCE.finditer(text):
        offset = m.start(2)
        for line in m.group(2).splitlines(keepends=True):
            body = line.strip()
            if body:
                s = offset + line.index(body)
                marks.take(s, s + len(body), "code")
            offset += len(line)
        marks.cover(m.start(), m.end())
    for m in _CODE_SPAN.finditer(text):
        if not marks.free(m.start(), m.end()):
            continue
        inner, s = m.group(2), m.start(2)
        if inner.startswith(" ") and inner.endswith(" ") and inner.strip():
            inner, s = inner[1:-1], s + 1
        inner = _CITED_END.sub("", inner)  # a citation copied into the span: `cmd [1]`
        if inner.strip():
            marks.take(s, s + len(inner), "code")
        marks.cover(m.start(), m.end())


def _take_tokens(marks: _Marks) -> None:
    """Per line: command runs (:func:`_command_runs`), then single technical tokens."""
    for line_start, line in _lines(marks.text):
        tokens: list[_Token | None] = []
        for m in _TOKEN.finditer(line):
            s = line_start + m.start()
            if not marks.free(s, s + len(m.group())):
                tokens.append(None)
                continue
            word, ws = trim_token(m.group(), s)
            tokens.append((word, ws, token_kind(word), m.group()) if word else None)
        for run in _command_runs(tokens):
            first, last = run[0], run[-1]
            marks.take(first[1], last[1] + len(last[0]), "command")
        for t in tokens:
            if t is not None and t[2] is not None:
                marks.take(t[1], t[1] + len(t[0]), t[2])


def extract_literals(text: str) -> list[Literal]:
    """Every literal of ``text``, in text order, none overlapping another.

    Code spans (inline backticks, any run length; fenced blocks line by line) first; then,
    outside them, ``key = value`` settings, numbers with units, command lines (a run of command-like tokens holding a
    flag or led by a command verb) and single technical tokens (:func:`token_kind`).

    Args:
        text: an answer (any length, any Unicode).

    Returns:
        :class:`Literal` s with ``text[lit.start:lit.end] == lit.text``.
    """
    marks = _Marks(text)
    _take_code(marks)
    for m in _SPACED_SETTING.finditer(text):
        marks.take(m.start(), m.end(), "setting")
    for m in _VALUE.finditer(text):
        marks.take(m.start(), m.end(), "value")
    _take_tokens(marks)
    return sorted(marks.found, key=lambda lit: lit.start)


def _lines(text: str) -> Iterator[tuple[int, str]]:
    offset = 0
    for line in text.splitlines(keepends=True):
        yield offset, line
        offset += len(line)


def _command_runs(tokens: list[_Token | None]) -> list[list[_Token]]:
    """Runs of consecutive command-like tokens that hold a flag or start with a
    :data:`COMMAND_VERBS` word; sentence words at either end are dropped, and plain
    words before the first technical token beyond :data:`MAX_LEAD_WORDS`."""
    runs: list[list[_Token]] = []
    current: list[_Token] = []

    def close() -> None:
        first = next((i for i, t in enumerate(current) if t[2] is not None or _FLAG.match(t[0])), len(current))
        verb = next((i for i in range(first) if current[i][0] in COMMAND_VERBS), None)
        del current[:verb if verb is not None else max(0, first - MAX_LEAD_WORDS)]
        while current and current[0][2] is None and current[0][0].lower() in _SENTENCE_WORDS:
            current.pop(0)
        while current and current[-1][2] is None and not _FLAG.match(current[-1][0]):
            current.pop()
        flags = sum(1 for t in current if _FLAG.match(t[0]))
        verb_lead = bool(current) and current[0][0] in COMMAND_VERBS
        if len(current) >= 2 and (flags or verb_lead):
            runs.append(list(current))
        current.clear()

    for t in tokens:
        if t is None:
            close()
            continue
        word, _, kind, raw = t
        commandish = kind is not None or _FLAG.match(word) or _PLAIN.match(word)
        if not commandish or word.lower() in _SENTENCE_WORDS and current and current[-1][2] is not None:
            close()
            continue
        if raw[:1] in "([{":  # a parenthesis opens: not part of the command before it
            close()
        current.append(t)
        trailing = raw[len(raw.rstrip(STRIP_CHARS + TRAIL_CHARS)):]
        if any(c in ".,;:!?)]}" for c in trailing) or len(current) >= MAX_RUN_TOKENS:
            close()  # the sentence (or clause) ends here
    close()
    return runs


@dataclass
class _Haystack:
    n: int
    doc_id: str
    chunk_id: str
    text: str
    norm: str
    where: list[int]
    highlights: tuple[str, ...]


def _haystacks(sources: Sequence[Source]) -> list[_Haystack]:
    out = []
    for s in sources:
        for chunk in s.haystack_chunks():
            norm, where = _normalise(chunk.text)
            out.append(_Haystack(s.n, s.doc_id, chunk.chunk_id, chunk.text, norm, where,
                                 tuple(_squash(h) for h in s.highlights)))
    return out


def _find(needle: str, haystacks: list[_Haystack]) -> tuple[_Haystack, int, int] | None:
    """The first haystack holding ``needle`` (whitespace-normalised), with raw offsets."""
    norm = _squash(needle)
    if not norm:
        return None
    for h in haystacks:
        i = h.norm.find(norm)
        if i >= 0:
            return h, h.where[i], h.where[i + len(norm) - 1] + 1
    return None


def _quote(lit: Literal, hit: tuple[_Haystack, int, int], cited: int | None) -> Quote:
    h, s, e = hit
    norm = _squash(lit.text)
    line = next((i for i, hl in enumerate(h.highlights) if norm in hl), None)
    return Quote(lit.text, lit.kind, lit.start, lit.end, h.n, h.doc_id, h.chunk_id, s, e, line, cited)


def cited_for(answer: str, end: int) -> int | None:
    """The source the answer cites for the text ending at offset ``end``: the first number of the
    first ``[k]`` marker after it on the same line (``None`` when the line cites none)."""
    line_end = answer.find("\n", end)
    numbers = cited_numbers(answer[end:] if line_end < 0 else answer[end:line_end])
    return numbers[0] if numbers else None


def _check_command(lit: Literal, haystacks: list[_Haystack]) -> tuple[Literal, tuple[_Haystack, int, int]] | None:
    """The longest stretch of a command line that a source holds and that keeps every one of its
    technical tokens and flags (``None`` when there is none)."""
    tokens = [(m.start(), m.end()) for m in _TOKEN.finditer(lit.text)]
    core = [i for i, (s, e) in enumerate(tokens)
            if token_kind(trim_token(lit.text[s:e], 0)[0]) is not None or _FLAG.match(lit.text[s:e])]
    if not core:
        return None
    lo_max, hi_min = core[0], core[-1]
    for length in range(len(tokens), hi_min - lo_max, -1):
        for lo in range(0, lo_max + 1):
            hi = lo + length - 1
            if hi < hi_min or hi >= len(tokens):
                continue
            s, e = tokens[lo][0], tokens[hi][1]
            hit = _find(lit.text[s:e], haystacks)
            if hit is not None:
                return Literal(lit.text[s:e], lit.kind, lit.start + s, lit.start + e), hit
    return None


def check_literals(answer: str, sources: Sequence[Source], question: str = "") -> LiteralCheck:
    """Check every literal of ``answer`` against the chunks of ``sources``.

    Args:
        answer: the answer text.
        sources: the sources shown with it (their matched chunks and evidence lines).
        question: the question (an unverified literal it holds is marked ``in_question``).

    Returns:
        The quoted literals (with the source ``n`` that holds each, the one the answer cites for
        it when that one does, the chunk id and offsets) and the unverified ones, each in answer order.
    """
    haystacks = _haystacks(sources)
    squashed_question = _squash(question)
    quotes, unverified = [], []
    for lit in extract_literals(answer):
        cited = cited_for(answer, lit.end)
        ordered = sorted(haystacks, key=lambda h: h.n != cited)  # the cited source's chunks first
        if lit.kind == "command":
            found = _check_command(lit, ordered)
            if found is not None:
                sub, hit = found
                quotes.append(_quote(sub, hit, cited))
                continue
        else:
            at = _find(lit.text, ordered)
            if at is not None:
                quotes.append(_quote(lit, at, cited))
                continue
        unverified.append(Unverified(lit.text, lit.kind, lit.start, lit.end,
                                     bool(squashed_question) and _squash(lit.text) in squashed_question))
    return LiteralCheck(quotes, unverified)
