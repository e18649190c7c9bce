"""Routes under ``/api/v1/projects``: create, read, list; submit and list runs; branch verdicts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from gradguard.service import access, crud, lifecycle
from gradguard.service.api.deps import (CredentialsDep, ExecutorDep, ReadableProject, SessionDep, SettingsDep, TokenDep,
                                       WritableProject, base_url, rate_limit, require_admin)
from gradguard.service.api.submission import SUBMISSION_OPENAPI, read_submission
from gradguard.service.errors import Invalid, Unavailable
from gradguard.service.reuse import bundle_key
from gradguard.service.schemas import (BranchList, BranchVerdict, ProjectCreate, ProjectCreated, ProjectList, ProjectOut,
                             ReadToken, RunAccepted, RunPage, run_out, run_urls)

__all__ = ["router"]

router = APIRouter(prefix="/projects", tags=["projects"])


@router.post("", status_code=201, response_model=ProjectCreated, dependencies=[Depends(require_admin)])
def create_project(data: ProjectCreate, session: SessionDep) -> ProjectCreated:
    """Create a project (admin token). The answer holds the submit token, shown this once."""
    project, token = crud.create_project(session, data=data)
    read_token = crud.new_read_token(session, project=project)
    session.commit()
    return ProjectCreated(**ProjectOut.model_validate(project).model_dump(), token=token, read_token=read_token)


@router.get("", response_model=ProjectList)
def list_projects(session: SessionDep, settings: SettingsDep, credentials: CredentialsDep) -> ProjectList:
    """Public projects, plus private ones the token can read."""
    projects = access.readable_projects(session, settings=settings, credentials=credentials)
    return ProjectList(items=[ProjectOut.model_validate(p) for p in projects])


@router.post("/{project}/read-token", status_code=201, response_model=ReadToken)
def rotate_read_token(project: WritableProject, session: SessionDep) -> ReadToken:
    """A fresh read-only token for the project's pages and badges (submit or admin token); the previous
    read-only token stops working."""
    read_token = crud.new_read_token(session, project=project)
    session.commit()
    return ReadToken(read_token=read_token)


@router.get("/{project}", response_model=ProjectOut)
def read_project(project: ReadableProject) -> ProjectOut:
    return ProjectOut.model_validate(project)


@router.post("/{project}/runs", status_code=202, response_model=RunAccepted, openapi_extra=SUBMISSION_OPENAPI,
             responses={413: {"description": "bundle too large"}, 429: {"description": "rate limited"}})
async def submit_run(project: WritableProject, request: Request, session: SessionDep, settings: SettingsDep,
                     token: TokenDep, executor: ExecutorDep) -> RunAccepted:
    """Queue a run of the submitted rule files (project token). Poll ``urls.self`` for the verdict."""
    found = project
    rate_limit(request, token)
    options, files = await read_submission(request, settings)
    if not executor.accepts(options.device):
        raise Invalid(f"device: no worker here runs {options.device!r} runs.", field="device",
                      fix="Submit with device=cpu, or deploy GPU workers (GRADGUARD_LOCAL_DEVICES=cpu,gpu or "
                          "GRADGUARD_EXECUTOR=celery with `gradguard worker --queue gpu`).")

    def store() -> tuple[int, str]:
        run = crud.create_run(session, project=found, options=options, files=files,
                              content_hash=bundle_key(files, options, settings))
        session.commit()
        if run.status != "queued":  # an identical bundle's finished verdict, reused
            lifecycle.update_branch_head(session, run)
        return run.id, run.status

    run_id, status = await run_in_threadpool(store)
    if status != "queued":
        return RunAccepted(id=run_id, status=status, urls=run_urls(run_id, base_url(request, settings)))
    try:
        executor.submit(run_id, options.device)
    except Exception as exc:  # the broker is down: do not leave a run queued that nobody will get
        await run_in_threadpool(lifecycle.fail_run, session, run_id=run_id, worker=None,
                                reason=f"could not be queued: {type(exc).__name__}: {exc}")
        raise Unavailable(f"queue: the broker did not take run {run_id} ({type(exc).__name__}).", field="queue",
                          fix="Retry in a minute; GET /readyz shows whether the queue is reachable.") from exc
    return RunAccepted(id=run_id, status="queued", urls=run_urls(run_id, base_url(request, settings)))


@router.get("/{project}/runs", response_model=RunPage)
def list_runs(project: ReadableProject, request: Request, session: SessionDep, settings: SettingsDep,
              branch: Annotated[str | None, Query(max_length=200)] = None,
              limit: Annotated[int, Query(ge=1, le=100)] = 20,
              cursor: Annotated[str | None, Query(max_length=64)] = None) -> RunPage:
    """Runs of a project, newest first; filter by ``branch``; follow ``next_cursor`` for older ones."""
    runs, next_cursor = crud.list_runs(session, project=project, branch=branch, limit=limit, cursor=cursor)
    base = base_url(request, settings)
    return RunPage(items=[run_out(r, base) for r in runs], next_cursor=next_cursor)


@router.get("/{project}/branches", response_model=BranchList)
def list_branches(project: ReadableProject, session: SessionDep) -> BranchList:
    """The latest verdict of every branch that has a finished run."""
    return BranchList(items=[BranchVerdict.model_validate(h) for h in crud.list_branch_heads(session, project=project)])


@router.get("/{project}/latest", response_model=BranchVerdict)
def latest_verdict(project: ReadableProject, session: SessionDep,
                   branch: Annotated[str | None, Query(max_length=200)] = None) -> BranchVerdict:
    """The latest finished run's verdict on ``branch`` (default: the project's default branch)."""
    return BranchVerdict.model_validate(crud.get_branch_head(session, project=project, branch=branch))
