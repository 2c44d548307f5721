"""Who may read what: API keys with scopes, configured in one keys file.

A key's scope names the document types and the source folders it may read, and whether it
may ingest and delete. Every route resolves the caller's key to an :class:`Access`
(:mod:`copilot.api.dependencies`) and hands it on: retrieval and the document list filter in
the stores (:meth:`Access.restrict`, so the ``k`` hits are ``k`` readable ones), single
documents are checked with :meth:`Access.allows`, and the n-gram drafter drafts only from
answers given to the same scope (:attr:`Access.partition`).

The keys file (``keys_file``, TOML or YAML by suffix)::

    [[keys]]
    name = "ops"                       # shown in logs; the key never is
    key_sha256 = "9f86d0…"             # or key = "…": hex SHA-256 of the key, so the file holds no secret
    doc_types = ["shiftlog", "elog"]   # omitted: every type
    sources = ["logbooks"]             # source folders (relative, as stored); omitted: every folder

    [[keys]]
    name = "admin"
    key_sha256 = "…"
    ingest = true                      # may ingest (under its folders); default false
    delete = true                      # may delete (documents it may read); default false

    [public]                           # anonymous reads with public_reads (default: everything)
    doc_types = ["postmortem"]

The flat ``api_keys`` stay valid: each is a full-access key (read all, ingest, delete).
"""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from ingestion.documents import SearchFilter, source_in_folders
from ingestion.loaders.registry import DOC_TYPES

#: One of :data:`ingestion.loaders.registry.DOC_TYPES` (a tuple subscript is the list of literals).
DocType = Literal[DOC_TYPES]  # type: ignore[valid-type]


@dataclass(frozen=True)
class Access:
    """What one caller may do.

    Attributes:
        name: the key's name (logs show it, never the key).
        doc_types: document types it may read; ``None`` = every type, empty = none.
        folders: source folders it may read (and ingest under), relative, no trailing ``/``;
            ``None`` = every folder, empty = none.
        can_ingest: may start ingest jobs (of files under ``folders``) and see them.
        can_delete: may delete documents it may read (and prune).
    """

    name: str
    doc_types: frozenset[str] | None = None
    folders: tuple[str, ...] | None = None
    can_ingest: bool = False
    can_delete: bool = False

    @property
    def reads_all(self) -> bool:
        """No read restriction at all."""
        return self.doc_types is None and self.folders is None

    @property
    def partition(self) -> str:
        """The answer-history partition of this scope: ``""`` for full read access, else a
        digest of the readable types and folders (keys with the same read scope share one)."""
        if self.reads_all:
            return ""
        scope = repr((sorted(self.doc_types) if self.doc_types is not None else None, self.folders))
        return "scope-" + hashlib.sha256(scope.encode()).hexdigest()[:16]

    def allows_source(self, source: str) -> bool:
        """Whether ``source`` (a stored relative path) lies in the readable folders."""
        return self.folders is None or source_in_folders(source, self.folders)

    def allows(self, metadata: Mapping[str, Any]) -> bool:
        """Whether a document or chunk with this metadata (``doc_type``, ``source``) is readable."""
        doc_type, source = metadata.get("doc_type"), metadata.get("source")
        if self.doc_types is not None and doc_type not in self.doc_types:
            return False
        return self.folders is None or isinstance(source, str) and self.allows_source(source)

    def restrict(self, flt: SearchFilter | None) -> SearchFilter | None:
        """The user's filter narrowed to this scope (``None`` in, ``None`` out for full read
        access). Where they do not overlap (no common type or folder, a ``source`` outside the
        folders) the result has ``match_none``: no hits, never all of them."""
        if self.reads_all:
            return flt
        base = flt or SearchFilter()
        nothing = replace(base, match_none=True)
        types = base.doc_types
        if self.doc_types is not None:
            types = tuple(t for t in (base.doc_types or DOC_TYPES) if t in self.doc_types)
            if not types:
                return nothing
        folders = base.source_folders
        if self.folders is not None:
            folders = _common_folders(base.source_folders, self.folders)
            if not folders or base.source is not None and not self.allows_source(base.source):
                return nothing
        return replace(base, doc_types=types, source_folders=folders)


    def read_scope(self) -> dict[str, Any]:
        """The name and read scope as JSON (what an ingest job keeps of the key that started it)."""
        return {"name": self.name, "doc_types": None if self.doc_types is None else sorted(self.doc_types),
                "folders": None if self.folders is None else list(self.folders)}

    @classmethod
    def from_read_scope(cls, scope: Mapping[str, Any]) -> "Access":
        """The :class:`Access` (read rights only) a :meth:`read_scope` describes."""
        types, folders = scope.get("doc_types"), scope.get("folders")
        return cls(str(scope["name"]), None if types is None else frozenset(types),
                   None if folders is None else tuple(folders))


#: The caller when no key is configured, and every flat ``api_keys`` key: reads all, ingests, deletes.
FULL_ACCESS = Access("full access", can_ingest=True, can_delete=True)


def _common_folders(wanted: tuple[str, ...], allowed: tuple[str, ...]) -> tuple[str, ...]:
    """The folders inside both sets (``wanted`` empty = every folder): for each pair, the deeper one
    when one holds the other."""
    if not wanted:
        return allowed
    common = [w for w in wanted if source_in_folders(w, allowed)] + \
        [a for a in allowed if source_in_folders(a, wanted)]
    return tuple(dict.fromkeys(common))


