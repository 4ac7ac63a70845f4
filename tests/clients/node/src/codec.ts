// A PayloadCodec that hands every payload to Threadline's codec server (POST /v1/codec/encode and
// /decode): large payloads come back from the claim check, sealed ones opened, in clear.
import type { Payload, PayloadCodec } from "@temporalio/common";

interface JsonPayload {
  metadata?: Record<string, string>; // values in base64, as protobuf's JSON writes bytes
  data?: string;
}

const toJson = (payload: Payload): JsonPayload => ({
  metadata: Object.fromEntries(
    Object.entries(payload.metadata ?? {}).map(([name, value]) => [name, Buffer.from(value).toString("base64")]),
  ),
  data: Buffer.from(payload.data ?? new Uint8Array()).toString("base64"),
});

const fromJson = (payload: JsonPayload): Payload => ({
  metadata: Object.fromEntries(
    Object.entries(payload.metadata ?? {}).map(([name, value]) => [name, Buffer.from(value, "base64")]),
  ),
  data: Buffer.from(payload.data ?? "", "base64"),
});

export class ThreadlineCodec implements PayloadCodec {
  /** `endpoint` is `http://<host>:<port>/v1/codec`; `key` a service key when the service has keys. */
  constructor(
    private readonly endpoint: string,
    private readonly key?: string,
  ) {}

  encode(payloads: Payload[]): Promise<Payload[]> {
    return this.call("encode", payloads);
  }

  decode(payloads: Payload[]): Promise<Payload[]> {
    return this.call("decode", payloads);
  }

  private async call(operation: "encode" | "decode", payloads: Payload[]): Promise<Payload[]> {
    if (payloads.length === 0) return [];
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.key) headers.authorization = `Bearer ${this.key}`;
    const body = JSON.stringify({ payloads: payloads.map(toJson) });
    const answer = await fetch(`${this.endpoint}/${operation}`, { method: "POST", headers, body });
    if (!answer.ok) throw new Error(`codec ${operation}: ${answer.status} ${await answer.text()}`);
    const { payloads: found = [] } = (await answer.json()) as { payloads?: JsonPayload[] };
    return found.map(fromJson);
  }
}
