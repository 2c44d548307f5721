"""Literal checking (copilot/answer/quotes.py): what counts as a literal, where it was found, what is flagged."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from copilot.answer.quotes import Quote, _squash, check_literals, extract_literals
from copilot.search.retrieval import Passage
from copilot.search.sources import Source
from ingestion.documents import Chunk

DOC = ("ELOG | MID 2 | Re: dc-pool-07 offline | 2026-01-12\n"
       "Dell technician swapped the disk in slot 14 at 14:30. Restarted the pool domain:\n"
       "  systemctl restart dcache@dc-pool-07Domain.service\n"
       "  \\s dc-pool-07 pool enable\n"
       "Set max_active=150 on the FTS link; see OPS-101. Error was SRM_AUTHORIZATION_FAILURE.\n"
       "Deployed /etc/grid-security/vomsdir/cms/voms-cms-auth.cern.ch.lsc (1.8 TB moved).")


def _source(text: str = DOC, n: int = 1, doc: str = "logbooks/operations.elog#2") -> Source:
    chunk = Chunk(f"{doc}#0", doc, text, {"chunk_index": 0, "title": "Re: dc-pool-07 offline"})
    return Source(n, (Passage(n, chunk, 0.5),), ("Restarted the pool domain: systemctl restart "
                                                 "dcache@dc-pool-07Domain.service",))


def kinds(text: str) -> list[tuple[str, str]]:
    return [(lit.kind, lit.text) for lit in extract_literals(text)]


def test_literals_of_each_kind():
    got = kinds("Run `pool disable -rdonly`, then systemctl restart dcache@dc-pool-07Domain.service. "
                "It failed with SRM_AUTHORIZATION_FAILURE on se-04.grid.example:8443 (OPS-107), "
                "path /etc/fetch-crl.conf, set http_proxy = http://squid:3128 and wait 30 minutes on 2026-01-20.")
    assert ("code", "pool disable -rdonly") in got
    assert ("command", "systemctl restart dcache@dc-pool-07Domain.service") in got
    assert ("error", "SRM_AUTHORIZATION_FAILURE") in got
    assert ("host", "se-04.grid.example:8443") in got
    assert ("ticket", "OPS-107") in got
    assert ("path", "/etc/fetch-crl.conf") in got
    assert ("setting", "http_proxy = http://squid:3128") in got
    assert ("value", "30 minutes") in got
    assert ("date", "2026-01-20") in got


def test_plain_prose_has_no_literals():
    assert kinds("The pool went read-only, e.g. after the disk failed. Nothing else happened [1].") == []


def test_backticks_inside_backticks_and_fences():
    got = kinds("Use ``grep `hostname` /etc/hosts`` or\n```\nls -la /tmp\n\nxrdcp a b\n```\ndone")
    assert got == [("code", "grep `hostname` /etc/hosts"), ("code", "ls -la /tmp"), ("code", "xrdcp a b")]


def test_unicode_literals():
    got = kinds("Le disque `café-01 ✓` a échoué sur hôte-07.exemple.fr, voir /données/東京/log.")
    assert ("code", "café-01 ✓") in got
    assert ("path", "/données/東京/log") in got


def test_quoted_literals_name_the_source_chunk_and_offsets():
    answer = "They ran `systemctl restart dcache@dc-pool-07Domain.service` and set max_active=150 [1]."
    check = check_literals(answer, [_source()])
    assert check.unverified == []
    by_literal = {q.literal: q for q in check.quotes}
    q = by_literal["systemctl restart dcache@dc-pool-07Domain.service"]
    assert (q.n, q.doc_id, q.chunk_id, q.kind) == (
        1, "logbooks/operations.elog#2", "logbooks/operations.elog#2#0", "code")
    assert DOC[q.start:q.end] == q.literal
    assert answer[q.answer_start:q.answer_end] == q.literal
    assert q.highlight == 0
    assert by_literal["max_active=150"].highlight is None


def test_whitespace_normalised_match_spans_line_breaks():
    answer = "It says `Restarted the pool   domain: systemctl restart dcache@dc-pool-07Domain.service`."
    (q,) = check_literals(answer, [_source()]).quotes
    assert _squash(DOC[q.start:q.end]) == _squash(q.literal)
    assert "\n" in DOC[q.start:q.end]


def test_invented_command_is_unverified_and_question_literals_marked():
    answer = "Run `dcache pool restart --force dc-pool-07` on dc-pool-99, then check OPS-101."
    check = check_literals(answer, [_source()], question="What happened to dc-pool-99?")
    unverified = {u.literal: u for u in check.unverified}
    assert "dcache pool restart --force dc-pool-07" in unverified
    assert unverified["dc-pool-99"].in_question
    assert not unverified["dcache pool restart --force dc-pool-07"].in_question
    assert [q.literal for q in check.quotes] == ["OPS-101"]


def test_command_in_prose_is_quoted_by_its_longest_stretch_in_a_source():
    answer = "The pool was restarted with systemctl restart dcache@dc-pool-07Domain.service once the rebuild ended."
    (q,) = check_literals(answer, [_source()]).quotes
    assert q.literal == "systemctl restart dcache@dc-pool-07Domain.service"


def test_a_changed_flag_makes_the_command_unverified():
    check = check_literals("Then run systemctl restart --now dcache@dc-pool-07Domain.service.", [_source()])
    assert [u.kind for u in check.unverified] == ["command"]


def test_long_answer_is_checked():
    answer = ("Run `xrdcp root://a//b /tmp/c` on wn-0213 then SRM_AUTHORIZATION_FAILURE clears. " * 60)[:4000]
    check = check_literals(answer, [_source()])
    assert len(check.quotes) + len(check.unverified) == len(extract_literals(answer)) > 50


_LITERALISH = st.text(alphabet=st.sampled_from(list("abz09-_./=@:` \n[]()é東✓")), max_size=120)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["systemctl", "restart", "dcache@dc-pool-07Domain.service", "max_active=150",
                                 "OPS-101", "SRM_AUTHORIZATION_FAILURE", "the", "pool", "`", "\n", "1.8 TB",
                                 "/etc/grid-security/vomsdir/cms/voms-cms-auth.cern.ch.lsc", "x", ".", ","]),
                max_size=30), _LITERALISH)
def test_every_offset_points_at_that_exact_text(words, noise):
    answer = " ".join(words) + " " + noise
    sources = [_source(), _source(DOC.replace("\n", "\n   "), 2, "other#1")]
    check = check_literals(answer, sources)
    for q in check.quotes:
        assert isinstance(q, Quote)
        assert answer[q.answer_start:q.answer_end] == q.literal
        chunk = next(p.chunk for s in sources for p in s.passages if p.chunk.chunk_id == q.chunk_id)
        assert _squash(chunk.text[q.start:q.end]) == _squash(q.literal)
        assert not chunk.text[q.start].isspace() and not chunk.text[q.end - 1].isspace()
    for u in check.unverified:
        assert answer[u.answer_start:u.answer_end] == u.literal
    spans = sorted((x.answer_start, x.answer_end) for x in [*check.quotes, *check.unverified])
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "literals never overlap"


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=400))
def test_any_text_extracts_without_error(text):
    for lit in extract_literals(text):
        assert text[lit.start:lit.end] == lit.text and lit.text.strip() == lit.text and lit.text
    assert not any(re.fullmatch(r"\s*", lit.text) for lit in extract_literals(text))


def test_a_citation_copied_into_a_code_span_is_not_part_of_the_literal():
    answer = "It is: `systemctl restart dcache@dc-pool-07Domain.service [1]` done."
    (q,) = check_literals(answer, [_source()]).quotes
    assert q.literal == "systemctl restart dcache@dc-pool-07Domain.service"
