"""The provider's double held to the provider's own SDK (issue 48, point 1): Cherry Servers'
official Python SDK (cherryservers-sdk-python, pinned in infra/requirements.txt), pointed at the
stack's simulator, drives every resource the service uses — teams, projects, regions, plans (by
team, and one by slug), images, SSH keys (create, get, list, rename, delete), a server created
and polled by the SDK to `deployed`, read, listed, renamed and retagged, powered off and on,
rebooted, rebuilt and deleted — and every answer must parse into the SDK's models with the
fields the service reads present. Then the server objects the service itself answers
(provisioning's 201, the project listing, a sandbox's server) must parse as the SDK's
`ServerModel`; and every JSON body written to the provider during the run (the simulator keeps
them: `GET /_sim/bodies`) must be a valid request of the SDK's, naming no field its schema does
not know. Where the simulator and the SDK disagree, the SDK wins: this fails.

Usage: provider-contract.py <simulator base URL, e.g. http://127.0.0.1:9302/v1> <token>
       <API base URL> <API key>
"""

import json
import sys
import urllib.request

from cherryservers_sdk_python import (
    _client,
    images,
    plans,
    projects,
    regions,
    servers,
    sshkeys,
    teams,
)

SIM, TOKEN = sys.argv[1].rstrip("/") + "/", sys.argv[2]
API, KEY = sys.argv[3].rstrip("/"), sys.argv[4]
PUBLIC_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl contract"
)

client = _client.CherryApiClient(token=TOKEN, api_endpoint_base=SIM)
timeout = 30


def need(model, fields):
    """The fields the service reads, present on `model`."""
    missing = [f for f in fields if getattr(model, f, None) is None]
    assert not missing, f"{type(model).__name__} lacks {missing}: {model!r}"
    return model


def show(step, value):
    print(f"== {step}")
    print(json.dumps(value, default=str)[:600])


# The catalogue: what discovery and pricing read.
team = need(teams.TeamClient(client, timeout).get_all()[0].get_model(), ["id", "name"])
project = need(
    projects.ProjectClient(client, timeout).list_by_team(team.id)[0].get_model(), ["id", "name"]
)
region_list = [
    need(r.get_model(), ["id", "slug", "name"])
    for r in regions.RegionClient(client, timeout).get_all()
]
plan_client = plans.PlanClient(client, timeout)
plan_list = [
    need(p.get_model(), ["id", "slug", "name", "type", "pricing"])
    for p in plan_client.list_by_team(team.id)
]
plan = need(
    plan_client.get_by_id_or_slug("cloud_vps_free").get_model(),
    ["id", "slug", "available_regions"],
)
assert plan.slug == "cloud_vps_free"
assert plan_client.get_by_id_or_slug(plan.id).get_model().slug == plan.slug
image_list = [
    need(i.get_model(), ["slug", "name"])
    for i in images.ImageClient(client, timeout).list_by_plan(plan.slug)
]
show("catalogue", {"team": team.id, "project": project.id, "regions": len(region_list),
                   "plans": len(plan_list), "images": [i.slug for i in image_list]})

# SSH keys: what provisioning registers and retires.
keys = sshkeys.SSHKeyClient(client, timeout)
key = keys.create(sshkeys.CreationRequest(label="contract", key=PUBLIC_KEY))
need(key.get_model(), ["id", "label", "key", "fingerprint"])
assert keys.get_by_id(key.get_id()).get_model().label == "contract"
assert key.get_id() in [k.get_id() for k in keys.get_all()]
key.update(sshkeys.UpdateRequest(label="contract-renamed"))
assert keys.get_by_id(key.get_id()).get_model().label == "contract-renamed"
show("ssh keys", {"id": key.get_id(), "fingerprint": key.get_model().fingerprint})

