"""workers: one heartbeat row per worker process with its actual sandbox level

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('workers',
    sa.Column('id', sa.String(length=200), nullable=False),
    sa.Column('executor', sa.String(length=16), nullable=False),
    sa.Column('devices', sa.JSON(), nullable=False),
    sa.Column('sandbox_level', sa.String(length=32), nullable=False),
    sa.Column('min_level', sa.String(length=32), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_seen', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_workers_last_seen'), ['last_seen'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_workers_last_seen'))
    op.drop_table('workers')
