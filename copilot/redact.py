"""Server folders out of what API clients read: absolute paths become relative or named.

Ingest job reports, warnings and errors are built from the files on disk and from the store's
messages, which name absolute server paths (``/srv/ingest/tickets/a.csv``, ``/data/chroma``).
A :class:`PathRedactor` rewrites them before a job is shown or saved: a path under the ingest
root or the uploads folder becomes relative to it (``tickets/a.csv``), the folder itself and the
data dir are named (``<ingest root>``, ``<uploads>``, ``<data dir>/chroma``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: An absolute POSIX path of two or more parts, not inside a URL or a relative path, nor an API route.
_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.<>-])/(?!v1/)(?:[\w.@+-]+/)+[\w.@+-]*")


@dataclass(frozen=True)
class PathRedactor:
    """Rewrites absolute server folders in text.

    Attributes:
        folders: ``(absolute folder, name, files relative)`` triples, longest folder first: a path
            under a folder loses the folder (``files relative``) or gets its name as prefix; the
            folder alone becomes its name.
    """

    folders: tuple[tuple[str, str, bool], ...] = ()

    @classmethod
    def of(cls, *, relative: dict[str, Path | None], named: dict[str, Path | None]) -> "PathRedactor":
        """A redactor for these folders (each in its absolute and its resolved form; None skipped).

        Args:
            relative: name -> folder whose files are shown relative to it (ingest root, uploads).
            named: name -> folder whose files are shown under its name (the data dir).
        """
        out: dict[str, tuple[str, bool]] = {}
        for table, rel in ((named, False), (relative, True)):  # relative wins where a folder is both
            for name, folder in table.items():
                if folder is None:
                    continue
                for form in {os.path.abspath(folder), os.path.realpath(folder)}:
                    if form != os.sep:
                        out[form] = (name, rel)
        ordered = sorted(out.items(), key=lambda kv: len(kv[0]), reverse=True)
        return cls(tuple((folder, name, rel) for folder, (name, rel) in ordered))

    def text(self, value: str) -> str:
        """``value`` with every known folder rewritten, and any other absolute path (a file
        outside those folders, e.g. one ingested by an operator's ``copilot ingest``) replaced
        by ``<server path>``."""
        for folder, name, rel in self.folders:
            if folder not in value:
                continue
            start = r"(?<![\w.-])" + re.escape(folder)  # the folder itself, not a tail of another path
            value = re.sub(start + re.escape(os.sep), "" if rel else name + "/", value)
            value = re.sub(start + r"(?![\w.-])", name, value)
        return _ABSOLUTE_PATH.sub("<server path>", value)


    def value(self, value: Any) -> Any:
        """``value`` (JSON-like: dicts, lists, strings, numbers) with every string rewritten."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value
