"""An MCP client session against the API's `POST /mcp`, with the official SDKs: the MCP Python
SDK (Streamable HTTP) and x402's MCP client, which pays a paid tool call with an EIP-3009
authorization signed by PRIVATE_KEY (the x402 MCP transport: `_meta["x402/payment"]`).

It lists the tools, gets a quote, provisions a paid server (paying the quote), waits for it
to be ready, renews it (`renew_server`, paid the same way), moves it to RESIZE_PLAN
(`resize_server`, paid the same way, its paidUntil kept) and deletes it, printing each step.
`make mcp-session KEY=svc_…` runs it against `make dev`;
the conformance run (infra/conformance.sh) runs it too, as an interoperability check.

With APPROVAL_KEY (a key whose policy refuses the plan), OWNER_PRIVATE_KEY (its owner's wallet)
and OWNER_SESSION (a session of that owner), it then asks with that key as a client without
URL-mode elicitation: the refusal must be a tool error carrying the approval; the owner grants it
(`svcctl approve`, which signs an EIP-4361 message naming it), and the same call then pays and
gets its server.

Environment: MCP_URL (http://127.0.0.1:9000/mcp), API_KEY (required), PRIVATE_KEY (the payer: on
make dev's rails one of anvil's funded accounts, as `make mcp-session` passes; a throwaway key
by default, which holds no USDC), PLAN
(B1-1-1gb-20s-shared), RESIZE_PLAN (B1-2-2gb-40s-shared; empty: no resize), REGION
(LT-Siauliai), NETWORK (eip155:84532), MAX_USD (50: the
most it pays; x402's clients default to $1).
"""

import asyncio
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import httpx2
from eth_account import Account
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from x402 import x402Client
from x402.mcp import x402MCPClient
from x402.mechanisms.evm.exact import ExactEvmClientScheme
from x402.mechanisms.evm.signers import EthAccountSigner


def show(step, value):
    print(f"== {step}")
    print(json.dumps(value, indent=2)[:1500])


class SessionAdapter:
    """x402's MCP client (2.25) was written against the MCP SDK 1.x: it calls
    `call_tool({name, arguments, _meta}, read_timeout_seconds=timedelta)` and reads the result's
    wire names (`isError`, `structuredContent`, `_meta`, content as dicts). The SDK 2.x session
    takes arguments and seconds and answers pydantic models with snake_case names; this adapts
    one to the other and nothing else."""

    def __init__(self, session):
        self.session = session

    async def call_tool(self, params, read_timeout_seconds=None, **_):
        result = await self.session.call_tool(
            params["name"],
            params.get("arguments"),
            read_timeout_seconds=getattr(read_timeout_seconds, "total_seconds", lambda: None)(),
            meta=params.get("_meta"),
        )
        return SimpleNamespace(**result.model_dump(by_alias=True, exclude_none=True))


