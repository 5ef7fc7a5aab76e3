"""server-group members stored under a key of their project and group

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 21:50:00

A server group's members were stored under the group's UUID alone, so a request
of another project naming that UUID counted them (and a reason could say where
they run). They are now stored under a UUID derived from the instance's project
and the group (``scheduler.filter_scheduler.group_key``); this rewrites the
members already stored. The formula is repeated here on purpose: a migration
must keep doing what it did when the code it was written with changes.
"""
import json
import uuid

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

_NAMESPACE = uuid.UUID("5d3c6b9e-3f0e-5b8a-9a51-4f3f5f2b7c10")


def _key(project_id, group) -> str:
    return str(uuid.uuid5(_NAMESPACE, json.dumps([project_id, group])))


def upgrade() -> None:
    # Since 0006 a consumer (instance, migration, evacuation) carries its group.
    alloc = sa.table('consumers', sa.column('project_id', sa.String),
                     sa.column('instance_group', sa.String))
    conn = op.get_bind()
    pairs = conn.execute(sa.select(alloc.c.project_id, alloc.c.instance_group).distinct()
                         .where(alloc.c.instance_group.isnot(None))).all()
    for project_id, group in pairs:
        project = (alloc.c.project_id.is_(None) if project_id is None
                   else alloc.c.project_id == project_id)
        conn.execute(alloc.update().where(project, alloc.c.instance_group == group)
                     .values(instance_group=_key(project_id, group)))


def downgrade() -> None:
    # The derived keys cannot be turned back into group UUIDs.
    pass
