"""The Python package against real stores (a local folder and S3 on the
test server), with the clients users read through: pandas, pyarrow,
polars and DuckDB on detafs:// paths."""

import json
import os
import threading

import duckdb
import fsspec
import pandas as pd
import polars as pl
import pyarrow.dataset as pads
import pytest

import detafs


def frame(n, k=1):
    return pd.DataFrame({"id": range(n), "value": [i * k for i in range(n)]})


@pytest.fixture
def two_versions(cli, tmp_path):
    """`ds` with v1 (a CSV, a Parquet file, a partitioned folder) and v2
    (the Parquet file changed, a file added), v1 tagged `first`."""
    src = tmp_path / "src"
    (src / "part" / "year=2023").mkdir(parents=True)
    (src / "part" / "year=2024").mkdir(parents=True)
    frame(100).to_csv(src / "table.csv", index=False)
    frame(1000).to_parquet(src / "table.parquet")
    frame(10).to_parquet(src / "part" / "year=2023" / "a.parquet")
    frame(20).to_parquet(src / "part" / "year=2024" / "b.parquet")
    cli("commit", "ds", "--from", str(src), "-m", "one")
    frame(1000, 3).to_parquet(src / "table.parquet")
    (src / "notes.txt").write_bytes(b"hello\n")
    cli("commit", "ds", "--from", str(src), "-m", "two")
    cli("tag", "ds", "v1", "first")
    return cli


def fs_of(cli, **kw):
    return fsspec.filesystem("detafs", store=cli.store, skip_instance_cache=True, **kw)


def test_the_api_reads_every_version(two_versions):
    store = detafs.Store(two_versions.store)
    assert "ds" in store.datasets()
    ds = store.dataset("ds")
    log = ds.log()
    assert [v["version"] for v in log] == [2, 1]
    # Shaped as `detafs log --json` shows them.
    assert log == json.loads(two_versions("log", "ds", "--json"))
    assert ds.versions()[0]["tags"] == ["first"]
    assert ds.tags() == {"first": 1}
    names = [e["name"] for e in ds.ls()]
    assert names == ["notes.txt", "part", "table.csv", "table.parquet"]
    assert [e["name"] for e in ds.ls(version="first")] == ["part", "table.csv", "table.parquet"]
    assert ds.diff("v1", "v2") == [("A", "notes.txt"), ("M", "table.parquet")]
    for spec in ("v1", "1", "first", "latest~1"):
        assert ds.resolve(spec) == 1
    # A seekable file that reads ranges.
    with ds.open("table.csv", version="v1") as f:
        whole = f.read()
        f.seek(3)
        assert f.read(5) == whole[3:8]
        f.seek(-4, os.SEEK_END)
        assert f.read() == whole[-4:]
    assert ds.tag("latest", "second") == 2
    assert ds.tags() == {"first": 1, "second": 2}


