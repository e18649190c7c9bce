"""projects.read_token_hash: a read-only token for pages and badges, separate from the submit token

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('projects') as batch:
        batch.add_column(sa.Column('read_token_hash', sa.String(length=64), nullable=True))
        batch.create_index('ix_projects_read_token_hash', ['read_token_hash'])


def downgrade() -> None:
    with op.batch_alter_table('projects') as batch:
        batch.drop_index('ix_projects_read_token_hash')
        batch.drop_column('read_token_hash')
