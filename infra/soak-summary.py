"""The totals of a `make soak` run (infra/soak.sh) from its chunk logs.

Usage: soak-summary.py LOGS_DIR [SECONDS_TAKEN]. Prints the outcomes summed over the chunks
that finished, seeds, seeds/s, actors and faults per seed, and the violating seeds (each
replayed by `make soak SEED=n`). Exits 1 on a violation or a chunk that ended without figures
(one interrupted, or failed before its figures).
"""

import collections
import glob
import json
import re
import sys

FIGURES = re.compile(
    r"^simulation: (\d+) seeds from \d+, (\d+) violations, ([\d.]+) s, .*?, "
    r"([\d.]+) actors and ([\d.]+) faults per seed",
    re.M,
)


def main(logs, elapsed):
    seeds = violations = 0
    seconds = actors = faults = 0.0
    outcomes, violating, unfinished = collections.Counter(), [], []
    for path in sorted(glob.glob(f"{logs}/*.log")):
        text = open(path).read()
        figures = FIGURES.search(text)
        if not figures:
            unfinished.append(path)
            continue
        n = int(figures[1])
        seeds, violations = seeds + n, violations + int(figures[2])
        seconds += float(figures[3])
        actors, faults = actors + n * float(figures[4]), faults + n * float(figures[5])
        found = re.search(r"^simulation outcomes: (\{.*\})$", text, re.M)
        outcomes.update(json.loads(found[1]) if found else {})
        found = re.search(r"^simulation: violating seeds \[(.*)\]$", text, re.M)
        violating += re.findall(r'"(\d+)"', found[1]) if found else []
    wall = f"in {elapsed} s ({seeds / elapsed:.2f} seeds/s), " if elapsed else ""
    print(f"soak outcomes: {dict(sorted(outcomes.items()))}")
    print(
        f"soak: {seeds} seeds {wall}{seeds / max(seconds, 1):.2f} seeds/s per chunk, "
        f"{actors / max(seeds, 1):.1f} actors and {faults / max(seeds, 1):.1f} faults per seed, "
        f"{violations} violations; violating seeds {violating} (replay: make soak SEED=n)"
    )
    for path in unfinished:
        print(f"soak: a chunk ended without figures (interrupted, or failed): {path}")
    return 1 if violations or unfinished else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0))
