// Unit tests of resuming after a lost link: the client's reconnect (its
// request, and what it does with the result) over a fake link, and the
// rules of backoff and refusal.
import { mock, test } from "node:test";
import assert from "node:assert/strict";
import { Client, RpcError, inputChunk, type Resumed } from "../src/client.js";
import type { Link } from "../src/link.js";
import { OVERLOADED, Unechoed, backoff, graceLeft, overloadedWait, refusal } from "../src/resume.js";
import type * as ahp from "../src/ahp.js";

const T = "ahp-terminal:/t1";
const OFFER = { windowBytes: 65536, maximumFrameBytes: 16384 };
const FC = { clientReceive: OFFER, hostReceive: OFFER };

/** A link that keeps what the client sent. */
function fakeLink(): Link & { sent: any[] } {
  const sent: any[] = [];
  return { kind: "WebSocket", sent, send: (t) => sent.push(JSON.parse(t)), close: () => {} };
}

const msg = (o: object) => JSON.stringify({ jsonrpc: "2.0", ...o });
const action = (channel: string, serverSeq: number, a: object, origin?: object) => msg({ method: "action", params: { channel, action: a, serverSeq, ...(origin ? { origin } : {}) } });

/** answer answers the client's last request on l with result. */
function answer(c: Client, l: ReturnType<typeof fakeLink>, result: unknown): void {
  const req = l.sent.filter((m) => m.id !== undefined).at(-1);
  c.receive(msg({ id: req.id, result }));
}

/** session: an initialized client with the root and a windowed terminal, the terminal having shown actions 1..3. */
async function session() {
  const c = new Client("web-1");
  const l = fakeLink();
  c.use(l);
  const root: ahp.Message[] = [];
  const data: ahp.Message[] = [];
  const held: (() => void)[] = [];
  c.on("ahp-root://", (m) => root.push(m));
  const init = c.initialize();
  answer(c, l, { serverSeq: 2, snapshots: [], resume: { token: "tok", graceMs: 60000 } });
  await init;
  const sub = c.subscribeWindowed(T, OFFER, (m, release) => {
    data.push(m);
    held.push(release);
  });
  answer(c, l, { flowControl: FC });
  await sub;
  c.receive(msg({ method: "channel/snapshot", params: { channel: T, snapshot: { resource: T, state: {}, fromSeq: 2 } } }));
  c.receive(action(T, 3, { type: "terminal/data", data: "a" }));
  c.receive(action("ahp-root://", 4, { type: "root/terminalsChanged", terminals: [] }));
  return { c, l, root, data, held };
}

test("reconnect asks for what the client kept, from where it stopped", async () => {
  const { c, l } = await session();
  c.lost("connection lost");
  c.dispatch(T, { type: "terminal/input", data: "x" }); // waits for a link
  const l2 = fakeLink();
  c.use(l2);
  void c.reconnect().catch(() => {});
  assert.equal(l2.sent.length, 1);
  assert.equal(l2.sent[0].method, "reconnect");
  assert.deepEqual(l2.sent[0].params, {
    channel: "ahp-root://",
    clientId: "web-1",
    lastSeenServerSeq: 4,
    resumeToken: "tok",
    clientInfo: { name: "sidecar-web" },
    subscriptions: ["ahp-root://", T],
    windows: { items: [{ channel: T, flowControl: { receive: OFFER }, lastAppliedServerSeq: 3 }] },
  });
  assert.equal(l.sent.filter((m) => m.method === "dispatchAction").length, 0);
});

