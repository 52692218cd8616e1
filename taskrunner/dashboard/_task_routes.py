"""The routes of a task's page and a workflow's, their ``/api/`` twins and their cancel
actions.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from taskrunner.dashboard import _features, _workflows
from taskrunner.dashboard._pages import GROUP, Dashboard, Forbidden, api, group_of, path
from taskrunner.errors import BackendError


def routes(d: Dashboard) -> list[Route]:
    """A task's and a workflow's pages and actions, in the order they are matched."""

    # A task
    async def task_data(request: Request) -> _features.TaskView | None:
        return await _features.read_task(d.backend, group_of(request), request.path_params["id"])

    async def task(request: Request) -> Response:
        group, task_id = group_of(request), str(request.path_params["id"])
        api_path = path("groups", group, "tasks", task_id)
        try:
            value = await task_data(request)
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        status = 200 if value is not None else 404
        return d.page(
            request,
            "task.html",
            api=api_path if value else None,
            status=status,
            group=group,
            task_id=task_id,
            t=value,
        )

    async def cancel(request: Request) -> Response:
        group, task_id = group_of(request), str(request.path_params["id"])
        try:
            await d.form(request)
            done = await _features.cancel_task(d.backend, group, task_id)
        except Forbidden as exc:
            return d.problem(request, 403, str(exc))
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        return d.back(
            request,
            path("groups", group, "tasks", task_id),
            "cancelled" if done else "not-cancelled",
        )

    # A workflow
    async def workflow_data(request: Request) -> _workflows.WorkflowView | None:
        workflow_id = str(request.path_params["id"])
        return await _workflows.read_workflow(d.backend, group_of(request), workflow_id)

    async def workflow(request: Request) -> Response:
        group, workflow_id = group_of(request), str(request.path_params["id"])
        try:
            value = await workflow_data(request)
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        return d.page(
            request,
            "workflow.html",
            api=path("groups", group, "workflows", workflow_id) if value else None,
            status=200 if value else 404,
            group=group,
            workflow_id=workflow_id,
            w=value,
        )

    async def cancel_workflow(request: Request) -> Response:
        group, workflow_id = group_of(request), str(request.path_params["id"])
        try:
            await d.form(request)
            done = await _workflows.cancel_workflow(d.backend, group, workflow_id)
        except Forbidden as exc:
            return d.problem(request, 403, str(exc))
        except BackendError as exc:
            return d.problem(request, 503, str(exc))
        return d.back(
            request,
            path("groups", group, "workflows", workflow_id),
            "workflow-cancelled" if done else "workflow-not-cancelled",
        )

    g = GROUP
    return [
        Route(g + "/tasks/{id}", task),
        Route("/api" + g + "/tasks/{id}", api(task_data)),
        Route(g + "/tasks/{id}/cancel", cancel, methods=["POST"]),
        Route(g + "/workflows/{id}", workflow),
        Route("/api" + g + "/workflows/{id}", api(workflow_data)),
        Route(g + "/workflows/{id}/cancel", cancel_workflow, methods=["POST"]),
    ]
