"""Server-side ingest paths (``POST /v1/ingest`` with ``{"path": ...}``): the checks on what a job
may read, and the refusal the ingest routes answer with an HTTP status.

Server-side paths must lie under the configured ingest root: ``..``, absolute paths elsewhere and
symlinks that lead out are refused with a reason.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from ingestion.files import discover_files


class PathRejectedError(ValueError):
    """A requested ingest path or job request is refused; ``status`` is the HTTP code to answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def resolve_ingest_path(raw: str, root: Path | None) -> tuple[Path, list[Path]]:
    """Check a requested server-side path and list the files to ingest under it.

    Args:
        raw: relative to ``root``, or absolute inside it.
        root: the configured ingest root (None: server-side ingest disabled).
    Returns:
        ``(source_root, files)``: the folder sources are named relative to (the path itself,
        or a file's parent, as the CLI does) and the files found (hidden entries skipped).
    Raises:
        PathRejectedError: 403 when disabled or the path (or a symlink in it) leads outside
            ``root``; 400 for ``..`` components or NUL bytes; 404 when it does not exist;
            422 when it holds no files.
    """
    if root is None:
        raise PathRejectedError(403, "server-side ingest is disabled: set COPILOT_INGEST_ROOT to allow it")
    if "\x00" in raw:
        raise PathRejectedError(400, "the path contains a NUL byte")
    if ".." in PurePosixPath(raw.replace("\\", "/")).parts:
        raise PathRejectedError(400, f"'..' is not allowed in ingest paths: {raw!r}")
    root_abs = Path(root).absolute()
    root_real = Path(root).resolve()
    candidate = Path(raw)
    path = candidate if candidate.is_absolute() else root_abs / candidate
    if not (path.is_relative_to(root_abs) or path.is_relative_to(root_real)):
        raise PathRejectedError(403, f"{raw!r} lies outside the ingest root")
    try:
        exists = path.exists()
    except OSError as exc:  # e.g. ENAMETOOLONG
        raise PathRejectedError(400, f"unusable path: {exc.strerror or exc}") from exc
    if not exists:
        if path.is_symlink():
            raise PathRejectedError(403, f"{raw!r} is a dangling symlink")
        raise PathRejectedError(404, f"no such file or folder under the ingest root: {raw!r}")
    real = path.resolve()
    if not real.is_relative_to(root_real):
        raise PathRejectedError(403, f"{raw!r} leads outside the ingest root (a symlink)")
    files, _missing = discover_files([path])
    escaping = [f for f in files if not f.resolve().is_relative_to(root_real)]
    if escaping:
        shown = ", ".join(str(f.relative_to(path)) if f.is_relative_to(path) else str(f) for f in escaping[:3])
        raise PathRejectedError(403, f"{len(escaping)} file(s) under {raw!r} are symlinks that lead outside "
                                     f"the ingest root: {shown}")
    if not files:
        raise PathRejectedError(422, f"no files to ingest under {raw!r} (hidden entries are skipped)")
    return (path if path.is_dir() else path.parent), files
