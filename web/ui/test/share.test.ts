// Unit tests of share.ts: who holds the terminal the page shows, the size
// it is drawn at, and what the page says while it shares it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Share, holderText, label } from "../src/share.js";

const ME = "web-me";
const CLI = "sidecar-0123456789abcdef";
const client = (clientId: string) => ({ kind: "client" as const, clientId });

test("a terminal held by a connected CLI is shared at its size after the claim on opening is refused", () => {
  const s = new Share(ME);
  assert.deepEqual(s.snapshot({ claim: client(CLI), cols: 120, rows: 40 }), { size: true });
  assert.equal(s.wantsClaim(), true);
  s.claiming(7, true);
  // Until the claim's answer the page neither holds it nor says it shares (the holder may be gone).
  assert.equal(s.holding, false);
  assert.equal(s.notice(), null);
  assert.deepEqual(s.view(), { cols: 120, rows: 40 });
  assert.deepEqual(s.action({ type: "terminal/claimed", claim: client(ME) }, { clientId: ME, clientSeq: 7 }, "not claim holder"), {});
  assert.equal(s.holding, false);
  assert.equal(s.refused, null, "a refused claim on opening is no Take over refused");
  s.catalogue({ resource: "ahp-terminal:/t1", claim: client(CLI), attached: [CLI, ME, "web-other"] });
  const n = s.notice()!;
  assert.match(n, /^Shared: sidecar-0123456789abcdef \(sidecar CLI\) holds this terminal/);
  assert.match(n, /120×40/);
  assert.match(n, /Also sharing: web-other \(a page\)\./);
  assert.ok(!n.includes(ME));
});

test("the claim on opening granted (the holder had gone): the page holds it, says nothing, fits the pane", () => {
  const s = new Share(ME);
  s.snapshot({ claim: client("web-gone"), cols: 80, rows: 24 });
  s.claiming(3, true);
  assert.deepEqual(s.action({ type: "terminal/claimed", claim: client(ME) }, { clientId: ME, clientSeq: 3 }), { holding: true });
  assert.equal(s.holding, true);
  assert.equal(s.notice(), null);
  assert.equal(s.view(), null);
  assert.equal(s.takenBy, null);
});

test("a terminal the page created is held from its first snapshot", () => {
  const s = new Share(ME);
  assert.deepEqual(s.snapshot({ claim: client(ME), cols: 90, rows: 30 }), { holding: true, size: true });
  assert.equal(s.wantsClaim(), false);
  assert.equal(s.view(), null);
  assert.equal(s.notice(), null);
});

test("sharing follows the holder's accepted resizes, not rejected ones", () => {
  const s = new Share(ME);
  s.snapshot({ claim: client(CLI), cols: 120, rows: 40 });
  assert.deepEqual(s.action({ type: "terminal/resized", cols: 75, rows: 26 }, { clientId: "web-x", clientSeq: 1 }, "not claim holder"), {});
  assert.deepEqual(s.view(), { cols: 120, rows: 40 });
  assert.deepEqual(s.action({ type: "terminal/resized", cols: 100, rows: 30 }, { clientId: CLI, clientSeq: 9 }), { size: true });
  assert.deepEqual(s.view(), { cols: 100, rows: 30 });
  assert.deepEqual(s.action({ type: "terminal/resized", cols: 0, rows: 30 }), {}, "an invalid size is ignored");
});

test("a huge holder's size is drawn clamped", () => {
  const s = new Share(ME);
  s.snapshot({ claim: client(CLI), cols: 4096, rows: 4096 });
  assert.deepEqual(s.view(), { cols: 1000, rows: 500 });
  assert.deepEqual(s.size, { cols: 4096, rows: 4096 });
});

