#!/usr/bin/env bash
# Waits until URL answers any HTTP status, for at most SECONDS, giving up early if process PID
# (optional) exits: infra/wait-for.sh URL SECONDS [PID]
url=$1; seconds=${2:-30}; pid=${3:-0}
python3 - "$url" "$seconds" "$pid" <<'PY'
import os, sys, time, urllib.request, urllib.error
url, deadline, pid = sys.argv[1], time.time() + float(sys.argv[2]), int(sys.argv[3])
def alive():
    if not pid:
        return True
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False
while time.time() < deadline and alive():
    try:
        urllib.request.urlopen(url, timeout=1)
        sys.exit(0)
    except urllib.error.HTTPError:
        sys.exit(0)
    except Exception:
        time.sleep(0.2)
print(f"{url} did not answer", file=sys.stderr)
sys.exit(1)
PY
