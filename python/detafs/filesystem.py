"""``detafs://DATASET@VERSION/path`` for fsspec, and so for pandas,
pyarrow, polars and DuckDB (``duckdb.register_filesystem(fsspec.filesystem("detafs"))``).

VERSION is what the CLI takes (``v3``, ``3``, ``latest``, a tag,
``latest~1``); without ``@VERSION``, ``latest``. Reads fetch only the
chunks a range needs. Writes happen only inside a transaction::

    fs = fsspec.filesystem("detafs", message="nightly refresh")
    with fs.transaction:
        df.to_parquet("detafs://weather/2024/june.parquet", filesystem=fs)

which becomes one atomic commit per dataset written when the block ends
(nothing is committed if it raises; a conflict raises
``detafs.ConflictError`` naming the paths).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Dict, List, Optional

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from fsspec.transaction import Transaction

from . import InvalidInputError, Stage, Store, parse_url


class DetafsFile(AbstractBufferedFile):
    """A version's file read in ranges (``_fetch_range``)."""

    def __init__(self, fs: "DetafsFileSystem", path: str, reader: Any, **kwargs: Any) -> None:
        self._reader = reader
        super().__init__(fs, path, mode="rb", size=reader.size, **kwargs)

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self._reader.read_range(start, end)


class DetafsTransaction(Transaction):
    """Writes collected per dataset, each committed as one version at the end."""

    def __init__(self, fs: "DetafsFileSystem", message: Optional[str] = None) -> None:
        super().__init__(fs)
        self.message = message or fs.message
        self.stages: Dict[str, Stage] = {}

    def stage(self, dataset: str) -> Stage:
        s = self.stages.get(dataset)
        if s is None:
            s = self.fs.store.dataset(dataset).stage(self.message)
            s.__enter__()
            self.stages[dataset] = s
        return s

    def complete(self, commit: bool = True) -> None:
        try:
            if commit:
                for s in self.stages.values():
                    s.commit()
        finally:
            for s in self.stages.values():
                s.discard()
            self.stages.clear()
            self.files.clear()
            self.fs._intrans = False
            self.fs._transaction = None


class _StagedFile:
    """A file written inside a transaction: a local file the commit takes."""

    def __init__(self, stage: Stage, path: str) -> None:
        self._f = stage.open(path, "wb")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> "_StagedFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._f.close()

    def write(self, data: bytes) -> int:
        return self._f.write(data)

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return self._f.seekable()

    def close(self) -> None:
        self._f.close()

    @property
    def closed(self) -> bool:
        return self._f.closed


