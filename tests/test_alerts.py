"""The Alertmanager receiver (issue 45, item 1): a notification in, a past-incident answer kept by
fingerprint, listed per key, posted to a chat webhook; bad notifications are 400s naming the field.
The end-to-end test runs a real Alertmanager (Debian's ``prometheus-alertmanager``) on 127.0.0.1
whose receiver is OpsCopilot under a real uvicorn."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import threading
import time
from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient

from copilot.alerts.forward import ChatWebhook
from copilot.alerts.question import Alert, alert_host, alert_problem, alert_question, alert_words
from copilot.alerts.table import AlertTable
from copilot.answer.grounding import assess, not_found_answer
from copilot.api.app import create_app
from copilot.api.server import ServerThread, free_port
from copilot.config import Settings
from copilot.search.entities import DocumentText
from copilot.service import CopilotService
from ingestion.stores.database import SqliteDatabase

KEYS_TOML = """
[[keys]]
name = "alerts"
key = "am-key"

[[keys]]
name = "ops"
key = "ops-key"
doc_types = ["elog", "shiftlog"]
"""
AM = {"Authorization": "Bearer am-key"}
OPS = {"Authorization": "Bearer ops-key"}


def notification(*alerts: dict, status: str = "firing") -> dict:
    return {"version": "4", "groupKey": "{}:{alertname=\"X\"}", "truncatedAlerts": 0, "status": status,
            "receiver": "opscopilot", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://127.0.0.1:9093", "alerts": list(alerts)}


def alert(fingerprint: str = "0a1b2c3d4e5f6a7b", status: str = "firing", **labels: str) -> dict:
    return {"status": status, "labels": {"alertname": "DCachePoolReadOnly", "instance": "dc-pool-07:9100", **labels},
            "annotations": {"summary": "dCache pool dc-pool-07 went read-only"},
            "startsAt": "2026-03-02T03:12:00Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph", "fingerprint": fingerprint}


# -- the question ---------------------------------------------------------------------------------
def test_the_question_names_what_the_records_can_hold():
    fired = Alert("f", "firing", {"alertname": "NodeFilesystemAlmostOutOfSpace", "job": "node_exporter",
                                  "instance": "wn-042.grid.lab.example:9100"},
                  {"summary": "Filesystem /var/lib/condor on wn-042 has 3% left (node_filesystem_avail_bytes)"})
    question = alert_question(fired)
    assert "wn-042" in question and "/var/lib/condor" in question and "What fixed it" in question
    assert "node_filesystem_avail_bytes" not in question and "node_exporter" not in question
    assert "grid.lab.example" not in question and "9100" not in question
    assert alert_words("CephOSDNearFull") == "Ceph OSD Near Full"
    tls = Alert("f", "firing", {"alertname": "CertificateExpiringSoon", "instance": "xrd-gw02.grid.lab.example:1094"},
                {"summary": "TLS certificate on xrd-gw02.grid.lab.example:1094 (dCache xrd-gw02Domain) expires; "
                            "replica on pg-01.grid.lab.example:5432, osd.37"})
    assert "TLS certificate on xrd-gw02 (dCache xrd-gw02) expires; replica on pg-01, osd.37" in alert_question(tls)
    assert alert_host({"instance": "https://[::1]:9100/metrics"}) == "::1"
    assert alert_host({"instance": "10.1.2.3:9100"}) == "10.1.2.3"
    assert alert_question(Alert("f", "firing", {"alertname": "HTCondorScheddDown", "host": "htc-ce02"})) == \
        "HT Condor Schedd Down on htc-ce02. What fixed it when this happened before, and when was that?"


def test_the_problem_words_leave_out_the_host_and_what_every_alert_says():
    fired = Alert("f", "firing", {"alertname": "NodeMemoryHigh", "instance": "br-01:9100"},
                  {"summary": "Memory usage on br-01 above 95% for 15 minutes"})
    assert alert_problem(fired) == ("memory",)


def test_a_record_of_the_host_about_another_problem_is_no_earlier_occurrence():
    """The grounding rule an alert's question adds: a source about the host must name one of the
    problem's words (stemmed), else "not found" before the model runs."""
    flaps = DocumentText("elog#7", "LHCONE link flaps on border router br-01: et-0/0/2 flapped 7 times")
    question = "Memory usage on br-01. What fixed it when this happened before, and when was that?"
    refused = assess(question, [flaps], [], None, problem=("memory",))
    assert not refused.answerable and "no entry about br-01 records this problem (memory)" in \
        not_found_answer(refused, ["LHCONE link flaps"])
    assert assess(question, [flaps], [], None, problem=("flapping",)).answerable  # "flapping" meets "flaps"
    assert assess(question, [flaps], [], None).answerable  # no problem words: the entity rule alone


