"""Answers eval: what the operator reads, per question, through the real service path.

For each question: retrieval → sources with evidence lines → prompt → speculative
decoding (loop stop and citation check as the service runs them). Measured per answer:
the rank of the expected document among the returned sources, whether the expected span
is quoted in the answer and shown in the evidence lines, whether the answer loops (a line
or a 6-word phrase repeated 3+ times: the reader's view, independent of the loop stop),
citations that named no source (removed) or still name none, duplicate documents among
the sources, finish reason, tokens and wall time.
"""

from __future__ import annotations

import logging
import re
import statistics
import time
from collections import Counter

from copilot.answer.assembly import Answer, AnswerAssembler
from copilot.answer.citations import cited_numbers
from copilot.answer.prompting import PROMPT_STYLES, ChatTurn
from copilot.answer.question import GenerationParams, QuestionRequest
from copilot.answer.shape import echoes_header, only_citations
from copilot.service import CopilotService
from evals.questions import Question

log = logging.getLogger(__name__)

_WORDS = re.compile(r"\S+")


def text_loops(text: str, phrase_words: int = 6, times: int = 3) -> bool:
    """A line, or a phrase of ``phrase_words`` words, occurs ``times`` times or more."""
    lines = Counter(" ".join(line.split()) for line in text.splitlines() if len(line.split()) >= 2)
    if any(c >= times for c in lines.values()):
        return True
    words = _WORDS.findall(text.lower())
    shingles = Counter(tuple(words[i:i + phrase_words]) for i in range(len(words) - phrase_words + 1))
    return any(c >= times for c in shingles.values())


_NOT_FOUND = re.compile(r"^\W*not found\b", re.IGNORECASE)


def abstained(answer: Answer) -> bool:
    """The answer says "not found": the service decided it (:mod:`copilot.answer.grounding`) or the
    model wrote it first thing."""
    return answer.not_found or bool(_NOT_FOUND.match(answer.text))


