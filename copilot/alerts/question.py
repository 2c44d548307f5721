"""The question a firing alert asks of the records: "when has this happened before, and what fixed it?"

An alert does not know the logbook's words: its name is a rule's CamelCase id
(``DCachePoolReadOnly``), its labels name the host, the job and the service, and its summary is
the rule author's sentence. The question is made of what the records can hold: the alert's name
as words, the host as operators write it (its short name: ``dc-pool-07``, not
``dc-pool-07.grid.lab.example:9100``), the service, and the summary without the metric and
label names no entry holds (``node_filesystem_avail_bytes``, ``job="node"``), which "not found"
would otherwise read as a named thing missing from every source
(:func:`copilot.search.entities.question_entities`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Mapping

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from copilot.search.highlights import terms
from copilot.search.literals import token_kind

#: Labels naming the host an alert is about, in order of preference.
HOST_LABELS = ("host", "hostname", "nodename", "node", "instance", "server", "exported_instance")
#: The summary (or description) read (characters): the question stays under the service's limit
#: however long the rule's description is.
MAX_SUMMARY_CHARS = 1000
#: Labels naming the service or job.
SERVICE_LABELS = ("service", "job", "app", "component")
#: Literal kinds of the summary that the records do not hold (metric and label names).
_DROPPED_KINDS = frozenset({"name", "setting"})
#: What every alert rule says of its problem, stemmed: not words that tell one problem from another.
_GENERIC = frozenset(terms("alert firing fired high low critical warning warn down up usage used above below over "
                          "under minutes hours seconds percent instance host node job service server almost soon rate "
                          "ratio count total value threshold exceeded exceeds detected state status since left more "
                          "less too many"))
_DAEMON_ID = re.compile(r"[A-Za-z][\w-]*\.\d+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


@dataclass(frozen=True)
class Alert:
    """One alert of an Alertmanager notification (its webhook fields).

    Attributes:
        starts_at, ends_at: ISO 8601 as Alertmanager sent them (``ends_at`` None while firing).
    """

    fingerprint: str
    status: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)
    starts_at: str = ""
    ends_at: str | None = None
    generator_url: str = ""

    @property
    def name(self) -> str:
        """The alert's name (``alertname``; ``alert`` when unnamed or blank)."""
        return self.labels.get("alertname", "").strip() or "alert"


def short_host(value: str) -> str:
    """The host as operators write it: no scheme, no port, the first label of a DNS name (an IP
    address and a daemon's id such as ``osd.37`` stay whole).
    ``https://dc-pool-07.grid.lab.example:9100/metrics`` → ``dc-pool-07``."""
    host = re.sub(r"^[a-z][a-z0-9+.-]*://", "", value.strip(), flags=re.IGNORECASE).split("/", 1)[0]
    if host.startswith("["):  # [::1]:9100
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if _DAEMON_ID.fullmatch(host):  # osd.37, mds.2: a daemon's id, not a DNS name
        return host
    return host.split(".", 1)[0]


def alert_host(labels: Mapping[str, str]) -> str | None:
    """The host an alert is about (:data:`HOST_LABELS`, short), or None."""
    for label in HOST_LABELS:
        if labels.get(label, "").strip():
            return short_host(labels[label]) or None
    return None


def _first_label(labels: Mapping[str, str], names: tuple[str, ...]) -> str:
    """The first of ``names`` with a value that is not blank (stripped), else ``""``."""
    return next((labels[k].strip() for k in names if labels.get(k, "").strip()), "")


def alert_words(name: str) -> str:
    """A rule's CamelCase name as words: ``CephOSDNearFull`` → ``Ceph OSD Near Full``."""
    return " ".join(_CAMEL.sub(" ", name.replace("_", " ")).split())


def _summary(text: str, host: str | None) -> str:
    """The summary as the records can hold it: a word holding the host stands for the host
    (``xrd-gw02.grid.lab.example:1094``, ``dc-pool-03Domain`` → the host), another host name is
    shortened (:func:`short_host`), metric and label names are left out."""
    kept = []
    for word in text.split():
        bare = word.strip(".,;:()[]{}'\"")
        if host and host.lower() in bare.lower():
            kept.append(word.replace(bare, host))
        elif token_kind(bare) == "host" and not bare.startswith("/"):
            kept.append(word.replace(bare, short_host(bare)))
        elif token_kind(bare) not in _DROPPED_KINDS:
            kept.append(word)
    return " ".join(kept).rstrip(" .:;")


def searchable(alert: Alert) -> bool:
    """Whether the alert names anything to search the records by: a name, a summary or a host."""
    return bool(alert.labels.get("alertname", "").strip() or _first_label(alert.annotations, ("summary", "description"))
                or alert_host(alert.labels))


def alert_problem(alert: Alert) -> tuple[str, ...]:
    """The words of the problem an alert reports (its name's and its summary's, lower case),
    without the host, English stop words, numbers and the words every alert rule uses (``high``,
    ``usage``, ``down``, ...): an earlier occurrence must name one of them
    (:func:`copilot.answer.grounding.assess`), so that a record of the same host about another
    problem is not taken for one."""
    host = alert_host(alert.labels) or ""
    summary = _first_label(alert.annotations, ("summary", "description"))[:MAX_SUMMARY_CHARS]
    text = _summary(f"{alert_words(alert.name)} {summary}", host)
    skip = set(terms(host)) | _GENERIC
    words = [w for w in re.findall(r"[A-Za-z]{3,}", text) if w.lower() not in ENGLISH_STOP_WORDS]
    return tuple(dict.fromkeys(w.lower() for w in words if not set(terms(w)) <= skip))


def alert_question(alert: Alert) -> str:
    """The question an alert asks of the records: what fired (its summary, with the name's words
    the summary lacks), the service and the host, then "What fixed it when this happened before,
    and when was that?" (the fix asked first: asked "when" first, the 1.5B listed the earlier
    entries' error lines; on the 4 tuning alerts of ``evals/data/alerts_tuning/`` the fix's
    literal came in 2/2 asked this way, 1/2 the other)."""
    host = alert_host(alert.labels)
    summary = _first_label(alert.annotations, ("summary", "description"))[:MAX_SUMMARY_CHARS]
    words = alert_words(alert.name)
    what = _summary(summary, host) or words
    if what != words and any(w not in what.lower() for w in words.lower().split() if len(w) >= 3):
        what = f"{words}: {what}"  # the name adds words the summary lacks
    service = _first_label(alert.labels, SERVICE_LABELS)
    if service and token_kind(service) not in _DROPPED_KINDS and service.lower() not in what.lower():
        what += f" ({service})"
    if host and host not in what:
        what += f" on {host}"
    return f"{what}. What fixed it when this happened before, and when was that?"
