// Unit tests of the page's pure logic: transport-io framing, window and
// credit accounting, AHP message building (node --test, after esbuild).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as tio from "../src/tio.js";
import { Receiver, Sender, utf16Bytes } from "../src/flow.js";
import * as ahp from "../src/ahp.js";

test("the ahp event id is the first four bytes of SHA-256(ahp)", () => {
  assert.equal(tio.AHP_EVENT_ID, createHash("sha256").update("ahp").digest().readUInt32BE(0));
});

test("an EMIT frame: length, type, codec, reserved, event id, payload", () => {
  const f = tio.emitFrame('{"a":"☃"}');
  const payload = new TextEncoder().encode('{"a":"☃"}');
  const v = new DataView(f.buffer);
  assert.equal(v.getUint32(0), 8 + payload.length);
  assert.deepEqual([f[4], f[5], v.getUint16(6), v.getUint32(8)], [tio.EMIT, tio.CODEC_JSON, 0, tio.AHP_EVENT_ID]);
  assert.deepEqual(f.slice(12), payload);
  assert.throws(() => tio.encodeFrame(tio.EMIT, 1, 0, new Uint8Array(0)));
});

test("the decoder recovers frames cut anywhere and coalesced", () => {
  const a = tio.handshakeFrame();
  const b = tio.emitFrame("hello");
  const all = new Uint8Array([...a, ...b]);
  for (let cut = 0; cut <= all.length; cut++) {
    const d = new tio.FrameDecoder();
    const frames = [...d.push(all.slice(0, cut)), ...d.push(all.slice(cut))];
    assert.equal(frames.length, 2, `cut at ${cut}`);
    assert.equal(tio.checkHandshake(frames[0]!), "");
    assert.equal(new TextDecoder().decode(frames[1]!.payload), "hello");
    assert.equal(d.pending, 0);
  }
  const bad = tio.emitFrame("x");
  bad[6] = 1;
  assert.throws(() => new tio.FrameDecoder().push(bad), /reserved/);
});

test("a handshake must carry ahp as we declare it", () => {
  const hs = (o: unknown) => ({ type: tio.HANDSHAKE, codec: 1, eventId: 0, payload: new TextEncoder().encode(JSON.stringify(o)) });
  assert.equal(tio.checkHandshake(hs({ v: 0, feat: [], events: [["ahp", tio.AHP_EVENT_ID, "reliable"], ["x", 1, "unreliable"]] })), "");
  assert.match(tio.checkHandshake(hs({ v: 1, events: [] })), /version/);
  assert.match(tio.checkHandshake(hs({ v: 0, events: [["ahp", 1, "reliable"]] })), /ahp/);
  assert.match(tio.checkHandshake(hs({ v: 0, events: [] })), /does not know/);
});

test("WebSocket close codes map onto session codes (§3.3)", () => {
  assert.equal(tio.webSocketCloseToSession(1000), tio.WT_NO_ERROR);
  assert.equal(tio.webSocketCloseToSession(4007), tio.WT_UNAUTHORIZED);
  assert.equal(tio.webSocketCloseToSession(1006), null);
  assert.equal(tio.webSocketCloseToSession(1001), null);
});

test("sizes are UTF-16 bytes", () => {
  assert.equal(utf16Bytes("ab"), 4);
  assert.equal(utf16Bytes("☃"), 2);
  assert.equal(utf16Bytes("😀"), 4);
});

test("credit is returned on release, coalesced to a sixteenth of the window or catching up", () => {
  const r = new Receiver(1600);
  r.receive(300);
  r.receive(300);
  assert.equal(r.release(50), null); // below 100 and not caught up
  assert.equal(r.release(50), 100); // a sixteenth
  assert.equal(r.release(450), 550);
  assert.equal(r.release(50), 600); // caught up
  assert.equal(r.release(10), null); // nothing more to release
  assert.equal(r.outstanding, 0);
});

test("credit is held back so that about rate x backlogMs is outstanding", () => {
  const r = new Receiver(1600, 10);
  r.floorBytes = 100;
  for (let i = 0; i < 4; i++) r.receive(400, 0);
  assert.equal(r.effectiveWindow, 1600); // no rate yet: the whole window
  assert.equal(r.release(400, 10), 400); // 10 ms busy: no sample yet
  assert.equal(r.release(400, 20), null); // 800 bytes in 20 ms: 40 bytes/ms, 400 over 10 ms
  assert.equal(r.rate, 40);
  assert.equal(r.effectiveWindow, 400);
  assert.equal(r.release(400, 30), null);
  assert.equal(r.release(400, 40), null); // caught up, but credit stays 1200 behind
  assert.equal(1600 - (r.received - r.credited), 400); // the host's room is the effective window
  r.receive(400, 50); // idle until now: the busy time restarts here
  assert.equal(r.release(400, 60), 800);
  assert.equal(1600 - (r.received - r.credited), 400);
  // Fragments released on arrival count into the next timed sample.
  r.receive(200, 70);
  assert.equal(r.release(200), 1000); // caught up: credited at once
  r.receive(200, 70);
  assert.equal(r.release(200, 80), 1200); // 400 more bytes in 10 ms: the next sample is 40 bytes/ms again
  assert.equal(r.rate, 40);
});

