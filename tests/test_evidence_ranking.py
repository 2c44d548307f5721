"""Evidence lines: the line that answers comes first (issue 30, item 3).

Bodies here are invented in the shape of the tuning sets' entries: the line that states the
problem in the question's own words, then the line that acts on it.
"""

from __future__ import annotations

import pytest

from copilot.search.answer_kinds import ACTION, ERROR, PLACE, VALUE, question_kinds, unit_kinds
from copilot.search.highlights import score_units, top_units
from copilot.search.record import evidence_units


def first_line(question: str, body: str) -> str:
    units = evidence_units(body)
    return top_units(score_units(question, [units], None), 0)[0].text


@pytest.mark.parametrize(("question", "kinds"), [
    ("Which command drained the broken filesystem on fst-3?", {ACTION}),
    ("how did anna restart the collector on all the buffers", {ACTION}),
    ("What error did the standby log when it stopped?", {ERROR}),
    ("How much coolant was added to CRAC-4?", {VALUE, ACTION}),
    ("where do the group quotas live?", {PLACE}),
    ("Why did the link flap?", set()),
])
def test_questions_ask_for_kinds_of_answer(question, kinds):
    assert question_kinds(question) == kinds


@pytest.mark.parametrize(("unit", "kind"), [
    ("Started drain: eos fs config 42 configstatus=drain", ACTION),
    ("FATAL: could not receive data from WAL stream", ERROR),
    ("coolant topped up with 2,4 kg", VALUE),
    ("File: /etc/condor/config.d/60-quotas.conf", PLACE),
])
def test_units_hold_kinds_of_answer(unit, kind):
    assert kind in unit_kinds(unit)


def test_the_action_comes_before_the_line_that_restates_the_problem():
    body = ("dmesg on fst-3: XFS (sdr1): error -5 returned, the broken filesystem is read-only.\n"
            "\"fs ls\" shows fsid 42 (fst-3:/data17) as ro since 14:50.\n"
            "Started drain: eos fs config 42 configstatus=drain\n")
    line = first_line("Which command started draining the broken filesystem on fst-3?", body)
    assert line.startswith("Started drain")


def test_the_error_line_comes_before_the_narration_for_an_error_question():
    body = ("The standby db-02 stopped replaying WAL around 02:30 and the replay lag grew.\n"
            "postgresql.log on the standby: FATAL: requested WAL segment 0000A1 has already been removed\n"
            "No replication slot was configured on the primary.\n")
    assert "FATAL" in first_line("What error did the standby log when it stopped replaying WAL?", body)


def test_stemming_meets_rolled_with_roll_back():
    body = ("The upgrade to taped 5.2 went out at 09:30 to all tape servers.\n"
            "Mounts failed during positioning and left transactions open.\n"
            "The catalogue reached its connection limit at 13:41.\n"
            "Tape servers rolled back with: dnf downgrade -y taped-5.1 && systemctl restart taped\n"
            "Drives were set up again at 17:30.\n")
    assert "dnf downgrade" in first_line("How did they roll back the tape servers?", body)


def test_a_line_ending_in_a_colon_keeps_its_command_across_a_blank_line():
    body = "- **16:10** rollback of all tape servers:\n\n      dnf downgrade -y taped-5.1 taped-lib-5.1\n\nDone.\n"
    assert any("rollback of all tape servers: dnf downgrade -y taped-5.1" in u for u in evidence_units(body))


def test_a_line_ending_in_a_colon_keeps_the_command_on_the_next_line():
    body = "Archive logs were never deleted. Freed space with:\nRMAN> DELETE NOPROMPT ARCHIVELOG ALL;\n"
    assert "Freed space with: RMAN> DELETE NOPROMPT ARCHIVELOG ALL;" in evidence_units(body)


def test_a_two_word_signature_is_no_evidence_but_a_short_command_is():
    units = evidence_units("More than 11,000 failures in the last hour.\nsystemctl restart fts\nADCoS shifter\n")
    assert "ADCoS shifter" not in units
    assert "systemctl restart fts" in units


def test_a_unit_repeated_by_an_overlapping_chunk_is_shown_once():
    line = "sw-core-b came back from the reboot with MTU 1500, the 9214 was never saved."
    units = ["Jumbo frames were enabled on the storage VLAN last week.", line, "ping -M do -s 8972 fails. " + line,
             "The fix on sw-core-b: copy running-config startup-config so the MTU 9214 survives a reboot.",
             "Storage traffic resumed at 00:40."]
    kept = [u.text for u in top_units(score_units("What was done on sw-core-b so the MTU survives a reboot?",
                                                  [units], None), 0)]
    assert len(kept) == 3 and sum(line in k for k in kept) == 1
