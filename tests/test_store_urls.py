"""Opening a local store creates nothing until the first write, and store URLs are parsed as URLs (``file:/abs``,
``file:///abs``, ``file://localhost/abs``, plain paths), never as folder names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coordinator import InvalidOptionError, LocalStore, open_store
from coordinator.store_factory import HadoopUnreachable, hadoop_url, local_path


def test_opening_a_local_store_creates_nothing_until_the_first_write(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b" / "lake"
    store = open_store(str(root), probe=False)
    assert isinstance(store, LocalStore)
    assert store.list("") == [] and store.list_dirs("") == [] and store.list_info("") == []
    with pytest.raises(FileNotFoundError):
        store.get("_txn/format.json")
    assert not (tmp_path / "a").exists()
    assert store.put_if_absent("x/y.json", b"1")
    assert (root / "x" / "y.json").read_bytes() == b"1"


@pytest.mark.parametrize("form", ["file:{p}", "file://{p}", "file://localhost{p}", "{p}", "FILE://{p}"])
def test_file_url_forms_name_the_same_folder(tmp_path: Path, form: str) -> None:
    root = tmp_path / "lake"
    store = open_store(form.format(p=root), probe=False)
    assert store.url == f"file://{root}"
    store.put("k", b"v")
    assert (root / "k").read_bytes() == b"v"
    assert not any(p.name.startswith("file:") for p in Path.cwd().iterdir())


def test_relative_paths_and_escapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert local_path("lake") == str(tmp_path / "lake")
    assert local_path("./my:lake") == str(tmp_path / "my:lake")
    assert local_path("file:///data/my%20lake") == "/data/my lake"
    assert local_path("s3://bucket/x") is None and local_path("memory://m") is None


@pytest.mark.parametrize("url, fragment", [
    ("file://otherhost/data", "names host 'otherhost'"),
    ("file:data", "not an absolute path"),
    ("ftp://x/y", "not supported"),
    ("   ", "is empty"),
])
def test_bad_store_urls_are_refused(url: str, fragment: str) -> None:
    with pytest.raises(InvalidOptionError, match=fragment):
        open_store(url, probe=False)


def test_opening_creates_nothing_and_the_probe_precedes_the_first_write(tmp_path: Path) -> None:
    from coordinator.probe import probe_conditional_writes

    root = tmp_path / "probed"
    store = open_store(str(root), probe=True)
    assert not root.exists()  # opening (and reading) writes nothing
    assert store.list("_txn/log") == [] and not root.exists()
    probe_conditional_writes(store)  # what a writer runs before its first conditional write
    assert [f for _d, _s, fs in os.walk(root) for f in fs] == [next(iter(os.listdir(root / "_txn" / "probe")))]


def test_hadoop_s3a_options_mirror_the_s3_options_only_for_s3_urls() -> None:
    from coordinator import StoreOptions
    from coordinator.store_factory import hadoop_s3a_options

    opts = StoreOptions.from_options({"s3.endpoint": "http://127.0.0.1:9000", "s3.key": "k", "s3.secret": "s",
                                      "s3.token": "t", "s3.region": "eu-west-1"})
    got = hadoop_s3a_options("s3://bucket/lake", opts)
    assert got["fs.s3a.endpoint"] == "http://127.0.0.1:9000" and got["fs.s3a.connection.ssl.enabled"] == "false"
    assert (got["fs.s3a.access.key"], got["fs.s3a.secret.key"], got["fs.s3a.session.token"]) == ("k", "s", "t")
    assert got["fs.s3a.endpoint.region"] == "eu-west-1" and got["fs.s3a.path.style.access"] == "true"
    assert "TemporaryAWSCredentialsProvider" in got["fs.s3a.aws.credentials.provider"]
    assert hadoop_s3a_options("/data/lake", opts) == {} and hadoop_s3a_options("file:///data/lake", opts) == {}
    no_token = hadoop_s3a_options("s3a://bucket", StoreOptions.from_options({"s3.key": "k", "s3.secret": "s"}))
    assert "fs.s3a.session.token" not in no_token and "fs.s3a.endpoint" not in no_token


@pytest.mark.parametrize("form", ["{p}", "file:{p}", "file://{p}", "file://localhost{p}"])
def test_hadoop_url_names_a_local_store_as_one_file_url(tmp_path: Path, form: str) -> None:
    assert hadoop_url(form.format(p=tmp_path) + " ") == f"file://{tmp_path}"


@pytest.mark.parametrize("url", ["s3://bucket/lake/", "s3a://bucket/lake"])
def test_hadoop_url_names_s3_through_s3a(url: str) -> None:
    assert hadoop_url(url) == "s3a://bucket/lake"


@pytest.mark.parametrize(("url", "fragment"), [
    ("memory://x", "in-memory"), ("/data/lake*", "glob"), ("/data/a,b", "path list"), ("/data/{a}", "glob"),
    ("gs://bucket/lake", "do not reach gs:// stores"), ("gcs://bucket/lake", "do not reach gs:// stores"),
])
def test_hadoop_url_says_why_spark_cannot_reach_a_store(url: str, fragment: str) -> None:
    with pytest.raises(HadoopUnreachable, match=fragment):
        hadoop_url(url)


@pytest.mark.parametrize(("url", "container", "account", "prefix"), [
    ("az://box/lake", "box", None, "lake/"),
    ("az://box", "box", None, ""),
    ("abfs://box/a/b/", "box", None, "a/b/"),
    ("abfss://box@acct01.dfs.core.windows.net/lake", "box", "acct01", "lake/"),
    ("abfss://box@ACCT01.blob.core.windows.net/", "box", "acct01", ""),
])
def test_azure_urls_name_container_account_and_prefix(url: str, container: str, account: str | None,
                                                      prefix: str) -> None:
    from coordinator.backends.azure import parse_azure_url

    assert parse_azure_url(url) == (container, account, prefix)


@pytest.mark.parametrize(("url", "options", "fragment"), [
    ("az://", {}, "names no valid container"),
    ("az://Bad_Name/x", {}, "names no valid container"),
    ("abfss://box@example.com/x", {}, "is not an account host"),
    ("az://box/a/../b", {}, "'..'"),
    ("abfss://box@one.dfs.core.windows.net/x", {"azure.account": "two"}, "names account 'one'"),
    ("az://box/x", {"azure.key": "k" * 8}, "give the account"),
    ("az://box/x", {"azure.account": "a1b", "azure.key": "k" * 8, "azure.sasToken": "sv=1&sig=abcd"}, "not both"),
    ("az://box/x", {"azure.account": "a1b", "azure.endpoint": "http://127.0.0.1:1/a1b"}, "token credentials need"),
])
def test_bad_azure_urls_and_options_are_refused_naming_them(url: str, options: dict[str, str], fragment: str) -> None:
    with pytest.raises(InvalidOptionError, match=fragment) as err:
        open_store(url, options)
    assert "k" * 8 not in str(err.value) and "abcd" not in str(err.value)


@pytest.mark.parametrize("url", ["az://box/lake", "abfss://box@acct01.dfs.core.windows.net/lake"])
def test_hadoop_url_says_azure_stores_need_hadoop_azure(url: str) -> None:
    with pytest.raises(HadoopUnreachable, match="hadoop-azure"):
        hadoop_url(url)
def test_gs_url_without_gcsfs_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delitem(sys.modules, "coordinator.backends.gcs", raising=False)
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # an import of it fails, as when it is not installed
    with pytest.raises(InvalidOptionError, match=r"gs:// stores need gcsfs .*install txnlog\[gcs\]"):
        open_store("gs://bucket/lake", {"gcs.token": "anon"})