test("Take over: pending, then held; the holder taking it back returns the page to sharing, and it says so", () => {
  const s = new Share(ME);
  s.snapshot({ claim: client(CLI), cols: 120, rows: 40 });
  s.claiming(1, true);
  s.action({ type: "terminal/claimed", claim: client(ME) }, { clientId: ME, clientSeq: 1 }, "not claim holder");
  s.claiming(2, false);
  assert.equal(s.takingOver, true);
  assert.notEqual(s.notice(), null, "the notice stays while Take over is under way");
  // Another client's echo with the same clientSeq is not our answer.
  s.action({ type: "terminal/claimed", claim: client("web-x") }, { clientId: "web-x", clientSeq: 2 }, "not claim holder");
  assert.equal(s.takingOver, true);
  assert.deepEqual(s.action({ type: "terminal/claimed", claim: client(ME), takeOver: true } as never, { clientId: ME, clientSeq: 2 }), { holding: true });
  assert.equal(s.takingOver, false);
  assert.equal(s.notice(), null);
  assert.equal(s.view(), null);
  assert.deepEqual(s.action({ type: "terminal/resized", cols: 88, rows: 35 }, { clientId: ME, clientSeq: 3 }), { size: true });
  // The holder takes it back.
  assert.deepEqual(s.action({ type: "terminal/claimed", claim: client(CLI) }, { clientId: CLI, clientSeq: 5 }), { holding: false });
  assert.equal(s.takenBy, CLI);
  assert.match(s.notice()!, /^sidecar-0123456789abcdef \(sidecar CLI\) took this terminal over: you share it now/);
  assert.deepEqual(s.action({ type: "terminal/resized", cols: 120, rows: 40 }, { clientId: CLI, clientSeq: 6 }), { size: true });
  assert.deepEqual(s.view(), { cols: 120, rows: 40 });
});

test("a refused Take over is said", () => {
  const s = new Share(ME);
  s.snapshot({ claim: client(CLI), cols: 80, rows: 24 });
  s.claiming(4, false);
  assert.deepEqual(s.action({ type: "terminal/claimed", claim: client(ME) }, { clientId: ME, clientSeq: 4 }, "terminal has exited"), { refused: "terminal has exited" });
  assert.match(s.notice()!, /Take over refused: terminal has exited/);
  s.claiming(5, false);
  assert.doesNotMatch(s.notice()!, /refused/);
});

test("a snapshot mid-stream settles a claim whose answer it skipped, and the holder it names", () => {
  const s = new Share(ME);
  s.snapshot({ claim: client(CLI), cols: 80, rows: 24 });
  s.claiming(1, true);
  assert.deepEqual(s.snapshot({ claim: client(CLI), cols: 80, rows: 24 }), {});
  assert.notEqual(s.notice(), null);
  assert.deepEqual(s.snapshot({ claim: client(ME), cols: 80, rows: 24 }), { holding: true });
});

test("an away holder is said away", () => {
  const s = new Share(ME);
  s.snapshot({ claim: client(CLI), cols: 80, rows: 24 });
  s.catalogue({ resource: "ahp-terminal:/t1", claim: client(CLI), attached: [ME], away: [CLI] });
  assert.match(s.notice()!, /\(sidecar CLI\) \(away\) holds/);
});

test("the terminal list says who holds each terminal", () => {
  assert.equal(holderText({ resource: "r", claim: client(ME) }, ME), "held by you");
  assert.equal(holderText({ resource: "r", claim: client(CLI), attached: [CLI] }, ME), `held by ${CLI}`);
  assert.equal(holderText({ resource: "r", claim: client(CLI), attached: [CLI, ME, "web-x"] }, ME), `held by ${CLI}, shared by 2`);
  assert.equal(holderText({ resource: "r", claim: client(ME), attached: [ME, CLI] }, ME), "held by you, shared by 1");
  assert.equal(holderText({ resource: "r", claim: client(CLI), away: [CLI] }, ME), `held by ${CLI} (away)`);
  assert.equal(holderText({ resource: "r" }, ME), "");
  assert.equal(label("web-abc"), "web-abc (a page)");
  assert.equal(label("c1"), "c1");
});
