// Unit tests of channel/ended in the client: the host ended a windowed
// subscription (a revoked share); the handler gets why, no credit goes
// back for it, and a reconnect no longer asks for the channel.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "../src/client.js";
import type { Link } from "../src/link.js";
import type * as ahp from "../src/ahp.js";

const T = "ahp-terminal:/t1";
const OFFER = { windowBytes: 65536, maximumFrameBytes: 16384 };
const FC = { clientReceive: OFFER, hostReceive: OFFER };
const REASON = "permission denied: terminal.attach: ahp-terminal:/t1 is no longer shared with vera (viewer): the share was revoked";

function fakeLink(): Link & { sent: any[] } {
  const sent: any[] = [];
  return { kind: "WebSocket", sent, send: (t) => sent.push(JSON.parse(t)), close: () => {} };
}

const msg = (o: object) => JSON.stringify({ jsonrpc: "2.0", ...o });

function answer(c: Client, l: ReturnType<typeof fakeLink>, result: unknown): void {
  const req = l.sent.filter((m) => m.id !== undefined).at(-1);
  c.receive(msg({ id: req.id, result }));
}

test("channel/ended reaches the handler, takes no credit, and is not resumed", async () => {
  const c = new Client("web-1");
  const l = fakeLink();
  c.use(l);
  const init = c.initialize();
  answer(c, l, { serverSeq: 2, snapshots: [], resume: { token: "tok", graceMs: 60000 }, identity: { principal: "vera", role: "viewer" } });
  await init;
  assert.deepEqual(c.identity, { principal: "vera", role: "viewer" });
  const data: ahp.Message[] = [];
  const sub = c.subscribeWindowed(T, OFFER, (m, release) => {
    data.push(m);
    release();
  });
  answer(c, l, { flowControl: FC });
  await sub;
  const before = l.sent.length;
  c.receive(msg({ method: "channel/ended", params: { channel: T, error: { code: -32009, message: REASON } } }));
  assert.equal(data.length, 1);
  assert.equal(data[0]!.method, "channel/ended");
  assert.equal(data[0]!.params.error.message, REASON);
  assert.equal(l.sent.length, before, "nothing sent back for channel/ended (no credit, no unsubscribe)");
  // Later data for the channel goes nowhere.
  c.receive(msg({ method: "action", params: { channel: T, action: { type: "terminal/data", data: "x" }, serverSeq: 3 } }));
  assert.equal(data.length, 1);
  c.lost("connection lost");
  const l2 = fakeLink();
  c.use(l2);
  void c.reconnect().catch(() => {});
  assert.equal(l2.sent[0].method, "reconnect");
  assert.deepEqual(l2.sent[0].params.subscriptions, []);
  assert.equal(l2.sent[0].params.windows, undefined);
});
