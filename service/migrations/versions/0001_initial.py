"""projects, runs, results, findings, reports, branch heads

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('projects',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('slug', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('public', sa.Boolean(), nullable=False),
    sa.Column('default_branch', sa.String(length=200), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('token_prefix', sa.String(length=12), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('slug')
    )
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_projects_token_hash'), ['token_hash'], unique=False)

    op.create_table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('project_id', sa.Integer(), nullable=False),
    sa.Column('commit_sha', sa.String(length=64), nullable=True),
    sa.Column('branch', sa.String(length=200), nullable=False),
    sa.Column('pull_request', sa.Integer(), nullable=True),
    sa.Column('device', sa.String(length=8), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('worker', sa.String(length=200), nullable=True),
    sa.Column('lease_until', sa.DateTime(timezone=True), nullable=True),
    sa.Column('sandbox_level', sa.String(length=32), nullable=True),
    sa.Column('select_checks', sa.JSON(), nullable=True),
    sa.Column('ignore_checks', sa.JSON(), nullable=True),
    sa.Column('seed', sa.Integer(), nullable=False),
    sa.Column('max_examples', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('duration_s', sa.Float(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('summary', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index('ix_runs_project_branch_id', ['project_id', 'branch', 'id'], unique=False)
        batch_op.create_index('ix_runs_status_device', ['status', 'device'], unique=False)

    op.create_table('branch_heads',
    sa.Column('project_id', sa.Integer(), nullable=False),
    sa.Column('branch', sa.String(length=200), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('commit_sha', sa.String(length=64), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('project_id', 'branch')
    )
    op.create_table('findings',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('rule', sa.String(length=400), nullable=False),
    sa.Column('check_id', sa.String(length=16), nullable=False),
    sa.Column('severity', sa.String(length=16), nullable=False),
    sa.Column('title', sa.String(length=400), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('location', sa.String(length=400), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('findings', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_findings_check_id'), ['check_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_findings_run_id'), ['run_id'], unique=False)

    op.create_table('reports',
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('report', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id')
    )
    op.create_table('rule_results',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=400), nullable=False),
    sa.Column('module', sa.String(length=400), nullable=True),
    sa.Column('source_file', sa.String(length=400), nullable=True),
    sa.Column('verdict', sa.String(length=8), nullable=False),
    sa.Column('duration_s', sa.Float(), nullable=False),
    sa.Column('findings', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('rule_results', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rule_results_name'), ['name'], unique=False)
        batch_op.create_index(batch_op.f('ix_rule_results_run_id'), ['run_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_rule_results_verdict'), ['verdict'], unique=False)

    op.create_table('run_files',
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('path', sa.String(length=400), nullable=False),
    sa.Column('content', sa.LargeBinary(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'path')
    )


def downgrade() -> None:
    op.drop_table('run_files')
    with op.batch_alter_table('rule_results', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_rule_results_verdict'))
        batch_op.drop_index(batch_op.f('ix_rule_results_run_id'))
        batch_op.drop_index(batch_op.f('ix_rule_results_name'))

    op.drop_table('rule_results')
    op.drop_table('reports')
    with op.batch_alter_table('findings', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_findings_run_id'))
        batch_op.drop_index(batch_op.f('ix_findings_check_id'))

    op.drop_table('findings')
    op.drop_table('branch_heads')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_status_device')
        batch_op.drop_index('ix_runs_project_branch_id')

    op.drop_table('runs')
    with op.batch_alter_table('projects', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_projects_token_hash'))

    op.drop_table('projects')
