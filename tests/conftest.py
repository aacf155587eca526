"""Keep every side effect of the suite inside the repo or the test's tmp_path."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("DVC_SITE_CACHE_DIR", str(REPO / ".pytest-tmp" / "dvc-site-cache"))
os.environ.setdefault("DASK_TEMPORARY_DIRECTORY", str(REPO / ".pytest-tmp" / "dask"))
for k, v in {"GIT_AUTHOR_NAME": "tessera-test", "GIT_AUTHOR_EMAIL": "test@tessera.local",
             "GIT_COMMITTER_NAME": "tessera-test", "GIT_COMMITTER_EMAIL": "test@tessera.local"}.items():
    os.environ.setdefault(k, v)