class DetafsFileSystem(AbstractFileSystem):
    """fsspec's view of a detafs store: ``store`` is ``Store``'s ``url``
    (``storage_options={"store": ...}`` for pandas), the other arguments
    ``Store``'s, and ``message`` the commits of transactions'."""

    protocol = "detafs"
    root_marker = ""
    transaction_type = DetafsTransaction

    def __init__(
        self,
        store: Optional[str] = None,
        *,
        key_file: Optional[str] = None,
        passphrase: Optional[str] = None,
        cache_dir: Optional[str] = None,
        timeout: Optional[float] = None,
        api_key: Optional[str] = None,
        token: Optional[str] = None,
        ca: Optional[str] = None,
        cache_memory: Optional[int] = None,
        message: str = "committed through fsspec",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.store = Store(
            store, key_file=key_file, passphrase=passphrase, cache_dir=cache_dir, timeout=timeout,
            api_key=api_key, token=token, ca=ca, cache_memory=cache_memory,
        )
        self.message = message

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]  # type: ignore[return-value]
        path = str(path)
        if path.startswith("detafs://"):
            path = path[len("detafs://") :]
        return path.strip("/")

    def _split(self, path: str):
        return parse_url(self._strip_protocol(path))

    @staticmethod
    def _full(dataset: str, path: str, spec: Optional[str]) -> str:
        head = dataset if spec is None else f"{dataset}@{spec}"
        return f"{head}/{path}" if path else head

    def _spec(self, path: str) -> Optional[str]:
        head = self._strip_protocol(path).split("/", 1)[0]
        return head.split("@", 1)[1] if "@" in head else None

    def _info_of(self, path: str, row: Dict[str, Any]) -> Dict[str, Any]:
        dataset, _, _ = self._split(path)
        kind = row["type"]
        out = dict(row)
        out["name"] = self._full(dataset, row["name"], self._spec(path))
        out["type"] = {"directory": "directory", "file": "file"}.get(kind, "other")
        if kind == "link":
            out["islink"] = True
        return out

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> List[Any]:
        dataset, version, inner = self._split(path)
        ds = self.store.dataset(dataset)
        info = ds.info(inner, version)
        rows = ds.ls(inner, version) if info["type"] == "directory" else [info]
        out = [self._info_of(path, r) for r in rows]
        return out if detail else [o["name"] for o in out]

    def info(self, path: str, **kwargs: Any) -> Dict[str, Any]:
        dataset, version, inner = self._split(path)
        row = self.store.dataset(dataset).info(inner, version)
        row["name"] = inner
        return self._info_of(path, row)

    def find(
        self, path: str, maxdepth: Optional[int] = None, withdirs: bool = False, detail: bool = False, **kwargs: Any
    ) -> Any:
        dataset, version, inner = self._split(path)
        ds = self.store.dataset(dataset)
        top = ds.info(inner, version)
        if top["type"] != "directory":
            rows = [dict(top, name=inner)]
        else:
            rows = ds.walk(inner, version)
        out: Dict[str, Dict[str, Any]] = {}
        base = inner.count("/") + 1 if inner else 0
        for r in rows:
            depth = r["name"].count("/") + 1 - base
            if maxdepth is not None and depth > maxdepth:
                continue
            if r["type"] == "directory" and not withdirs:
                continue
            i = self._info_of(path, r)
            out[i["name"]] = i
        if withdirs and top["type"] == "directory":
            i = self._info_of(path, dict(top, name=inner))
            out[i["name"]] = i
        names = sorted(out)
        return {n: out[n] for n in names} if detail else names

    def cat_file(self, path: str, start: Optional[int] = None, end: Optional[int] = None, **kwargs: Any) -> bytes:
        dataset, version, inner = self._split(path)
        reader = self.store._s.open(dataset, version, inner)
        size = reader.size
        start = 0 if start is None else (start if start >= 0 else max(size + start, 0))
        end = size if end is None else (end if end >= 0 else max(size + end, 0))
        return reader.read_range(start, end)

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: Optional[int] = None,
        autocommit: bool = True,
        cache_options: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> Any:
        dataset, version, inner = self._split(path)
        if "r" in mode and "+" not in mode:
            reader = self.store._s.open(dataset, version, inner)
            # Verified bytes are kept below (`cache_memory`) and sequential
            # reads fetched ahead there: fsspec's own read-ahead would only
            # copy them once more (and fetch past what a ranged reader asks).
            kwargs.setdefault("cache_type", "none")
            return DetafsFile(
                self, path, reader, block_size=block_size or 4 << 20, cache_options=cache_options, **kwargs
            )
        if mode not in ("wb", "xb"):
            raise InvalidInputError(f"mode {mode!r}: detafs files are read ('rb') or written whole ('wb')")
        return _StagedFile(self._stage_for(path, dataset), inner)

    def _stage_for(self, path: str, dataset: str) -> Stage:
        if not self._intrans:
            raise InvalidInputError(
                f"{path}: versions never change; write inside `with fs.transaction:` "
                "(one commit at its end)"
            )
        spec = self._spec(path)
        if spec not in (None, "latest"):
            raise InvalidInputError(f"{path}: a commit writes the next version, not {spec}")
        return self.transaction.stage(dataset)

    def rm_file(self, path: str) -> None:
        dataset, _, inner = self._split(path)
        self._stage_for(path, dataset).delete(inner)

    def rm(self, path: Any, recursive: bool = False, maxdepth: Optional[int] = None) -> None:
        paths = path if isinstance(path, list) else [path]
        for p in paths:
            dataset, version, inner = self._split(p)
            if self.store.dataset(dataset).info(inner, version)["type"] == "directory":
                if not recursive:
                    raise IsADirectoryError(p)
                for f in self.find(p):
                    self.rm_file(f)
            else:
                self.rm_file(p)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        # Folders exist through the files committed in them.
        pass

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        pass

    def put_file(self, lpath: str, rpath: str, callback: Any = None, **kwargs: Any) -> None:
        if os.path.isdir(lpath):
            return
        dataset, _, inner = self._split(rpath)
        self._stage_for(rpath, dataset).put(inner, lpath)

    def get_file(self, rpath: str, lpath: str, callback: Any = None, outfile: Any = None, **kwargs: Any) -> None:
        if self.isdir(rpath):
            os.makedirs(lpath, exist_ok=True)
            return
        dataset, version, inner = self._split(rpath)
        with self.store.dataset(dataset).open(inner, version) as src:
            if outfile is not None:
                shutil.copyfileobj(src, outfile)
                return
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(lpath)) or ".")
            with os.fdopen(fd, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(tmp, lpath)

    def created(self, path: str) -> Any:
        return self.modified(path)

    def modified(self, path: str) -> Any:
        import datetime

        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], tz=datetime.timezone.utc)

    def ukey(self, path: str) -> str:
        dataset, version, inner = self._split(path)
        return f"{dataset}@v{self.store.dataset(dataset).resolve(version)}/{inner}"