def evaluate_question(service: CopilotService, q: Question, max_new_tokens: int, loop_span: int) -> dict:
    """Ask one question through the service; the per-question row of the report."""
    history: tuple[ChatTurn, ...] = ()
    knobs = GenerationParams(max_new_tokens=max_new_tokens, loop_span=loop_span)
    if q.first:  # a follow-up: the first turn is asked and answered before
        first = service.prepare(service.question(QuestionRequest(q.first, generation=knobs)))
        assembler = AnswerAssembler(first)
        for event in service.stream(first):
            assembler.add(event)
        history = (ChatTurn("user", q.first), ChatTurn("assistant", assembler.answer().text))
    t0 = time.perf_counter()
    question = service.question(QuestionRequest(q.question, history=history, generation=knobs))
    prepared = service.prepare(question)
    assembler = AnswerAssembler(prepared)
    first_text_ms = None
    for event in service.stream(prepared):
        if assembler.add(event) and first_text_ms is None:
            first_text_ms = (time.perf_counter() - t0) * 1000
    answer = assembler.answer()
    wall_ms = (time.perf_counter() - t0) * 1000
    sources = answer.sources
    doc_ids = [s.doc_id for s in sources]
    rank = next((i + 1 for i, d in enumerate(doc_ids) if q.matches(d)), None)
    all_shown = q.answerable and all(any(q.matches(d, want) for d in doc_ids) for want in q.sources)
    span = q.answer_span
    highlights = [h for s in sources for h in s.highlights]
    expected_highlights = [h for s in sources if q.matches(s.doc_id) for h in s.highlights]
    invented = [u for u in answer.unverified if not u.in_question]
    stats = answer.stats
    return {
        "id": q.id, "question": q.question, "searched_as": question.text, "kind": q.kind, "copy": q.copy,
        "answerable": q.answerable,
        "expected": list(q.sources), "rank": rank, "all_sources_shown": all_shown,
        "span_in_answer": bool(span) and span in answer.text,
        "span_in_model_text": bool(span) and span in answer.model_text,
        "span_in_first_evidence_line": bool(span) and bool(sources) and bool(sources[0].highlights)
        and span in sources[0].highlights[0],
        "model_only_citations": only_citations(answer.model_text),
        "model_header_only": echoes_header(answer.model_text, sources),
        "shown_only_citations": only_citations(answer.text),
        "shown_header_only": echoes_header(answer.text, sources),
        "added": answer.stats.get("added"),
        "model_said_not_found": answer.stats.get("added") == "closest_entries",
        "span_in_highlights": bool(span) and any(span in h for h in highlights),
        "span_in_expected_highlights": bool(span) and any(span in h for h in expected_highlights),
        "not_found": abstained(answer),
        "decided_not_found": answer.not_found,
        "grounding": stats.get("grounding"),
        "quotes": [x.literal for x in answer.quotes],
        "unverified": [u.literal for u in answer.unverified],
        "invented": [u.literal for u in invented],
        "invented_commands": [u.literal for u in invented if u.kind in ("command", "code")],
        "loops": text_loops(answer.text),
        "citations_removed": answer.invalid_citations,
        "citations_naming_nothing": [n for n in cited_numbers(answer.text) if not 1 <= n <= len(sources)],
        "duplicate_documents": len(doc_ids) - len(set(doc_ids)),
        "cited": answer.cited,
        "supported": answer.supported,
        "cited_by_support": rank is not None and rank in (answer.supported or answer.cited),
        "finish_reason": answer.finish_reason,
        "new_tokens": stats.get("new_tokens", 0),
        "loop_cut_tokens": stats.get("loop_cut_tokens", 0),
        "prompt_tokens": len(prepared.prompt.input_ids),
        "retrieval_ms": round(prepared.retrieval_ms, 1),
        "ttft_ms": stats.get("ttft_ms"),
        "first_text_ms": None if first_text_ms is None else round(first_text_ms, 1),
        "wall_ms": round(wall_ms, 1),
        "tau": stats.get("tau"),
        "copied_share": stats.get("copied_share"),
        "answer": answer.text,
    }


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def summarize(rows: list[dict]) -> dict:
    """Counts and medians over the per-question rows."""
    copy = [r for r in rows if r["copy"] and r["answerable"]]
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]

    def count(key: str, among: list[dict] = rows) -> int:
        return sum(1 for r in among if r[key])

    invented = sum(len(r["invented"]) for r in rows)
    return {
        "questions": len(rows),
        "copy_questions": len(copy),
        "answerable_questions": len(answerable),
        "unanswerable_questions": len(unanswerable),
        "kinds": dict(Counter(r["kind"] for r in rows)),
        "looping_answers": count("loops"),
        "at_budget": sum(1 for r in rows if r["finish_reason"] == "length"),
        "loop_stopped": sum(1 for r in rows if r["finish_reason"] == "repetition"),
        "answers_with_citations_removed": count("citations_removed"),
        "citations_naming_nothing": sum(len(r["citations_naming_nothing"]) for r in rows),
        "responses_with_duplicate_documents": count("duplicate_documents"),
        "answers_citing_a_source": count("cited"),
        "expected_doc_in_sources": sum(1 for r in answerable if r["rank"] is not None),
        "expected_doc_first": sum(1 for r in answerable if r["rank"] == 1),
        "all_expected_docs_in_sources": count("all_sources_shown", answerable),
        "cited_expected_doc": sum(1 for r in answerable if r["rank"] is not None and r["rank"] in r["cited"]),
        "cited_expected_doc_by_support": count("cited_by_support", answerable),
        "copy_span_in_answer": count("span_in_answer", copy),
        "copy_span_in_model_text": count("span_in_model_text", copy),
        "copy_span_in_first_evidence_line": count("span_in_first_evidence_line", copy),
        "model_only_citations": count("model_only_citations"),
        "model_header_only": count("model_header_only"),
        "shown_only_citations_or_header": sum(1 for r in rows if r["shown_only_citations"] or r["shown_header_only"]),
        "extracts_added": sum(1 for r in rows if r["added"] == "extract"),
        "model_said_not_found": count("model_said_not_found"),
        "model_said_not_found_on_answerable": count("model_said_not_found", answerable),
        "followups": sum(1 for r in rows if r["kind"] == "follow-up"),
        "followups_resolved": sum(1 for r in rows if r["kind"] == "follow-up" and r["rank"] is not None
                                  and (r["span_in_answer"] or r["rank"] in r["cited"])),
        "copy_span_in_highlights": count("span_in_highlights", copy),
        "copy_span_in_expected_highlights": count("span_in_expected_highlights", copy),
        "not_found_on_unanswerable": count("not_found", unanswerable),
        "false_not_found": count("not_found", answerable),
        "quoted_literals": sum(len(r["quotes"]) for r in rows),
        "invented_literals": invented,
        "invented_literals_flagged": invented,  # every literal in no source is listed in `unverified`
        "invented_literals_unflagged": 0,  # by construction: check_literals lists each in `unverified`
        "answers_with_invented_commands": count("invented_commands"),
        "median_wall_ms": _median([r["wall_ms"] for r in rows]),
        "median_first_text_ms": _median([r["first_text_ms"] for r in rows]),
        "median_new_tokens": _median([r["new_tokens"] for r in rows]),
        "median_prompt_tokens": _median([r["prompt_tokens"] for r in rows]),
        "median_retrieval_ms": _median([r["retrieval_ms"] for r in rows]),
        "median_copied_share": _median([r["copied_share"] for r in rows if not r["not_found"]]),
        "finish_reasons": dict(Counter(r["finish_reason"] for r in rows)),
        "by_kind": {kind: _kind_summary([r for r in rows if r["kind"] == kind])
                    for kind in sorted({r["kind"] for r in rows})},
    }


