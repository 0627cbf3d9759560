"""SSH keys, images, compatibility hints and the SSH audit trail in the console."""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path

from gpudock.db.models import SshKeyModel, UserModel
from gpudock.images.catalog import ImageSpec
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.context import utc_now
from gpudock.services.images import catalog as images
from gpudock.services.ssh import keys as ssh_keys
from gpudock.services.ssh import sessions as ssh_sessions
from tests.support.key_proof import make_key, public_text
from tests.support.web import log_in
from tests.web.test_pages import create

NEW_CUDA = "nvidia/cuda:13.0.0-runtime-ubuntu24.04"


def user_named(platform: Platform, name: str) -> UserModel:
    return next(u for u in users.list_users(platform.ctx) if u.name == name)


_CHALLENGE = re.compile(r'name="challenge" value="([^"]+)"')
_COMMAND = re.compile(r'<code id="sign-command">([^<]+)</code>')


def proof_fields(page: str, key: Path) -> dict[str, str]:
    """Run the page's one-line command (with KEY's path) as a user would, and fill the form."""
    challenge = _CHALLENGE.search(page)
    command = _COMMAND.search(page)
    assert challenge and command, "no challenge or command on the page"
    assert f"'{challenge.group(1)}'" in html.unescape(command.group(1))
    line = html.unescape(command.group(1)).replace("~/.ssh/id_ed25519", str(key))
    signed = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True)
    return {"challenge": challenge.group(1), "signature": signed.stdout}


def test_ssh_keys_are_added_with_a_proof_listed_and_removed_by_their_owner_only(
    console: Platform, tmp_path: Path
) -> None:
    alice, bob = log_in(console, "alice"), log_in(console, "bob")
    key = make_key(tmp_path, "alice")
    text = public_text(key)
    page = alice.client.get("/ssh-keys").text
    assert "gpudock keys add" in page and "-n gpudock-key-proof" in page
    added = alice.post(
        "/ssh-keys", {"public_key": text + "\n", "name": "", **proof_fields(page, key)}
    )
    assert added.status_code == 303, added.text
    page = alice.client.get("/ssh-keys").text
    assert 'data-key="alice@test"' in page and "ssh-ed25519 256" in page
    assert 'data-proof="proven"' in page and 'id="unproven-notice"' not in page
    [added_key] = ssh_keys.list_keys(console.ctx, user_named(console, "alice"))
    secret = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
    private = alice.post("/ssh-keys", {"public_key": secret, "name": "laptop"})
    assert private.status_code == 422 and "that is a private key" in private.text
    assert "BEGIN OPENSSH" not in private.text and "b3BlbnNzaC1rZXktdjEAAAAA" not in private.text
    assert 'value="laptop"' in private.text  # the rest of the form is kept
    assert bob.post(f"/ssh-keys/{added_key.id}/delete").status_code == 404
    assert ssh_keys.list_keys(console.ctx, user_named(console, "alice")) != []
    assert alice.post(f"/ssh-keys/{added_key.id}/delete").status_code == 303
    assert ssh_keys.list_keys(console.ctx, user_named(console, "alice")) == []
    assert "No keys yet." in alice.client.get("/ssh-keys").text


