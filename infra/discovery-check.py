"""What an x402 indexer and a cataloguing facilitator read of the API, checked by their rules.

Usage: discovery-check.py <API base URL> <API key>   (the conformance run calls it)

Without a key: the root OpenAPI document as x402scan reads it (docs/DISCOVERY.md: `openapi`,
`info.title` and `info.version`, `paths`; each paid operation with `x-payment-info` naming the
`x402` protocol and a price mode, a documented 402 and its `security`), `/.well-known/x402`
(x402scan's `{version: 1, resources}`) and `/llms.txt`. With the key: a provisioning's 402 over
HTTP and over MCP, whose `bazaar` extension x402's own facilitator code
(`x402.extensions.bazaar`: `validate_discovery_extension_spec`, then `extract_discovery_info`,
which validates `info` against the extension's JSON Schema) must accept and catalogue, from a
payment payload that echoes it as a client does. Prints one line per document; exits non-zero
naming what failed.
"""

import base64
import json
import sys
import urllib.error
import urllib.request

from x402.extensions.bazaar.facilitator import (
    extract_discovery_info,
    validate_discovery_extension_spec,
)

API, KEY = sys.argv[1].rstrip("/"), sys.argv[2]
PLAN = {"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai", "hostname": "indexed-1"}


def fail(why):
    sys.exit(f"discovery: {why}")


def get(path, headers=None):
    request = urllib.request.Request(API + path, headers=headers or {})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.status, answer.headers, answer.read()


def post(path, body, headers):
    request = urllib.request.Request(
        API + path, data=json.dumps(body).encode(), method="POST",
        headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def catalogued(required, where):
    """What a facilitator catalogues of `required` (a v2 PaymentRequired) once a client echoes
    its extensions in its payment payload."""
    bazaar = (required.get("extensions") or {}).get("bazaar")
    if not bazaar:
        fail(f"{where}: the 402 has no bazaar extension")
    spec = validate_discovery_extension_spec(bazaar)
    if not spec.valid:
        fail(f"{where}: against the bazaar spec: {spec.errors}")
    payload = {"x402Version": 2, "resource": required["resource"],
               "accepted": required["accepts"][0], "extensions": required["extensions"],
               "payload": {}}
    found = extract_discovery_info(payload, required["accepts"][0])
    if found is None:
        fail(f"{where}: x402's facilitator code catalogues nothing (info fails its schema?)")
    return found


def main():
    status, _, body = get("/openapi.json")
    document = json.loads(body)
    for field in ("openapi", "paths"):
        if field not in document:
            fail(f"/openapi.json lacks `{field}`")
    if not (document.get("info", {}).get("title") and document["info"].get("version")):
        fail("/openapi.json lacks info.title or info.version")
    paid = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            info = operation.get("x-payment-info")
            if info is None:
                continue
            paid.append(f"{method.upper()} {path}")
            if "x402" not in info.get("protocols", []):
                fail(f"{method} {path}: x-payment-info names no x402 protocol")
            mode = info.get("pricingMode")
            priced = (mode == "quote" or (mode == "fixed" and "price" in info)
                      or (mode == "range" and "minPrice" in info and "maxPrice" in info))
            if not priced:
                fail(f"{method} {path}: no valid pricing in {info}")
            if "402" not in operation.get("responses", {}) or not operation.get("security"):
                fail(f"{method} {path}: a paid operation needs a 402 answer and its security")
    if not paid:
        fail("/openapi.json has no paid operation")
    print(f"discovery: /openapi.json: {len(paid)} paid operations ({', '.join(paid)})")

    _, _, body = get("/.well-known/x402")
    well_known = json.loads(body)
    resources = well_known.get("resources", [])
    if well_known.get("version") != 1 or not resources:
        fail(f"/.well-known/x402 is not x402scan's shape: {well_known}")
    print(f"discovery: /.well-known/x402: {len(resources)} resources")

    _, headers, body = get("/llms.txt")
    if not headers.get("content-type", "").startswith("text/plain") or not body.startswith(b"# "):
        fail("/llms.txt is not a text guide")
    print(f"discovery: /llms.txt: {len(body)} bytes")

    key = {"X-API-Key": KEY}
    _, _, body = get("/api/cloud/teams", key)
    team = json.loads(body)[0]["id"]
    _, _, body = get(f"/api/cloud/projects/{team}", key)
    project = json.loads(body)[0]["id"]
    status, headers, body = post(f"/api/cloud/servers/{project}", PLAN, key)
    if status != 402:
        fail(f"an unpaid provisioning answered {status}: {body[:300]!r}")
    required = json.loads(base64.b64decode(headers["payment-required"]))
    found = catalogued(required, "HTTP")
    if (found.method, found.route_template) != ("POST", "/api/cloud/servers/:id"):
        fail(f"HTTP: catalogued as {found.method} {found.route_template}")
    print(f"discovery: HTTP 402: catalogued as {found.method} {found.resource_url}")

    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "provision_server", "arguments": {"projectId": project, **PLAN}}}
    status, _, body = post("/mcp", call, {**key, "accept": "application/json, text/event-stream",
                                          "mcp-protocol-version": "2025-06-18"})
    result = json.loads(body).get("result", {})
    if status != 200 or not result.get("isError"):
        fail(f"an unpaid provision_server answered {status}: {body[:300]!r}")
    found = catalogued(result["structuredContent"], "MCP")
    if found.tool_name != "provision_server":
        fail(f"MCP: catalogued as tool {found.tool_name}")
    print(f"discovery: MCP 402: catalogued as tool {found.tool_name} at {found.resource_url}")


main()
