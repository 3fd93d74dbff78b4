"""The output folder: checked before anything runs, locked while written, and owned.

- :func:`check_out_dir`: ``--out`` that is a file, lies under a file, or cannot be
  created or written is a one-line ConfigError, found before simulating.
- :class:`OutLock`: one ``pagesim run`` at a time writes a folder. The lock is an
  exclusive ``flock`` on the folder itself (no lock file is left behind); a second
  run on the same folder says so on stderr and waits, then finds the first one's
  runs in the cache. Where ``fcntl`` is missing (Windows) there is no lock.
- :class:`Manifest` (``.pagesim-outputs.json``): the files pagesim wrote there and
  whether they came from a full or a ``--quick`` run. A rerun removes the files the
  previous run wrote that this one does not (charts no longer asked for, tables of
  seeds no longer run), refuses to overwrite a file pagesim did not write, and
  refuses to mix a ``--quick`` run with a full one in one folder. A folder written
  by a pagesim from before manifests (``results.csv``, ``experiment.json`` and
  ``runs/`` but no manifest) is taken as pagesim's: its files of the planned names
  are overwritten, and it gets a manifest.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pagesim.errors import ConfigError

MANIFEST_NAME = ".pagesim-outputs.json"


def check_out_dir(out_dir: Path) -> None:
    """Raise a one-line ConfigError if ``out_dir`` cannot be an output folder."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir}: is a file, not a folder; give a folder path")
    for parent in out_dir.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"--out {out_dir}: {parent} is a file, not a folder")
            target = out_dir if out_dir.exists() else parent
            if not os.access(target, os.W_OK | os.X_OK):
                raise ConfigError(f"--out {out_dir}: {target} is not writable")
            return


def make_out_dir(out_dir: Path) -> list[Path]:
    """Create ``out_dir`` (and missing parents); returns the folders created, deepest last."""
    check_out_dir(out_dir)
    created = [p for p in [*reversed(out_dir.parents), out_dir] if not p.exists()]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out_dir}: cannot create the folder ({exc.strerror})") from None
    return created


def remove_if_empty(folders: list[Path]) -> None:
    """Remove the folders this run created, deepest first, where they are still empty."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:
            return


class OutLock:
    """An exclusive lock on the output folder for the length of a run (see module doc)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self._fd: int | None = None

    def __enter__(self) -> OutLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return self
        fd = os.open(self.out_dir, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(
                    f"pagesim: another pagesim run is writing {self.out_dir}; waiting for it",
                    file=sys.stderr,
                )
                fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


class Manifest:
    """The files pagesim wrote in a folder, and the variant (``full`` / ``quick``)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.path = out_dir / MANIFEST_NAME
        self.variant: str | None = None
        self.files: set[str] = set()
        self.is_legacy = not self.path.exists() and all(
            (out_dir / name).exists() for name in ("results.csv", "experiment.json", "runs")
        )
        if self.path.is_file():
            try:
                doc = json.loads(self.path.read_text())
                self.variant = doc.get("variant")
                self.files = set(doc.get("files", []))
            except (OSError, ValueError, AttributeError):
                raise ConfigError(
                    f"{self.path}: unreadable output manifest; remove it (and the outputs "
                    "it listed) or choose another --out"
                ) from None

    def check(self, variant: str, planned: list[str]) -> None:
        """Refuse to mix variants or to overwrite a file pagesim did not write."""
        if self.variant is not None and self.variant != variant:
            raise ConfigError(
                f"--out {self.out_dir}: holds the outputs of a {self.variant} run; a {variant} "
                f"run would overwrite or mix with them; choose another --out"
            )
        if self.is_legacy:
            return
        for name in planned:
            if name not in self.files and (self.out_dir / name).exists():
                raise ConfigError(
                    f"--out {self.out_dir}: {name} exists and was not written by pagesim; "
                    "move it or choose another --out"
                )

    def claim(self, variant: str, planned: list[str]) -> None:
        """Record ``planned`` as pagesim's before writing them, so that a run interrupted
        while writing its outputs leaves files its rerun knows as its own."""
        from pagesim.experiments.outputs import atomic_write_text

        self.variant, self.files = variant, self.files | set(planned)
        doc = {"variant": variant, "files": sorted(self.files)}
        atomic_write_text(self.path, json.dumps(doc, indent=1) + "\n")

    def replace(self, variant: str, written: list[str]) -> list[str]:
        """Record ``written``; remove the files of the previous run that are not in it.
        Returns the removed names."""
        from pagesim.experiments.outputs import atomic_write_text

        stale = sorted(self.files - set(written))
        for name in stale:
            (self.out_dir / name).unlink(missing_ok=True)
        doc = {"variant": variant, "files": sorted(written)}
        atomic_write_text(self.path, json.dumps(doc, indent=1) + "\n")
        self.variant, self.files = variant, set(written)
        return stale
