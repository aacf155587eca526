"""Where a stage's samples go, thread by thread, from a py-spy speedscope profile:
`python experiments/host_time/spy_threads.py PROFILE.json [N]`.

Record one with `py-spy record -r 50 -f speedscope -o PROFILE.json -- python -m pipeline <phase>`
in an exported copy of a trial (measure.py --work DIR leaves one). py-spy keeps only the
samples in which a thread was running Python or native code it can see (not waiting), so a
thread's total approaches its CPU seconds on an idle machine and exceeds them under load
(runnable but not running counts too): compare the shares, not the totals. Prints, per
thread, its sampled seconds, then the N functions with the largest inclusive share and the
15 lines with the largest own (self) share."""
from __future__ import annotations

import collections
import json
import sys


def main(path: str, n: int = 25) -> None:
    doc = json.load(open(path))
    frames = doc["shared"]["frames"]
    for prof in doc["profiles"]:
        incl, own, total = collections.Counter(), collections.Counter(), 0.0
        for stack, w in zip(prof["samples"], prof["weights"]):
            total += w
            seen = set()
            for i in stack:
                key = (frames[i]["name"], frames[i].get("file", "").split("/")[-1])
                if key not in seen:
                    incl[key] += w
                    seen.add(key)
            if stack:
                f = frames[stack[-1]]
                own[(f["name"], f.get("file", "").split("/")[-1], f.get("line"))] += w
        print(f"== {prof['name']}: {total:.1f} s sampled")
        skip = ("threading.py", "thread.py", "<frozen runpy>", "__main__.py")
        for key, w in [kv for kv in incl.most_common() if kv[0][1] not in skip][:n]:
            print(f"  {w / total * 100:5.1f} %  {key[0]} ({key[1]})")
        print("  -- own")
        for key, w in own.most_common(15):
            print(f"  {w / total * 100:5.1f} %  {key[0]} ({key[1]}:{key[2]})")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