def test_fsspec_paths_for_pandas_pyarrow_polars_and_duckdb(two_versions):
    fs = fs_of(two_versions)
    opts = {"store": two_versions.store}
    # Two versions side by side.
    v1 = pd.read_parquet("detafs://ds@v1/table.parquet", storage_options=opts)
    v2 = pd.read_parquet("detafs://ds/table.parquet", storage_options=opts)
    assert v1["value"].sum() * 3 == v2["value"].sum()
    assert len(pd.read_csv("detafs://ds@first/table.csv", storage_options=opts)) == 100
    # A partitioned folder of a version.
    table = pads.dataset("ds@v1/part", filesystem=fs, format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 30
    assert sorted(set(table.column("year").to_pylist())) == [2023, 2024]
    with fs.open("detafs://ds@2/table.parquet") as f:
        assert pl.read_parquet(f)["value"].sum() == v2["value"].sum()
    con = duckdb.connect()
    con.register_filesystem(fs)
    got = con.sql("select count(*), sum(value) from read_parquet('detafs://ds@v1/table.parquet')").fetchall()
    assert got == [(1000, v1["value"].sum())]


def test_listing_and_ranges(two_versions):
    fs = fs_of(two_versions)
    assert fs.exists("detafs://ds@v1/table.csv")
    assert not fs.exists("detafs://ds@v1/notes.txt")
    assert fs.isdir("detafs://ds/part")
    assert fs.info("detafs://ds/notes.txt")["size"] == 6
    assert fs.glob("detafs://ds@v1/part/*/*.parquet") == [
        "ds@v1/part/year=2023/a.parquet",
        "ds@v1/part/year=2024/b.parquet",
    ]
    assert [p.replace("@v2", "@v1") for p in fs.find("detafs://ds@v2/part")] == fs.find(
        "detafs://ds@v1/part"
    )
    assert fs.find("detafs://ds@v1", maxdepth=1) == ["ds@v1/table.csv", "ds@v1/table.parquet"]
    assert fs.cat_file("detafs://ds/notes.txt", start=1, end=4) == b"ell"
    assert fs.cat_file("detafs://ds/notes.txt", start=-3) == b"lo\n"
    assert fs.cat_file("detafs://ds/notes.txt") == b"hello\n"


def test_a_transaction_is_one_commit_and_nothing_if_it_raises(local_cli):
    fs = fs_of(local_cli, message="from pandas")
    with fs.transaction:
        frame(50).to_parquet("detafs://ds/out/a.parquet", filesystem=fs)
        with fs.open("detafs://ds/out/b.txt", "wb") as f:
            f.write(b"b")
    ds = detafs.Store(local_cli.store).dataset("ds")
    assert [(v["version"], v["message"], v["files_added"]) for v in ds.versions()] == [(1, "from pandas", 2)]
    assert len(pd.read_parquet("detafs://ds/out/a.parquet", filesystem=fs)) == 50
    with pytest.raises(RuntimeError):
        with fs.transaction:
            with fs.open("detafs://ds/out/c.txt", "wb") as f:
                f.write(b"c")
            fs.rm("detafs://ds/out/b.txt")
            raise RuntimeError("the block failed")
    assert len(ds.versions()) == 1
    assert fs.cat_file("detafs://ds/out/b.txt") == b"b"
    # Deleting inside a transaction; writing outside one is refused.
    with fs.transaction:
        fs.rm("detafs://ds/out/b.txt")
    assert not fs.exists("detafs://ds/out/b.txt")
    with pytest.raises(detafs.InvalidInputError, match="transaction"):
        fs.open("detafs://ds/x.txt", "wb")
    with pytest.raises(detafs.InvalidInputError):
        with fs.transaction:
            fs.open("detafs://ds@v1/x.txt", "wb")
    assert len(ds.versions()) == 2


def test_a_commit_of_no_change_says_nothing_to_commit(local_cli):
    ds = detafs.Store(local_cli.store).dataset("ds")
    with ds.stage("one") as s:
        s.write("a.txt", b"a")
    # The same bytes again: no change, no version.
    with pytest.raises(detafs.NothingToCommitError, match="nothing to commit"):
        with ds.stage("same") as s:
            s.write("a.txt", b"a")
    assert [v["version"] for v in ds.versions()] == [1]
    with pytest.raises(detafs.InvalidInputError):
        with ds.stage("same, as an InvalidInputError") as s:
            s.write("a.txt", b"a")


def test_two_writers_of_the_same_path_conflict(local_cli):
    ds = detafs.Store(local_cli.store).dataset("ds")
    with ds.stage("base") as s:
        s.write("shared.txt", b"0")
        s.write("other.txt", b"0")
    first, second = ds.stage("first"), ds.stage("second")
    with first:
        with second:
            second.write("shared.txt", b"2")
            first.write("shared.txt", b"1")
            first.write("mine.txt", b"1")
            first.commit()
            with pytest.raises(detafs.ConflictError) as e:
                second.commit()
            assert e.value.paths == ["shared.txt"]
            second.discard()
    assert ds.read("shared.txt") == b"1"
    assert [v["message"] for v in ds.versions()] == ["base", "first"]
    # Writers of different paths both land.
    a, b = ds.stage("a"), ds.stage("b")
    with a, b:
        a.write("a.txt", b"a")
        b.write("b.txt", b"b")
    assert ds.read("a.txt") == b"a" and ds.read("b.txt") == b"b"


def test_readers_on_eight_threads(two_versions):
    store = detafs.Store(two_versions.store)
    ds = store.dataset("ds")
    want = {v: ds.read("table.parquet", v) for v in ("v1", "v2")}
    errors = []

    def read(i):
        try:
            for _ in range(10):
                v = ("v1", "v2")[i % 2]
                with ds.open("table.parquet", v) as f:
                    f.seek(100)
                    assert f.read(1000) == want[v][100:1100]
                    f.seek(0)
                    assert f.read() == want[v]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def _read_in_child(url, queue):
    """A forked worker's read (a DataLoader's, multiprocessing's)."""
    try:
        queue.put(detafs.Store(url).dataset("ds").read("table.parquet", "v2"))
    except Exception as e:  # noqa: BLE001 - the parent reports it
        queue.put(repr(e))


def test_a_forked_worker_reads_with_a_store_of_its_own(two_versions):
    import multiprocessing

    # The parent's store has started its runtime's threads, which a child
    # made by fork does not have: the child's own store must work anyway.
    want = detafs.Store(two_versions.store).dataset("ds").read("table.parquet", "v2")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(two_versions.store, queue))
    child.start()
    try:
        got = queue.get(timeout=60)
        child.join(60)
    finally:
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    assert got == want


