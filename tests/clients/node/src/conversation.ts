// A Threadline conversation driven with @temporalio/client alone, after docs/workflow.md.
import { Client, Connection, WithStartWorkflowOperation, WorkflowUpdateFailedError } from "@temporalio/client";
import { ApplicationFailure, type Workflow } from "@temporalio/common";
import { ThreadlineCodec } from "./codec";

export interface TurnSend {
  request_id: string; // at most 200 characters; the same id again is the same turn
  inputs: Record<string, unknown>; // the program's inputs: {"message": "..."} for `tutor`
  continue_from?: string;
  sends?: "queue" | "refuse" | "branch" | "interrupt";
}

// A field at its default (null, false, [] or {}) is left out: read a missing one as its default.
export interface TurnOutcome {
  state: "done" | "failed" | "stopped" | "abandoned" | "refused" | "waiting";
  outputs?: Record<string, unknown> | null; // the answer is outputs[answer]
  error?: { code: string; message: string } | null;
  request_id: string;
  turn?: string | null;
  parent?: string | null;
  answer?: string | null; // which output is the answer: "result" for `tutor`
  result?: unknown; // only when the answer is none of the outputs
}

export interface Begun {
  request_id: string;
  turn?: string | null;
  parent?: string | null;
  existing?: boolean;
}

export async function connect(address: string, codecEndpoint: string, namespace = "default"): Promise<Client> {
  const connection = await Connection.connect({ address });
  return new Client({ connection, namespace, dataConverter: { payloadCodecs: [new ThreadlineCodec(codecEndpoint)] } });
}

/** The code of a refusal (`conversation-busy`, `invalid-request`, ...), or undefined for other errors. */
export function codeOf(err: unknown): string | undefined {
  const cause = err instanceof WorkflowUpdateFailedError ? err.cause : err;
  return cause instanceof ApplicationFailure ? (cause.type ?? undefined) : undefined;
}

const RESOURCE_EXHAUSTED = 8; // gRPC: the workflow has 10 updates in flight already

async function patiently<T>(call: () => Promise<T>): Promise<T> {
  for (let pause = 100; ; pause = Math.min(pause * 2, 2000)) {
    try {
      return await call();
    } catch (err) {
      const status = (err as { cause?: { code?: number } }).cause?.code;
      if (status !== RESOURCE_EXHAUSTED) throw err;
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}

export class Conversation {
  constructor(
    readonly client: Client,
    readonly id: string,
    readonly program = "tutor",
    readonly store = "default",
    readonly taskQueue = "threadline",
  ) {}

  get workflowId(): string {
    return `conversation/${this.store}/${this.id}`;
  }

  private start(): WithStartWorkflowOperation<Workflow> {
    return new WithStartWorkflowOperation("Conversation", {
      workflowId: this.workflowId,
      taskQueue: this.taskQueue,
      args: [{ config: { store: this.store, conversation: this.id, program: this.program } }],
      workflowIdConflictPolicy: "USE_EXISTING",
    });
  }

  /** Send a turn and wait for its outcome, starting the conversation if it is not running. */
  send(send: TurnSend): Promise<TurnOutcome> {
    const startWorkflowOperation = this.start();
    return patiently(() => this.client.workflow.executeUpdateWithStart<Workflow, TurnOutcome, [TurnSend]>("send", { args: [send], startWorkflowOperation }));
  }

  /** Send a turn and wait only until it is placed: its turn id and parent. */
  place(send: TurnSend): Promise<Begun> {
    const startWorkflowOperation = this.start();
    return patiently(() => this.client.workflow.executeUpdateWithStart<Workflow, Begun, [TurnSend]>("place", { args: [send], startWorkflowOperation }));
  }

  /** Send a turn as the `turn` signal: durable at once, even while no worker runs. */
  async signal(send: TurnSend): Promise<void> {
    await this.client.workflow.signalWithStart("Conversation", {
      workflowId: this.workflowId,
      taskQueue: this.taskQueue,
      args: [{ config: { store: this.store, conversation: this.id, program: this.program } }],
      signal: "turn",
      signalArgs: [send],
    });
  }

  /** Wait for how the send `requestId` ended. */
  wait(requestId: string): Promise<TurnOutcome> {
    const handle = this.client.workflow.getHandle(this.workflowId);
    return patiently(() => handle.executeUpdate<TurnOutcome, [string]>("wait", { args: [requestId] }));
  }

  /** Stop a turn (`turn`), a send (`request_id`), or everything running and queued (neither). */
  async stop(stop: { turn?: string; request_id?: string } = {}): Promise<void> {
    await this.client.workflow.getHandle(this.workflowId).signal("stop", stop);
  }

  status(): Promise<Record<string, unknown>> {
    return this.client.workflow.getHandle(this.workflowId).query("status");
  }
}

/** The ids of a store's conversations, as Temporal visibility lists them (newest runs first). */
export async function list(client: Client, store = "default"): Promise<string[]> {
  const query = `WorkflowType = 'Conversation' AND ThreadlineStore = '${store}' AND ExecutionStatus != 'ContinuedAsNew'`;
  const ids: string[] = [];
  for await (const execution of client.workflow.list({ query })) ids.push(execution.workflowId);
  return ids;
}