test("a replay: root actions applied before what follows, counters at zero, input sent after the result", async () => {
  const { c, root, data, held } = await session();
  c.lost("connection lost");
  c.dispatch(T, { type: "terminal/input", data: "x" });
  const l2 = fakeLink();
  c.use(l2);
  const done = c.reconnect();
  const id = l2.sent[0].id;
  // The result and the first replayed data in one read: the result is applied first.
  c.receive(msg({ id, result: { type: "replay", actions: [{ channel: "ahp-root://", action: { type: "root/terminalsChanged", terminals: [{ resource: T }] }, serverSeq: 6 }], missing: [], windows: { items: [{ channel: T, flowControl: FC, recovery: "replay", headSeq: 5 }] }, serverSeq: 7, resume: { token: "tok2", graceMs: 60000 } } }));
  c.receive(action("ahp-root://", 8, { type: "root/portsChanged", ports: [] }));
  c.receive(action(T, 5, { type: "terminal/data", data: "b" }));
  const r: Resumed = await done;
  assert.deepEqual(r, { type: "replay", missing: [], unknownFate: 0 });
  assert.deepEqual(root.map((m) => m.params.serverSeq), [4, 6, 8]);
  assert.equal(c.lastSeen, 8);
  assert.equal(c.resume?.token, "tok2");
  assert.deepEqual(data.map((m) => m.params.action?.data ?? "snapshot"), ["snapshot", "a", "b"]);
  assert.deepEqual(l2.sent.filter((m) => m.method === "dispatchAction").map((m) => m.params.action.data), ["x"]);
  // Releasing what arrived before the loss returns no credit on the new link; what arrived since does, counted from zero.
  for (const release of held.slice(0, 2)) release();
  assert.equal(l2.sent.filter((m) => m.method === "channel/credit").length, 0);
  held[2]!();
  const credit = l2.sent.filter((m) => m.method === "channel/credit");
  assert.equal(credit.length, 1);
  assert.equal(credit[0].params.consumedBytes, 2 * action(T, 5, { type: "terminal/data", data: "b" }).length);
});

test("input without an echo is sent again once the replay reaches headSeq, never after a snapshot", async () => {
  for (const recovery of ["replay", "snapshot"] as const) {
    const { c, l } = await session();
    c.dispatch(T, { type: "terminal/input", data: "seen" });
    c.dispatch(T, { type: "terminal/input", data: "lost" });
    const [seen, lost] = l.sent.filter((m) => m.method === "dispatchAction").map((m) => m.params.clientSeq);
    c.receive(action(T, 5, { type: "terminal/input", data: "seen" }, { clientId: "web-1", clientSeq: seen }));
    c.lost("connection lost");
    const l2 = fakeLink();
    c.use(l2);
    const done = c.reconnect();
    answer(c, l2, { type: "replay", actions: [], missing: [], windows: { items: [{ channel: T, flowControl: FC, recovery, headSeq: 7 }] }, serverSeq: 7 });
    const r = await done;
    const resent = () => l2.sent.filter((m) => m.method === "dispatchAction").map((m) => m.params.clientSeq);
    if (recovery === "snapshot") {
      assert.equal(r.unknownFate, 1);
      c.receive(action(T, 7, { type: "terminal/data", data: "z" }));
      assert.deepEqual(resent(), []);
      continue;
    }
    assert.equal(r.unknownFate, 0);
    c.receive(action(T, 6, { type: "terminal/data", data: "y" }));
    assert.deepEqual(resent(), [], "not before headSeq");
    c.receive(action(T, 7, { type: "terminal/data", data: "z" }));
    assert.deepEqual(resent(), [lost]);
  }
});

test("channels the host did not keep end; a snapshot result replaces the root's state", async () => {
  const { c, root } = await session();
  c.lost("connection lost");
  const l2 = fakeLink();
  c.use(l2);
  const done = c.reconnect();
  answer(c, l2, { type: "snapshot", snapshots: [{ resource: "ahp-root://", state: { terminals: [] }, fromSeq: 9 }], missing: [T], windows: { items: [] }, serverSeq: 9 });
  const r = await done;
  assert.deepEqual(r.missing, [T]);
  assert.equal(root.at(-1)?.method, "channel/snapshot");
  assert.deepEqual(root.at(-1)?.params.snapshot.state, { terminals: [] });
  c.dispatch(T, { type: "terminal/input", data: "x" }); // no longer windowed: sent as is
  assert.equal(l2.sent.at(-1).params.action.data, "x");
});

test("a refused reconnect rejects with the host's code and data", async () => {
  const { c } = await session();
  c.lost("connection lost");
  const l2 = fakeLink();
  c.use(l2);
  const done = c.reconnect();
  c.receive(msg({ id: l2.sent[0].id, error: { code: -32008, message: "nothing to resume", data: { kind: "expired" } } }));
  const err = await done.catch((e) => e);
  assert.ok(err instanceof RpcError);
  assert.equal(refusal(err.code, err.data), "expired");
});

test("a lost link fails what waited for an answer", async () => {
  const { c } = await session();
  const p = c.request("ping", { channel: "ahp-root://" });
  c.lost("connection lost");
  await assert.rejects(p, /connection lost/);
  await assert.rejects(c.request("ping", {}), /not connected/);
});

