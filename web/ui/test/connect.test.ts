// Unit tests of connecting: URLs relative to where the page was served,
// what is tried in which order, and the happy-eyeballs race (its timers
// mocked).
import { test } from "node:test";
import assert from "node:assert/strict";
import { GRACE_MS, HEAD_START_MS, endpoint, fetchTicket, forcedTransport, isFinal, plan, race, refusedText, rememberKey, type Attempt, type Kind } from "../src/connect.js";
import { LinkError } from "../src/link.js";
import { WT_UNAUTHORIZED } from "../src/tio.js";

test("endpoints are relative to the page's base, on the page's scheme", () => {
  const cases: [string, string, "https:" | "ws", Record<string, string>, string][] = [
    ["https://h:8443/", "transport-io", "ws", { ticket: "T" }, "wss://h:8443/transport-io?ticket=T"],
    ["https://h:8443/", "transport-io", "https:", { ticket: "T" }, "https://h:8443/transport-io?ticket=T"],
    ["https://proxy/vm1/", "transport-io", "ws", { ticket: "a-b_c" }, "wss://proxy/vm1/transport-io?ticket=a-b_c"],
    ["https://proxy/vm1/?transport=websocket", "transport-io", "https:", { ticket: "T" }, "https://proxy/vm1/transport-io?ticket=T"],
    ["https://proxy/vm1/index.html#x", "web/ticket", "https:", {}, "https://proxy/vm1/web/ticket"],
    ["http://proxy/a/b/", "transport-io", "ws", {}, "ws://proxy/a/b/transport-io"],
  ];
  for (const [base, path, scheme, q, want] of cases) assert.equal(endpoint(base, path, scheme, q), want, `${base} + ${path}`);
});

test("?transport= forces one transport", () => {
  assert.equal(forcedTransport("?transport=websocket"), "WebSocket");
  assert.equal(forcedTransport("?transport=webtransport"), "WebTransport");
  assert.equal(forcedTransport(""), null);
  assert.equal(forcedTransport("?transport=carrier-pigeon"), null);
});

test("what worked is remembered per origin and path", () => {
  assert.equal(rememberKey("https://proxy/vm1/?x=1#y"), "sidecar.transport:https://proxy/vm1/");
  assert.notEqual(rememberKey("https://proxy/vm1/"), rememberKey("https://proxy/vm2/"));
  assert.notEqual(rememberKey("https://proxy:1/vm1/"), rememberKey("https://proxy:2/vm1/"));
});

test("the plan: forced alone, both at once, or the remembered one with a head start", () => {
  assert.deepEqual(plan("WebSocket", "WebTransport", true), [{ kind: "WebSocket", delayMs: 0 }]);
  assert.deepEqual(plan("WebTransport", null, false), [{ kind: "WebTransport", delayMs: 0 }]);
  assert.deepEqual(plan(null, null, false), [{ kind: "WebSocket", delayMs: 0 }]);
  assert.deepEqual(plan(null, null, true), [
    { kind: "WebTransport", delayMs: 0 },
    { kind: "WebSocket", delayMs: 0 },
  ]);
  assert.deepEqual(plan(null, "WebSocket", true), [
    { kind: "WebSocket", delayMs: 0 },
    { kind: "WebTransport", delayMs: HEAD_START_MS },
  ]);
  assert.deepEqual(plan(null, "WebTransport", true), [
    { kind: "WebTransport", delayMs: 0 },
    { kind: "WebSocket", delayMs: HEAD_START_MS },
  ]);
  assert.deepEqual(plan(null, "garbage", true), plan(null, null, true));
});

/** A controllable attempt: it resolves or rejects when the test says, and records its start and abort. */
interface Fake {
  kind: Kind;
  started: number; // times started
  aborted: boolean;
  closed: boolean;
  succeed: () => void;
  failWith: (err: unknown) => void;
}

