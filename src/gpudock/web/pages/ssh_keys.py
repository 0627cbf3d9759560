"""SSH keys: the user's public keys, added by pasting one with a proof that the user
holds its private half (the page shows the one-line command that makes it), and
removed with a button."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from gpudock.errors import Conflict, InvalidRequest
from gpudock.services.accounts.logins import WebSession
from gpudock.services.context import ServiceContext
from gpudock.services.ssh import key_proof as ssh_key_proof
from gpudock.services.ssh import keys as ssh_keys
from gpudock.services.ssh.key_proof import Challenge, KeyProof
from gpudock.web.deps import ConsoleRoute, Context, CsrfViewer, Viewer, form_error, redirect, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


def _page(
    request: Request,
    ctx: ServiceContext,
    viewer: WebSession,
    status_code: int = 200,
    *,
    challenge: Challenge | None = None,
    error: InvalidRequest | Conflict | None = None,
    form: dict[str, str] | None = None,
) -> Response:
    challenge = challenge or ssh_key_proof.issue_challenge(ctx, viewer.user)
    keys = ssh_keys.list_keys(ctx, viewer.user)
    return render(
        request,
        "ssh_keys.html",
        viewer,
        status_code,
        keys=keys,
        unproven=[k for k in keys if k.verified_at is None],
        challenge=challenge,
        sign_command=challenge.sign_command(),
        **form_error(error),
        form=form or {},
    )


@router.get("/ssh-keys")
def ssh_keys_page(request: Request, ctx: Context, viewer: Viewer) -> Response:
    return _page(request, ctx, viewer)


@router.post("/ssh-keys")
def add_key(
    request: Request,
    ctx: Context,
    viewer: CsrfViewer,
    public_key: Annotated[str, Form(max_length=ssh_keys.MAX_KEY_TEXT)],
    challenge: Annotated[str, Form(max_length=256)] = "",
    signature: Annotated[str, Form(max_length=ssh_key_proof.MAX_SIGNATURE_TEXT)] = "",
    name: Annotated[str, Form(max_length=128)] = "",
) -> Response:
    proof = KeyProof(challenge, signature)
    try:
        ssh_keys.add_key(ctx, viewer.user, public_key, name.strip() or None, proof)
    except (InvalidRequest, Conflict) as exc:
        # The signature pasted is over the challenge sent: keep both while it is
        # valid, so fixing the name or the key does not mean signing again.
        kept = ssh_key_proof.still_valid(ctx, viewer.user, challenge)
        # A private key pasted by mistake is a secret: never send it back in the page.
        echoed = "" if "PRIVATE KEY" in public_key else public_key
        form = {"public_key": echoed, "name": name, "signature": signature if kept else ""}
        return _page(request, ctx, viewer, 422, challenge=kept, error=exc, form=form)
    return redirect("/ssh-keys")


@router.post("/ssh-keys/{key_id}/delete")
def remove_key(ctx: Context, viewer: CsrfViewer, key_id: str) -> Response:
    """Another user's key id is a 404 (the service looks among the viewer's own)."""
    ssh_keys.remove_key(ctx, viewer.user, key_id)
    return redirect("/ssh-keys")
