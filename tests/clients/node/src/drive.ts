// The conversation tests/clients/test_typescript.py drives from TypeScript: the scenario of
// docs/workflow.md, its results printed as one JSON line for the test to check.
import { defaultPayloadConverter } from "@temporalio/common";
import { ThreadlineCodec } from "./codec";
import { codeOf, connect, Conversation, list } from "./conversation";

const env = (name: string): string => {
  const value = process.env[name];
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};

async function listed(chat: Conversation): Promise<boolean> {
  for (let i = 0; i < 100; i++) {
    if ((await list(chat.client, chat.store)).includes(chat.workflowId)) return true;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return false;
}

/** The `send` updates' and `turn` signals' inputs in the history, read in clear through the codec. */
async function sentInHistory(chat: Conversation, codec: ThreadlineCodec): Promise<{ sent: unknown[]; encodings: string[] }> {
  const history = await chat.client.workflow.getHandle(chat.workflowId).fetchHistory();
  const payloads = (history.events ?? []).flatMap(
    (event) =>
      event.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.args?.payloads ??
      event.workflowExecutionSignaledEventAttributes?.input?.payloads ??
      [],
  );
  const encodings = payloads.map((p) => Buffer.from(p.metadata?.encoding ?? new Uint8Array()).toString());
  const sent = (await codec.decode(payloads)).map((p) => defaultPayloadConverter.fromPayload(p));
  return { sent, encodings };
}

async function main(): Promise<void> {
  const codec = new ThreadlineCodec(env("CODEC_ENDPOINT")); // to read the history at the end
  // region: scenario
  const client = await connect(env("TEMPORAL_ADDRESS"), env("CODEC_ENDPOINT"));
  const chat = new Conversation(client, env("CONVERSATION"), env("PROGRAM"), "default", env("TASK_QUEUE"));
  const first = await chat.send({ request_id: "r-1", inputs: { message: "Hello" } }); // starts the conversation
  await chat.signal({ request_id: "r-2", inputs: { message: env("MESSAGE_4K") } }); // durable with no worker too
  const long = await chat.wait("r-2"); // its answer, 4 KB: in history as it is, readable by any client
  const third = await chat.send({ request_id: "r-3", inputs: { message: env("MESSAGE_12K") } }); // over 8 KB: kept by the claim check, read through the codec
  const again = await chat.send({ request_id: "r-1", inputs: { message: "Hello" } }); // the same turn as `first`
  const tooLong = await chat.send({ request_id: "r".repeat(201), inputs: { message: "x" } }).catch(codeOf);
  const placed = await chat.place({ request_id: "r-4", inputs: { message: "wait until stopped" } });
  await chat.stop({ request_id: "r-4" });
  const stopped = await chat.wait("r-4"); // state "stopped"
  const status = await chat.status();
  // endregion
  const history = await sentInHistory(chat, codec);
  const found = await listed(chat);
  process.stdout.write(JSON.stringify({ first, long, third, again, tooLong, placed, stopped, status, history, listed: found }) + "\n");
}

main().catch((err) => {
  process.stderr.write(`${err?.stack ?? err}\n`);
  process.exit(1);
});