# A server, as the service orders, reads, lists and manages it.
server_client = servers.ServerClient(client, timeout)
order = servers.CreationRequest(
    region="LT-Siauliai",
    plan=plan.slug,
    image=image_list[0].slug,
    hostname="contract",
    ssh_keys={key.get_id()},
    tags={"owner": "contract"},
)
server = server_client.create(order, project.id, deployment_timeout=120)
fields = ["id", "hostname", "status", "region", "plan", "ip_addresses", "tags", "created_at"]
need(server.get_model(), fields)
assert server.get_status() == "deployed", server.get_status()
assert server.get_id() in [s.get_id() for s in server_client.list_by_project(project.id)]
server.update(servers.UpdateRequest(hostname="contract-renamed", tags={"owner": "renamed"}))
renamed = server_client.get_by_id(server.get_id()).get_model()
assert (renamed.hostname, renamed.tags) == ("contract-renamed", {"owner": "renamed"}), renamed
server.power_off()
server.power_on()
server.reboot()
server.rebuild(servers.RebuildRequest(image=image_list[0].slug, hostname="contract-rebuilt",
                                      password="Contract-Pass-1234", ssh_keys={key.get_id()}))
server.delete()
key.delete()
show("a server through the SDK", {"id": server.get_id(), "status": "deployed, then deleted"})


# The server objects the service answers: each one the SDK's ServerModel.
def api(method, path, body=None):
    request = urllib.request.Request(
        f"{API}{path}", method=method, data=json.dumps(body).encode() if body else None,
        headers={"x-api-key": KEY, "content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        text = answer.read()
        return answer.status, json.loads(text) if text else None


status, created = api("POST", f"/api/cloud/servers/{project.id}",
                      {"plan": plan.slug, "region": "LT-Siauliai", "hostname": "contract-api"})
assert status == 201, (status, created)
ours = [servers.ServerModel.model_validate(created)]
_, listing = api("GET", f"/api/cloud/servers/{project.id}")
ours += [servers.ServerModel.model_validate(s) for s in listing]
_, sandbox = api("GET", f"/api/sandboxes/{created['sandboxId']}")
ours.append(servers.ServerModel.model_validate(sandbox["server"]))
for model in ours:
    need(model, ["id", "hostname", "status", "region", "plan"])
assert api("DELETE", f"/api/cloud/servers/{created['id']}")[0] in (200, 202, 204)
show("the service's server objects as the SDK's ServerModel", {"parsed": len(ours)})

# What the service wrote to the provider (the simulator kept every body): each a valid request of
# the SDK's, naming no field the SDK's schema does not know.
ACTIONS = {"power-off": servers.PowerOffRequest, "power-on": servers.PowerOnRequest,
           "reboot": servers.RebootRequest, "rebuild": servers.RebuildRequest,
           "enter-rescue-mode": servers.EnterRescueModeRequest,
           "exit-rescue-mode": servers.ExitRescueModeRequest}
with urllib.request.urlopen(SIM.removesuffix("v1/") + "_sim/bodies", timeout=30) as answer:
    written = json.load(answer)
checked = 0
for request in written:
    path, body = request["path"], request["body"]
    if request["method"] == "POST" and path.endswith("/servers"):
        schema = servers.CreationRequest
    elif request["method"] == "POST" and path.endswith("/actions") and body["type"] == "upgrade":
        # The Python SDK has no upgrade; the Go client's ServerAction sends `type` and `plan`.
        assert set(body) == {"type", "plan"} and isinstance(body["plan"], str), body
        checked += 1
        continue
    elif request["method"] == "POST" and path.endswith("/actions"):
        schema = ACTIONS[body["type"]]
    elif request["method"] == "POST" and path == "/ssh-keys":
        schema = sshkeys.CreationRequest
    elif request["method"] == "PUT" and path.startswith("/ssh-keys/"):
        schema = sshkeys.UpdateRequest
    elif request["method"] == "PUT" and path.startswith("/servers/"):
        schema = servers.UpdateRequest
    else:
        raise AssertionError(f"a request the contract does not know: {request}")
    schema.model_validate(body)
    unknown = set(body) - set(schema.model_fields)
    assert not unknown, f"{request['method']} {path} sends {unknown}, unknown to {schema.__name__}"
    checked += 1
assert checked >= 3, written
show("the bodies written to the provider, as the SDK's requests", {"checked": checked})
print("== done")