async def main():
    url = os.environ.get("MCP_URL", "http://127.0.0.1:9000/mcp")
    key = os.environ["API_KEY"]
    plan = os.environ.get("PLAN", "B1-1-1gb-20s-shared")
    region = os.environ.get("REGION", "LT-Siauliai")
    network = os.environ.get("NETWORK", "eip155:84532")
    account = Account.from_key(os.environ.get("PRIVATE_KEY") or Account.create().key)
    # x402's clients refuse to pay more than $1 by default; this session allows MAX_USD.
    payment_client = x402Client().set_spend_controls(
        {"max_amount_per_payment": os.environ.get("MAX_USD", "50")}
    )
    payment_client.register(network, ExactEvmClientScheme(EthAccountSigner(account)))

    http = httpx2.AsyncClient(headers={"X-API-Key": key}, timeout=60)
    async with http, streamable_http_client(url, http_client=http) as (read, write), ClientSession(
        read, write
    ) as session:
        init = await session.initialize()
        print(f"== connected to {init.server_info.name} {init.server_info.version} "
              f"(MCP {init.protocol_version})")
        tools = await session.list_tools()
        show("tools", [t.name for t in tools.tools])

        async def call(name, args):
            result = await session.call_tool(name, args)
            if result.is_error:
                sys.exit(f"{name}: tool error: {result.content[0].text}")
            return result.structured_content

        projects = (await call("list_projects", {}))["projects"]
        project = projects[0]["id"]
        quote = await call("get_quote", {"plan": plan, "region": region, "projectId": project})
        show("get_quote", {k: quote[k] for k in ("amount", "amountUsd", "network", "payTo",
                                                  "validUntil")})

        paying = x402MCPClient(SessionAdapter(session), payment_client, auto_payment=True)
        paid = await paying.call_tool(
            "provision_server",
            {"projectId": project, "plan": plan, "region": region, "hostname": "mcp-session"},
        )
        if paid.is_error:
            sys.exit(f"provision_server: {paid.content[0]['text']}")
        created = json.loads(paid.content[0]["text"])
        settlement = paid.payment_response
        show("provision_server (paid)", {
            "sandboxId": created["sandboxId"],
            "server": {k: created.get("server", {}).get(k) for k in ("id", "hostname", "status")},
            "x402/payment-response": settlement.model_dump(by_alias=True) if settlement else None,
        })
        if not paid.payment_made or settlement is None or not settlement.success:
            sys.exit("the payment was not settled")
        if settlement.amount not in (None, "", quote["amount"]) or \
                settlement.payer.lower() != account.address.lower():
            sys.exit("the settlement is not the quote's")

        # Ready (deployed, SSH answered): its first deployment is over, so it can be renewed.
        for _ in range(9):
            waited = await call("wait_for_sandbox", {"sandboxId": created["sandboxId"],
                                                     "waitFor": ["ready", "failed"],
                                                     "timeout": 20})
            if waited.get("reached"):
                break
        show("wait_for_sandbox", {k: waited.get(k) for k in ("stage", "reached", "access")})
        if waited.get("stage") != "ready":
            sys.exit("the server never became ready")
        server = created["server"]["id"]

        renewed = await paying.call_tool("renew_server", {"serverId": server, "periods": 1})
        if renewed.is_error:
            sys.exit(f"renew_server: {renewed.content[0]['text']}")
        renewal = json.loads(renewed.content[0]["text"])
        settlement = renewed.payment_response
        show("renew_server (paid)", {
            "renewal": renewal,
            "x402/payment-response": settlement.model_dump(by_alias=True) if settlement else None,
        })
        if not renewed.payment_made or settlement is None or not settlement.success:
            sys.exit("the renewal's payment was not settled")
        if renewal.get("paidUntil", "") <= waited.get("lease", {}).get("paidUntil", ""):
            sys.exit("the renewal did not move paidUntil")
        await resize(paying, server, renewal["paidUntil"])
        show("delete_server", await call("delete_server", {"serverId": server}))
    if os.environ.get("APPROVAL_KEY"):
        await approved(url, project, plan, region, payment_client)


async def resize(paying, server, paid_until):
    """`resize_server` to RESIZE_PLAN, paid like a renewal: the plan moves, paidUntil does not."""
    plan = os.environ.get("RESIZE_PLAN", "B1-2-2gb-40s-shared")
    if not plan:
        return
    resized = await paying.call_tool("resize_server", {"serverId": server, "plan": plan})
    if resized.is_error:
        sys.exit(f"resize_server: {resized.content[0]['text']}")
    result = json.loads(resized.content[0]["text"])
    settlement = resized.payment_response
    show("resize_server (paid)", {
        "resize": result,
        "x402/payment-response": settlement.model_dump(by_alias=True) if settlement else None,
    })
    if not resized.payment_made or settlement is None or not settlement.success:
        sys.exit("the resize's payment was not settled")
    if result.get("plan") != plan or result.get("paidUntil") != paid_until:
        sys.exit("the resize did not move the plan alone")


async def approved(url, project, plan, region, payment_client):
    """A key over its policy asks, its owner approves, the same call pays and gets a server."""
    http = httpx2.AsyncClient(headers={"X-API-Key": os.environ["APPROVAL_KEY"]}, timeout=60)
    async with http, streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        args = {"projectId": project, "plan": plan, "region": region, "hostname": "mcp-approved"}
        refused = await session.call_tool("provision_server", args)
        approval = (refused.structured_content or {}).get("approval")
        show("provision_server over the key's policy", refused.structured_content)
        if not refused.is_error or not approval or approval.get("state") != "pending":
            sys.exit("a key over its policy was not answered with an approval")
        api = url.rsplit("/mcp", 1)[0]
        granted = subprocess.run(
            [os.environ.get("SVCCTL", "target/debug/svcctl"), "approve", "--api", api, "--approval",
             approval["approvalId"], "--chain-id", "84532"],
            env={**os.environ, "PRIVATE_KEY": os.environ["OWNER_PRIVATE_KEY"],
                 "SESSION": os.environ["OWNER_SESSION"]},
            capture_output=True, text=True, check=False)
        if granted.returncode != 0:
            sys.exit(f"the owner's grant failed: {granted.stdout}{granted.stderr}")
        show("the owner approves", json.loads(granted.stdout)["state"])
        paying = x402MCPClient(SessionAdapter(session), payment_client, auto_payment=True)
        bought = await paying.call_tool("provision_server", args)
        if bought.is_error or not bought.payment_made:
            sys.exit(f"approved, not bought: {bought.content[0]['text']}")
        show("provision_server, approved and paid",
             {"sandboxId": json.loads(bought.content[0]["text"])["sandboxId"]})


if __name__ == "__main__":
    asyncio.run(main())