test("the sender stops at the window and takes cumulative credit", () => {
  const s = new Sender(100);
  s.send(60);
  assert.ok(s.canSend());
  s.send(60);
  assert.ok(!s.canSend());
  assert.ok(s.credit(30));
  assert.ok(s.canSend());
  assert.ok(s.credit(10)); // stale: ignored
  assert.equal(s.consumed, 30);
  assert.ok(!s.credit(500)); // beyond what was sent
});

test("AHP messages", () => {
  assert.deepEqual(JSON.parse(ahp.initialize(1, "c1")), {
    jsonrpc: "2.0",
    id: 1,
    method: "initialize",
    params: { channel: "ahp-root://", protocolVersions: ["0.5.0"], clientId: "c1", clientInfo: { name: "sidecar-web" }, initialSubscriptions: ["ahp-root://"] },
  });
  assert.deepEqual(JSON.parse(ahp.subscribe(2, "ahp-terminal:/t", { windowBytes: 65536, maximumFrameBytes: 16384 })).params, {
    channel: "ahp-terminal:/t",
    flowControl: { receive: { windowBytes: 65536, maximumFrameBytes: 16384 } },
  });
  assert.equal(ahp.credit("ahp-terminal:/t", 804), '{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"ahp-terminal:/t","consumedBytes":804}}');
  assert.deepEqual(JSON.parse(ahp.dispatch("ahp-terminal:/t", 3, { type: "terminal/input", data: "ls\r" })).params, {
    channel: "ahp-terminal:/t",
    clientSeq: 3,
    action: { type: "terminal/input", data: "ls\r" },
  });
  assert.deepEqual(JSON.parse(JSON.stringify(ahp.reconnectParams("c1", 7, "tok", ["ahp-root://"], []))), {
    channel: "ahp-root://",
    clientId: "c1",
    lastSeenServerSeq: 7,
    resumeToken: "tok",
    clientInfo: { name: "sidecar-web" },
    subscriptions: ["ahp-root://"],
  });
  assert.match(ahp.newTerminalUri(() => 0.5), /^ahp-terminal:\/web-[0-9a-z]+$/);
  assert.equal(ahp.exitText({ exitCode: 0 }), "exited with status 0");
  assert.equal(ahp.exitText({ signal: "SIGKILL" }), "killed by SIGKILL");
});

test("what counts against a window", () => {
  const n = (method: string) => ({ jsonrpc: "2.0" as const, method, params: { channel: "c" } });
  assert.ok(ahp.countsAgainstWindow(n("action")));
  assert.ok(ahp.countsAgainstWindow(n("channel/frame")));
  assert.ok(ahp.countsAgainstWindow(n("channel/snapshot")));
  assert.ok(!ahp.countsAgainstWindow(n("channel/credit")));
  assert.ok(!ahp.countsAgainstWindow({ jsonrpc: "2.0", id: 1, result: null }));
});

test("fragments are joined per channel", () => {
  const r = new ahp.Reassembler();
  assert.equal(r.push("a", '{"x":', false), null);
  assert.equal(r.push("b", "[]", true), "[]");
  assert.equal(r.push("a", "1}", true), '{"x":1}');
});

test("the metrics panel reads OTLP/JSON", () => {
  const v = ahp.readMetrics({
    resourceMetrics: [{ scopeMetrics: [{ metrics: [
      { name: "system.cpu.utilization", gauge: { dataPoints: [
        { attributes: [{ key: "cpu.mode", value: { stringValue: "idle" } }], asDouble: 0.75 },
        { attributes: [{ key: "cpu.mode", value: { stringValue: "idle" } }, { key: "cpu.logical_number", value: { intValue: "0" } }], asDouble: 0.1 },
      ] } },
      { name: "system.memory.usage", sum: { dataPoints: [{ attributes: [{ key: "system.memory.state", value: { stringValue: "used" } }], asInt: "1024" }] } },
      { name: "system.memory.limit", sum: { dataPoints: [{ asInt: "4096" }] } },
      { name: "sidecar.clients", sum: { dataPoints: [{ asInt: "2" }] } },
    ] }] }],
  });
  assert.deepEqual(v, { cpu: 0.25, memUsed: 1024, memLimit: 4096, clients: 2 });
});