def test_the_chat_message_links_the_sources_in_the_channels_style():
    fired = Alert("f", "firing", {"alertname": "DCachePoolReadOnly", "instance": "dc-pool-07:9100"}, {},
                  "2026-03-02T03:12:00+00:00")
    answer = {"answer": "Restarted with `systemctl restart dcache` [1].", "not_found": False,
              "sources": [{"n": 1, "doc_id": "logbooks/operations.elog#2", "title": "dc-pool-07 back"}],
              "destructive": [{"command": "rm -rf /pool"}], "unverified": [{"literal": "curl x | sh"}]}
    url = "http://h/v1/documents/logbooks%2Foperations.elog%232"
    markdown = ChatWebhook("http://hook").message(fired, answer, lambda d: url)
    assert f"[1] [dc-pool-07 back]({url})" in markdown and "DCachePoolReadOnly on dc-pool-07" in markdown
    assert "⚠ Destructive" in markdown and "`rm -rf /pool`" in markdown
    assert "Not in the sources — check before running: `curl x | sh`" in markdown
    assert f"<{url}|dc-pool-07 back>" in ChatWebhook("http://hook", "slack").message(fired, answer, lambda d: url)
    sneaky = Alert("f", "firing", {"alertname": "@channel [urgent: click](http://phish.example/login)"}, {}, "t")
    head = ChatWebhook("http://hook").message(sneaky, answer, lambda d: url).splitlines()[0]
    assert "@channel" not in head and "](" not in head and "urgent: click" in head


# -- the table ------------------------------------------------------------------------------------
def test_the_table_keeps_one_answer_per_occurrence_and_scope_and_is_bounded(tmp_path):
    table = AlertTable(SqliteDatabase(tmp_path), keep=3)
    first = table.claim("", "a", "t1", None, {"alertname": "A"})
    assert first and table.claim("", "a", "t1", None, {}) is None  # a repeat while answering
    assert table.finish("", "a", first, "answered", answer={"answer": "x", "sources": [{"doc_id": "d#1"}]})
    assert table.claim("", "a", "t1", None, {}) is None  # a repeat once answered
    second = table.claim("", "a", "t2", None, {"alertname": "A"})  # fired again: a new occurrence
    assert second and not table.finish("", "a", first, "answered", answer={})  # the old answer is void
    table.finish("", "a", second, "failed", error="boom")
    assert table.claim("", "a", "t2", None, {"alertname": "A"})  # a failed answer is tried again
    other = table.claim("scope-x", "a", "t2", "ops", {"alertname": "A"})  # another scope: its own row
    assert other and table.get("", "a").claim != other
    assert not table.resolve("scope-y", "a", None) and table.get("", "a").record.get("status") != "resolved"
    for name in "bcde":
        time.sleep(0.01)
        table.claim("", name, "t1", None, {})
    rows, total = table.page(0, 10, "")
    assert total == 3 and [r.fingerprint for r in rows] == ["e", "d", "c"]  # bounded per scope ...
    assert table.page(0, 10, "scope-x")[1] == 1 and table.page(0, 10)[1] == 4  # ... the other scope's kept
    table.finish("", "e", table.get("", "e").claim, "answered", answer={"sources": [{"doc_id": "gone#1"}]})
    assert table.forget_document("gone#1") == 1 and table.get("", "e") is None


