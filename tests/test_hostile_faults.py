"""The faults a hostile pass found (issue 33), each on the real path: uvicorn on 127.0.0.1 for the
routes, a real full filesystem (a tmpfs this test mounts, skipped with the reason where the
runner cannot mount) for the disk cases.

- ``folder=.`` / ``./`` was a 500; a folder with a newline was accepted (file names were not).
- A full disk locked the store: ``documents list`` and ``delete`` failed too; the ingest report
  listed only the file being written.
- ``/v1/embeddings`` embedded ``""``; ``[]`` got a message about token ids.
- Malformed tools, a ``tool_choice`` that is no OpenAI value, ``store: true`` on responses.
- With public reads on, a mistyped key silently got the public scope.
- One NUL byte failed a whole ELOG file.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "ingestion"))
from ingestion_helpers import HashEmbedder  # noqa: E402

from copilot.api.app import create_app  # noqa: E402
from copilot.api.server import ServerThread  # noqa: E402
from copilot.config import Settings  # noqa: E402
from copilot.service import CopilotService  # noqa: E402
from ingestion.deletion import delete_document  # noqa: E402
from ingestion.ingest_command import run_ingest  # noqa: E402
from ingestion.loaders import load_bytes  # noqa: E402
from ingestion.report import EXIT_OK, EXIT_STORE  # noqa: E402
from ingestion.stores.chunk_store import ChunkStore, open_store  # noqa: E402
from ingestion.stores.space_reserve import RESERVE_NAME  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "evals" / "data" / "corpus"
LOG_LINE = b"2026-01-20 06:04 [OPS] dc-pool-07 disk full, restarted the domain\n"

pytestmark = pytest.mark.usefixtures("restore_logging")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The real app (hash embeddings, no language model) served by uvicorn, with keys and public reads."""
    data = tmp_path_factory.mktemp("hostile")
    settings = Settings(data_dir=data, api_keys=["good-key"], public_reads=True, _env_file=None)
    store = ChunkStore(data, embedder=HashEmbedder())
    with ServerThread(create_app(settings, CopilotService(settings, store, None))) as srv:
        yield srv


KEY = {"Authorization": "Bearer good-key"}


def _upload(server, folder: str) -> requests.Response:
    return requests.post(server.url + "/v1/ingest", headers=KEY, timeout=30, data={"folder": folder},
                         files=[("files", (f"f-{uuid.uuid4().hex[:6]}.log", LOG_LINE))])


def _wait_job(server, job_id: str) -> dict:
    for _ in range(300):  # 30 s at most
        job = requests.get(f"{server.url}/v1/ingest/{job_id}", headers=KEY, timeout=10).json()
        if job["status"] not in ("queued", "running"):
            return job
        time.sleep(0.1)
    pytest.fail(f"ingest job {job_id} did not finish in 30 s")


@pytest.mark.parametrize("folder", [".", "./"])
def test_dot_folders_are_the_uploads_root(server, folder):
    r = _upload(server, folder)
    assert r.status_code == 202, r.text
    job = _wait_job(server, r.json()["id"])
    assert job["status"] == "succeeded", job
    sources = [f["source"] for f in job["report"]["files"]]
    assert sources and all("/" not in s for s in sources), sources  # at the root, no "." folder


