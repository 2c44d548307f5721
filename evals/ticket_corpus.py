"""A deterministic synthetic JSON Lines export of many small operations tickets (bulk-ingest benchmark).

Each line is one ticket as :mod:`ingestion.loaders.jsonl` reads it: ``id``, ``title``,
``author``, ``assignee``, ``status``, ``site``, ``labels``, ``created``, ``updated``, ``priority`` and a
``text`` of two to four sentences, about 540 bytes per line on average. Every ticket is
built from its own seeded random stream, so the file is the same for the same seed, and
the texts differ (host names, numbers, error strings, sentence choice) so that neither the
manifest nor the embedder sees duplicates.

usage: python -m evals.ticket_corpus OUT.jsonl [--records 100000] [--seed 23]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
from pathlib import Path

_SERVICES = ("dCache", "FTS3", "HTCondor", "CVMFS", "Squid", "XRootD", "ARC-CE", "Rucio", "EOS", "perfSONAR")
_ERRORS = ("SRM_AUTHORIZATION_FAILURE", "Connection timed out", "TRANSFER_CHECKSUM_MISMATCH", "No space left on device",
           "Permission denied (publickey)", "SSL handshake failed", "CERTIFICATE_VERIFY_FAILED", "HTTP 503",
           "Too many open files", "stale file handle", "job held: memory exceeded", "gridftp: 530 Login incorrect")
_ACTIONS = ("restarted {svc} on {host}", "drained {host} and rebooted it", "renewed the host certificate on {host}",
            "cleared the {svc} cache on {host}", "raised the file-descriptor limit of {svc} to {num}",
            "moved {num} pending transfers to {host}", "rolled back {svc} to the previous release on {host}",
            "added {num} GB to the pool behind {host}", "re-synced the CRLs on {host}")
_SYMPTOMS = ("Users report {err} when writing to {host} since {time}.",
             "{svc} on {host} logs {err} for about {pct}% of requests.",
             "Monitoring shows {err} on {host}; {num} jobs failed in the last hour.",
             "Since {time} the {svc} door on {host} answers {err}.",
             "Transfers from {site2} to {host} fail with {err} (about {num} per minute).")
_FOLLOWUPS = ("Checked the logs under /var/log/{svcl}/ and found nothing else unusual.",
              "The problem did not come back after {num} minutes of observation.",
              "Opened a vendor case; waiting for an answer before closing.",
              "Same root cause as ticket OPS-{ref}; the checklist has been updated.",
              "Affected VO: {vo}. Downtime declared in GOCDB for {num} minutes.",
              "Run `systemctl status {svcl}` on {host} if it happens again and attach the output.")
_AUTHORS = ("Lena Haas", "Richard Osei", "Mira Novak", "Tomás Ruiz", "Aiko Tanaka", "Jon Berg", "Priya Nair")
_STATUSES = ("open", "in progress", "waiting for reply", "solved", "closed", "verified")
_SITES = ("NORDLAB-T2", "EAST-T1", "ALPINE-T2", "COAST-T3")
_VOS = ("atlas", "cms", "lhcb", "alice", "belle")
_PRIORITIES = ("low", "medium", "high", "urgent")


def _host(rng: random.Random) -> str:
    kind = rng.choice(("wn", "se", "ce", "fts", "squid", "door", "pool"))
    return f"{kind}-{rng.choice('abcdef')}{rng.randint(1, 99):02d}.grid.lab.example"


def ticket(index: int, seed: int = 23) -> dict[str, object]:
    """Ticket number ``index`` (0-based) of the corpus drawn with ``seed``: a JSON-ready dict."""
    rng = random.Random(f"{seed}:{index}")
    svc = rng.choice(_SERVICES)
    host = _host(rng)
    fill = {"svc": svc, "svcl": svc.lower(), "host": host, "err": rng.choice(_ERRORS),
            "site2": rng.choice(_SITES), "vo": rng.choice(_VOS),
            "ref": rng.randint(100, 99999), "pct": rng.randint(1, 99),
            "time": f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"}
    created = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=rng.randint(0, 60 * 24 * 450))
    updated = created + dt.timedelta(minutes=rng.randint(5, 60 * 24 * 10))

    def say(template: str) -> str:  # each sentence draws its own number
        return template.format(**{**fill, "num": rng.randint(2, 480)})

    sentences = [say(rng.choice(_SYMPTOMS)), f"Fix: {say(rng.choice(_ACTIONS))}."]
    sentences += [say(f) for f in rng.sample(_FOLLOWUPS, rng.randint(0, 2))]
    return {
        "id": f"TCK-{index + 1:06d}",
        "title": f"{svc}: {fill['err']} on {host.split('.')[0]}",
        "author": rng.choice(_AUTHORS),
        "assignee": rng.choice(_AUTHORS),
        "status": rng.choice(_STATUSES),
        "site": rng.choice(_SITES),
        "labels": sorted(rng.sample(("storage", "transfers", "batch", "network", "security", "monitoring"), 2)),
        "priority": rng.choice(_PRIORITIES),
        "created": created.isoformat(timespec="seconds"),
        "updated": updated.isoformat(timespec="seconds"),
        "text": " ".join(sentences),
    }


def write_tickets(path: Path, records: int, seed: int = 23) -> int:
    """Write ``records`` tickets to ``path`` as JSON Lines (parents created); returns the bytes written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for i in range(records):
            out.write(json.dumps(ticket(i, seed), ensure_ascii=False) + "\n")
    return path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=23)
    args = parser.parse_args(argv)
    size = write_tickets(args.out, args.records, args.seed)
    print(f"{args.records} tickets, {size} bytes ({size / max(1, args.records):.0f} bytes/record) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