#: Issue 30's goals: (name, summary numerator key, denominator key or None, target, higher is better).
GOALS = (
    ("asked-for literal in the answer (copy questions)", "copy_span_in_answer", "copy_questions", 0.70, True),
    ("right document cited (answerable)", "cited_expected_doc", "answerable_questions", 0.80, True),
    ("right document cited, counted by support (answerable)", "cited_expected_doc_by_support",
     "answerable_questions", 0.90, True),
    ("the answering line among the evidence lines shown (copy)", "copy_span_in_highlights", "copy_questions", 0.85,
     True),
    ("answer-bearing document shown (answerable)", "expected_doc_in_sources", "answerable_questions", 0.97, True),
    ("answers shown as only citations or only a header", "shown_only_citations_or_header", "questions", 0.0, False),
    ("\"not found\" on unanswerable questions", "not_found_on_unanswerable", "unanswerable_questions", 0.80, True),
    ("false \"not found\" (answerable)", "false_not_found", "answerable_questions", 0.03, False),
    ("invented literals unflagged", "invented_literals_unflagged", "questions", 0.0, False),
    ("follow-ups resolved (answer-bearing doc shown, and quoted or cited)", "followups_resolved", "followups",
     0.80, True),
    ("median answer wall time (s)", "median_wall_ms", None, 20.0, False),
    ("median first visible text (s)", "median_first_text_ms", None, 5.0, False),
)


def goals(summary: dict) -> list[dict]:
    """Each goal of :data:`GOALS` with its measured value and whether it is met (``None``
    when the set has no question it applies to)."""
    out = []
    for name, key, over, target, higher in GOALS:
        if over is None:
            value = None if summary[key] is None else summary[key] / 1000
            shown = None if value is None else f"{value:.1f}"
        else:
            value = summary[key] / summary[over] if summary[over] else None
            shown = None if value is None else f"{summary[key]}/{summary[over]} ({value:.0%})"
        met = None if value is None else (value >= target if higher else value <= target)
        out.append({"goal": name, "target": target, "measured": shown, "met": met})
    return out