function fakes(steps: [Kind, number][]): { attempts: Attempt<Fake>[]; f: Fake[] } {
  const f: Fake[] = [];
  const attempts = steps.map(([kind, delayMs]): Attempt<Fake> => {
    const me: Fake = { kind, started: 0, aborted: false, closed: false, succeed: () => {}, failWith: () => {} };
    f.push(me);
    return {
      kind,
      delayMs,
      start: (signal) =>
        new Promise<Fake>((resolve, reject) => {
          me.started++;
          me.succeed = () => resolve(me);
          me.failWith = reject;
          signal.addEventListener("abort", () => {
            me.aborted = true;
            reject(new Error("aborted"));
          });
        }),
    };
  });
  return { attempts, f };
}

const opts = { prefer: "WebTransport" as Kind, graceMs: GRACE_MS, isFinal, close: (x: Fake) => void (x.closed = true) };
const flush = () => new Promise<void>((r) => setImmediate(r));

test("race: WebTransport first wins at once, the WebSocket is aborted", async () => {
  const { attempts, f } = fakes([
    ["WebTransport", 0],
    ["WebSocket", 0],
  ]);
  const p = race(attempts, opts);
  assert.deepEqual([f[0]!.started, f[1]!.started], [1, 1]);
  f[0]!.succeed();
  const won = await p;
  assert.equal(won.kind, "WebTransport");
  assert.equal(f[1]!.aborted, true);
});

test("race: a WebSocket first waits out the grace, and WebTransport within it wins", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const { attempts, f } = fakes([
    ["WebTransport", 0],
    ["WebSocket", 0],
  ]);
  let won: Kind | null = null;
  const p = race(attempts, opts).then((w) => (won = w.kind));
  f[1]!.succeed();
  await flush();
  t.mock.timers.tick(GRACE_MS - 1);
  await flush();
  assert.equal(won, null, "decided before the grace ended");
  f[0]!.succeed();
  await p;
  assert.equal(won, "WebTransport");
  assert.equal(f[1]!.closed, true, "the WebSocket that lost is closed");
});

test("race: a WebSocket first wins when the grace ends without WebTransport", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const { attempts, f } = fakes([
    ["WebTransport", 0],
    ["WebSocket", 0],
  ]);
  let won: Kind | null = null;
  const p = race(attempts, opts).then((w) => (won = w.kind));
  f[1]!.succeed();
  await flush();
  t.mock.timers.tick(GRACE_MS);
  await p;
  assert.equal(won, "WebSocket");
  assert.equal(f[0]!.aborted, true);
  f[0]!.succeed(); // completing late: nothing changes (the promise was already rejected by the abort)
});

test("race: a WebSocket first wins at once when WebTransport fails during the grace", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const { attempts, f } = fakes([
    ["WebTransport", 0],
    ["WebSocket", 0],
  ]);
  const p = race(attempts, opts);
  f[1]!.succeed();
  await flush();
  f[0]!.failWith(new Error("no UDP"));
  assert.equal((await p).kind, "WebSocket");
});

test("race: the remembered one runs alone for its head start; the other starts after it, or when it fails", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  {
    const { attempts, f } = fakes([
      ["WebSocket", 0],
      ["WebTransport", HEAD_START_MS],
    ]);
    const p = race(attempts, opts);
    f[0]!.succeed();
    assert.equal((await p).kind, "WebSocket", "WebTransport not started: nothing to wait for");
    t.mock.timers.tick(HEAD_START_MS);
    assert.equal(f[1]!.started, 0);
  }
  {
    const { attempts, f } = fakes([
      ["WebTransport", 0],
      ["WebSocket", HEAD_START_MS],
    ]);
    const p = race(attempts, opts);
    t.mock.timers.tick(HEAD_START_MS - 1);
    assert.equal(f[1]!.started, 0);
    t.mock.timers.tick(1);
    assert.equal(f[1]!.started, 1, "started at the end of the head start");
    f[1]!.succeed();
    await flush();
    t.mock.timers.tick(GRACE_MS);
    assert.equal((await p).kind, "WebSocket");
  }
  {
    const { attempts, f } = fakes([
      ["WebTransport", 0],
      ["WebSocket", HEAD_START_MS],
    ]);
    const p = race(attempts, opts);
    f[0]!.failWith(new Error("UDP blocked"));
    await flush();
    assert.equal(f[1]!.started, 1, "started as soon as the remembered one failed");
    f[1]!.succeed();
    assert.equal((await p).kind, "WebSocket");
  }
});

