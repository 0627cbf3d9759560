"""The caller's own API tokens: create (shown once), list, revoke."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpudock.api.deps import Context, CurrentCaller
from gpudock.api.errors import error_responses
from gpudock.api.links import links
from gpudock.api.schemas import TokenCreateRequest, TokenPublic, TokenWithValuePublic
from gpudock.services.accounts import tokens
from gpudock.services.accounts.tokens import TokenView

router = APIRouter(prefix="/tokens", tags=["tokens"])


def _public(view: TokenView, current_id: str) -> TokenPublic:
    t = view.token
    return TokenPublic(
        id=t.id,
        name=t.name,
        state=view.state.value,
        created_at=t.created_at,
        expires_at=t.expires_at,
        last_used_at=t.last_used_at,
        revoked_at=t.revoked_at,
        current=t.id == current_id,
    )


@router.post(
    "",
    response_model=TokenWithValuePublic,
    status_code=201,
    responses={
        **error_responses(409),
        **links(201, "token_ref", "id", {"revoke": ("DELETE", "/tokens/{token_ref}")}),
    },
)
def create_token(
    ctx: Context, caller: CurrentCaller, body: TokenCreateRequest
) -> TokenWithValuePublic:
    """A new token for yourself; its value is in this answer only."""
    created = tokens.create_token(
        ctx, caller.user, body.name, expires_in=body.expires_in, expires_at=body.expires_at
    )
    public = _public(created.view, caller.token_id)
    return TokenWithValuePublic(**public.model_dump(), token=created.value)


@router.get("", response_model=list[TokenPublic])
def list_tokens(
    ctx: Context,
    caller: CurrentCaller,
    include_revoked: Annotated[bool, Query(description="Also list revoked tokens")] = False,
) -> list[TokenPublic]:
    """Your tokens (never anyone else's): name, state, created, expires, last used."""
    views = tokens.list_tokens(ctx, caller.user, include_revoked=include_revoked)
    return [_public(v, caller.token_id) for v in views]


@router.delete("/{token_ref}", response_model=TokenPublic, responses=error_responses(404))
def revoke_token(ctx: Context, caller: CurrentCaller, token_ref: str) -> TokenPublic:
    """By id or name, among your unrevoked tokens; it stops working at once."""
    return _public(tokens.revoke_token(ctx, caller.user, token_ref), caller.token_id)