# -- the keys file ---------------------------------------------------------------------------------------
def _folder(raw: str) -> str:
    """A source folder as stored sources spell it: relative, ``/``-separated, no ``.``/``..``."""
    text = raw.strip().replace("\\", "/").strip("/")
    parts = PurePosixPath(text).parts if text else ()
    if not parts or raw.strip().startswith("/") or any(p in (".", "..") for p in text.split("/")):
        raise ValueError(f"{raw!r} is not a relative source folder (like 'logbooks' or 'tickets/security')")
    return "/".join(parts)


class ReadScope(BaseModel):
    """What a key (or an anonymous reader) may read: omitted lists mean everything."""

    model_config = ConfigDict(extra="forbid")

    doc_types: list[DocType] | None = Field(None, description="readable document types; omitted: all")
    sources: list[str] | None = Field(None, description="readable source folders; omitted: all")

    @field_validator("sources")
    @classmethod
    def _folders(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else [_folder(f) for f in v]

    def access(self, name: str, ingest: bool = False, delete: bool = False) -> Access:
        """The scope as an :class:`Access`."""
        return Access(name, None if self.doc_types is None else frozenset(self.doc_types),
                      None if self.sources is None else tuple(dict.fromkeys(self.sources)), ingest, delete)


class KeyEntry(ReadScope):
    """One key of the keys file."""

    name: str = Field(min_length=1, max_length=200, description="shown in logs instead of the key")
    key: SecretStr | None = Field(None, min_length=1, description="the key itself")
    key_sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$", description="hex SHA-256 of the key")
    ingest: bool = False
    delete: bool = False

    @model_validator(mode="after")
    def _one_secret(self) -> "KeyEntry":
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError(f"key {self.name!r}: give exactly one of 'key' and 'key_sha256'")
        return self

    @property
    def digest(self) -> bytes:
        """SHA-256 of the key (32 bytes)."""
        if self.key is not None:
            return hashlib.sha256(self.key.get_secret_value().encode()).digest()
        return bytes.fromhex(str(self.key_sha256))


class KeysFile(BaseModel):
    """The keys file: ``keys`` (names and secrets unique) and an optional ``public`` scope."""

    model_config = ConfigDict(extra="forbid")

    keys: list[KeyEntry] = Field(min_length=1)
    public: ReadScope | None = None

    @model_validator(mode="after")
    def _unique(self) -> "KeysFile":
        names = [k.name for k in self.keys]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"key names must be unique: {twice} appear more than once")
        digests = [k.digest for k in self.keys]
        same = sorted({k.name for k in self.keys if digests.count(k.digest) > 1})
        if same:
            raise ValueError(f"keys {same} have the same secret")
        return self


class KeysFileError(ValueError):
    """The keys file is missing, unreadable or invalid; the message names the file and the field."""


def load_keys_file(path: Path) -> KeysFile:
    """Read and validate a keys file (``.yaml``/``.yml``: YAML, else TOML).

    Raises:
        KeysFileError: no such file, a syntax error, or an invalid field (named: ``keys.1.doc_types.0``).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
        data = yaml.safe_load(text) if Path(path).suffix in (".yaml", ".yml") else tomllib.loads(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise KeysFileError(f"keys file {path}: cannot read it: {exc}") from None
    try:
        return KeysFile.model_validate(data if data is not None else {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
                             for e in exc.errors())
        raise KeysFileError(f"keys file {path}: {problems}") from None


class KeyRing:
    """The configured keys, looked up by SHA-256 in constant time per key.

    Args:
        entries: ``(sha256 digest, access)`` per key.
        public: what an anonymous caller may read when ``public_reads`` is on.
    """

    def __init__(self, entries: Sequence[tuple[bytes, Access]], public: Access) -> None:
        self.entries = list(entries)
        self.public = public

    @classmethod
    def build(cls, api_keys: Sequence[str], keys: KeysFile | None) -> "KeyRing":
        """The flat ``api_keys`` (full access, named ``api_keys[i]``) and the keys file's keys.

        Raises:
            KeysFileError: a flat key is also in the keys file.
        """
        entries = [(hashlib.sha256(k.encode()).digest(), replace(FULL_ACCESS, name=f"api_keys[{i}]"))
                   for i, k in enumerate(api_keys)]
        flat = {d for d, _ in entries}
        for entry in keys.keys if keys else []:
            if entry.digest in flat:
                raise KeysFileError(f"keys file: key {entry.name!r} is also one of api_keys (drop one of them)")
            entries.append((entry.digest, entry.access(entry.name, entry.ingest, entry.delete)))
        public = keys.public.access("public") if keys and keys.public else Access("public")
        return cls(entries, public)

    @property
    def enabled(self) -> bool:
        """Whether any key is configured (without keys, everyone has :data:`FULL_ACCESS`)."""
        return bool(self.entries)

    def lookup(self, key: str) -> Access | None:
        """The access of ``key``, or None for an unknown key (every entry is compared)."""
        digest = hashlib.sha256(key.encode()).digest()
        found = None
        for known, access in self.entries:
            if hmac.compare_digest(digest, known):
                found = access
        return found
