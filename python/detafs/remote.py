"""A store reached through ``detafs serve`` (HTTPS, an API key or token):
the same calls the extension's ``Store`` answers, made on the gateway's
API (docs/gateway.md), for hosts without store credentials. The gateway
applies its store's access policy: what a caller may not see does not
exist for it (``FileNotFoundError``), what it may not do is a
``PermissionError``."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import threading
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple

from ._detafs import ConflictError, Error, InvalidInputError, NothingToCommitError, StoreError

EntryInfo = Tuple[str, str, int, int, Tuple[int, int], Optional[str]]
KINDS = {"dir": "directory", "file": "file", "symlink": "link", "special": "other"}


def _quote(path: str) -> str:
    return urllib.parse.quote(path.strip("/"), safe="/")


class RemoteReader:
    """One file of a pinned version, read in ranges (HTTP Range)."""

    def __init__(self, remote: "Remote", url: str, size: int) -> None:
        self._remote, self._url, self.size = remote, url, size

    def read_range(self, start: int, end: int) -> bytes:
        end = min(end, self.size)
        if start >= end:
            return b""
        return self._remote._call("GET", self._url, headers={"Range": f"bytes={start}-{end - 1}"})


class Remote:
    """The gateway at ``url`` (``https://host:port``) with ``api_key`` (or
    an OAuth2 ``token``), trusting ``ca`` (a PEM file: the gateway's
    certificate or its CA; default: the system's)."""

    def __init__(
        self, url: str, api_key: Optional[str] = None, token: Optional[str] = None, ca: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> None:
        if not url.startswith("https://"):
            raise InvalidInputError(f"{url!r}: the gateway is reached over https://")
        self.url = url.rstrip("/")
        secret = api_key or token or os.environ.get("DETAFS_API_KEY")
        if not secret:
            raise InvalidInputError("a gateway needs an API key (api_key=, or $DETAFS_API_KEY) or a token")
        self._auth = {"Authorization": f"Bearer {secret}"}
        self._ssl = ssl.create_default_context(cafile=ca)
        self._where = urllib.parse.urlsplit(self.url)
        self._local = threading.local()
        self._timeout = timeout or 60.0
        self._ids: Dict[str, str] = {}

    # -- HTTP ---------------------------------------------------------

    def _conn(self) -> http.client.HTTPSConnection:
        # One kept-alive connection per thread: a TLS handshake per range
        # read would cost more than most reads.
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(
                self._where.hostname, self._where.port or 443, context=self._ssl, timeout=self._timeout
            )
            self._local.conn = conn
        return conn

    def _call(self, method: str, path: str, body: Any = None,
              headers: Optional[Dict[str, str]] = None, raw: bool = True) -> Any:
        hdrs = {**self._auth, **(headers or {})}
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, self._where.path.rstrip("/") + path, body=body, headers=hdrs)
                r = conn.getresponse()
                data, status, reason = r.read(), r.status, r.reason
                kind = r.getheader("Content-Type", "")
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                # A kept connection the gateway closed meanwhile: once more
                # on a new one (a file body from its start).
                conn.close()
                self._local.conn = None
                if attempt == 2 or (body is not None and not hasattr(body, "seek") and not isinstance(body, bytes)):
                    raise StoreError(f"{self.url}: {e}") from None
                if hasattr(body, "seek"):
                    body.seek(0)
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self._local.conn = None
                raise StoreError(f"{self.url}: {e}") from None
        if status >= 400:
            raise self._error(status, reason, data)
        if raw:
            return data
        return json.loads(data) if kind.startswith("application/json") else data

    def _json(self, method: str, path: str, payload: Any = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        data = self._call(method, path, body, {"Content-Type": "application/json"} if body else None)
        return json.loads(data) if data else None

    @staticmethod
    def _error(status: int, reason: str, body: bytes) -> Exception:
        try:
            err = json.loads(body)["error"]
            message, details = err.get("message", ""), err.get("details") or {}
            code = err.get("code", "")
        except Exception:  # noqa: BLE001 - a body that is not the gateway's
            message, details, code = f"{status} {reason}", {}, ""
        if status == 404:
            return FileNotFoundError(message)
        if status in (401, 403):
            return PermissionError(message)
        if status == 409 and code == "nothing_to_commit":
            return NothingToCommitError(message)
        if status == 409 and "paths" in details:
            c = ConflictError(message)
            c.paths = details["paths"]
            return c
        if status in (400, 409, 413, 416):
            return InvalidInputError(message)
        if status >= 500:
            return StoreError(message)
        return Error(message)

    def _id(self, dataset: str) -> str:
        if dataset not in self._ids:
            for d in self._json("GET", "/datasets"):
                self._ids[d["name"]] = d["id"]
        if dataset not in self._ids:
            raise FileNotFoundError(f"no dataset named {dataset!r}")
        return urllib.parse.quote(self._ids[dataset], safe="")

    def _version_url(self, dataset: str, spec: str) -> str:
        return f"/datasets/{self._id(dataset)}/versions/v{self.resolve(dataset, spec)}"

    # -- the extension's Store calls -----------------------------------

    def datasets(self) -> List[str]:
        return [d["name"] for d in self._json("GET", "/datasets")]

    def create_dataset(self, name: str) -> None:
        d = self._json("POST", "/datasets", {"name": name})
        self._ids[d["name"]] = d["id"]

    def versions_json(self, dataset: str) -> str:
        rows = self._json("GET", f"/datasets/{self._id(dataset)}/versions")
        return json.dumps(rows)

    def resolve(self, dataset: str, spec: str) -> int:
        spec = urllib.parse.quote(str(spec), safe="")
        return self._json("GET", f"/datasets/{self._id(dataset)}/versions/{spec}")["version"]

    def _listing(self, base: str, path: str) -> Any:
        url = f"{base}/files/{_quote(path)}" if path.strip("/") else f"{base}/files"
        return self._call("GET", url, raw=False)

    def ls(self, dataset: str, spec: str, path: str) -> List[EntryInfo]:
        rows = self._listing(self._version_url(dataset, spec), path)
        if not isinstance(rows, list):
            raise NotADirectoryError(f"{path} is not a folder")
        return [(r["name"], KINDS.get(r["type"], "other"), r["size"], 0o755 if r["type"] == "dir" else 0o644,
                 (r["mtime"], 0), None) for r in rows]

    def info(self, dataset: str, spec: str, path: str) -> EntryInfo:
        path = path.strip("/")
        if not path:
            self.ls(dataset, spec, "")
            return ("", "directory", 0, 0o755, (0, 0), None)
        parent, _, name = path.rpartition("/")
        for row in self.ls(dataset, spec, parent):
            if row[0] == name:
                return (path,) + row[1:]
        raise FileNotFoundError(f"{path}: no such file or directory")

    def walk(self, dataset: str, spec: str, path: str) -> List[EntryInfo]:
        base = self._version_url(dataset, spec)
        out: List[EntryInfo] = []
        stack = [path.strip("/")]
        while stack:
            folder = stack.pop()
            rows = self._listing(base, folder)
            for r in rows:
                rel = f"{folder}/{r['name']}" if folder else r["name"]
                top = path.strip("/")
                shown = rel[len(top) + 1:] if top else rel
                out.append((shown, KINDS.get(r["type"], "other"), r["size"], 0o644, (r["mtime"], 0), None))
                if r["type"] == "dir":
                    stack.append(rel)
        return out

    def open(self, dataset: str, spec: str, path: str) -> RemoteReader:
        version = f"v{self.resolve(dataset, spec)}"
        row = self.info(dataset, version, path)
        if row[1] != "file":
            raise IsADirectoryError(f"{path} is a {row[1]}, not a file")
        url = f"/datasets/{self._id(dataset)}/versions/{version}/files/{_quote(path)}"
        return RemoteReader(self, url, row[2])

    def diff(self, dataset: str, old: str, new: str) -> List[Tuple[str, str]]:
        raise Error("diff is not offered by the gateway; compare ls or walk of the two versions")

    def tags(self, dataset: str) -> List[Tuple[str, int]]:
        # The version list carries each version's tags: one request.
        out = []
        for row in json.loads(self.versions_json(dataset)):
            out.extend((t, row["version"]) for t in row.get("tags", []))
        return out

    def tag(self, dataset: str, spec: str, tag: str) -> int:
        raise Error("tags are made with `detafs tag` on a host with the store; the gateway reads them")

    def commit(self, dataset: str, folder: str, message: str, author: Optional[str] = None) -> str:
        puts = []
        for top, _, files in os.walk(folder):
            for f in files:
                local = os.path.join(top, f)
                puts.append((os.path.relpath(local, folder).replace(os.sep, "/"), local))
        versions = json.loads(self.versions_json(dataset))
        parent = f"v{versions[-1]['version']}" if versions else None
        # The folder is the whole next version: what it lacks goes.
        old = self.walk(dataset, parent, "") if parent else []
        local = {p for p, _ in puts}
        deletes = sorted(p for p, kind, *_ in old if kind != "directory" and p not in local)
        return self.commit_changes(dataset, parent, puts, deletes, message, author)

    def commit_changes(self, dataset: str, parent: Optional[str], puts: List[Tuple[str, str]],
                       deletes: List[str], message: str, author: Optional[str] = None) -> str:
        ds = self._id(dataset)
        uploads = []
        for path, local in puts:
            if not path.strip("/"):
                raise InvalidInputError("a file's path is needed")
            # Streamed from the file: an upload may be of any size.
            with open(local, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                up = self._call("PUT", f"/datasets/{ds}/uploads/{_quote(path)}", f,
                                {"Content-Type": "application/octet-stream", "Content-Length": str(size)})
            uploads.append(json.loads(up)["upload"])
        body: Dict[str, Any] = {"commit_message": message, "uploads": uploads, "delete": list(deletes)}
        if parent is not None:
            body["parent"] = parent
        return json.dumps(self._json("POST", f"/datasets/{ds}/commit", body))
