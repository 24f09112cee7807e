"""The store contract (see ``coordinator.store``), one suite run on every backend: memory, local disk, S3 (moto's
server on loopback), Azure Blob Storage (Azurite on loopback) and GCS (fake-gcs-server on loopback)."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from azure_lake import ACCOUNT, account_sas
from coordinator import LocalStore, MemoryStore, create_topic, open_store
from coordinator.errors import InvalidOptionError, StoreError, UnsupportedStoreError
from coordinator.probe import probe_conditional_writes
from coordinator.store import TEMP_PREFIX, Store
from s3_lake import TEST_KEY, TEST_SECRET, S3Lake
from s3faults import FaultProxy
from store_roots import ALL_BACKENDS, store_root

BIG = 1 << 20


@pytest.fixture(params=ALL_BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """``(url, options)`` of a fresh, empty store root on every backend (ids memory / local / s3 / azure / gcs)."""
    yield from store_root(request, tmp_path, request.param)


def _uniform(data: bytes, size: int) -> bool:
    return len(data) == size and data == data[:1] * size


def _run_threads(n: int, target: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


# -- put_if_absent: mutual exclusion and retried writes -------------------------------------------------------


def test_put_if_absent_creates_once(store: Store) -> None:
    assert store.put_if_absent("log/00.json", b"first") is True
    assert store.get("log/00.json") == b"first"
    # the same bytes again: our own write re-sent by a retry, reported as success
    assert store.put_if_absent("log/00.json", b"first") is True
    # another writer's bytes: a conflict, and the object keeps the first bytes
    assert store.put_if_absent("log/00.json", b"second") is False
    assert store.get("log/00.json") == b"first"


def test_put_if_absent_race_threads(store_url: tuple[str, dict[str, str]]) -> None:
    url, options = store_url
    n = 8
    stores = [open_store(url, options) for _ in range(n)]
    try:
        for round_ in range(3):
            path = f"race/{round_:02d}.json"
            barrier = threading.Barrier(n)
            results: dict[int, bool] = {}

            def race(
                i: int, path: str = path, barrier: threading.Barrier = barrier, results: dict[int, bool] = results
            ) -> None:
                barrier.wait()
                results[i] = stores[i].put_if_absent(path, f"writer-{i}".encode())

            _run_threads(n, race)
            winners = [i for i, won in results.items() if won]
            assert len(results) == n
            assert len(winners) == 1, results
            assert stores[0].get(path) == f"writer-{winners[0]}".encode()
    finally:
        for st in stores:
            st.close()


def _race_process(root: str, path: str, token: str, start_at: float, out: multiprocessing.Queue) -> None:
    store = LocalStore("file://" + root, root)
    time.sleep(max(0.0, start_at - time.time()))
    out.put((token, store.put_if_absent(path, token.encode())))


def test_put_if_absent_race_local_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    root = str(tmp_path / "lake")
    n = 4
    out = ctx.Queue()
    start_at = time.time() + 2.0
    procs = [
        ctx.Process(target=_race_process, args=(root, "race/x.json", f"proc-{i}", start_at, out)) for i in range(n)
    ]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=60) for _ in range(n))
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    winners = [t for t, won in results.items() if won]
    assert len(winners) == 1, results
    assert LocalStore("file://" + root, root).get("race/x.json") == winners[0].encode()


# -- atomic visibility ------------------------------------------------------------------------------------------


def test_readers_never_see_partial_objects(store: Store) -> None:
    path = "seg/big.bin"
    store.put(path, b"a" * BIG)
    started = threading.Event()
    done = threading.Event()
    seen: list[int] = []

    def read(_: int) -> None:
        while not done.is_set():
            data = store.get(path)
            assert _uniform(data, BIG), f"partial or mixed object of {len(data)} bytes"
            seen.append(data[0])
            started.set()

    reader = threading.Thread(target=_run_threads, args=(2, read))
    reader.start()
    try:
        assert started.wait(30), "readers never ran"
        for version in b"bcdefgh":
            store.put(path, bytes([version]) * BIG)
    finally:
        done.set()
        reader.join(timeout=60)
    assert set(seen) <= set(b"abcdefgh")
    assert store.get(path) == b"h" * BIG


def test_put_if_absent_is_invisible_until_complete(store: Store) -> None:
    started = threading.Event()
    done = threading.Event()
    outcomes: list[str] = []

    def read(_: int) -> None:
        while not done.is_set():
            for i in range(4):
                try:
                    data = store.get(f"seg/{i}.bin")
                except FileNotFoundError:
                    outcomes.append("absent")
                    continue
                finally:
                    started.set()
                assert _uniform(data, BIG), f"partial object of {len(data)} bytes"
                outcomes.append("complete")

    reader = threading.Thread(target=_run_threads, args=(2, read))
    reader.start()
    try:
        assert started.wait(30), "readers never ran"
        for i in range(4):
            assert store.put_if_absent(f"seg/{i}.bin", bytes([65 + i]) * BIG)
        # let the readers make at least one more full pass over the finished objects
        seen = len(outcomes)
        deadline = time.monotonic() + 30
        while len(outcomes) < seen + 8 and time.monotonic() < deadline and reader.is_alive():
            time.sleep(0.01)
    finally:
        done.set()
        reader.join(timeout=60)
    assert "complete" in outcomes[seen:]


# -- listing -----------------------------------------------------------------------------------------------------


def _populate(store: Store) -> None:
    for name in ("log/03.json", "log/01.json", "log/02.json", "log/sub/x.json", "log/sub/deeper/y.json"):
        store.put(name, name.encode())
    store.put("other/z.json", b"z")
    store.put("top.json", b"t")


def _root_dirs(store: Store) -> list[str]:
    """Root folders (the probe leaves no folder behind on any backend)."""
    return store.list_dirs("")


def test_list_sorted_without_subfolders(store: Store) -> None:
    _populate(store)
    assert store.list("log") == ["01.json", "02.json", "03.json"]
    assert store.list("") == ["top.json"]
    assert store.list("log/sub") == ["x.json"]


def test_list_start_after(store: Store) -> None:
    _populate(store)
    assert store.list("log", start_after="01.json") == ["02.json", "03.json"]
    assert store.list("log", start_after="015") == ["02.json", "03.json"]
    assert store.list("log", start_after="03.json") == []
    assert store.list("log", start_after="") == ["01.json", "02.json", "03.json"]


def test_list_missing_folder_is_empty(store: Store) -> None:
    _populate(store)
    assert store.list("nope") == []
    assert store.list("log/nope/deeper") == []
    assert store.list_dirs("nope") == []
    assert store.list_info("nope") == []
    # a prefix that is a name's beginning is not a folder
    assert store.list("lo") == []


def test_list_dirs(store: Store) -> None:
    _populate(store)
    assert _root_dirs(store) == ["log", "other"]
    assert store.list_dirs("log") == ["sub"]
    assert store.list_dirs("log/sub") == ["deeper"]
    assert store.list_dirs("log/sub/deeper") == []


def test_list_info_recursive(store: Store) -> None:
    before = time.time()
    _populate(store)
    infos = store.list_info("log")
    assert [i.path for i in infos] == [
        "log/01.json",
        "log/02.json",
        "log/03.json",
        "log/sub/deeper/y.json",
        "log/sub/x.json",
    ]
    for info in infos:
        assert info.size == len(info.path.encode())
        assert before - 5 <= info.mtime <= time.time() + 5
    assert [i.path for i in store.list_info("")] == sorted(
        ["top.json", "other/z.json"] + [i.path for i in infos]
    )


def test_list_after_write(store: Store) -> None:
    for i in range(5):
        assert store.put_if_absent(f"log/{i:02d}.json", b"x")
        assert store.list("log")[-1] == f"{i:02d}.json"


def test_local_temp_files_are_hidden(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    store.put("log/01.json", b"x")
    # a crashed writer's leftover temp file
    (tmp_path / "lake" / "log" / f"{TEMP_PREFIX}deadbeef").write_bytes(b"half")
    assert store.list("log") == ["01.json"]
    assert [i.path for i in store.list_info("")] == ["log/01.json"]


# -- get, delete ---------------------------------------------------------------------------------------------------


def test_get_missing_raises_file_not_found(store: Store) -> None:
    with pytest.raises(FileNotFoundError):
        store.get("nope/x.json")
    store.put("dir/x.json", b"x")
    with pytest.raises(FileNotFoundError):
        store.get("dir")
    assert store.exists("dir/x.json")
    assert not store.exists("dir/y.json")


def test_delete_is_idempotent(store: Store) -> None:
    store.put("a/x.json", b"x")
    store.delete("a/x.json")
    store.delete("a/x.json")
    store.delete("never/there.json")
    with pytest.raises(FileNotFoundError):
        store.get("a/x.json")
    assert store.list("a") == []
    assert store.put_if_absent("a/x.json", b"again") is True


def test_empty_object(store: Store) -> None:
    assert store.put_if_absent("e/empty", b"") is True
    assert store.get("e/empty") == b""
    assert store.put_if_absent("e/empty", b"") is True
    assert store.put_if_absent("e/empty", b"x") is False


# -- request counters ----------------------------------------------------------------------------------------------


def test_counters_count_one_request_per_operation(store: Store) -> None:
    steps: list[tuple[str, Callable[[], object]]] = [
        ("put_if_absent", lambda: store.put_if_absent("c/1.json", b"1")),
        ("put", lambda: store.put("c/2.json", b"2")),
        ("get", lambda: store.get("c/1.json")),
        ("list", lambda: store.list("c")),
        ("list", lambda: store.list_dirs("")),
        ("list", lambda: store.list_info("c")),
        ("delete", lambda: store.delete("c/2.json")),
    ]
    for kind, step in steps:
        store.counters.reset()
        step()
        assert store.counters.snapshot() == {kind: 1}, kind
    store.counters.reset()
    assert store.put_if_absent("c/1.json", b"other") is False
    assert store.counters["put_if_absent"] == 1
    assert store.counters.total() <= 2


# -- path validation -----------------------------------------------------------------------------------------------

BAD_PATHS = ["../escape.json", "a/../../escape.json", "/abs/x.json", "a//b.json", "", "a/./b.json", "a/"]


@pytest.mark.parametrize("bad", BAD_PATHS)
def test_writes_refuse_paths_leaving_the_root(store: Store, bad: str) -> None:
    with pytest.raises(InvalidOptionError):
        store.put_if_absent(bad, b"x")
    with pytest.raises(InvalidOptionError):
        store.put(bad, b"x")
    assert store.list_info("") == []


@pytest.mark.parametrize("bad", ["../escape.json", "/abs/x.json", "a//b.json"])
def test_reads_refuse_paths_leaving_the_root(store: Store, bad: str) -> None:
    with pytest.raises(InvalidOptionError):
        store.get(bad)
    with pytest.raises(InvalidOptionError):
        store.delete(bad)


# -- conditional-write probe ---------------------------------------------------------------------------------------


def test_probe_passes(store_url: tuple[str, dict[str, str]]) -> None:
    url, options = store_url
    # a root not probed before in this process, so the probe really runs
    st = open_store(url + "/probed", options)
    try:
        assert st.counters.total() == 0  # opening reads and writes nothing
        probe_conditional_writes(st)
        assert st.counters["put_if_absent"] == 2
        probe_conditional_writes(st)
        assert st.counters["put_if_absent"] == 2  # once per process and URL
        # the probe cleans up, leaving its verdict: a fresh process pays one GET instead of a probe
        (verdict,) = [i.path for i in st.list_info("")]
        assert verdict.startswith("_txn/probe/ok-")
        from coordinator import probe as probe_module

        probe_module._PROBED.clear()
        fresh = open_store(url + "/probed", options)
        probe_conditional_writes(fresh)
        assert fresh.counters.snapshot() == {"get": 1}
    finally:
        st.close()


class _OverwritingMemoryStore(MemoryStore):
    """A store that ignores the create-if-absent condition, as some S3-compatible stores do."""

    def put_if_absent(self, path: str, data: bytes) -> bool:
        self.put(path, data)
        return True


class _OverwritingLocalStore(LocalStore):
    """Local disk written with a plain replace, ignoring the create-if-absent condition."""

    def put_if_absent(self, path: str, data: bytes) -> bool:
        self.put(path, data)
        return True


def test_probe_refuses_store_ignoring_conditions(store_url: tuple[str, dict[str, str]]) -> None:
    url, options = store_url
    if url.startswith(("s3://", "gs://")):
        option = "s3.endpoint" if url.startswith("s3://") else "gcs.endpoint"  # GCS: the ifGenerationMatch query
        with FaultProxy(options[option], strip_conditional=True) as proxy:
            st3 = open_store(url + "/stripped", {**options, option: proxy.endpoint})
            with pytest.raises(UnsupportedStoreError, match="conditional writes"):
                create_topic(st3, "t", pa.schema([("v", pa.int64())]))  # refused before the first write
            assert proxy.log.requests >= 2
        return
    if url.startswith("az://"):
        # with a SAS token, which signs no header: the stripped If-None-Match still passes authentication
        sas = {k: v for k, v in options.items() if k != "azure.key"} | {"azure.sasToken": account_sas()}
        with FaultProxy(options["azure.endpoint"], strip_conditional=True) as proxy:
            st_az = open_store(url + "/stripped", {**sas, "azure.endpoint": proxy.endpoint + "/" + ACCOUNT})
            with pytest.raises(UnsupportedStoreError, match="conditional writes"):
                create_topic(st_az, "t", pa.schema([("v", pa.int64())]))  # refused before the first write
            assert proxy.log.requests >= 2
            st_az.close()
        return
    st: Store
    if url.startswith("memory://"):
        st = _OverwritingMemoryStore(url + "/overwriting")
    else:
        root = url[len("file://"):] + "-overwriting"
        st = _OverwritingLocalStore("file://" + root, root)
    with pytest.raises(UnsupportedStoreError, match="conditional writes"):
        probe_conditional_writes(st)
    if isinstance(st, MemoryStore):
        MemoryStore.drop(st.url)


def test_local_store_writes_under_its_root_only(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    store.put("a/b.json", b"x")
    assert sorted(os.listdir(tmp_path)) == ["lake"]


def test_s3_missing_bucket_and_repr_hide_credentials(s3_lake: S3Lake) -> None:
    url = f"s3://no-such-bucket-{uuid.uuid4().hex[:12]}/lake"
    with pytest.raises(StoreError, match="NoSuchBucket") as err:
        open_store(url, s3_lake.options).list("_txn/log")
    st = open_store(s3_lake.url, s3_lake.options)
    try:
        for text in (str(err.value), repr(err.value), repr(st), str(st.__dict__.get("url"))):
            assert TEST_KEY not in text and TEST_SECRET not in text, text
    finally:
        st.close()
