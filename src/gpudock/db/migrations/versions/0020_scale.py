"""The fleet's generation: a counter in `meta` that every write to hosts or GPUs moves

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 14:00:00

Servers keep the fleet's shape (hosts, GPUs, their wiring and health) in memory
between reads (`services.fleet.shape`) and reread it only when this counter has
moved. Triggers move it, so no writer can forget to: this server, another one on
the same database, or an operator's SQL.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BUMP_SQLITE = "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'fleet_generation'"
SQLITE_TRIGGERS = {  # SQLite: one trigger per table and event, run per row
    name: f"CREATE TRIGGER {name} AFTER {event} ON {table} BEGIN {BUMP_SQLITE}; END"
    for table in ("hosts", "gpus")
    for event in ("INSERT", "UPDATE", "DELETE")
    for name in (f"{table}_fleet_generation_{event.lower()}",)
}
PG_FUNCTION = """
CREATE FUNCTION gpudock_bump_fleet_generation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE meta SET value = (value::bigint + 1)::text WHERE key = 'fleet_generation';
    RETURN NULL;
END $$
"""
PG_TRIGGERS = {  # PostgreSQL: one per table, run once per statement
    "hosts": "CREATE TRIGGER hosts_fleet_generation AFTER INSERT OR UPDATE OR DELETE ON hosts "
    "FOR EACH STATEMENT EXECUTE FUNCTION gpudock_bump_fleet_generation()",
    "gpus": "CREATE TRIGGER gpus_fleet_generation AFTER INSERT OR UPDATE OR DELETE ON gpus "
    "FOR EACH STATEMENT EXECUTE FUNCTION gpudock_bump_fleet_generation()",
}


def _postgres() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def upgrade() -> None:
    op.execute("INSERT INTO meta (key, value) VALUES ('fleet_generation', '0')")
    if _postgres():
        op.execute(PG_FUNCTION)
        for trigger in PG_TRIGGERS.values():
            op.execute(trigger)
    else:
        for trigger in SQLITE_TRIGGERS.values():
            op.execute(trigger)


def downgrade() -> None:
    if _postgres():
        op.execute("DROP TRIGGER hosts_fleet_generation ON hosts")
        op.execute("DROP TRIGGER gpus_fleet_generation ON gpus")
        op.execute("DROP FUNCTION gpudock_bump_fleet_generation()")
    else:
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    op.execute("DELETE FROM meta WHERE key = 'fleet_generation'")
