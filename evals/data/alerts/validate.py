#!/usr/bin/env python3
"""Check the alert-history evaluation set (``alerts.jsonl``) against the sample corpus.

Run from the repository root (or anywhere)::

    .venv/bin/python evals/data/alerts/validate.py

Standard library and ``evals/set_checks.py`` only. Every line of ``alerts.jsonl`` is checked:

- exactly the keys ``id, payload, history, fix_span, source, note``; ids unique and ``aNN``;
- ``payload`` is an Alertmanager webhook body, version "4": ``version, groupKey, truncatedAlerts,
  status, receiver, groupLabels, commonLabels, commonAnnotations, externalURL, alerts`` with the
  right types, status "firing", ``truncatedAlerts`` 0, exactly one alert; the alert has ``status``
  "firing", ``labels`` (``alertname``, ``severity``, ``instance``, ``job`` and ``host`` or ``node``),
  ``annotations`` (``summary``), ``startsAt`` (RFC 3339, after the corpus' last event),
  ``endsAt`` "0001-01-01T00:00:00Z", ``generatorURL``, ``fingerprint`` (16 lower-case hex digits,
  equal to Prometheus' FNV-1a label-set fingerprint of the labels, unique in the file);
  ``groupLabels`` is a subset of the labels and is named in ``groupKey``, ``commonLabels`` /
  ``commonAnnotations`` equal the single alert's labels / annotations;
- ``history: true``: ``fix_span`` is a non-empty string that occurs verbatim in the text of the
  ``source`` document's entry (ELOG entry by MID, Jira issue by key, GGUS row by ticket id, shift
  section by "<date> <shift>", post-mortem by front-matter id), and, when the project's own loaders
  can be imported, also in the text the ingester builds for that id; it occurs (case-insensitively)
  in none of the payload's labels, annotations, group/common labels or the decoded generatorURL; the
  alert's host (``host`` label, else ``node``) is named in the source entry;
- ``history: false``: ``fix_span`` and ``source`` are null. The alert "names a real host" when its
  host occurs in the corpus; otherwise neither its host nor its ``service`` label may occur in it;
- ``note`` is a non-empty string;
- counts: at least 14 alerts, 9 with history, 5 without, 3 of those naming a real host.

Prints one line per failure and ``N alerts OK`` at the end; exit status 1 on any failure.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import unquote_plus

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CORPUS = HERE.parent / "corpus"
ALERTS = HERE / "alerts.jsonl"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from evals.set_checks import read_jsonl  # noqa: E402

ROW_KEYS = {"id", "payload", "history", "fix_span", "source", "note"}
PAYLOAD_TYPES = {
    "version": str, "groupKey": str, "truncatedAlerts": int, "status": str, "receiver": str,
    "groupLabels": dict, "commonLabels": dict, "commonAnnotations": dict, "externalURL": str,
    "alerts": list,
}
ALERT_TYPES = {
    "status": str, "labels": dict, "annotations": dict, "startsAt": str, "endsAt": str,
    "generatorURL": str, "fingerprint": str,
}
REQUIRED_LABELS = ("alertname", "severity", "instance", "job")
SEVERITIES = {"critical", "warning", "info"}
ZERO_TIME = "0001-01-01T00:00:00Z"
#: The corpus' last event is on 2026-01-30; alerts must fire after it.
AFTER = datetime(2026, 2, 1, tzinfo=timezone.utc)
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")
MIN_ALERTS, MIN_HISTORY, MIN_NO_HISTORY, MIN_NAMES_REAL = 14, 9, 5, 3


# --------------------------------------------------------------------------- corpus entries

def read_text(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")  # facility.elog is ISO-8859-1


def elog_entries(text: str) -> dict[str, str]:
    entries: dict[str, str] = {}
    for chunk in re.split(r"(?m)^(?=\$@MID@\$:)", text):
        match = re.match(r"\$@MID@\$:\s*(\d+)", chunk)
        if match:
            entries[match.group(1)] = chunk
    return entries


def jira_entries(text: str) -> dict[str, str]:
    entries: dict[str, str] = {}
    for issue in json.loads(text).get("issues", []):
        fields = issue.get("fields") or {}
        parts = [issue.get("key") or "", fields.get("summary") or "", fields.get("description") or ""]
        for comment in (fields.get("comment") or {}).get("comments") or []:
            parts.append(comment.get("body") or "")
        entries[issue["key"]] = "\n".join(parts)
    return entries


def csv_entries(text: str) -> dict[str, str]:
    rows = csv.DictReader(io.StringIO(text, newline=""))
    return {row["ticket_id"]: "\n".join(v or "" for v in row.values()) for row in rows}


def shift_entries(text: str) -> dict[str, str]:
    entries: dict[str, str] = {}
    key = None
    for line in text.splitlines(keepends=True):
        match = re.match(r"=== Shift (\S+) (\S+) ", line)
        if match:
            key = f"{match.group(1)} {match.group(2)}"
            entries[key] = ""
        if key is not None:
            entries[key] += line
    return entries


def markdown_entries(path: Path, text: str) -> dict[str, str]:
    key = path.stem
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    if match:
        for line in match.group(1).splitlines():
            if line.startswith("id:"):
                key = line[3:].strip().strip("'\"") or key
    return {key: text}


def corpus_entries(errors: list[str]) -> tuple[dict[str, str], str]:
    """doc id -> entry text for every document of the corpus, and the whole corpus' text."""
    docs: dict[str, str] = {}
    whole = []
    if not CORPUS.is_dir():
        errors.append(f"corpus folder missing: {CORPUS}")
        return docs, ""
    for path in sorted(p for p in CORPUS.rglob("*") if p.is_file()):
        rel = path.relative_to(CORPUS).as_posix()
        text = read_text(path)
        whole.append(text)
        if path.suffix == ".elog":
            entries = elog_entries(text)
        elif path.suffix == ".json":
            entries = jira_entries(text)
        elif path.suffix == ".csv":
            entries = csv_entries(text)
        elif path.suffix == ".log":
            entries = shift_entries(text)
        elif path.suffix == ".md":
            entries = markdown_entries(path, text)
        else:
            continue
        for key, entry in entries.items():
            docs[f"{rel}#{key}"] = entry
    return docs, "\n".join(whole)


