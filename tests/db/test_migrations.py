"""The migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, insert, select, text

from gpudock.db.engine import (
    alembic_config,
    applied_revisions,
    head_revisions,
    make_engine,
    make_sessionmaker,
    migrate,
)
from gpudock.db.models import (
    Base,
    BillingAccountModel,
    BillingMonthTotalModel,
    BillingPostingModel,
    InstanceEventModel,
    InstanceModel,
    UserState,
)
from gpudock.gpu.simulated import SimulatedGpuSource
from gpudock.messages import localize
from gpudock.platform import Platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import tokens, users
from gpudock.services.billing import postings as ledger
from gpudock.services.billing.balances import month_spent
from gpudock.services.context import ServiceContext
from gpudock.services.instances import actions as instances
from gpudock.settings import Settings


def _database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh migrated PostgreSQL database, or an empty SQLite file."""
    if backend == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return f"sqlite:///{tmp_path / 'm.db'}"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_migrations_match_the_models(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    engine = make_engine(_database_url(backend, tmp_path, request))
    try:
        migrate(engine)
        migrate(engine)  # idempotent
        with engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert diff == [], f"models and migrations differ: {diff}"
    finally:
        engine.dispose()


def test_tokens_and_users_made_before_0009_keep_working(tmp_path: Path) -> None:
    """Every head but 0009 first (the schema of a running installation), a user
    and their token in it, then the upgrade: the token is a named one and works."""
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    try:
        config = alembic_config(engine)
        for head in ("0002", "0003", "0004", "0005", "0006"):
            command.upgrade(config, head)
        created = datetime(2026, 1, 1, tzinfo=UTC)
        with engine.begin() as connection:
            connection.execute(
                text("INSERT INTO users VALUES ('u1', 'alice', 0, :at)"), {"at": created}
            )
            connection.execute(
                text("INSERT INTO api_tokens VALUES ('t1', 'u1', :hash, 'default', :at)"),
                {"hash": tokens.hash_token("gpd_old-token"), "at": created},
            )
        migrate(engine)
        ctx = ServiceContext(
            settings=Settings(data_dir=tmp_path),
            sessions=make_sessionmaker(engine),
            runtime=FakeRuntime(),
            gpu_source=SimulatedGpuSource("1x1xA100-80GB"),
        )
        caller = tokens.authenticate(ctx, "gpd_old-token")
        assert (caller.user.name, caller.user.state) == ("alice", UserState.ACTIVE)
        [view] = tokens.list_tokens(ctx, caller.user)
        assert (view.token.name, view.state, view.token.expires_at) == ("default", "active", None)
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_downgrading_0009_keeps_users_and_their_tokens(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A table rebuild on SQLite would drop `users`, cascading into api_tokens."""
    engine = make_engine(_database_url(backend, tmp_path, request))
    try:
        migrate(engine)
        at = datetime(2026, 1, 1, tzinfo=UTC)
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO users (id, name, is_admin, created_at) "
                    "VALUES ('u1', 'a', false, :at)"
                ),
                {"at": at},
            )
            connection.execute(
                text(
                    "INSERT INTO api_tokens (id, user_id, token_hash, name, created_at) "
                    "VALUES ('t1', 'u1', 'h', 'default', :at)"
                ),
                {"at": at},
            )
        command.downgrade(alembic_config(engine), "0009@0006")
        migrate(engine)
        with engine.connect() as connection:
            tokens_left = connection.execute(text("SELECT id FROM api_tokens")).scalars().all()
            state = connection.execute(text("SELECT state FROM users")).scalar_one()
        assert (tokens_left, state) == (["t1"], "active")
    finally:
        engine.dispose()


def test_the_heads_read_from_the_scripts_are_alembics(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'heads.db'}")
    assert applied_revisions(engine) == set()
    migrate(engine)
    # What a full upgrade leaves in alembic_version: the heads, less the
    # revisions others depend on; a database there skips Alembic at start.
    assert head_revisions() == applied_revisions(engine)
    script = ScriptDirectory.from_config(alembic_config(engine))
    assert head_revisions() <= set(script.get_heads())
    engine.dispose()


def test_0011_gives_existing_texts_their_message_ids(platform: Platform) -> None:
    """Rows written before 0011 (its columns dropped again here) get their structure
    from the catalog's templates; a text no template fits keeps none."""
    ctx = platform.ctx
    owner = users.create_user(ctx, "carol").user
    request = instances.InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name="old")
    made = instances.create_instance(ctx, owner, request)
    platform.reconciler.drain()
    instances.stop_instance(ctx, owner, made.id)
    platform.reconciler.drain()
    with ctx.sessions.begin() as session:
        session.add(
            InstanceEventModel(
                instance_id=made.id,
                at=ctx.clock(),
                from_status="stopped",
                to_status="stopped",
                message="something nobody catalogued",
            )
        )
    engine = make_engine(ctx.settings.effective_database_url)
    try:
        command.downgrade(alembic_config(engine), "0011@0010")
        migrate(engine)
        with engine.connect() as connection:
            reason = connection.execute(
                select(InstanceModel.status_reason_msg).where(InstanceModel.id == made.id)
            ).scalar_one()
            events = connection.execute(
                select(InstanceEventModel.message, InstanceEventModel.message_msg)
                .where(InstanceEventModel.instance_id == made.id)
                .order_by(InstanceEventModel.id)
            ).all()
    finally:
        engine.dispose()
    assert reason == {"id": "stopped; data kept", "params": {}}
    running = next(msg for text, msg in events if text.startswith("running on"))
    assert running["id"] == "running on {host} ({gpus})"
    assert running["params"]["gpus"] == {
        "id": "{count} × {models}",
        "params": {"count": "1", "models": "A100-80GB"},
    }
    assert events[-1] == ("something nobody catalogued", None)
    assert localize("x", "zh-CN", reason) == "已关机；数据保留"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_0023_sums_what_was_posted_into_monthly_totals_by_utc_month(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Postings made before 0023 land in the month of their UTC time, per kind."""
    engine = make_engine(_database_url(backend, tmp_path, request))
    try:
        migrate(engine)
        command.downgrade(alembic_config(engine), "0023@0022")  # the schema before 0023
        _post_before_0023(engine)
        migrate(engine)
        with make_sessionmaker(engine)() as session:
            totals = session.execute(
                select(
                    BillingMonthTotalModel.month,
                    BillingMonthTotalModel.kind,
                    BillingMonthTotalModel.amount_micro,
                ).order_by(BillingMonthTotalModel.month, BillingMonthTotalModel.kind)
            ).all()
            assert ledger.verify_month_totals(session) == {}
            december = datetime(2026, 12, 15, tzinfo=UTC)
            assert month_spent(session, "u1", december) == 5_000 - 1_000
        assert [tuple(t) for t in totals] == [
            ("2026-11", "charge", 3_000 + 4_000),  # 00:30 at UTC+1 is still November in UTC
            ("2026-12", "charge", 5_000),
            ("2026-12", "refund", 1_000),
            ("2026-12", "topup", 9_000),
        ]
    finally:
        engine.dispose()


def _post_before_0023(engine: Engine) -> None:
    at = datetime(2026, 11, 1, tzinfo=UTC)
    plus_one = timezone(timedelta(hours=1))
    postings = [
        ("charge", 3_000, datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC)),
        ("charge", 4_000, datetime(2026, 12, 1, 0, 30, tzinfo=plus_one)),
        ("charge", 5_000, datetime(2026, 12, 1, 0, 0, tzinfo=UTC)),
        ("refund", 1_000, datetime(2026, 12, 2, tzinfo=UTC)),
        ("topup", 9_000, datetime(2026, 12, 3, tzinfo=UTC)),
    ]
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO users (id, name, is_admin, created_at) VALUES ('u1', 'a', false, :at)"
            ),
            {"at": at},
        )
        connection.execute(
            insert(BillingAccountModel.__table__),  # type: ignore[arg-type]
            [
                {"id": account, "user_id": None, "balance_micro": 0, "created_at": at}
                for account in ("user:u1", "revenue")
            ],
        )
        connection.execute(
            insert(BillingPostingModel.__table__),  # type: ignore[arg-type]
            [
                {
                    "key": f"k{n}",
                    "kind": kind,
                    "debit_account": "user:u1",
                    "credit_account": "revenue",
                    "amount_micro": amount,
                    "user_id": "u1",
                    "at": when,
                    "recorded_at": when,
                    "seconds": 0,
                    "gpu_count": 0,
                    "description": "",
                }
                for n, (kind, amount, when) in enumerate(postings)
            ],
        )