@pytest.mark.parametrize("folder", ["a\nb", "a\rb", "a\tb", "x/\x7f", "a\x00b", "a\x85b", "a\u2028b", "\u202eevil"])
def test_folders_get_the_control_character_check_file_names_get(server, folder):
    r = _upload(server, folder)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert "control characters" in err["message"] or "relative path" in err["message"], err
    # the same check for a file name (a raw multipart body: requests would percent-encode it)
    boundary = uuid.uuid4().hex
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="f{folder}.log"\r\n'
            "Content-Type: text/plain\r\n\r\n").encode() + LOG_LINE + f"\r\n--{boundary}--\r\n".encode()
    bad_name = requests.post(server.url + "/v1/ingest", data=body, timeout=30,
                             headers={**KEY, "Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert bad_name.status_code == 400, bad_name.text


@pytest.mark.parametrize("body, param, words", [
    ({"input": ""}, "input", "empty string"),
    ({"input": "   "}, "input", "empty string"),
    ({"input": []}, "input", "at least one string"),
    ({"input": ["ok", ""]}, "input.1", "empty string"),
    ({"input": [1, 2, 3]}, "input", "token-id"),
])
def test_embeddings_refuse_empty_inputs_in_the_openai_shape(server, body, param, words):
    r = requests.post(server.url + "/v1/embeddings", headers=KEY, timeout=30,
                      json={"model": "test/hash-embedder", **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and words in err["message"], err


CHAT = {"model": "opscopilot", "messages": [{"role": "user", "content": "How was OPS-107 resolved?"}]}
RESPONSE = {"model": "opscopilot", "input": "How was OPS-107 resolved?"}


@pytest.mark.parametrize("path, body, param, words", [
    ("/v1/chat/completions", {**CHAT, "tools": [{"x": 1}]}, "tools.0", "string 'type'"),
    ("/v1/chat/completions", {**CHAT, "tools": [{"type": "function"}]}, "tools.0", "function.name"),
    ("/v1/chat/completions", {**CHAT, "tool_choice": "weird"}, "tool_choice", "not a valid value"),
    ("/v1/responses", {**RESPONSE, "tools": [{"x": 1}]}, "tools.0", "string 'type'"),
    ("/v1/responses", {**RESPONSE, "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools.0",
     "string 'name'"),
    ("/v1/responses", {**RESPONSE, "tool_choice": "weird"}, "tool_choice", "not a valid value"),
    ("/v1/chat/completions", {**CHAT, "tool_choice": {}}, "tool_choice", "not a valid value"),
    ("/v1/responses", {**RESPONSE, "store": True}, "store", "nothing is stored"),
    ("/v1/chat/completions", {**CHAT, "store": True}, "store", "nothing is stored"),
])
def test_malformed_tools_and_store_are_400s_naming_them(server, path, body, param, words):
    r = requests.post(server.url + path, headers=KEY, json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"], err


def test_well_formed_tools_still_pass_validation(server):
    """Open WebUI's tools pass the checks (this app has no model, so it then answers 503)."""
    tool = {"type": "function", "function": {"name": "get_ticket", "parameters": {"type": "object"}}}
    r = requests.post(server.url + "/v1/chat/completions", headers=KEY, timeout=30,
                      json={**CHAT, "tools": [tool], "tool_choice": "auto"})
    assert r.status_code == 503, r.text


def test_a_mistyped_key_is_refused_even_where_reads_are_public(server):
    assert requests.get(server.url + "/v1/documents", timeout=10).status_code == 200  # anonymous: public scope
    assert requests.get(server.url + "/v1/documents", headers=KEY, timeout=10).status_code == 200
    r = requests.get(server.url + "/v1/documents", headers={"Authorization": "Bearer good-kee"}, timeout=10)
    assert r.status_code == 403 and r.json()["error"]["code"] == "invalid_api_key", r.text


def test_the_queue_gauges_name_their_capacity(server):
    text = requests.get(server.url + "/metrics", timeout=10).text
    depth = float(next(line for line in text.splitlines() if line.startswith("copilot_queue_depth ")).split()[1])
    capacity = next(line for line in text.splitlines() if line.startswith("copilot_queue_capacity "))
    assert depth <= float(capacity.split()[1]) == 16.0  # queue size 8 + 8 free batch slots


def test_a_nul_byte_fails_only_its_elog_entry():
    data = (CORPUS / "logbooks" / "operations.elog").read_bytes()
    whole = load_bytes(data, "logbooks/operations.elog")
    second = data.index(b"$@MID@$:", 10)
    damaged = data[:second + 40] + b"\x00" + data[second + 40:]
    result = load_bytes(damaged, "logbooks/operations.elog")
    assert len(result.documents) == len(whole.documents) - 1 and len(result.failures) == 1
    assert "NUL" in result.failures[0].reason and result.failures[0].where.startswith("line ")
    zeroed = data[:second + 40] + b"\x00" * 4096 + data[second + 40:]  # a zeroed block, as a crash leaves
    result = load_bytes(zeroed, "logbooks/operations.elog")
    assert len(result.documents) == len(whole.documents) - 1 and len(result.failures) == 1
    with pytest.raises(Exception, match="binary"):  # a real binary still is one
        load_bytes(b"\x00\x01\x02\x03binary\x00" * 20, "blob.log")


# -- a full disk ----------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 24 MiB tmpfs mounted at ``tmp_path/disk`` (removed after), or a skip with the reason."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path, leave: int = 0) -> None:
    """Write a filler file until ``leave`` bytes are free (0: until the disk is full)."""
    with open(disk / "filler", "ab") as f:
        while True:
            room = shutil.disk_usage(disk).free - leave
            if room <= 0:
                return
            try:
                f.write(b"\0" * min(room, 1 << 20))
                f.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return


def _corpus(root: Path, files: int, lines: int) -> Path:
    root.mkdir()
    for i in range(files):
        text = "".join(f"2026-02-{i % 27 + 1:02d} {j % 24:02d}:{j % 60:02d} [OPS] wn-{i:02d}{j:04d} disk "
                       f"full on /scratch, cleaned job_{i}_{j} and restarted the startd {'x' * 40}\n"
                       for j in range(lines))
        (root / f"{root.name}-{i:02d}.log").write_text(text)
    return root


def _settings(disk: Path) -> Settings:
    return Settings(data_dir=disk / "data", embedding_model="test/hash-embedder", _env_file=None)


def test_a_full_disk_stops_ingest_names_every_file_and_leaves_list_read_and_delete(small_disk, tmp_path):
    settings, embedder = _settings(small_disk), HashEmbedder()
    first = _corpus(tmp_path / "first", files=2, lines=20)
    assert run_ingest([first], settings, progress=False, embedder=embedder).exit_code == EXIT_OK
    assert (small_disk / "data" / RESERVE_NAME).stat().st_size > 0  # the space reserve is held
    big = _corpus(tmp_path / "big", files=12, lines=3000)  # ~3 MB of text, more chunks than the disk holds
    _fill(small_disk, leave=1 << 20)

    before = _doc_ids(settings, embedder)
    outcome = run_ingest([big], settings, progress=False, embedder=embedder)
    assert outcome.exit_code == EXIT_STORE, outcome.report.to_dict()
    files = {Path(f.path).name: f for f in outcome.report.files}
    assert set(files) == {p.name for p in big.iterdir()}, "every file has a status"
    failed = [f for f in files.values() if f.status == "failed"]
    assert failed and all("re-run" in f.reason for f in failed)
    assert any(f.reason.startswith("not reached") for f in failed)
    _fill(small_disk)  # and then nothing at all is free
    assert shutil.disk_usage(small_disk).free < (1 << 20)

    store = open_store(settings, embedder=embedder)  # opens (the reserve gives the room)
    try:
        page, total = store.manifest.page(limit=10_000)
        ids = {d["doc_id"] for d in page}
        assert before <= ids and total == len(ids)  # nothing stored before is lost
        doc_id = sorted(before)[0]
        assert store.manifest.info(doc_id) is not None and store.lexical.document_chunks(doc_id)
        assert delete_document(store, doc_id)
        assert store.manifest.info(doc_id) is None
        assert store.manifest.count() == total - 1
    finally:
        store.close()


def test_a_disk_that_fills_during_ingest_leaves_every_command_working_once_space_is_free(small_disk, tmp_path):
    """Issue 46 items 1 and 3: the ingest stops between batches for lack of room (a save of the dense
    index is never cut short), and once space is free the first list, search, delete and a later
    ingest all work, with nothing stored before lost."""
    settings, embedder = _settings(small_disk), HashEmbedder()
    first = _corpus(tmp_path / "first", files=2, lines=20)
    assert run_ingest([first], settings, progress=False, embedder=embedder).exit_code == EXIT_OK
    before = _doc_ids(settings, embedder)
    src = tmp_path / "big"
    src.mkdir()
    (src / "big.jsonl").write_text("".join(
        json.dumps({"id": f"BIG-{i}", "title": f"pool disk controller restart on wn-{i:05d}",
                    "text": f"host wn-{i:05d} disk controller reset after the pool filled; fixed by restarting the "
                            f"raid service and clearing /scratch {i}"}) + "\n" for i in range(8000)))
    (small_disk / "filler").write_bytes(bytes(6 << 20))  # what the operator frees afterwards

    outcome = run_ingest([src], settings, progress=False, embedder=embedder)
    assert outcome.exit_code == EXIT_STORE and "full" in outcome.report.error, outcome.report.error
    assert "MiB" in outcome.report.error  # the room needed and the room there is
    (small_disk / "filler").unlink()

    store = open_store(settings, embedder=embedder)  # the first command afterwards
    try:
        assert store.dense_damage is None
        page, total = store.manifest.page(limit=100_000)
        assert before <= {d["doc_id"] for d in page} and total > len(before)
        assert store.dense_search("pool disk controller restart", 5)
        assert delete_document(store, sorted(before)[0])
    finally:
        store.close()
    more = _corpus(tmp_path / "more", files=1, lines=5)
    assert run_ingest([more], settings, progress=False, embedder=embedder).exit_code == EXIT_OK


def test_a_small_disk_stores_documents_or_names_the_room_it_needs(tmp_path):
    """Issue 46 item 4: on a 16 MiB disk the space reserve shrinks to an eighth of it and three small
    files are stored; on a 2 MiB disk the refusal names what is free and what is needed."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    for size, stored in (("16m", True), ("2m", False)):
        mount = tmp_path / f"disk-{size}"
        mount.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        try:
            src = _corpus(tmp_path / f"src-{size}", files=3, lines=30)
            outcome = run_ingest([src], _settings(mount), progress=False, embedder=HashEmbedder())
            if stored:
                assert outcome.exit_code == EXIT_OK and outcome.report.documents_written > 0
            else:
                assert outcome.exit_code == EXIT_STORE
                assert "MiB free" in outcome.report.error and "needs" in outcome.report.error
        finally:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def _doc_ids(settings: Settings, embedder: HashEmbedder) -> set[str]:
    store = open_store(settings, embedder=embedder)
    try:
        return {d["doc_id"] for d in store.manifest.page(limit=10_000)[0]}
    finally:
        store.close()


def test_an_ingest_started_on_a_full_disk_refuses_and_names_every_file(small_disk, tmp_path):
    settings, embedder = _settings(small_disk), HashEmbedder()
    first = _corpus(tmp_path / "first", files=1, lines=10)
    assert run_ingest([first], settings, progress=False, embedder=embedder).exit_code == EXIT_OK
    before = _doc_ids(settings, embedder)
    _fill(small_disk)
    more = _corpus(tmp_path / "more", files=3, lines=50)
    outcome = run_ingest([more], settings, progress=False, embedder=embedder)
    assert outcome.exit_code == EXIT_STORE
    assert "full" in outcome.report.error
    assert sorted(Path(f.path).name for f in outcome.report.files) == sorted(p.name for p in more.iterdir())
    assert all(f.status == "failed" and "re-run" in f.reason for f in outcome.report.files)
    assert _doc_ids(settings, embedder) == before  # the stored documents are kept, and still readable


@pytest.mark.parametrize("model", ["/nonexistent/x.gguf", "embedded:nope"])
def test_a_target_that_cannot_load_is_one_line_and_exit_2(tmp_path, model):
    env = {**os.environ, "COPILOT_TARGET_MODEL": model, "COPILOT_DATA_DIR": str(tmp_path / "data")}
    with socket.socket() as probe:  # a free port: serve binds it before it loads the model
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    for args in (["ask", "How was OPS-107 fixed?"], ["serve", "--port", port]):
        done = subprocess.run([str(Path(sys.executable).parent / "copilot"), *args], env=env,
                              capture_output=True, text=True, timeout=300, cwd=REPO)
        assert done.returncode == 2, (args, done.stderr[-2000:])
        assert "Traceback" not in done.stderr and "cannot load the model" in done.stderr, done.stderr[-2000:]


def test_a_reserve_kept_from_a_larger_disk_shrinks_to_this_ones_size(tmp_path):
    """A store copied onto a small disk brings its 8 MiB reserve; the reserve sized to this disk is kept instead."""
    from ingestion.stores.space_reserve import SpaceReserve

    (tmp_path / RESERVE_NAME).write_bytes(bytes(3 << 20))
    reserve = SpaceReserve(tmp_path, size=1 << 20)
    assert reserve.ensure() and reserve.held() == 1 << 20
