"""runs: content_hash and reused_from, so that an identical bundle reuses a finished verdict

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('content_hash', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('reused_from', sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f('ix_runs_content_hash'), ['content_hash'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_content_hash'))
        batch_op.drop_column('reused_from')
        batch_op.drop_column('content_hash')
