"""The uploads folder without HTTP: name checks, staging, install, prune (ingestion.uploads).
Real files in a temporary folder; the API's use of it is tested in tests/test_api_ingest.py."""

from __future__ import annotations

import io
from pathlib import PurePosixPath

import pytest

from ingestion.uploads import (
    UploadArea,
    UploadConflictError,
    UploadNameError,
    UploadPathError,
    safe_folder,
    safe_upload_name,
)


@pytest.mark.parametrize("name, error", [("", UploadNameError), (".env", UploadNameError),
                                         ("a\x01b.log", UploadNameError), ("x" * 256, UploadNameError)])
def test_bad_file_names_are_refused(name, error):
    with pytest.raises(error):
        safe_upload_name(name)


def test_names_and_folders_that_are_fine():
    assert safe_upload_name("C:\\exports\\ggus.csv") == "ggus.csv"
    assert safe_folder("tickets/2026") == PurePosixPath("tickets/2026") and safe_folder(None) == PurePosixPath()
    for bad in ("/etc", "../up", "a/.hidden", "a\x00b"):
        with pytest.raises(UploadPathError):
            safe_folder(bad)


def test_stage_install_and_prune(tmp_path):
    area = UploadArea(tmp_path / "uploads")
    folder = PurePosixPath("tickets")
    first = area.stage("job1", [("a.csv", io.BytesIO(b"1")), ("b.csv", io.BytesIO(b"2"))], folder)
    assert first == [area.staging_dir("job1") / "tickets" / n for n in ("a.csv", "b.csv")]
    done = area.install("job1", first, folder)
    assert done.paths == [area.root / "tickets" / "a.csv", area.root / "tickets" / "b.csv"]
    assert done.failed == [] and not area.incoming_dir.exists()
    # again with prune: b.csv is not in this upload, so it goes; a.csv is replaced
    second = area.stage("job2", [("a.csv", io.BytesIO(b"new"))], folder)
    done = area.install("job2", second, folder, prune=True)
    assert sorted(p.name for p in area.folder_dir(folder).iterdir()) == ["a.csv"]
    assert (area.root / "tickets" / "a.csv").read_bytes() == b"new"


def test_duplicates_and_conflicts_are_refused_and_nothing_is_kept(tmp_path):
    area = UploadArea(tmp_path / "uploads")
    with pytest.raises(UploadNameError, match="duplicate file names"):
        area.stage("j", [("a.csv", io.BytesIO(b"1")), ("a.csv", io.BytesIO(b"2"))], PurePosixPath())
    area.install("j0", area.stage("j0", [("a.csv", io.BytesIO(b"1"))], PurePosixPath()), PurePosixPath())
    with pytest.raises(UploadConflictError, match="crosses the uploaded file 'a.csv'"):
        area.stage("j1", [("x.csv", io.BytesIO(b"1"))], PurePosixPath("a.csv/sub"))
    area.install("j2", area.stage("j2", [("y.csv", io.BytesIO(b"1"))], PurePosixPath("logs")), PurePosixPath("logs"))
    with pytest.raises(UploadConflictError, match="is an upload folder"):
        area.stage("j3", [("logs", io.BytesIO(b"1"))], PurePosixPath())
    assert not area.incoming_dir.exists()
