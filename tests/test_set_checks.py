"""The question schema every long-record eval set's validate.py checks (evals/set_checks.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from evals.set_checks import QuestionRules, check_questions, validate_set

DOCS = {"elog/a.elog#1": "ran: systemctl restart xrootd on xg-01\n", "elog/a.elog#2": "disk swapped\n"}
RULES = QuestionRules(r"t\d{2}", "t01", {"buried": 1, "unanswerable": 1}, question_range=(2, 3),
                      min_names_real=1, min_names_fake=0)


def write(tmp_path, rows):
    path = tmp_path / "questions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def row(qid, kind="buried", span="systemctl restart xrootd", sources=("elog/a.elog#1",), copy=True, **extra):
    return {"id": qid, "question": "how was xrootd brought back?", "answer_span": span, "sources": list(sources),
            "kind": kind, "copy": copy, **extra}


def test_a_well_formed_set_passes_and_is_counted(tmp_path):
    errors: list[str] = []
    path = write(tmp_path, [row("t01"), row("t02", "unanswerable", "", (), False, names_real=True) | {
        "question": "what is the serial of xg-01?"}])
    counts = check_questions(path, DOCS, RULES, errors)
    assert errors == [] and counts.kinds == {"buried": 1, "unanswerable": 1} and counts.names_real == 1


def test_each_broken_question_is_a_finding(tmp_path):
    errors: list[str] = []
    path = write(tmp_path, [row("x1"), row("t01", span="not in the source"), row("t01", sources=("nope#1",)),
                            row("t03", "unanswerable", "", (), False, names_real=False) | {
                                "question": "what broke on xg-01?"}])
    check_questions(path, DOCS, RULES, errors)
    text = "\n".join(errors)
    for finding in ("id must look like t01", "not an exact substring of the last source", "duplicate id t01",
                    "'nope#1' is not an ingested document id", "names_real false but it names xg-01",
                    "0 unanswerable questions with names_real true", "4 questions, expected 2-3"):
        assert finding in text, finding


def test_report_gives_the_exit_code_and_says_every_finding(capsys):
    from evals.set_checks import report

    assert report("siteX", "3 documents", []) == 0
    assert capsys.readouterr().out == "siteX validation OK: 3 documents\n"
    assert report("siteX", "3 documents", ["q1: span not in its source", "q2: unknown kind"]) == 1
    err = capsys.readouterr().err
    assert "siteX validation FAILED with 2 problem(s)" in err and "  - q2: unknown kind" in err


def test_a_set_validates_whole_and_a_broken_copy_names_its_problem(tmp_path, capsys):
    rules = QuestionRules(r"s8q\d{2,3}", "s8q01",
                          {"buried": 4, "terse": 2, "final-fix": 3, "table": 2, "copy": 2, "unanswerable": 3},
                          question_range=(14, 18), min_names_real=2)
    site8 = Path(__file__).resolve().parents[1] / "evals" / "data" / "site8"
    assert validate_set(site8, rules, (28, 40)) == 0
    assert "site8 validation OK" in capsys.readouterr().out
    broken = tmp_path / "site8"
    shutil.copytree(site8, broken)
    with (broken / "questions.jsonl").open("a") as f:
        f.write('{"id": "s8q99", "question": "?"}\n')
    assert validate_set(broken, rules, (28, 40)) == 1
    assert "s8q99" in capsys.readouterr().err
    assert (site8 / "questions.jsonl").read_text() != (broken / "questions.jsonl").read_text()
