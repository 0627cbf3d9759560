"""SSH keys, the gateway's endpoint and the session audit through the API."""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient

from gpudock.platform import Platform
from gpudock.services.ssh import endpoint as ssh_endpoint
from gpudock.services.ssh import sessions as ssh_sessions
from gpudock.services.ssh.sessions import Attempt, Grant
from tests.support.factories import Tenant
from tests.support.key_proof import post_with_proof, public_text

API = "/api/v1"
ACCEPTED = {  # name → (ssh-keygen arguments, algorithm)
    "ed25519": (["-t", "ed25519"], "ssh-ed25519"),
    "ecdsa256": (["-t", "ecdsa", "-b", "256"], "ecdsa-sha2-nistp256"),
    "ecdsa384": (["-t", "ecdsa", "-b", "384"], "ecdsa-sha2-nistp384"),
    "ecdsa521": (["-t", "ecdsa", "-b", "521"], "ecdsa-sha2-nistp521"),
    "rsa2048": (["-t", "rsa", "-b", "2048"], "ssh-rsa"),
    "rsa3072": (["-t", "rsa", "-b", "3072"], "ssh-rsa"),
}
REFUSED = {"dsa": ["-t", "dsa"], "rsa1024": ["-t", "rsa", "-b", "1024"]}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Private key files made by ssh-keygen (the .pub beside each), by name."""
    directory = tmp_path_factory.mktemp("keys")
    made = {}
    for name, args in {**{n: a for n, (a, _) in ACCEPTED.items()}, **REFUSED}.items():
        path = directory / f"id_{name}"
        subprocess.run(
            ["ssh-keygen", "-q", *args, "-N", "", "-C", f"{name}@laptop", "-f", str(path)],
            check=True,
        )
        made[name] = path
    return made


def keygen_says(path: Path) -> tuple[int, str]:
    """(bits, fingerprint) as `ssh-keygen -lf` prints them."""
    out = subprocess.run(["ssh-keygen", "-lf", str(path)], capture_output=True, check=True)
    bits, fingerprint = out.stdout.decode().split()[:2]
    return int(bits), fingerprint


def add(client: TestClient, tenant: Tenant, key: Path, name: str | None = None) -> httpx.Response:
    """Register KEY (a private key's path) with a proof, as `gpudock keys add` does."""
    return post_with_proof(client, key, name, headers=tenant.headers)


def add_text(client: TestClient, tenant: Tenant, public_key: str) -> httpx.Response:
    """Send PUBLIC_KEY with an otherwise valid proof: it is refused before the proof counts."""
    response: httpx.Response = client.post(
        f"{API}/ssh-keys",
        json={"public_key": public_key, "challenge": "c", "signature": "s"},
        headers=tenant.headers,
    )
    return response


ROUTES = [
    ("get", "/ssh-keys"),
    ("post", "/ssh-keys"),
    ("post", "/ssh-keys/challenge"),
    ("delete", "/ssh-keys/k-000000000000"),
    ("get", "/ssh"),
    ("get", "/instances/i-0000000000/sessions"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_ssh_endpoint_needs_a_token(client: TestClient, method: str, path: str) -> None:
    for headers in ({}, {"Authorization": "Bearer gpd_not-a-real-token"}):
        response = client.request(method, API + path, headers=headers)
        assert response.status_code == 401, response.text


def test_another_tenants_key_and_sessions_are_not_found(
    client: TestClient, alice: Tenant, bob: Tenant, keys: dict[str, Path]
) -> None:
    key = add(client, alice, keys["ed25519"]).json()
    for ref in (key["id"], key["name"], key["fingerprint"]):
        response = client.delete(f"{API}/ssh-keys/{ref}", headers=bob.headers)
        assert response.status_code == 404, response.text
    assert client.get(f"{API}/ssh-keys", headers=bob.headers).json() == []
    body = {"name": "mine", "gpu_model": "A100-80GB"}
    instance = client.post(f"{API}/instances", json=body, headers=alice.headers).json()
    for ref in (instance["id"], "mine"):
        response = client.get(f"{API}/instances/{ref}/sessions", headers=bob.headers)
        assert response.status_code == 404, response.text
    assert client.get(f"{API}/instances/mine/sessions", headers=alice.headers).json() == []


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_keys_get_the_fingerprint_ssh_keygen_prints(
    client: TestClient, alice: Tenant, keys: dict[str, Path], name: str
) -> None:
    response = add(client, alice, keys[name])
    assert response.status_code == 201, response.text
    key = response.json()
    bits, fingerprint = keygen_says(keys[name])
    assert key["fingerprint"] == fingerprint
    assert (key["bits"], key["algorithm"], key["name"]) == (
        bits,
        ACCEPTED[name][1],
        f"{name}@laptop",
    )
    assert key["public_key"] == " ".join(public_text(keys[name]).split()[:2])
    assert key["verified"] is True and key["verified_at"] == key["created_at"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dsa", "'ssh-dss' keys are not accepted"),
        ("rsa1024", "RSA keys need at least 2048 bits, this one has 1024"),
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGarbage== me", "malformed ssh-ed25519 public key"),
        ("ssh-ed25519", "malformed ssh-ed25519 public key"),
        ("hello world", "'hello' keys are not accepted"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END", "that is a private key"),
        ("ssh-ed25519 AAAA\nssh-ed25519 AAAA", "expected one public key line"),
    ],
)
def test_other_and_malformed_keys_are_refused_with_the_reason(
    client: TestClient, alice: Tenant, keys: dict[str, Path], text: str, message: str
) -> None:
    public_key = public_text(keys[text]) if text in keys else text
    response = add_text(client, alice, public_key)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert message in error["message"] and error["field"] == "public_key"


def test_a_key_belongs_to_one_user_and_names_are_unique(
    client: TestClient, alice: Tenant, bob: Tenant, keys: dict[str, Path]
) -> None:
    assert add(client, alice, keys["ed25519"], "laptop").status_code == 201
    again = add(client, alice, keys["ed25519"], "other")
    assert again.status_code == 409 and "your account" in again.text
    # bob holds the private key too (a shared key): still one user per key, and
    # the answer says only that someone else has it, never who
    shared = add(client, bob, keys["ed25519"])
    assert shared.status_code == 409 and "another account" in shared.text
    assert "alice" not in shared.text
    same_name = add(client, alice, keys["ecdsa256"], "laptop")
    assert same_name.status_code == 409


def test_list_and_remove_by_id_name_or_fingerprint(
    client: TestClient, alice: Tenant, keys: dict[str, Path]
) -> None:
    made = [add(client, alice, keys[n]).json() for n in ("ed25519", "ecdsa256", "rsa2048")]
    listed = client.get(f"{API}/ssh-keys", headers=alice.headers).json()
    assert [k["id"] for k in listed] == [k["id"] for k in made]
    slashed = add(client, alice, _key_with_slash_in_fingerprint(keys)).json()
    response = client.delete(f"{API}/ssh-keys/{slashed['fingerprint']}", headers=alice.headers)
    assert response.status_code == 200, response.text
    for key, ref in zip(made, ("id", "name", "fingerprint"), strict=True):
        # a fingerprint's base64 often holds '/': the CLI quotes it, the server takes both
        response = client.delete(
            f"{API}/ssh-keys/{quote(key[ref], safe='')}", headers=alice.headers
        )
        assert response.status_code == 200 and response.json()["id"] == key["id"]
    assert client.get(f"{API}/ssh-keys", headers=alice.headers).json() == []


def test_the_gateway_endpoint_and_each_instances_ssh_command(
    client: TestClient, platform: Platform, alice: Tenant
) -> None:
    endpoint = client.get(f"{API}/ssh", headers=alice.headers).json()
    assert (endpoint["host"], endpoint["port"]) == ("127.0.0.1", 2222)
    host_key = ssh_endpoint.host_key_path(platform.ctx.settings)
    assert host_key.stat().st_mode & 0o777 == 0o600
    public = host_key.with_name(host_key.name + ".pub")
    assert endpoint["host_key"] == " ".join(public.read_text().split()[:2])
    assert endpoint["host_key_fingerprint"] == keygen_says(public)[1]
    body = {"name": "train", "gpu_model": "A100-80GB"}
    instance = client.post(f"{API}/instances", json=body, headers=alice.headers).json()
    assert instance["ssh_command"] == f"ssh -p 2222 {instance['id']}@127.0.0.1"


def test_sessions_are_listed_newest_first(
    client: TestClient, platform: Platform, alice: Tenant
) -> None:
    body = {"name": "train", "gpu_model": "A100-80GB"}
    instance = client.post(f"{API}/instances", json=body, headers=alice.headers).json()
    me = client.get(f"{API}/users/me", headers=alice.headers).json()
    grant = Grant(me["id"], "alice", "k-1", "SHA256:abc", instance["id"], "train")
    opened = ssh_sessions.open_session(platform.ctx, grant, "train", "127.0.0.1:5555")
    ssh_sessions.close_session(platform.ctx, opened, bytes_in=10, bytes_out=20)
    attempt = Attempt("train", "127.0.0.1:6666", "SHA256:def", instance_id=instance["id"])
    ssh_sessions.record_refusal(platform.ctx, attempt, "agent forwarding refused")
    rows = client.get(f"{API}/instances/train/sessions", headers=alice.headers).json()
    assert [(r["outcome"], r["reason"]) for r in rows] == [
        ("refused", "agent forwarding refused"),
        ("closed", ""),
    ]
    assert (rows[1]["bytes_in"], rows[1]["bytes_out"]) == (10, 20)
    assert rows[1]["key_fingerprint"] == "SHA256:abc" and rows[1]["ended_at"] is not None


def _key_with_slash_in_fingerprint(keys: dict[str, Path]) -> Path:
    directory = next(iter(keys.values())).parent
    for attempt in range(200):
        path = directory / f"id_slash{attempt}"
        if not path.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True
            )
        if "/" in keygen_says(path.with_suffix(".pub"))[1]:
            return path
    raise AssertionError("no fingerprint with a '/' in 200 keys")
