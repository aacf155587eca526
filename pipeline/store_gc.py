"""`python -m pipeline.store_gc [--store URL] [--max-gb G] [--dry-run]`: what the task-result
store holds, and its least recently used entries removed until it holds at most G GB.

Why: the store only grows. Fan-out items (expand's candidates, placement's tile problems: ~5 MB
a 27-layer So400m trial) and a sweep's phase results (hundreds of MB a trial) are entries, and
a code change makes every older key unreachable; nothing else removes them. An entry's mtime is its last use (Store.get
touches it), so a gc keeps what recent trials read or wrote. A removed entry is recomputed
when next needed, so a gc loses no result, only the time to compute it again. Left-over
temporary files of writers killed mid-write (older than an hour) go too; a lock file is
removed only where no one holds it. Local stores only (a path or file:// URL)."""
from __future__ import annotations

import argparse
import fcntl
import os
import sys
import time
from pathlib import Path

from .store import _TMP_PREFIX, LOCK_SUFFIX, REPO_ROOT, Store, StoreError

STALE_TMP_S = 3600


def entries(store: Store) -> list[tuple[float, int, Path]]:
    """(mtime, bytes, path) of every entry, least recently used first."""
    out = []
    for k in store.keys():
        p = Path(store.path(k))
        try:
            st = p.stat()
        except FileNotFoundError:         # removed meanwhile (another gc, a corrupt entry)
            continue
        out.append((st.st_mtime, st.st_size, p))
    return sorted(out)


def _leftovers(store: Store, now: float) -> list[Path]:
    """Temporary files older than STALE_TMP_S and lock files no one holds, removed."""
    out = []
    for p in Path(store.root).glob(f"*/{_TMP_PREFIX}*"):
        try:
            if now - p.stat().st_mtime > STALE_TMP_S:
                p.unlink()
                out.append(p)
        except FileNotFoundError:
            pass
    for p in Path(store.root).glob(f"*/*{LOCK_SUFFIX}"):
        try:
            fd = os.open(p, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            p.unlink(missing_ok=True)     # unheld: removed under our lock, as a holder does
            out.append(p)
        except BlockingIOError:           # held: its computation is running
            pass
        finally:
            os.close(fd)
    return out


def gc(store: Store, max_bytes: int, dry_run: bool = False) -> dict:
    """Remove least recently used entries until the store holds at most max_bytes."""
    es = entries(store)
    total = sum(b for _, b, _ in es)
    removed = freed = 0
    for _, b, p in es:
        if total - freed <= max_bytes:
            break
        if not dry_run:
            p.unlink(missing_ok=True)
        removed, freed = removed + 1, freed + b
    left = [] if dry_run else _leftovers(store, time.time())
    return dict(entries=len(es), bytes=total, removed=removed, freed=freed, leftovers=len(left))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.store_gc", description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", help="the store's path (default: $TESSERA_STORE or <repo>/.tessera-store)")
    ap.add_argument("--max-gb", type=float, help="remove least recently used entries down to this size")
    ap.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    a = ap.parse_args(argv)
    try:
        url = a.store or os.environ.get("TESSERA_STORE") or str(REPO_ROOT / ".tessera-store")    # Store.default()
        if "://" in url and not url.startswith("file://"):
            raise StoreError(f"store {url}: gc works on a store at a local path only")
        store = Store(url)
        if a.max_gb is None:
            es = entries(store)
            print(f"{store.url}: {len(es)} entries, {sum(b for _, b, _ in es) / 1e9:.2f} GB")
            return 0
        if a.max_gb < 0:
            raise StoreError(f"--max-gb must be >= 0, got {a.max_gb}")
        r = gc(store, int(a.max_gb * 1e9), a.dry_run)
    except StoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    verb = "would remove" if a.dry_run else "removed"
    print(f"{store.url}: {r['entries']} entries, {r['bytes'] / 1e9:.2f} GB; {verb} the {r['removed']} least "
          f"recently used ({r['freed'] / 1e9:.2f} GB)" + (f", and {r['leftovers']} left-over files" if r["leftovers"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
