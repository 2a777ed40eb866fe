#!/usr/bin/env bash
# Waits until URL answers any HTTP status, for at most SECONDS: infra/wait-for.sh URL SECONDS
url=$1; seconds=${2:-30}
python3 - "$url" "$seconds" <<'PY'
import sys, time, urllib.request, urllib.error
url, deadline = sys.argv[1], time.time() + float(sys.argv[2])
while time.time() < deadline:
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
