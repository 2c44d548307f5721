"""Where an answer's words come from (issue 43, items 3 and 4: copilot/answer/support.py): the source
that holds each quote, a labelled source check when the model cites another, and "not found" when
the quoted lines are about a sibling of the host or ticket the question names, or hold no value of the
shape the question asks for."""

from __future__ import annotations

from copilot.answer.events import AnswerFeed
from copilot.answer.quotes import check_literals, cited_for
from copilot.answer.support import (
    SUPPORT_LABEL,
    after_generation,
    asked_subjects,
    missing_value,
    sibling_subject,
    siblings,
    support_note,
    supported,
)
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


def test_siblings_are_one_family_of_names():
    assert siblings("xrootd-gw01", "xrootd-gw02") and siblings("htc-cm01", "htc-ce02")
    assert siblings("sw-core-a", "sw-core-b") and siblings("UPS-A", "ups-b")
    assert siblings("166517", "166702") and not siblings("166517", "88213504")  # numbers: the same length
    assert not siblings("sw-core-a", "sw-core-a") and not siblings("sw-core-a", "sw-core-02")
    assert not siblings("se-07", "disk") and not siblings("e-mail", "x-ray")
    assert not siblings("ora-rac-01", "ORA-00257")  # an error code is no sibling of a host


def test_the_asked_subjects_include_lettered_names_and_ticket_numbers():
    assert asked_subjects("sw-core-a rebooted by itself - which port-channel came back with the wrong MTU?") == \
        ["sw-core-a"]
    assert asked_subjects("GGUS 166517 - what did we reply to the VO?") == ["166517"]
    assert asked_subjects("when does the htc-cm01 cert expire?") == ["htc-cm01"]
    assert asked_subjects("why did the pool go read-only?") == []


def test_the_other_side_of_a_pair_is_not_found():
    swb = source(1, "net.jira#T1OPS-2052", "sw-core-b Port-Channel12 lost MTU 9214 after watchdog reboot",
                 "sw-core-b rebooted itself at 23:40 (watchdog).\nPort-Channel12 came back with MTU 1500.",
                 ("sw-core-b rebooted itself at 23:40 (watchdog).", "Port-Channel12 came back with MTU 1500."))
    question = "sw-core-a rebooted by itself (watchdog) - which port-channel came back with the wrong MTU?"
    added, not_found = after_generation(question, "sw-core-b rebooted itself at 23:40 (watchdog). [1]", [swb])
    assert not_found and "not found for sw-core-a" in added and "about sw-core-b" in added
    asked_b = question.replace("sw-core-a", "sw-core-b")
    assert after_generation(asked_b, "sw-core-b rebooted itself at 23:40 (watchdog). [1]", [swb]) == ("", False)


def test_another_tickets_record_is_not_found_for_the_asked_number():
    reply = source(1, "ggus.jsonl#166702", "Ticket 166702 | ALICE: read errors on 3 files",
                   "We could not recover them; please declare them lost in the ALICE catalogue.",
                   ("We could not recover them; please declare them lost in the ALICE catalogue.",))
    text = "We could not recover them; please declare them lost in the ALICE catalogue. [1]"
    added, not_found = after_generation("GGUS 166517 - what did we reply to the VO?", text, [reply])
    assert not_found and "not found for 166517" in added
    assert after_generation("GGUS 166702 - what did we reply to the VO?", text, [reply]) == ("", False)


def test_an_answer_without_the_asked_kind_of_value_is_not_found():
    assert missing_value("serial number of the disk fitted in slot 14?", "The technician swapped it at 14:30 [1]") \
        == "serial number"
    assert missing_value("serial number of the disk fitted in slot 14?", "New disk S/N ZL2C8K4T [1]") is None
    # a token the question holds (the drive's name) or a date is not the value
    assert missing_value("serial of the drive pulled from IBMLIB1-LTO9-07?",
                         "IBMLIB1-LTO9-07 swapped on 2026-02-26 [1]") == "serial number"
    assert missing_value("which bmc firmware version did wn-b029 get?", "PSU2 replaced, SR 1829344107 [1]") == "version"
    assert missing_value("which bmc firmware version did wn-b029 get?", "BMC updated to 7.10.30.00 [1]") is None
    assert missing_value("why could the firmware not be upgraded in service?", "ISSU failed, so a reboot [1]") is None
    assert missing_value("what autonomy did UPS-B reach?", "Load on bypass 71 % [1]") == "autonomy"
    assert missing_value("what autonomy did UPS-B reach?", "Autonomy 14 min at 62 % load [1]") is None
    added, not_found = after_generation("what autonomy did UPS-B reach?", "Load on bypass 71 % [1]", [GW02])
    assert not_found and "the answer gives no autonomy" in added