test("race: a refused token ends it at once; a refused ticket does not", async () => {
  {
    const { attempts, f } = fakes([
      ["WebTransport", 0],
      ["WebSocket", 0],
    ]);
    const p = race(attempts, opts);
    const wrong = new LinkError("wrong token", { code: WT_UNAUTHORIZED, reason: "unauthorized" });
    f[1]!.failWith(wrong);
    await assert.rejects(p, (e) => e === wrong);
    assert.equal(f[0]!.aborted, true);
  }
  {
    const { attempts, f } = fakes([
      ["WebTransport", 0],
      ["WebSocket", 0],
    ]);
    const p = race(attempts, opts);
    f[1]!.failWith(new LinkError("ticket", { code: WT_UNAUTHORIZED, reason: "ticket-used" }));
    await flush();
    f[0]!.succeed();
    assert.equal((await p).kind, "WebTransport");
  }
});

test("race: every attempt failed: an error naming each", async () => {
  const { attempts, f } = fakes([
    ["WebTransport", 0],
    ["WebSocket", 0],
  ]);
  const p = race(attempts, opts);
  f[0]!.failWith(new Error("no UDP"));
  f[1]!.failWith(new Error("WebSocket closed (1006)"));
  await assert.rejects(p, (e: Error) => e instanceof LinkError && e.closed === null && /WebTransport: no UDP; WebSocket: WebSocket closed \(1006\)/.test(e.message));
  const one = fakes([["WebSocket", 0]]);
  const q = race(one.attempts, opts);
  const err = new Error("alone");
  one.f[0]!.failWith(err);
  await assert.rejects(q, (e) => e === err);
});

test("race: an attempt completing after the race ended is closed", async () => {
  const { attempts, f } = fakes([
    ["WebTransport", 0],
    ["WebSocket", 0],
  ]);
  // The WebSocket's start ignores its abort (a WebTransport session the
  // browser reports only once it is up).
  attempts[1]!.start = () =>
    new Promise<Fake>((resolve) => {
      f[1]!.started++;
      f[1]!.succeed = () => resolve(f[1]!);
    });
  const p = race(attempts, opts);
  f[0]!.succeed();
  await p;
  f[1]!.succeed();
  await flush();
  assert.equal(f[1]!.closed, true);
});


test("fetchTicket: a refusal carries web/ticket's reason; refusedText words it", async (t) => {
  const answers: [number, object, string][] = [
    [401, { error: "missing or wrong token", reason: "unauthorized" }, "unauthorized"],
    [401, { error: "the credential expired: sign in again, or send a new one", reason: "expired" }, "expired"],
    [401, { error: "the credential was revoked", reason: "revoked" }, "revoked"],
    [401, { error: "missing or wrong token" }, "unauthorized"], // a daemon before the reason
  ];
  for (const [status, body, reason] of answers) {
    t.mock.method(globalThis, "fetch", async () => new Response(JSON.stringify(body), { status }));
    await assert.rejects(fetchTicket("https://h/", "T"), (err: unknown) => {
      assert.ok(err instanceof LinkError);
      assert.deepEqual(err.closed, { code: WT_UNAUTHORIZED, reason });
      return true;
    });
    t.mock.restoreAll();
  }
  assert.match(refusedText("expired"), /sign-in expired: sign in again/);
  assert.match(refusedText("revoked"), /revoked/);
  assert.match(refusedText("unauthorized"), /^Wrong token/);
  assert.doesNotMatch(refusedText("expired"), /Wrong token/);
});