def test_the_console_refuses_anothers_key_and_keeps_what_was_pasted(
    console: Platform, tmp_path: Path
) -> None:
    alice, bob = log_in(console, "alice"), log_in(console, "bob")
    alice_key, bob_key = make_key(tmp_path, "alice"), make_key(tmp_path, "bob")
    page = bob.client.get("/ssh-keys").text
    bare = bob.post("/ssh-keys", {"public_key": public_text(alice_key)})
    assert bare.status_code == 422 and 'data-field="signature"' in bare.text
    # bob signs his challenge with his own key but pastes alice's public key
    fields = proof_fields(page, bob_key)
    squat = bob.post("/ssh-keys", {"public_key": public_text(alice_key), **fields})
    assert squat.status_code == 422 and "the signature was made with the key" in squat.text
    assert fields["challenge"] in squat.text and "BEGIN SSH SIGNATURE" in squat.text  # kept
    assert ssh_keys.list_keys(console.ctx, user_named(console, "bob")) == []
    # fixing the pasted key keeps the challenge and the signature: no second signing
    fixed = bob.post("/ssh-keys", {"public_key": public_text(bob_key), **fields})
    assert fixed.status_code == 303, fixed.text
    # alice's own proof, replayed by bob, names no one
    mine = proof_fields(alice.client.get("/ssh-keys").text, alice_key)
    replayed = bob.post("/ssh-keys", {"public_key": public_text(alice_key), **mine})
    assert replayed.status_code == 422 and "issued to another account" in replayed.text
    assert "alice" not in replayed.text.split("<main", 1)[1].replace("alice@test", "")
    assert mine["challenge"] not in replayed.text  # a new challenge for bob to sign
    assert (
        alice.post("/ssh-keys", {"public_key": public_text(alice_key), **mine}).status_code == 303
    )


def test_unproven_keys_are_marked_and_explained(console: Platform, tmp_path: Path) -> None:
    alice = log_in(console, "alice")
    parsed = ssh_keys.parse_public_key(public_text(make_key(tmp_path, "old")))
    with console.ctx.sessions.begin() as session:
        session.add(
            SshKeyModel(
                id="k-legacy",
                user_id=user_named(console, "alice").id,
                name="old",
                algorithm=parsed.algorithm,
                bits=parsed.bits,
                fingerprint=parsed.fingerprint,
                public_key=parsed.public_key,
                created_at=utc_now(),
            )
        )
    page = alice.client.get("/ssh-keys").text
    assert 'data-proof="unproven"' in page and 'id="unproven-notice"' in page


def test_images_page_shows_compatibility_per_gpu_model(console: Platform) -> None:
    alice = log_in(console, "alice")
    page = alice.client.get("/images").text
    assert ">A100-80GB</th>" in page and ">RTX4090-24GB</th>" in page
    specs = images.list_images(console.ctx, user_named(console, "alice"))
    table = images.compatibility_table(console.ctx, user_named(console, "alice"), specs)
    for spec in specs:
        row = page.split(f'data-image="{spec.reference}"')[1].split("</tr>")[0]
        shown = re.findall(r'<span class="(good|bad)" title="([^"]*)"', row)
        expected = ["good" if v == "ok" else "bad" for v in table[spec.reference].values()]
        assert [kind for kind, _ in shown] == expected, spec.reference
        for (kind, title), verdict in zip(shown, table[spec.reference].values(), strict=True):
            assert kind == "good" or html.unescape(title) == verdict
        on_host = "yes" if console.ctx.runtime.image_present(spec.reference) else "no"
        assert f'data-on-host="{on_host}"' in row, spec.reference
    assert "not on the host: pulled from its registry at first use" in page


def test_build_and_delete_a_private_image_from_the_console(console: Platform) -> None:
    alice, bob = log_in(console, "alice"), log_in(console, "bob")
    base = console.ctx.settings.default_image
    built = alice.post(
        "/images/build", {"name": "my-env:v1", "dockerfile": f"FROM {base}\nRUN true\n"}
    )
    assert built.status_code == 201, built.text
    assert 'id="build-log"' in built.text and "Step 2/3 : RUN true" in built.text
    assert "gpudock/alice/my-env:v1" in built.text
    failed = alice.post(
        "/images/build", {"name": "broken", "dockerfile": f"FROM {base}\nRUN false\n"}
    )
    assert failed.status_code == 422 and 'id="build-log"' in failed.text
    bad_name = alice.post("/images/build", {"name": "Bad Name", "dockerfile": f"FROM {base}\n"})
    assert bad_name.status_code == 422 and "bad image name" in bad_name.text
    assert "gpudock/alice/my-env:v1" not in bob.client.get("/images").text  # private
    [mine] = [i for i in images.list_images(console.ctx, user_named(console, "alice")) if i.id]
    assert bob.post(f"/images/{mine.id}/delete").status_code == 404
    assert alice.post(f"/images/{mine.id}/delete").status_code == 303
    assert "gpudock/alice/my-env:v1" not in alice.client.get("/images").text


