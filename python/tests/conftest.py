"""Fixtures: a fresh store per test (a local folder, or a bucket on the S3
test server on 127.0.0.1:4566), made by the CLI (`$DETAFS_BIN`), with HOME
and the key file inside the test's own folder."""

import os
import subprocess
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
S3_ENV = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:4566",
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_REGION": "us-east-1",
}


def binary() -> str:
    given = os.environ.get("DETAFS_BIN")
    if given:
        return given
    for profile in ("release", "debug"):
        b = ROOT / "target" / profile / "detafs"
        if b.exists():
            return str(b)
    raise RuntimeError("no detafs binary: cargo build --release (or set DETAFS_BIN)")


class Cli:
    """The CLI on one store, for what the tests set up and check."""

    def __init__(self, store: str, home: Path, env: dict) -> None:
        self.store = store
        self.env = dict(os.environ, HOME=str(home), DETAFS_STORE=store, **env)
        self.env.pop("DETAFS_PASSWORD", None)

    def __call__(self, *args: str) -> str:
        out = subprocess.run(
            [binary(), *args], env=self.env, capture_output=True, text=True
        )
        if out.returncode != 0:
            raise AssertionError(f"detafs {' '.join(args)}: {out.stderr}")
        return out.stdout


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("DETAFS_CACHE", str(tmp_path / "cache"))
    for var in ("DETAFS_STORE", "DETAFS_KEY_FILE", "DETAFS_PASSWORD", "DETAFS_PASSWORD_FILE"):
        monkeypatch.delenv(var, raising=False)
    return h


def s3_bucket() -> str:
    import boto3

    name = f"pytest-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=S3_ENV["AWS_ENDPOINT_URL"]).create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["local", "s3"])
def cli(request, tmp_path, home, monkeypatch):
    """An initialised store with one dataset `ds`, on each kind of store."""
    if request.param == "local":
        store, env = str(tmp_path / "store"), {}
    else:
        for k, v in S3_ENV.items():
            monkeypatch.setenv(k, v)
        store, env = f"s3://{s3_bucket()}/store", S3_ENV
    c = Cli(store, home, env)
    c("init")
    c("dataset", "create", "ds")
    return c


@pytest.fixture
def local_cli(tmp_path, home):
    """A local initialised store with one dataset `ds`."""
    c = Cli(str(tmp_path / "store"), home, {})
    c("init")
    c("dataset", "create", "ds")
    return c


class Gateway:
    def __init__(self, url, cert, writer, reader):
        self.url, self.cert, self.writer, self.reader = url, cert, writer, reader


@pytest.fixture
def gateway(local_cli, tmp_path):
    """`detafs serve` on 127.0.0.1 (TLS, its self-signed certificate) over
    the local store, with a key that reads and commits and one that reads."""
    import threading

    writer = local_cli("apikey", "create", "writer", "--scopes", "read,commit,create").strip()
    reader = local_cli("apikey", "create", "reader", "--scopes", "read").strip()
    proc = subprocess.Popen(
        [binary(), "serve", "--listen", "127.0.0.1:0"], env=local_cli.env, stderr=subprocess.PIPE, text=True
    )
    url = None
    for line in proc.stderr:
        if line.startswith("serving "):
            url = line.split()[1].rstrip("/")
            break
    assert url, "the gateway did not start"
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    cert = next(Path(local_cli.env["DETAFS_CACHE"]).rglob("gateway-cert.pem"))
    yield Gateway(url, str(cert), writer, reader)
    proc.kill()
    proc.wait()