test("refusals are never retried; other errors are", () => {
  assert.equal(refusal(-32008, { kind: "expired" }), "expired");
  assert.equal(refusal(-32009, undefined), "refused");
  assert.equal(refusal(-32000, { kind: "refused" }), "refused");
  assert.equal(refusal(-32603, null), null);
});

test("backoff doubles from 250 ms to at most 5 s, with jitter", () => {
  const mid = () => 0.5;
  assert.deepEqual([1, 2, 3, 4, 5, 6, 10].map((n) => backoff(n, mid)), [250, 500, 1000, 2000, 4000, 5000, 5000]);
  assert.equal(backoff(1, () => 0), 200);
  assert.equal(backoff(1, () => 1), 300);
});

test("the grace runs from the loss", () => {
  const r = { token: "t", graceMs: 1000 };
  assert.equal(graceLeft(r, 5000, 5400), 600);
  assert.equal(graceLeft(r, 5000, 7000), 0);
});

test("unechoed input is kept in order, bounded", () => {
  const u = new Unechoed(2);
  u.sentAs(1, "a");
  u.sentAs(2, "b");
  u.sentAs(3, "c"); // the oldest goes
  u.echoed(2);
  assert.deepEqual(u.take(), [[3, "c"]]);
  assert.equal(u.size, 0);
});

test("a message cut in its fragments by the loss is discarded", async () => {
  const { c, data } = await session();
  const whole = action(T, 4, { type: "terminal/data", data: "cut" });
  c.receive(msg({ method: "channel/frame", params: { channel: T, data: whole.slice(0, 20) } }));
  c.lost("connection lost");
  const l2 = fakeLink();
  c.use(l2);
  const done = c.reconnect();
  answer(c, l2, { type: "replay", actions: [], missing: [], windows: { items: [{ channel: T, flowControl: FC, recovery: "replay", headSeq: 4 }] }, serverSeq: 4 });
  await done;
  c.receive(msg({ method: "channel/frame", params: { channel: T, data: whole.slice(0, 30) } }));
  c.receive(msg({ method: "channel/frame", params: { channel: T, data: whole.slice(30), final: true } }));
  assert.deepEqual(data.map((m) => m.params.action?.data ?? "snapshot"), ["snapshot", "a", "cut"]);
});

test("fragments are credited as they arrive: a message larger than the window completes", async () => {
  // Seed 000: a receiver MUST NOT wait for the final fragment before
  // releasing the others. A 16 KiB window with 8 KiB frames: the host
  // stops once 16 KiB of fragments are outstanding, so a message whose
  // fragments add up to more than that needs their credit to complete.
  const small = { windowBytes: 16384, maximumFrameBytes: 8192 };
  const c = new Client("web-1");
  const l = fakeLink();
  c.use(l);
  const data: ahp.Message[] = [];
  const held: (() => void)[] = [];
  const sub = c.subscribeWindowed(T, small, (m, release) => {
    data.push(m);
    held.push(release);
  });
  answer(c, l, { flowControl: { clientReceive: small, hostReceive: small } });
  await sub;
  const snap = msg({ method: "channel/snapshot", params: { channel: T, snapshot: { resource: T, state: {}, fromSeq: 2 } } });
  c.receive(snap);
  held.shift()!();
  let consumed = 2 * snap.length;
  const credits = () => l.sent.filter((m) => m.method === "channel/credit").map((m) => m.params.consumedBytes);
  assert.deepEqual(credits(), [consumed]);

  const whole = action(T, 3, { type: "terminal/data", data: "y\r\n".repeat(2048) });
  const frame = (data: string, final: boolean) => msg({ method: "channel/frame", params: { channel: T, data, ...(final ? { final } : {}) } });
  const pieces: string[] = [];
  for (let i = 0; i < whole.length; i += 3000) pieces.push(whole.slice(i, i + 3000));
  let sent = 0;
  for (const [i, p] of pieces.entries()) {
    const f = frame(p, i === pieces.length - 1);
    sent += 2 * f.length;
    c.receive(f);
    if (i < pieces.length - 1) {
      consumed += 2 * f.length;
      assert.equal(credits().at(-1), consumed, `fragment ${i} credited on arrival`);
      assert.equal(data.length, 1, "no message before its final fragment");
    }
  }
  assert.ok(sent > small.windowBytes, `the fragments (${sent}) go past the window`);
  assert.equal(data.length, 2);
  assert.equal(data[1]!.params.action.data, "y\r\n".repeat(2048));
  held.shift()!();
  assert.equal(credits().at(-1), 2 * snap.length + sent, "the final fragment is credited with the whole message");
});

