"""detafs from Python: read any version of a dataset, commit changes.

    import detafs
    store = detafs.Store()                       # as the CLI: $DETAFS_STORE, else the embedded store
    ds = store.dataset("weather")
    ds.versions()                                # [{"version": 1, "message": ..., ...}, ...]
    with ds.open("2024/may.csv", version="v3") as f:
        head = f.read(100)
    with ds.stage(message="add June") as s:      # one atomic commit at the end
        s.write("2024/june.csv", b"...")

Paths for pandas, pyarrow, polars and DuckDB: ``detafs://DATASET@VERSION/path``
(see ``detafs.filesystem``). Every error is an exception carrying the
message the CLI prints: ``FileNotFoundError`` for a missing dataset,
version or path, ``PermissionError`` for a denial, a ``detafs.Error``
subclass for the rest. Objects are safe to share between threads; the
GIL is let go while the store is read.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Tuple, Union

from ._detafs import (
    ConflictError,
    DamagedError,
    ErasedError,
    Error,
    InvalidInputError,
    NothingToCommitError,
    StoreError,
    WrongKeyError,
)
from ._detafs import Store as _Store

__all__ = [
    "Store",
    "Dataset",
    "Stage",
    "Error",
    "ConflictError",
    "InvalidInputError",
    "NothingToCommitError",
    "StoreError",
    "DamagedError",
    "ErasedError",
    "WrongKeyError",
    "parse_url",
]

PathLike = Union[str, "os.PathLike[str]"]


def parse_url(url: str) -> Tuple[str, str, str]:
    """Splits ``[detafs://]DATASET[@VERSION][/path]`` into (dataset, version, path).

    VERSION is what the CLI takes (``v3``, ``3``, ``latest``, a tag,
    ``latest~1``); without it, ``latest``.
    """
    rest = url[len("detafs://") :] if url.startswith("detafs://") else url
    rest = rest.lstrip("/")
    head, _, path = rest.partition("/")
    dataset, at, version = head.partition("@")
    if not dataset:
        raise InvalidInputError(f"{url!r} names no dataset (detafs://DATASET@VERSION/path)")
    if at and not version:
        raise InvalidInputError(f"{url!r}: an empty version after '@'")
    return dataset, version or "latest", path.strip("/")


class _RawFile(io.RawIOBase):
    """A version's file: each read fetches (and verifies) only the chunks it needs."""

    def __init__(self, reader: Any, name: str) -> None:
        super().__init__()
        self._reader = reader
        self._pos = 0
        self.name = name

    @property
    def size(self) -> int:
        return self._reader.size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._reader.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._reader.read_range(self._pos, self._pos + len(view))
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def readall(self) -> bytes:
        data = self._reader.read_range(self._pos, self._reader.size)
        self._pos += len(data)
        return data


def _entry(dataset: str, version: str, folder: str, row: Tuple[Any, ...]) -> Dict[str, Any]:
    name, kind, size, mode, (sec, nsec), target = row
    path = f"{folder}/{name}" if folder and name else (name or folder)
    out = {
        "name": path,
        "type": kind,
        "size": size,
        "mode": mode,
        "mtime": sec + nsec / 1e9,
    }
    if target is not None:
        out["target"] = target
    return out


class Dataset:
    """One dataset of a store: its versions, their files, and commits."""

    def __init__(self, store: "Store", name: str) -> None:
        self.store = store
        self.name = name

    def __repr__(self) -> str:
        return f"<detafs.Dataset {self.name!r} of {self.store.url}>"

    def versions(self) -> List[Dict[str, Any]]:
        """Every version, oldest first, as ``detafs log --json`` shows each."""
        return json.loads(self.store._s.versions_json(self.name))

    def log(self) -> List[Dict[str, Any]]:
        """Every version, newest first (``detafs log --json``)."""
        return list(reversed(self.versions()))

    def resolve(self, version: str = "latest") -> int:
        """The version number ``version`` names now."""
        return self.store._s.resolve(self.name, str(version))

    def info(self, path: str = "", version: str = "latest") -> Dict[str, Any]:
        """What ``path`` of ``version`` is: name, type, size, mode, mtime."""
        return _entry(self.name, version, "", self.store._s.info(self.name, str(version), path))

    def ls(self, path: str = "", version: str = "latest") -> List[Dict[str, Any]]:
        """The entries of folder ``path`` of ``version``, in name order."""
        rows = self.store._s.ls(self.name, str(version), path)
        folder = path.strip("/")
        return [_entry(self.name, version, folder, r) for r in rows]

    def walk(self, path: str = "", version: str = "latest") -> List[Dict[str, Any]]:
        """Every entry below folder ``path`` of ``version``."""
        rows = self.store._s.walk(self.name, str(version), path)
        folder = path.strip("/")
        return [_entry(self.name, version, folder, r) for r in rows]

    def open(self, path: str, version: str = "latest", buffering: int = 1 << 20) -> io.BufferedReader:
        """``path`` of ``version`` as a seekable binary file."""
        reader = self.store._s.open(self.name, str(version), path)
        return io.BufferedReader(_RawFile(reader, f"detafs://{self.name}@{version}/{path}"), buffering)

    def read(self, path: str, version: str = "latest") -> bytes:
        """All of ``path`` of ``version``."""
        with self.open(path, version) as f:
            return f.read()

    def diff(self, old: str, new: str = "latest") -> List[Tuple[str, str]]:
        """(``A``, ``M`` or ``D``, path) from version ``old`` to ``new``."""
        return [(str(tag), path) for tag, path in self.store._s.diff(self.name, str(old), str(new))]

    def tags(self) -> Dict[str, int]:
        """Tag name -> version number."""
        return dict(self.store._s.tags(self.name))

    def tag(self, version: str, name: str) -> int:
        """Names ``version`` ``name`` (tags never move); its number."""
        return self.store._s.tag(self.name, str(version), name)

    def retention(self) -> Dict[str, Any]:
        """The rules, holds and expired versions (``detafs retention show --json``)."""
        return json.loads(self.store._s.retention(self.name))

    def set_retention(self, **rules: Any) -> None:
        """Sets the whole rule set: ``keep_last``, ``keep_hourly``, ``keep_daily``,
        ``keep_weekly``, ``keep_monthly``, ``keep_yearly`` (counts),
        ``keep_within`` and ``min_age`` (seconds), ``keep_tagged``, ``locked``."""
        self.store._s.set_retention(self.name, json.dumps(rules))

    def forget(self, *versions: str, dry_run: bool = False) -> Dict[str, Any]:
        """Expires ``versions`` (or what the rules do not keep); the plan,
        as ``detafs forget --json`` prints it."""
        return json.loads(self.store._s.forget(self.name, [str(v) for v in versions], dry_run))

    def hold(self, version: str, reason: str) -> int:
        """Puts a legal hold on ``version``; its number."""
        return self.store._s.hold(self.name, str(version), reason)

    def release(self, version: str, reason: str) -> int:
        """Ends the legal hold on ``version``; its number."""
        return self.store._s.hold(self.name, str(version), reason, True)

    def erase(
        self, path: str, reason: str, from_version: Optional[str] = None, dry_run: bool = False
    ) -> Dict[str, Any]:
        """Erases ``path``'s bytes from every version holding it (``detafs erase``):
        versions, files, blobs and bytes zeroed."""
        return json.loads(self.store._s.erase(self.name, path, reason, from_version, dry_run))

    def commit(self, folder: PathLike, message: str, author: Optional[str] = None) -> Dict[str, Any]:
        """Records local ``folder`` as the next version; its log entry."""
        return json.loads(self.store._s.commit(self.name, os.fspath(folder), message, author))

    def stage(self, message: str, author: Optional[str] = None) -> "Stage":
        """Changes made in a ``with`` block, committed as one version at its end."""
        return Stage(self, message, author)


class Stage:
    """Changes to a dataset, committed atomically when the ``with`` block
    ends; nothing is committed if it raises. Built on the version that was
    newest when it began: a version committed meanwhile that changed other
    paths is built upon, one that changed the same paths raises
    ``ConflictError`` (its ``paths`` named) and commits nothing."""

    def __init__(self, dataset: Dataset, message: str, author: Optional[str] = None) -> None:
        self.dataset = dataset
        self.message = message
        self.author = author
        self.parent: Optional[int] = None
        self._dir: Optional[str] = None
        self._puts: Dict[str, str] = {}
        self._deletes: set = set()
        self._files = 0
        self.committed: Optional[Dict[str, Any]] = None

    def __enter__(self) -> "Stage":
        versions = self.dataset.versions()
        self.parent = versions[-1]["version"] if versions else None
        self._dir = tempfile.mkdtemp(prefix="detafs-stage-")
        return self

    def _local(self, path: str) -> str:
        if self._dir is None:
            raise InvalidInputError("a Stage is used inside its `with` block")
        path = path.strip("/")
        if not path:
            raise InvalidInputError("a file's path is needed")
        old = self._puts.get(path)
        if old is not None:
            return old
        self._files += 1
        return os.path.join(self._dir, str(self._files))

    def open(self, path: str, mode: str = "wb") -> io.BufferedWriter:
        """A file at ``path`` to write (``wb``) whose bytes the commit takes."""
        if mode not in ("wb", "w+b", "xb"):
            raise InvalidInputError(f"mode {mode!r}: a stage's files are written whole ('wb')")
        local = self._local(path)
        self._puts[path.strip("/")] = local
        self._deletes.discard(path.strip("/"))
        return open(local, "wb")

    def write(self, path: str, data: bytes) -> None:
        """``path`` takes ``data``."""
        with self.open(path) as f:
            f.write(data)

    def put(self, path: str, local_file: PathLike) -> None:
        """``path`` takes the bytes of ``local_file`` (copied now)."""
        with self.open(path) as f, open(os.fspath(local_file), "rb") as src:
            shutil.copyfileobj(src, f)

    def delete(self, path: str) -> None:
        """``path`` goes."""
        path = path.strip("/")
        self._puts.pop(path, None)
        self._deletes.add(path)

    def changed(self) -> bool:
        return bool(self._puts or self._deletes)

    def commit(self) -> Optional[Dict[str, Any]]:
        """Commits now (the ``with`` block does it at its end)."""
        if not self.changed():
            return None
        parent = None if self.parent is None else f"v{self.parent}"
        entry = self.dataset.store._s.commit_changes(
            self.dataset.name,
            parent,
            sorted(self._puts.items()),
            sorted(self._deletes),
            self.message,
            self.author,
        )
        self.committed = json.loads(entry)
        # Committed once: the block's end commits only what comes after.
        self._puts.clear()
        self._deletes.clear()
        self.parent = self.committed["version"]
        return self.committed

    def discard(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._puts.clear()
        self._deletes.clear()

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        try:
            if kind is None:
                self.commit()
        finally:
            self.discard()


class Store:
    """A detafs store, opened as the CLI opens it.

    ``url``: a folder, ``s3://bucket/prefix``, ``gs://…``, ``az://…``
    (default ``$DETAFS_STORE``, else the embedded store); ``key_file``
    (default ``$DETAFS_KEY_FILE``, else the one ``detafs init`` wrote) or
    ``passphrase`` (default ``$DETAFS_PASSWORD``) for an encrypted store;
    ``cache_dir`` (default ``$DETAFS_CACHE``); ``timeout`` in seconds for a
    remote store's retries (default 60); ``cache_memory``, bytes of verified
    file content kept in memory so that a file read again is a copy
    (default ``$DETAFS_CACHE_MEMORY``, else an eighth of the machine's
    memory, 64 MiB to 4 GiB; at least 16 MiB). S3 and Azure credentials
    come from the usual environment variables, as for the CLI.

    ``url`` ``https://host:port`` is a gateway (``detafs serve``), for
    hosts without store credentials: ``api_key`` (default
    ``$DETAFS_API_KEY``) or an OAuth2 ``token``, and ``ca``, the PEM file of
    its certificate or CA (default: the system's). Its policy applies.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        key_file: Optional[PathLike] = None,
        passphrase: Optional[str] = None,
        cache_dir: Optional[PathLike] = None,
        timeout: Optional[float] = None,
        api_key: Optional[str] = None,
        token: Optional[str] = None,
        ca: Optional[PathLike] = None,
        cache_memory: Optional[int] = None,
    ) -> None:
        if url is not None and url.startswith("https://"):
            from .remote import Remote

            self._s: Any = Remote(
                url, api_key=api_key, token=token, ca=None if ca is None else os.fspath(ca), timeout=timeout
            )
            return
        self._s = _Store(
            url,
            key_file=None if key_file is None else os.fspath(key_file),
            passphrase=passphrase,
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            timeout=timeout,
            cache_memory=cache_memory,
        )

    @property
    def url(self) -> str:
        return self._s.url

    def __repr__(self) -> str:
        return f"<detafs.Store {self.url}>"

    def datasets(self) -> List[str]:
        """The datasets' names."""
        return self._s.datasets()

    def create_dataset(self, name: str) -> Dataset:
        """A new, empty dataset."""
        self._s.create_dataset(name)
        return Dataset(self, name)

    def dataset(self, name: str) -> Dataset:
        """Dataset ``name`` (checked when first used)."""
        return Dataset(self, name)

    def open(self, url: str, version: Optional[str] = None) -> io.BufferedReader:
        """``detafs://DATASET@VERSION/path`` (or ``DATASET/path`` and ``version``) to read."""
        dataset, at, path = parse_url(url)
        return self.dataset(dataset).open(path, version or at)

    def log(self, dataset: str) -> List[Dict[str, Any]]:
        return self.dataset(dataset).log()

    def versions(self, dataset: str) -> List[Dict[str, Any]]:
        return self.dataset(dataset).versions()

    def ls(self, url: str) -> List[Dict[str, Any]]:
        dataset, version, path = parse_url(url)
        return self.dataset(dataset).ls(path, version)

    def diff(self, dataset: str, old: str, new: str = "latest") -> List[Tuple[str, str]]:
        return self.dataset(dataset).diff(old, new)

    def tag(self, dataset: str, version: str, name: str) -> int:
        return self.dataset(dataset).tag(version, name)

    def commit(self, dataset: str, folder: PathLike, message: str) -> Dict[str, Any]:
        return self.dataset(dataset).commit(folder, message)

