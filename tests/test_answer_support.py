"""Where an answer's words come from (issue 43, items 3 and 4: copilot/answer/support.py): the source
that holds each quote, a labelled source check when the model cites another, and "not found" when
the quoted lines are about a sibling of the host or ticket the question names."""

from __future__ import annotations

from copilot.answer.events import AnswerFeed
from copilot.answer.quotes import check_literals, cited_for
from copilot.answer.support import SUPPORT_LABEL, after_generation, sibling_subject, support_note, supported
from copilot.search.retrieval import Passage
from copilot.search.sources import Source
from decoding.engine import GenerationResult, StreamEvent
from decoding.stats import GenerationStats
from ingestion.documents import Chunk


def source(n: int, doc: str, title: str, body: str, highlights: tuple[str, ...]) -> Source:
    chunk = Chunk(f"{doc}#0", doc, f"ELOG {doc} | {title}\n{body}", {"chunk_index": 0, "title": title})
    return Source(n, (Passage(0, chunk, 0.5),), highlights)


GW02 = source(1, "certs.elog#7", "host certificates renewed",
              "xrootd-gw02: notAfter=Oct  3 12:00:00 2027 GMT\nxrootd-gw01 was rebooted for the kernel update.",
              ("xrootd-gw02: notAfter=Oct 3 12:00:00 2027 GMT",))
FTS = source(2, "fts.elog#3", "FTS link tuned", "Raised the limit: fts-config-set --max-active 8589934592 for FNAL.",
             ("Raised the limit: fts-config-set --max-active 8589934592 for FNAL.",))


def test_the_cited_source_is_preferred_and_a_miscited_quote_is_named():
    text = "Set `fts-config-set --max-active 8589934592` [1]."
    (quote,) = check_literals(text, [GW02, FTS]).quotes
    assert quote.n == 2 and quote.cited == 1 and quote.miscited
    note = support_note([quote])
    assert note.startswith(f"\n\n{SUPPORT_LABEL}") and "is in [2], not [1]" in note
    assert supported([quote]) == [2]


def test_a_quote_cited_where_it_is_raises_no_note():
    text = "Set `fts-config-set --max-active 8589934592` [2]."
    quotes = check_literals(text, [GW02, FTS]).quotes
    assert [q.cited for q in quotes] == [2] and support_note(quotes) == ""


def test_the_citation_is_read_on_the_literals_own_line():
    text = "run `a`\nthen `b` [3]"
    assert cited_for(text, text.index("`a`") + 3) is None
    assert cited_for(text, text.index("`b`") + 3) == 3


def test_a_sibling_hosts_line_is_not_found_for_the_asked_host():
    question = "when does the xrootd-gw01 certificate expire?"
    text = "It expires on `notAfter=Oct 3 12:00:00 2027 GMT` [1]."
    quotes = check_literals(text, [GW02], question).quotes
    assert sibling_subject(text, question, quotes, [GW02]) == ("xrootd-gw01", "xrootd-gw02")
    added, not_found = after_generation(question, text, [GW02])
    assert not_found and "not found for xrootd-gw01" in added and "[1] host certificates renewed" in added


def test_the_asked_hosts_own_line_or_record_is_an_answer():
    question = "when does the xrootd-gw02 certificate expire?"
    text = "It expires on `notAfter=Oct 3 12:00:00 2027 GMT` [1]."
    assert after_generation(question, text, [GW02]) == ("", False)
    own = source(1, "gw01.elog#9", "xrootd-gw01 certificate", "see also xrootd-gw02\nnotAfter=Jan 1 2028",
                 ("notAfter=Jan 1 2028 (see xrootd-gw02)",))
    quotes = check_literals("`notAfter=Jan 1 2028` [1]", [own]).quotes
    assert sibling_subject("`notAfter=Jan 1 2028` [1]", "xrootd-gw01 cert expiry?", quotes, [own]) is None


def test_a_copied_value_without_a_literal_shape_is_read_from_its_line():
    sr = source(1, "storage.elog#5", "disk swap", "ceph-osd11 controller swapped, Dell SR 1829102277 opened.",
                ("ceph-osd11 controller swapped, Dell SR 1829102277 opened.",))
    text = "ceph-osd11 controller swapped, Dell SR 1829102277 [1]"
    added, not_found = after_generation("dell SR for the ceph-osd07 controller swap?", text, [sr])
    assert not_found and "about ceph-osd11" in added


def test_the_feed_appends_the_check_and_reports_not_found():
    question = "when does the xrootd-gw01 certificate expire?"
    feed = AnswerFeed(1, [GW02], question)
    text = "It expires on `notAfter=Oct 3 12:00:00 2027 GMT` [1]."
    feed.convert(StreamEvent(text))
    last = feed.convert(StreamEvent("", [], GenerationResult([], text, "eos", GenerationStats())))
    assert last.model_not_found and last.added.lstrip().startswith(SUPPORT_LABEL)