def test_bad_input_is_a_clear_exception_and_changes_nothing(two_versions, tmp_path):
    fs = fs_of(two_versions)
    store = detafs.Store(two_versions.store)
    ds = store.dataset("ds")
    with pytest.raises(detafs.InvalidInputError, match="names no dataset"):
        fs.info("detafs://")
    with pytest.raises(FileNotFoundError, match="no dataset"):
        fs.ls("detafs://nope@v1")
    with pytest.raises(FileNotFoundError, match="no version"):
        fs.info("detafs://ds@v9/table.csv")
    with pytest.raises((FileNotFoundError, detafs.InvalidInputError)):
        fs.info("detafs://ds@latest~7/table.csv")
    with pytest.raises(detafs.InvalidInputError):
        fs.info("detafs://ds@v1/../../etc/passwd")
    with pytest.raises(FileNotFoundError, match="no such file"):
        fs.cat_file("detafs://ds/missing.csv")
    with pytest.raises(detafs.InvalidInputError):
        with ds.stage("escape") as s:
            s.write("../outside.txt", b"x")
    # Another store's key file.
    from conftest import Cli

    other = Cli(str(tmp_path / "other"), tmp_path / "home", {})
    keys = tmp_path / "home" / ".config" / "detafs" / "keys"
    ours = set(keys.iterdir())
    other("init")
    (wrong,) = set(keys.iterdir()) - ours
    with pytest.raises(detafs.WrongKeyError, match="does not open"):
        detafs.Store(two_versions.store, key_file=wrong)
    with pytest.raises(detafs.InvalidInputError, match="not a detafs key file"):
        detafs.Store(two_versions.store, key_file=__file__)
    with pytest.raises(detafs.Error):
        detafs.Store(str(tmp_path / "not-a-store"))
    assert [v["version"] for v in ds.versions()] == [1, 2]