def test_save_an_instance_as_an_image_from_its_page(console: Platform) -> None:
    alice, bob = log_in(console, "alice"), log_in(console, "bob")
    instance_id = create(alice, name="work")
    assert 'id="save-image"' in alice.client.get(f"/instances/{instance_id}").text
    early = alice.post("/images/save", {"instance_id": instance_id, "name": "early"})
    assert early.status_code == 409 and "has no container yet" in early.text
    console.reconciler.drain()
    stolen = bob.post("/images/save", {"instance_id": instance_id, "name": "theft"})
    assert stolen.status_code == 404
    saved = alice.post("/images/save", {"instance_id": instance_id, "name": "snapshot"})
    assert saved.status_code == 303 and saved.headers["location"] == "/images"
    assert "gpudock/alice/snapshot:latest" in alice.client.get("/images").text
    assert "gpudock/alice/snapshot:latest" not in bob.client.get("/images").text


def test_create_form_hints_whether_the_image_runs_on_the_model(console: Platform) -> None:
    alice = log_in(console, "alice")
    form = alice.client.get("/instances/new").text
    assert 'data-compat="ok"' in form and '<datalist id="image-choices">' in form
    assert f'<option value="{NEW_CUDA}">' in form
    table = images.compatibility_table(
        console.ctx, user_named(console, "alice"), images.list_images(console.ctx, None)
    )
    for model, verdict in table[NEW_CUDA].items():
        hint = alice.client.get(
            f"/instances/new/image-hint?image={NEW_CUDA}&gpu_model={model}"
        ).text
        if verdict == "ok":
            assert 'data-compat="ok"' in hint
        else:
            assert 'data-compat="no"' in hint and verdict in hint.replace("&gt;", ">")
            assert "Images that can" in hint
    unknown = alice.client.get("/instances/new/image-hint?image=example/x:1&gpu_model=A100-80GB")
    assert 'data-compat="unknown"' in unknown.text


def test_an_image_outside_the_compatibility_data_shows_as_not_checked(console: Platform) -> None:
    alice = log_in(console, "alice")
    spec = ImageSpec(reference="acme/next:1", name="next", cuda="13.9")
    images.register(console.ctx, user_named(console, "alice"), spec)
    row = alice.client.get("/images").text.split('data-image="acme/next:1"')[1].split("</tr>")[0]
    assert '<span class="unchecked muted" title="unknown: CUDA 13.9' in html.unescape(row)
    hint = alice.client.get("/instances/new/image-hint?image=acme/next:1&gpu_model=A100-80GB")
    assert 'data-compat="unchecked"' in hint.text and "Not checked on A100-80GB" in hint.text
    assert "CUDA 13.9" in html.unescape(hint.text)


def test_instance_page_shows_its_ssh_audit_trail(console: Platform) -> None:
    alice, bob = log_in(console, "alice"), log_in(console, "bob")
    instance_id = create(alice, name="audited")
    assert "No SSH sessions yet." in alice.client.get(f"/instances/{instance_id}/live").text
    attempt = ssh_sessions.Attempt(
        login=instance_id,
        client_address="203.0.113.9",
        fingerprint="SHA256:x",
        instance_id=instance_id,
    )
    ssh_sessions.record_refusal(console.ctx, attempt, "the key belongs to another user")
    live = alice.client.get(f"/instances/{instance_id}/live").text
    assert 'data-session="refused"' in live and "203.0.113.9" in live
    assert "the key belongs to another user" in live
    assert bob.client.get(f"/instances/{instance_id}/live").status_code == 404
