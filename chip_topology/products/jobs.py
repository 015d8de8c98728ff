"""What a family's validation reads of a job, and the words every family's refusal shares.

The engine's ``Job`` is read through ``JobAsk`` (structurally: nothing here imports the
engine, which sits above ``chip_topology``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class JobInvalid(ValueError):
    """A job asks for something no placement can satisfy; the message is upstream's."""


class TaskAsk(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def npu(self) -> int: ...


class JobAsk(Protocol):
    """A job as validation reads it: its name (and ``namespace/name`` key), its merged
    labels, its tasks and those that ask for NPUs."""

    @property
    def name(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def tasks(self) -> Sequence[TaskAsk]: ...

    @property
    def npu_tasks(self) -> Sequence[TaskAsk]: ...


def job_id(job: JobAsk) -> str:
    """The job as upstream's messages name it: Volcano's job id, ``<namespace>/<PodGroup>``
    (volcano ``pkg/scheduler/cache/event_handlers.go`` getJobID; the plugin's ``tp.Name``).
    The service names a gang by its key already."""
    return job.name if "/" in job.name else job.key


def task_listing(expected: str, bad: Sequence[TaskAsk]) -> None:
    """Upstream's ``TaskValidateHelper.TaskValidResult``: every bad task, in task order
    (upstream walks a Go map)."""
    if bad:
        actual = "".join(f"task<{t.name}> req npu: {t.npu}" for t in bad)
        raise JobInvalid(f"expected: {expected}, actual: {actual}, ")
