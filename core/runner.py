"""The workers' workflow runner: the SDK's sandbox, with each payload's serialization context answered
outside it when the data converter reads none (`context_free`). Only workers load this module (it
imports `temporalio.worker`); clients never do."""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    SerializationContext,
    StorageDriverStoreContext,
    WorkflowSerializationContext,
)
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.workflow import Info as WorkflowInfo


def context_free(converter: DataConverter) -> bool:
    """True when no part of `converter` reads the SDK's serialization context (the workflow or the
    activity a payload belongs to), so every payload of a workflow task converts the same under any."""
    contexts = (
        WorkflowSerializationContext(namespace="-", workflow_id="-"),
        ActivitySerializationContext(
            namespace="-",
            workflow_id="-",
            workflow_type="-",
            activity_type="-",
            activity_task_queue="-",
            is_local=False,
            activity_id="-",
        ),
    )
    return converter.external_storage is None and all(converter.with_context(c) is converter for c in contexts)


@dataclasses.dataclass(frozen=True)
class ContextFreeRunner(SandboxedWorkflowRunner):
    """The workflow sandbox, with the serialization context of a payload answered outside it.

    The SDK asks a workflow instance for each payload's serialization context six times per payload
    of every workflow task (three passes each way). The sandboxed instance answers by compiling and
    running code inside the sandbox with its import restrictions applied: most of the CPU of a cold
    turn's replay (bench/profiles/cold-turn.txt). With a converter that reads no context
    (`context_free`), every payload converts the same under any context, so the instance answers
    with its workflow's context at once. Everything else (activations, import restrictions and
    passthrough modules, determinism) is the sandbox's: this is a `SandboxedWorkflowRunner`."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        """The sandboxed instance, answering context lookups itself."""
        return _ContextFreeInstance(super().create_instance(det))


class _ContextFreeInstance(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance) -> None:
        self.inner = inner
        info = inner.get_info()
        self.context = WorkflowSerializationContext(namespace=info.namespace, workflow_id=info.workflow_id)

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        return self.inner.activate(act)

    def get_serialization_context(self, command_info: Any) -> SerializationContext | None:
        return self.context

    def get_external_store_context(self, command_info: Any) -> StorageDriverStoreContext:
        return StorageDriverStoreContext(target=None)

    def get_info(self) -> WorkflowInfo:
        return self.inner.get_info()

    def get_thread_id(self) -> int | None:
        return self.inner.get_thread_id()