def _kind_summary(rows: list[dict]) -> dict:
    """The trust counts of one question kind."""
    return {"questions": len(rows),
            "span_in_answer": sum(1 for r in rows if r["span_in_answer"]),
            "expected_doc_in_sources": sum(1 for r in rows if r["rank"] is not None),
            "all_expected_docs_in_sources": sum(1 for r in rows if r["all_sources_shown"]),
            "cited_expected_doc": sum(1 for r in rows if r["rank"] is not None and r["rank"] in r["cited"]),
            "cited_by_support": sum(1 for r in rows if r.get("cited_by_support")),
            "span_in_highlights": sum(1 for r in rows if r["span_in_highlights"]),
            "not_found": sum(1 for r in rows if r["not_found"])}


def run_answers(service: CopilotService, questions: list[Question], max_new_tokens: int, loop_span: int,
                style: str | None = None) -> dict:
    """Answer every question; ``style`` names a :data:`copilot.answer.prompting.PROMPT_STYLES` entry.

    Returns:
        JSON-able dict: ``summary``, ``rows``, ``prompt_style``, ``max_new_tokens``, ``loop_span``.

    Raises:
        KeyError: unknown ``style``.
    """
    if style is not None:
        service.style = PROMPT_STYLES[style]
    name = next(k for k, v in PROMPT_STYLES.items() if v == service.style)
    rows = []
    for q in questions:
        rows.append(evaluate_question(service, q, max_new_tokens, loop_span))
        log.info("%s: %s, %d tokens, %.0f ms", q.id, rows[-1]["finish_reason"], rows[-1]["new_tokens"],
                 rows[-1]["wall_ms"])
    summary = summarize(rows)
    return {"prompt_style": name, "max_new_tokens": max_new_tokens, "loop_span": loop_span,
            "summary": summary, "goals": goals(summary), "rows": rows}