def ingested_texts() -> dict[str, str] | None:
    """doc id -> the text the project's ingester builds, or None when its loaders cannot be
    imported (e.g. run outside the project's virtual environment)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    try:
        from evals.set_checks import load_corpus
    except Exception:  # noqa: BLE001 - optional cross-check
        return None
    problems: list[str] = []
    docs = load_corpus(CORPUS, (1, 10_000), problems)
    return docs if not problems else None


# --------------------------------------------------------------------------- payload checks

def fingerprint(labels: dict[str, str]) -> str:
    """Prometheus ``model.LabelSet.Fingerprint``: FNV-1a 64 over sorted name/value pairs, each
    followed by the 0xff separator byte, printed as 16 hex digits."""
    h = 14695981039346656037
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode("utf-8") + b"\xff":
                h ^= byte
                h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def str_map(where: str, name: str, value: object, errors: list[str]) -> bool:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):  # type: ignore[union-attr]
        errors.append(f"{where}: {name} must map strings to strings")
        return False
    return True


def parse_time(value: str) -> datetime | None:
    if not RFC3339.fullmatch(value):
        return None
    text = value.replace("Z", "+00:00")
    match = re.match(r"(.*T\d{2}:\d{2}:\d{2})(\.\d+)?(.*)", text)
    if match and match.group(2):  # fromisoformat takes at most 6 fraction digits
        text = match.group(1) + match.group(2)[:7] + match.group(3)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def check_payload(where: str, payload: object, fingerprints: dict[str, str],
                  errors: list[str]) -> dict | None:
    """Shape of the webhook body; returns its single alert when it is usable."""
    if not isinstance(payload, dict):
        errors.append(f"{where}: payload must be an object")
        return None
    ok = True
    for key, typ in PAYLOAD_TYPES.items():
        if key not in payload:
            errors.append(f"{where}: payload lacks {key!r}")
            ok = False
        elif not isinstance(payload[key], typ) or (typ is int and isinstance(payload[key], bool)):
            errors.append(f"{where}: payload.{key} must be {typ.__name__}")
            ok = False
    extra = set(payload) - set(PAYLOAD_TYPES)
    if extra:
        errors.append(f"{where}: payload has unexpected keys {sorted(extra)}")
    if not ok:
        return None
    if payload["version"] != "4":
        errors.append(f"{where}: payload.version must be \"4\"")
    if payload["truncatedAlerts"] != 0:
        errors.append(f"{where}: payload.truncatedAlerts must be 0")
    if payload["status"] != "firing":
        errors.append(f"{where}: payload.status must be \"firing\"")
    for key in ("receiver", "groupKey"):
        if not payload[key].strip():
            errors.append(f"{where}: payload.{key} is empty")
    if not payload["externalURL"].startswith(("http://", "https://")):
        errors.append(f"{where}: payload.externalURL must be an http(s) URL")
    for key in ("groupLabels", "commonLabels", "commonAnnotations"):
        ok = str_map(where, f"payload.{key}", payload[key], errors) and ok
    if len(payload["alerts"]) != 1:
        errors.append(f"{where}: payload.alerts must hold exactly one alert")
        return None
    alert = payload["alerts"][0]
    if not isinstance(alert, dict):
        errors.append(f"{where}: alerts[0] must be an object")
        return None
    for key, typ in ALERT_TYPES.items():
        if key not in alert:
            errors.append(f"{where}: alerts[0] lacks {key!r}")
            ok = False
        elif not isinstance(alert[key], typ):
            errors.append(f"{where}: alerts[0].{key} must be {typ.__name__}")
            ok = False
    extra = set(alert) - set(ALERT_TYPES)
    if extra:
        errors.append(f"{where}: alerts[0] has unexpected keys {sorted(extra)}")
    if not ok:
        return None
    labels, annotations = alert["labels"], alert["annotations"]
    if not (str_map(where, "alerts[0].labels", labels, errors)
            and str_map(where, "alerts[0].annotations", annotations, errors)):
        return None
    if alert["status"] != "firing":
        errors.append(f"{where}: alerts[0].status must be \"firing\"")
    for name in REQUIRED_LABELS:
        if not labels.get(name, "").strip():
            errors.append(f"{where}: label {name!r} missing or empty")
    if not (labels.get("host") or labels.get("node")):
        errors.append(f"{where}: alert needs a 'host' (or 'node') label")
    if labels.get("severity") and labels["severity"] not in SEVERITIES:
        errors.append(f"{where}: severity {labels['severity']!r} not in {sorted(SEVERITIES)}")
    if not annotations.get("summary", "").strip():
        errors.append(f"{where}: annotation 'summary' missing or empty")
    starts = parse_time(alert["startsAt"])
    if starts is None or starts.tzinfo is None:
        errors.append(f"{where}: startsAt {alert['startsAt']!r} is not RFC 3339 with a zone")
    elif starts <= AFTER:
        errors.append(f"{where}: startsAt {alert['startsAt']} is not after the corpus events")
    if alert["endsAt"] != ZERO_TIME:
        errors.append(f"{where}: endsAt must be {ZERO_TIME}")
    if not alert["generatorURL"].startswith(("http://", "https://")):
        errors.append(f"{where}: generatorURL must be an http(s) URL")
    fp = alert["fingerprint"]
    if not re.fullmatch(r"[0-9a-f]{16}", fp):
        errors.append(f"{where}: fingerprint {fp!r} is not 16 lower-case hex digits")
    else:
        if fp != fingerprint(labels):
            errors.append(f"{where}: fingerprint {fp} is not the labels' fingerprint {fingerprint(labels)}")
        if fp in fingerprints:
            errors.append(f"{where}: fingerprint {fp} already used by {fingerprints[fp]}")
        fingerprints[fp] = where
    group = payload["groupLabels"]
    if "alertname" not in group:
        errors.append(f"{where}: groupLabels lacks alertname")
    for name, value in group.items():
        if labels.get(name) != value:
            errors.append(f"{where}: groupLabels.{name} differs from the alert's label")
        if f'{name}="{value}"' not in payload["groupKey"]:
            errors.append(f"{where}: groupKey does not name group label {name}")
    if payload["commonLabels"] != labels:
        errors.append(f"{where}: commonLabels must equal the single alert's labels")
    if payload["commonAnnotations"] != annotations:
        errors.append(f"{where}: commonAnnotations must equal the single alert's annotations")
    return alert


def alert_texts(payload: dict, alert: dict) -> list[str]:
    """Everything the alert says about itself: label and annotation values (alert, group and
    common), and the decoded generatorURL."""
    texts = []
    for mapping in (alert["labels"], alert["annotations"], payload["groupLabels"],
                    payload["commonLabels"], payload["commonAnnotations"]):
        texts.extend(mapping.values())
    texts.append(unquote_plus(alert["generatorURL"]))
    return texts


# --------------------------------------------------------------------------- main

def main() -> int:
    errors: list[str] = []
    docs, corpus_text = corpus_entries(errors)
    corpus_lower = corpus_text.lower()
    ingested = ingested_texts()
    seen_ids: set[str] = set()
    fingerprints: dict[str, str] = {}
    n_rows = n_history = n_none = n_real = 0
    for lineno, row in read_jsonl(ALERTS, errors):
        n_rows += 1
        where = f"alerts.jsonl:{lineno} ({row.get('id', '?')})"
        if set(row) != ROW_KEYS:
            errors.append(f"{where}: keys {sorted(row)} != {sorted(ROW_KEYS)}")
            continue
        rid = row["id"]
        if not isinstance(rid, str) or not re.fullmatch(r"a\d{2,3}", rid):
            errors.append(f"{where}: id must look like a01")
        elif rid in seen_ids:
            errors.append(f"{where}: duplicate id {rid}")
        else:
            seen_ids.add(rid)
        if not isinstance(row["note"], str) or not row["note"].strip():
            errors.append(f"{where}: note must be a non-empty string")
        alert = check_payload(where, row["payload"], fingerprints, errors)
        history, span, source = row["history"], row["fix_span"], row["source"]
        if not isinstance(history, bool):
            errors.append(f"{where}: history must be true or false")
            continue
        if alert is None:
            continue
        labels = alert["labels"]
        host = labels.get("host") or labels.get("node") or ""
        if history:
            n_history += 1
            if not isinstance(span, str) or not span.strip() or span != span.strip():
                errors.append(f"{where}: fix_span must be a non-empty string without outer white space")
                continue
            if not isinstance(source, str) or source not in docs:
                errors.append(f"{where}: source {source!r} is not a document id of the corpus")
                continue
            if span not in docs[source]:
                errors.append(f"{where}: fix_span is not in the text of {source}")
            if ingested is not None:
                if source not in ingested:
                    errors.append(f"{where}: the ingester builds no document {source}")
                elif span not in ingested[source]:
                    errors.append(f"{where}: fix_span is not in the ingested text of {source}")
            leaked = [t for t in alert_texts(row["payload"], alert) if span.lower() in t.lower()]
            if leaked:
                errors.append(f"{where}: fix_span appears in the alert itself ({leaked[0]!r})")
            if host and host.lower() not in docs[source].lower():
                errors.append(f"{where}: host {host!r} is not named in {source}")
        else:
            n_none += 1
            if span is not None or source is not None:
                errors.append(f"{where}: history false needs fix_span and source null")
            if host and host.lower() in corpus_lower:
                n_real += 1
            else:
                service = labels.get("service", "")
                if service and service.lower() in corpus_lower:
                    errors.append(f"{where}: host is absent from the corpus but service {service!r} is not")
    if n_rows < MIN_ALERTS:
        errors.append(f"alerts.jsonl: {n_rows} alerts, need at least {MIN_ALERTS}")
    if n_history < MIN_HISTORY:
        errors.append(f"alerts.jsonl: {n_history} alerts with history, need at least {MIN_HISTORY}")
    if n_none < MIN_NO_HISTORY:
        errors.append(f"alerts.jsonl: {n_none} alerts without history, need at least {MIN_NO_HISTORY}")
    if n_real < MIN_NAMES_REAL:
        errors.append(f"alerts.jsonl: {n_real} no-history alerts name a real host, need at least {MIN_NAMES_REAL}")
    for err in errors:
        print(err)
    if errors:
        return 1
    note = "" if ingested is not None else " (ingester cross-check skipped: project loaders not importable)"
    print(f"{n_rows} alerts OK: {n_history} with history, {n_none} without "
          f"({n_real} naming a real host){note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