test("an Overloaded answer is sent again after a backoff with jitter; other errors are not", async () => {
  assert.equal(overloadedWait(1, () => 0.5), 10);
  assert.equal(overloadedWait(1, () => 0), 8);
  assert.equal(overloadedWait(1, () => 1), 12);
  assert.equal(overloadedWait(4, () => 0.5), 80);
  assert.equal(overloadedWait(30, () => 0.5), 1000);

  mock.timers.enable({ apis: ["setTimeout"] });
  try {
    const c = new Client("web-1");
    const l = fakeLink();
    c.use(l);
    const got = c.request("listTerminals", {});
    const first = l.sent.at(-1);
    c.receive(msg({ id: first.id, error: { code: OVERLOADED, message: "overloaded", data: { kind: "overloaded", retryable: true, capacity: 16 } } }));
    await Promise.resolve();
    await Promise.resolve();
    assert.equal(l.sent.length, 1); // not before the backoff
    mock.timers.tick(12);
    await Promise.resolve();
    assert.equal(l.sent.length, 2);
    const again = l.sent.at(-1);
    assert.equal(again.method, "listTerminals");
    assert.notEqual(again.id, first.id);
    c.receive(msg({ id: again.id, result: { terminals: [] } }));
    assert.deepEqual(await got, { terminals: [] });

    const bad = c.request("listTerminals", {});
    c.receive(msg({ id: l.sent.at(-1).id, error: { code: -32602, message: "invalid params" } }));
    await assert.rejects(bad, (e: RpcError) => e.code === -32602);
    assert.equal(l.sent.length, 3);

    // A link lost during the backoff: the Overloaded error is the answer.
    const lost = c.request("listTerminals", {});
    c.receive(msg({ id: l.sent.at(-1).id, error: { code: OVERLOADED, message: "overloaded" } }));
    await Promise.resolve();
    c.lost("gone");
    c.use(fakeLink());
    mock.timers.tick(1000);
    await assert.rejects(lost, (e: RpcError) => e.code === OVERLOADED);
  } finally {
    mock.timers.reset();
  }
});

test("a gap on an ordinary subscription subscribes again and hands over the fresh snapshot", async () => {
  const c = new Client("web-1");
  const l = fakeLink();
  c.use(l);
  const root: ahp.Message[] = [];
  c.on("ahp-root://", (m) => root.push(m));
  c.receive(msg({ method: "channel/gap", params: { channel: "ahp-root://", afterSeq: 7 } }));
  c.receive(msg({ method: "channel/gap", params: { channel: "ahp-root://", afterSeq: 9 } })); // while subscribing: covered
  const subs = l.sent.filter((m) => m.method === "subscribe");
  assert.equal(subs.length, 1);
  assert.deepEqual(subs[0].params, { channel: "ahp-root://" });
  const snapshot = { resource: "ahp-root://", state: { terminals: [] }, fromSeq: 12 };
  c.receive(msg({ id: subs[0].id, result: { snapshot } }));
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(root, [{ jsonrpc: "2.0", method: "channel/snapshot", params: { channel: "ahp-root://", snapshot } }]);
});

test("a paste is sent in dispatchActions that each fit the host's maximumFrameBytes, surrogate pairs whole", async () => {
  const { c, l } = await session();
  l.sent.length = 0;
  const paste = "x".repeat(10000) + "\u0001".repeat(3000) + "😀".repeat(2000) + "end";
  c.input(T, paste);
  const inputs = l.sent.filter((m) => m.method === "dispatchAction");
  assert.ok(inputs.length > 1);
  let joined = "";
  for (const m of inputs) {
    const size = 2 * JSON.stringify(m).length;
    assert.ok(size <= OFFER.maximumFrameBytes, `a dispatchAction of ${size} UTF-16 bytes`);
    const d: string = m.params.action.data;
    const first = d.charCodeAt(0);
    assert.ok(!(first >= 0xdc00 && first <= 0xdfff), "a chunk starts with a low surrogate");
    joined += d;
  }
  assert.equal(joined, paste);
  assert.equal(inputChunk(16384), 1322);
});