# -- the route, no model --------------------------------------------------------------------------
@pytest.fixture
def client(light_store, tmp_path, restore_logging):
    (tmp_path / "keys.toml").write_text(KEYS_TOML)
    settings = Settings(data_dir=tmp_path / "app", keys_file=tmp_path / "keys.toml", public_reads=True,
                        _env_file=None)
    with TestClient(create_app(settings, CopilotService(settings, light_store, None))) as c:
        yield c


def wait_for(client: TestClient, fingerprint: str, headers: dict, state: str = "answered", timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = client.get(f"/v1/alerts/{fingerprint}", headers=headers)
        if got.status_code == 200 and got.json()["state"] != "answering":
            return got.json()
        time.sleep(0.1)
    raise AssertionError(f"{fingerprint} still answering after {timeout_s} s")


@pytest.mark.parametrize("body, param", [
    ({**notification(alert()), "version": "3"}, "version"),
    ({**notification(alert()), "alerts": []}, "alerts"),
    (notification({**alert(), "fingerprint": "../x"}), "alerts.0.fingerprint"),
    (notification({k: v for k, v in alert().items() if k != "labels"}), "alerts.0.labels"),
    (notification({**alert(), "startsAt": "yesterday"}), "alerts.0.startsAt"),
    (notification({**alert(), "status": "pending"}), "alerts.0.status"),
])
def test_a_malformed_notification_is_a_400_naming_the_field(client, body, param):
    response = client.post("/v1/alerts/alertmanager", json=body, headers=AM)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert client.get("/v1/alerts", headers=AM).json()["total"] == 0  # nothing kept


def test_the_receiver_needs_a_key_even_with_public_reads(client):
    assert client.post("/v1/alerts/alertmanager", json=notification(alert())).status_code == 401
    assert client.post("/v1/alerts/alertmanager", json=notification(alert()),
                       headers={"Authorization": "Bearer nope"}).status_code == 403


def test_a_failed_answer_is_kept_with_its_reason_and_retried_by_the_next_notification(client):
    first = client.post("/v1/alerts/alertmanager", json=notification(alert()), headers=AM)
    assert first.status_code == 202 and first.json()["answering"] == ["0a1b2c3d4e5f6a7b"]
    kept = wait_for(client, "0a1b2c3d4e5f6a7b", AM)
    assert kept["state"] == "failed" and kept["error"]  # no model here: the reason is kept
    assert "dc-pool-07" in kept["question"] and kept["labels"]["instance"] == "dc-pool-07:9100"
    again = client.post("/v1/alerts/alertmanager", json=notification(alert()), headers=AM).json()
    assert again["answering"] == ["0a1b2c3d4e5f6a7b"]
    wait_for(client, "0a1b2c3d4e5f6a7b", AM)
    resolved = client.post("/v1/alerts/alertmanager", headers=AM, json=notification(
        {**alert(status="resolved"), "endsAt": "2026-03-02T04:00:00Z"}, status="resolved")).json()
    assert resolved == {"answering": [], "kept": [], "resolved": ["0a1b2c3d4e5f6a7b"], "deferred": []}
    shown = client.get("/v1/alerts/0a1b2c3d4e5f6a7b", headers=AM).json()
    assert shown["status"] == "resolved" and shown["ends_at"].startswith("2026-03-02T04:00")
    assert client.get("/healthz").status_code == 200


def test_keys_of_other_scopes_neither_see_nor_touch_each_others_alerts(client):
    """Alerts are kept per read scope: the ops key's notification of a fingerprint the full key sent
    is its own row (answered for it, not 'kept'), and its 'resolved' does not resolve the other."""
    client.post("/v1/alerts/alertmanager", json=notification(alert("00000000000000ee")), headers=AM)
    wait_for(client, "00000000000000ee", AM)
    mine = client.post("/v1/alerts/alertmanager", json=notification(alert("00000000000000ee")), headers=OPS).json()
    assert mine["answering"] == ["00000000000000ee"]
    wait_for(client, "00000000000000ee", OPS)
    resolved = client.post("/v1/alerts/alertmanager", headers=OPS, json=notification(
        alert("00000000000000ee", status="resolved"), status="resolved")).json()
    assert resolved["resolved"] == ["00000000000000ee"]
    assert client.get("/v1/alerts/00000000000000ee", headers=OPS).json()["status"] == "resolved"
    assert client.get("/v1/alerts/00000000000000ee", headers=AM).json()["status"] == "firing"  # its own row


def test_a_repeated_fingerprint_counts_once_and_a_blank_alert_is_not_asked(client):
    twice = client.post("/v1/alerts/alertmanager", headers=AM, json=notification(
        alert("00000000000000f1"), alert("00000000000000f1"))).json()
    assert twice["answering"] == ["00000000000000f1"]
    blank = {**alert("00000000000000f2", alertname=" \t", instance=""), "annotations": {}}
    client.post("/v1/alerts/alertmanager", headers=AM, json=notification(blank))
    kept = wait_for(client, "00000000000000f2", AM)
    assert kept["state"] == "failed" and "names nothing to search" in kept["error"]


def test_a_key_sees_the_alerts_it_sent(client):
    client.post("/v1/alerts/alertmanager", json=notification(alert("00000000000000aa")), headers=OPS)
    client.post("/v1/alerts/alertmanager", json=notification(alert("00000000000000bb")), headers=AM)
    wait_for(client, "00000000000000aa", OPS)
    wait_for(client, "00000000000000bb", AM)
    assert "00000000000000bb" not in [a["fingerprint"] for a in client.get("/v1/alerts", headers=OPS).json()["alerts"]]
    assert client.get("/v1/alerts/00000000000000bb", headers=OPS).status_code == 404
    assert {a["fingerprint"] for a in client.get("/v1/alerts", headers=AM).json()["alerts"]} >= \
        {"00000000000000aa", "00000000000000bb"}  # a key that reads everything sees every alert


# -- end to end: a real Alertmanager, the embedded model, a chat webhook --------------------------
class _Hook(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def chat_hook():
    _Hook.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hooks/opscopilot", _Hook.received
    server.shutdown()


@pytest.fixture
def alertmanager(tmp_path):
    """``(receiver_url) -> alertmanager base URL``: a real Alertmanager on 127.0.0.1 whose one
    receiver posts to ``receiver_url`` with the key ``am-key``."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed (apt-get install prometheus-alertmanager)")
    procs = []

    def start(receiver_url: str) -> str:
        port = free_port()
        config = tmp_path / "alertmanager.yml"
        config.write_text(f"""
route:
  receiver: opscopilot
  group_by: [alertname, instance]
  group_wait: 1s
  group_interval: 2s
  repeat_interval: 3s
receivers:
  - name: opscopilot
    webhook_configs:
      - url: {receiver_url}
        send_resolved: true
        http_config:
          authorization:
            credentials: am-key
""")
        procs.append(subprocess.Popen([binary, f"--config.file={config}", f"--storage.path={tmp_path / 'am'}",
                                       f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
                                       "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(base + "/-/ready", timeout=1).status_code == 200:
                    return base
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError("Alertmanager did not start: " + procs[-1].stderr.read(2000).decode())

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_a_real_alertmanager_notification_becomes_a_kept_past_incident_answer(sample_service, tmp_path, alertmanager,
                                                                              chat_hook):
    hook_url, posted = chat_hook
    (tmp_path / "keys.toml").write_text(KEYS_TOML)
    settings = Settings(data_dir=tmp_path / "app", keys_file=tmp_path / "keys.toml", max_new_tokens=24,
                        max_sources=3, alerts_webhook_url=hook_url, _env_file=None)
    service = CopilotService(settings, sample_service.store, sample_service.models.engine)
    with ServerThread(create_app(settings, service)) as server:
        am = alertmanager(server.url + "/v1/alerts/alertmanager")
        fired = time.monotonic()
        response = httpx.post(am + "/api/v2/alerts", json=[{
            "labels": {"alertname": "DCachePoolReadOnly", "instance": "dc-pool-07.grid.lab.example:9100",
                       "service": "dcache", "severity": "critical"},
            "annotations": {"summary": "dCache pool dc-pool-07 went read-only"},
            "generatorURL": "http://prometheus.example:9090/graph"}])
        assert response.status_code == 200, response.text
        deadline = time.monotonic() + 180
        kept = None
        while time.monotonic() < deadline and kept is None:
            rows = httpx.get(server.url + "/v1/alerts", headers=AM).json()["alerts"]
            kept = next((r for r in rows if r["state"] != "answering"), None)
            time.sleep(0.25)
        assert kept is not None, "no answer kept within 180 s"
        elapsed = time.monotonic() - fired
        assert kept["state"] == "answered", kept
        answer = kept["answer"]
        print(f"\nAlertmanager notification -> kept answer in {elapsed:.1f} s (answer time {kept['answer_s']:.1f} s)")
        doc_ids = [s["doc_id"] for s in answer["sources"]]
        earlier = {"tickets/jira_export.json#OPS-101", "logbooks/operations.elog#1", "logbooks/operations.elog#2"}
        assert doc_ids[0] in earlier, doc_ids  # the earlier occurrence: dc-pool-07's disk failure, set read-only
        assert elapsed <= kept["answer_s"] + 10  # the goal: within the answer time plus 10 s
        # Alertmanager repeats the notification (repeat_interval 3 s): kept, not recomputed
        time.sleep(5)
        again = httpx.get(server.url + f"/v1/alerts/{kept['fingerprint']}", headers=AM).json()
        assert again["received"] == kept["received"] and again["answer"] == answer
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not posted:
            time.sleep(0.2)
        assert posted and "DCachePoolReadOnly on dc-pool-07" in posted[0]["text"]
        assert "/v1/documents/" + quote(doc_ids[0], safe="") in posted[0]["text"]  # the citation as a link
        assert again["forwarded"] is True


@pytest.mark.slow
def test_a_scoped_keys_alert_answer_holds_only_its_documents(sample_service, tmp_path, restore_logging):
    """The key that sends the notification scopes the answer: an ``ops`` key (ELOG and shift logs)
    gets no ticket among the sources, the quotes or the answer, though the tickets hold this incident."""
    (tmp_path / "keys.toml").write_text(KEYS_TOML)
    settings = Settings(data_dir=tmp_path / "app", keys_file=tmp_path / "keys.toml", max_new_tokens=16,
                        max_sources=3, _env_file=None)
    service = CopilotService(settings, sample_service.store, sample_service.models.engine)
    with TestClient(create_app(settings, service)) as client:
        client.post("/v1/alerts/alertmanager", headers=OPS, json=notification(alert("00000000000000cc")))
        client.post("/v1/alerts/alertmanager", headers=AM, json=notification(alert("00000000000000dd")))
        scoped = wait_for(client, "00000000000000cc", OPS, timeout_s=180)
        full = wait_for(client, "00000000000000dd", AM, timeout_s=180)
    assert scoped["state"] == full["state"] == "answered", (scoped, full)
    types = {s["doc_type"] for s in scoped["answer"]["sources"]}
    assert types and types <= {"elog", "shiftlog"}, types
    assert all(q["doc_id"].startswith(("logbooks/", "shiftlogs/")) for q in scoped["answer"]["quotes"])
    assert "OPS-101" not in scoped["answer"]["answer"]
    assert any(s["doc_type"] == "jira" for s in full["answer"]["sources"])  # the tickets are there for others