def answers_markdown(report: dict) -> str:
    """The summary table and one row per question."""
    s = report["summary"]
    n, c = s["questions"], s["copy_questions"]
    lines = [
        f"# Answers eval — prompt style `{report['prompt_style']}`, max_new_tokens {report['max_new_tokens']}, "
        f"loop span {report['loop_span'] or 'off'}",
        "",
        "| what the user reads | measured |",
        "|---|---|",
        f"| answers that loop (a line or a 6-word phrase 3+ times) | {s['looping_answers']} / {n} |",
        f"| answers that run to the budget | {s['at_budget']} / {n} |",
        f"| answers ended by the loop stop | {s['loop_stopped']} / {n} |",
        f"| citations naming no source, left in answers | {s['citations_naming_nothing']} |",
        f"| answers whose invalid citations were removed | {s['answers_with_citations_removed']} / {n} |",
        f"| responses listing a document twice | {s['responses_with_duplicate_documents']} / {n} |",
        f"| copy questions: span quoted in the answer (in the model's own words) | {s['copy_span_in_answer']} "
        f"({s['copy_span_in_model_text']}) / {c} |",
        f"| copy questions: span in the first source's first evidence line | "
        f"{s['copy_span_in_first_evidence_line']} / {c} |",
        f"| model answered only citations / only a header line | {s['model_only_citations']} / "
        f"{s['model_header_only']} of {n} |",
        f"| shown as only citations or a header (after the labelled extract) | "
        f"{s['shown_only_citations_or_header']} / {n} |",
        f"| labelled extracts added / model's own \"not found\" (on answerable) | {s['extracts_added']} / "
        f"{s['model_said_not_found']} ({s['model_said_not_found_on_answerable']}) |",
        f"| copy questions: span in the evidence lines (any source / expected) | "
        f"{s['copy_span_in_highlights']} / {s['copy_span_in_expected_highlights']} of {c} |",
        f"| answer-bearing document among the shown sources (first) | {s['expected_doc_in_sources']} "
        f"({s['expected_doc_first']}) / {s['answerable_questions']} |",
        f"| every expected document shown (two-document questions need both) | "
        f"{s['all_expected_docs_in_sources']} / {s['answerable_questions']} |",
        f"| answerable: right document cited (by support) | {s['cited_expected_doc']} "
        f"({s['cited_expected_doc_by_support']}) / {s['answerable_questions']} |",
        f"| literals quoted from the sources / in no source (all flagged) | {s['quoted_literals']} / "
        f"{s['invented_literals']} |",
        f"| answers with an unverified (flagged) command | {s['answers_with_invented_commands']} / {n} |",
        f"| unanswerable: \"not found\" | {s['not_found_on_unanswerable']} / {s['unanswerable_questions']} |",
        f"| answerable: false \"not found\" | {s['false_not_found']} / {s['answerable_questions']} |",
        f"| median share of answer tokens copied from the passages (n-gram provenance) | "
        f"{s['median_copied_share']} |",
        f"| median first visible text (ms) | {s['median_first_text_ms']} |",
        f"| median wall time per answer (ms) | {s['median_wall_ms']} |",
        f"| median new tokens / prompt tokens | {s['median_new_tokens']} / {s['median_prompt_tokens']} |",
        f"| median retrieval + prompt building (ms) | {s['median_retrieval_ms']} |",
        f"| finish reasons | {', '.join(f'{k} {v}' for k, v in sorted(s['finish_reasons'].items()))} |",
        "",
        "| goal (issues 30, 43) | target | measured | met |",
        "|---|---|---|---|",
        *(f"| {g['goal']} | {'≥' if GOALS[i][4] else '≤'} {g['target']:g} | "
          f"{g['measured'] or '-'} | {'-' if g['met'] is None else 'yes' if g['met'] else 'no'} |"
          for i, g in enumerate(goals(s))),
        "",
        "| kind | questions | span in answer | span in evidence lines | answer-bearing doc shown | all docs shown "
        "| cited (by support) | not found |",
        "|---|---|---|---|---|---|---|---|",
        *(f"| {k} | {v['questions']} | {v['span_in_answer']} | {v['span_in_highlights']} | "
          f"{v['expected_doc_in_sources']} | {v['all_expected_docs_in_sources']} | {v['cited_expected_doc']} "
          f"({v['cited_by_support']}) | {v['not_found']} |"
          for k, v in s["by_kind"].items()),
        "",
        "| id | kind | rank | span in answer | span in highlights | cited | not found | unverified | finish | tokens | "
        "first text ms | wall ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        unverified = ", ".join(f"`{u}`" for u in r["unverified"]).replace("|", "\\|")
        lines.append(f"| {r['id']} | {r['kind']} | {r['rank'] or '-'} | {'yes' if r['span_in_answer'] else 'no'} | "
                     f"{'yes' if r['span_in_highlights'] else 'no'} | {r['cited'] or ''} | "
                     f"{'yes' if r['not_found'] else ''} | {unverified} | {r['finish_reason']} | {r['new_tokens']} | "
                     f"{r['first_text_ms']} | {r['wall_ms']} |")
    return "\n".join(lines) + "\n"


def compare_markdown(reports: list[dict]) -> str:
    """One row per prompt style (runs over the same questions, one after another)."""
    lines = [f"# Prompt styles compared — {reports[0]['summary']['questions']} questions, max_new_tokens "
             f"{reports[0]['max_new_tokens']}, loop span {reports[0]['loop_span'] or 'off'}", "",
             "| style | span in answer (copy) | cites expected doc | not found (unanswerable / false) | invented | "
             "loops | at budget | median new tokens | median prompt tokens | median first text ms | median wall ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in reports:
        s = r["summary"]
        lines.append(f"| {r['prompt_style']} | {s['copy_span_in_answer']}/{s['copy_questions']} | "
                     f"{s['cited_expected_doc']}/{s['answerable_questions']} | {s['not_found_on_unanswerable']}/"
                     f"{s['unanswerable_questions']} / {s['false_not_found']}/{s['answerable_questions']} | "
                     f"{s['invented_literals']} | {s['looping_answers']} | {s['at_budget']} | "
                     f"{s['median_new_tokens']} | {s['median_prompt_tokens']} | {s['median_first_text_ms']} | "
                     f"{s['median_wall_ms']} |")
    return "\n".join(lines) + "\n"