def test_through_the_gateway(gateway, local_cli, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    frame(500).to_parquet(src / "t.parquet")
    (src / "sub" / "a.txt").write_bytes(b"alpha\n")
    local_cli("commit", "ds", "--from", str(src), "-m", "one")
    opts = {"store": gateway.url, "api_key": gateway.writer, "ca": gateway.cert}
    store = detafs.Store(gateway.url, api_key=gateway.writer, ca=gateway.cert)
    assert "ds" in store.datasets()
    ds = store.dataset("ds")
    assert [v["version"] for v in ds.versions()] == [1]
    assert [e["name"] for e in ds.ls()] == ["sub", "t.parquet"]
    with ds.open("sub/a.txt") as f:
        f.seek(2)
        assert f.read() == b"pha\n"
    assert len(pd.read_parquet("detafs://ds@v1/t.parquet", storage_options=opts)) == 500
    fs = fsspec.filesystem("detafs", skip_instance_cache=True, message="remote", **opts)
    assert fs.find("detafs://ds") == ["ds/sub/a.txt", "ds/t.parquet"]
    assert fs.cat_file("detafs://ds/sub/a.txt", start=1, end=3) == b"lp"
    # A transaction commits through the gateway's uploads, as the key's author.
    with fs.transaction:
        with fs.open("detafs://ds/sub/b.txt", "wb") as f:
            f.write(b"beta\n" * 100_000)
        fs.rm("detafs://ds/sub/a.txt")
    log = ds.log()
    assert (log[0]["version"], log[0]["message"], log[0]["author"]) == (2, "remote", "key:writer")
    assert local_cli("cat", "ds", "v2", "sub/b.txt") == "beta\n" * 100_000
    assert not fs.exists("detafs://ds/sub/a.txt")
    # Two writers of one path: the second is a conflict naming it.
    first, second = ds.stage("first"), ds.stage("second")
    with first, second:
        first.write("c.txt", b"1")
        second.write("c.txt", b"2")
        first.commit()
        with pytest.raises(detafs.ConflictError) as e:
            second.commit()
        assert e.value.paths == ["c.txt"]
        second.discard()
    # What the key may not do, a key the gateway does not know, a
    # certificate not trusted: each a clear exception, nothing changed.
    read_only = detafs.Store(gateway.url, api_key=gateway.reader, ca=gateway.cert).dataset("ds")
    assert read_only.read("c.txt") == b"1"
    with pytest.raises(PermissionError):
        with read_only.stage("not allowed") as s:
            s.write("d.txt", b"d")
    with pytest.raises(PermissionError):
        detafs.Store(gateway.url, api_key="dtfs_nope_nope", ca=gateway.cert).datasets()
    with pytest.raises(detafs.StoreError, match="CERTIFICATE"):
        detafs.Store(gateway.url, api_key=gateway.writer).datasets()
    with pytest.raises(FileNotFoundError):
        ds.read("missing.txt")
    with pytest.raises(FileNotFoundError):
        ds.read("c.txt", version="v9")
    # The same bytes again through the gateway: nothing to commit.
    with pytest.raises(detafs.NothingToCommitError, match="nothing to commit"):
        with ds.stage("same") as s:
            s.write("c.txt", b"1")
    assert [v["version"] for v in ds.versions()] == [1, 2, 3]


def test_the_gateways_policy_applies(gateway, local_cli, tmp_path):
    import time

    src = tmp_path / "src"
    (src / "secret").mkdir(parents=True)
    (src / "open.txt").write_bytes(b"open\n")
    (src / "secret" / "s.txt").write_bytes(b"hidden\n")
    local_cli("commit", "ds", "--from", str(src), "-m", "one")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "policies:\n"
        '  - {name: admins, effect: allow, principals: ["user:root", "key:writer"], actions: ["dataset:*"], resources: ["*"]}\n'
        '  - {name: readers, effect: allow, principals: ["key:reader"], actions: ["dataset:read", "dataset:versions"], resources: ["datasets/ds"]}\n'
        '  - {name: no_secret, effect: deny, principals: ["key:reader"], actions: ["dataset:read"], resources: ["datasets/ds/versions/*/files/secret/*"]}\n'
    )
    local_cli("policy", "set", str(policy), "-m", "readers see no secret")
    reader = detafs.Store(gateway.url, api_key=gateway.reader, ca=gateway.cert).dataset("ds")
    # Gateways read the policy again within 2 s: wait for it, not for a time.
    deadline = time.monotonic() + 60
    while "secret" in [e["name"] for e in reader.ls()]:
        assert time.monotonic() < deadline, "the gateway never applied the policy"
        time.sleep(0.1)
    assert reader.read("open.txt") == b"open\n"
    # What the policy hides does not exist for the caller.
    with pytest.raises(FileNotFoundError):
        reader.read("secret/s.txt")
    with pytest.raises(FileNotFoundError):
        fsspec.filesystem(
            "detafs", skip_instance_cache=True, store=gateway.url, api_key=gateway.reader, ca=gateway.cert
        ).cat_file("detafs://ds/secret/s.txt")
    with pytest.raises(PermissionError):
        with reader.stage("not allowed") as s:
            s.write("x.txt", b"x")
    writer = detafs.Store(gateway.url, api_key=gateway.writer, ca=gateway.cert).dataset("ds")
    assert writer.read("secret/s.txt") == b"hidden\n"
    assert [v["version"] for v in writer.versions()] == [1]


def test_a_file_read_again_comes_from_memory_and_nothing_unverified_is_served(local_cli, tmp_path):
    """Verified bytes are kept (``cache_memory``): read again after the
    store's copy is damaged, a file comes whole from memory; a store opened
    with a cache too small to hold it reads the store again and refuses the
    damaged bytes."""
    src = tmp_path / "src"
    src.mkdir()
    data = os.urandom(24 << 20)
    (src / "big.bin").write_bytes(data)
    local_cli("commit", "ds", "--from", str(src), "-m", "one")
    kept = detafs.Store(local_cli.store, cache_memory=256 << 20).dataset("ds")
    assert kept.read("big.bin") == data
    packs = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(local_cli.store, "packs")) for f in fs]
    largest = max(packs, key=os.path.getsize)
    with open(largest, "r+b") as f:
        f.seek(os.path.getsize(largest) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x40]))
    assert kept.read("big.bin") == data
    small = detafs.Store(local_cli.store, cache_memory=16 << 20).dataset("ds")
    with pytest.raises(detafs.DamagedError):
        small.read("big.bin")
    with pytest.raises(detafs.InvalidInputError, match="at least"):
        detafs.Store(local_cli.store, cache_memory=1 << 20)


def test_retention_holds_forget_and_erasure(local_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("DETAFS_TEST_GC_NOTE_WAIT", "0s")
    src = tmp_path / "src"
    (src / "people").mkdir(parents=True)
    for i in range(1, 5):
        (src / f"f{i}.txt").write_bytes(b"x" * i)
        (src / "people" / "jane.csv").write_bytes(b"name\njane doe %d\n" % i)
        local_cli("commit", "ds", "--from", str(src), "-m", f"c{i}")
    ds = detafs.Store(local_cli.store).dataset("ds")
    ds.set_retention(keep_last=2)
    assert ds.retention()["rules"]["keep_last"] == 2
    with pytest.raises(detafs.InvalidInputError):
        ds.set_retention(keep_lats=2)
    assert ds.hold("v1", "audit 7") == 1
    plan = ds.forget(dry_run=True)
    assert plan["expired"] == [2] and [v["version"] for v in ds.log()] == [4, 3, 2, 1]
    with pytest.raises(detafs.InvalidInputError, match="held"):
        ds.forget("v1")
    assert ds.forget()["expired"] == [2]
    assert [v["version"] for v in ds.log()] == [4, 3, 1]
    with pytest.raises(FileNotFoundError, match="expired"):
        ds.open("f1.txt", version="v2")
    ds.release("v1", "closed")
    done = ds.erase("people/jane.csv", "GDPR art. 17")
    assert done["versions"] == [1, 2, 3, 4] and done["blobs"] > 0
    with pytest.raises(detafs.ErasedError, match="was erased"):
        ds.open("people/jane.csv", version="v3").read()
    with pytest.raises(detafs.ErasedError):
        pd.read_csv("detafs://ds@v4/people/jane.csv", storage_options={"store": local_cli.store})
    assert ds.open("f3.txt", version="v3").read() == b"xxx"
