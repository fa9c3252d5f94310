// Unit tests of upload.ts: the bytes, the hash and the window an upload keeps to.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { Upload, base64, sliceBytes, uploadName, type UploadClient } from "../src/upload.js";
import type { Message } from "../src/ahp.js";

function source(bytes: Uint8Array, name = "a.bin") {
  let biggest = 0;
  return {
    name,
    size: bytes.length,
    lastModified: 1700000000000,
    biggest: () => biggest,
    slice(start: number, end: number) {
      biggest = Math.max(biggest, end - start);
      return { arrayBuffer: async () => bytes.slice(start, end).buffer };
    },
  };
}

/** A fake host: a window of `window` UTF-16 bytes it credits when told; records what it got. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function fakeHost(window: number, frame: number, answer?: (h: any) => void) {
  const h = {
    opened: null as any,
    opens: [] as any[],
    commit: null as any,
    /** open answers files/open (default: nothing kept). */
    open: (_p: any): any => ({ offset: 0 }),
    /** lose, when set, fails the next writable() once: a lost link. */
    lose: false,
    /** dead: the client's session is gone (die()): everything it is asked fails, as client.ts's does without a link. */
    dead: false,
    sent: 0,
    credited: 0,
    maxOutstanding: 0,
    got: [] as Buffer[],
    eof: -1,
    resets: 0,
    unsubscribed: false,
    handler: null as null | ((m: Message, release: () => void) => void),
    waiters: [] as { resolve: () => void; reject: (e: Error) => void }[],
    credit(n: number) {
      h.credited = Math.min(h.sent, h.credited + n);
      while (h.waiters.length > 0 && h.sent - h.credited < window) h.waiters.shift()!.resolve();
    },
    /** die ends the client's session: what waits for the window fails, as client.ts's lost() does. */
    die() {
      h.dead = true;
      for (const w of h.waiters.splice(0)) w.reject(new Error("connection lost"));
    },
    push(method: string, params: object) {
      h.handler?.({ jsonrpc: "2.0", method, params: { channel: h.opened.channel, ...params } }, () => {});
    },
  };
  const c: UploadClient = {
    async request(method: string, params: any) {
      if (h.dead) throw new Error("not connected");
      if (method === "files/commit") {
        assert.equal(params.channel, h.opened.channel);
        h.commit = params;
        return {} as any;
      }
      assert.equal(method, "files/open");
      h.opened = params;
      h.opens.push(params);
      h.got = [];
      return h.open(params);
    },
    async subscribeWindowed(_ch, _offer, handler) {
      if (h.dead) throw new Error("not connected");
      h.handler = handler;
    },
    writable() {
      if (h.dead) return Promise.reject(new Error("not connected"));
      if (h.lose) {
        h.lose = false;
        return Promise.reject(new Error("the link was lost"));
      }
      return h.sent - h.credited < window ? Promise.resolve() : new Promise<void>((resolve, reject) => h.waiters.push({ resolve, reject }));
    },
    frameOf: () => frame,
    sendData(channel, method, params: any) {
      if (h.dead) throw new Error(`${channel}: not connected`);
      const text = JSON.stringify({ jsonrpc: "2.0", method, params: { channel, ...params } });
      assert.ok(2 * text.length <= frame, `a message of ${2 * text.length} UTF-16 bytes over the frame ${frame}`);
      h.sent += 2 * text.length;
      h.maxOutstanding = Math.max(h.maxOutstanding, h.sent - h.credited);
      if (method === "tcp/data") {
        assert.equal(params.offset, Buffer.concat(h.got).length);
        h.got.push(Buffer.from(params.data, "base64"));
      } else {
        h.eof = params.offset;
        answer?.(h);
      }
    },
    control(_ch, method) {
      if (method === "tcp/reset") h.resets++;
    },
    unsubscribe() {
      h.unsubscribed = true;
    },
  };
  return Object.assign(h, { c });
}

test("base64 is Node's", () => {
  for (const n of [0, 1, 2, 3, 4, 5, 100, 24577, 3 * 8192 + 1]) {
    const b = new Uint8Array(n).map((_, i) => (i * 7919) & 255);
    assert.equal(base64(b), Buffer.from(b).toString("base64"), `${n} bytes`);
  }
});

test("sliceBytes fills a frame without passing it", () => {
  const ch = "ahp-file:/up-x";
  for (const frame of [16384, 524288]) {
    const n = sliceBytes(frame, ch);
    const text = JSON.stringify({ jsonrpc: "2.0", method: "tcp/data", params: { channel: ch, offset: 2 ** 40, data: "A".repeat((4 * n) / 3) } });
    assert.ok(2 * text.length <= frame, `${frame}: ${2 * text.length}`);
    assert.ok(2 * text.length > frame - 16, `${frame}: ${2 * text.length} leaves room`);
  }
});

test("uploadName refuses what the host would", () => {
  for (const bad of ["", ".", "..", "a/b", "a\u0000"]) assert.equal(uploadName(bad), null);
  assert.equal(uploadName("ok.txt"), "ok.txt");
});

test("an upload sends every byte once, in order, with the file's SHA-256, within the window", async () => {
  const bytes = new Uint8Array(3 * 1024 * 1024 + 17).map((_, i) => (i * 31 + (i >> 9)) & 255);
  const window = 256 * 1024;
  const h = fakeHost(window, 64 * 1024, (h) => setTimeout(() => h.push("tcp/eof", { offset: 0 })));
  const src = source(bytes);
  const u = new Upload(() => h.c, src, "/srv/up", "a.bin");
  const done = u.run();
  // Credit as a host would, a message at a time, until the end.
  while (u.phase !== "done" && u.phase !== "failed") {
    await new Promise((r) => setTimeout(r, 0));
    h.credit(64 * 1024);
  }
  await done;
  assert.equal(h.opened.path, "/srv/up");
  assert.equal(h.opened.entry, "a.bin");
  assert.equal(h.opened.mode, "write");
  assert.equal(h.opened.size, bytes.length);
  assert.equal(h.opened.sha256, undefined);
  assert.equal(h.commit.sha256, createHash("sha256").update(bytes).digest("hex"));
  assert.equal(h.opened.mtimeNs, 1700000000000 * 1e6);
  assert.ok(Buffer.concat(h.got).equals(Buffer.from(bytes)));
  assert.equal(h.eof, bytes.length);
  assert.ok(h.maxOutstanding < window + 64 * 1024, `outstanding ${h.maxOutstanding}`);
  assert.ok(src.biggest() <= 1 << 20, `read ${src.biggest()} bytes at once`);
  assert.equal(u.phase, "done");
  assert.equal(u.fraction, 1);
  assert.ok(h.unsubscribed);
});

test("the host's reason fails an upload", async () => {
  const h = fakeHost(1 << 20, 64 * 1024, (h) => {
    h.push("tcp/data", { offset: 0, data: Buffer.from("a.bin: SHA-256 differs").toString("base64") });
    h.push("tcp/eof", { offset: 22 });
  });
  const u = new Upload(() => h.c, source(new Uint8Array(10)), "/srv", "a.bin");
  await assert.rejects(u.run(), /SHA-256 differs/);
  assert.equal(u.phase, "failed");
  assert.equal(u.error, "a.bin: SHA-256 differs");
});

test("cancel resets the channel and never ends the stream", async () => {
  const bytes = new Uint8Array(1 << 20);
  const h = fakeHost(64 * 1024, 16 * 1024); // no credit: the upload waits for the window
  const u = new Upload(() => h.c, source(bytes), "/srv", "a.bin");
  const done = u.run();
  while (u.phase !== "sending" || h.sent === 0) await new Promise((r) => setTimeout(r, 0));
  u.cancel();
  await assert.rejects(done, /cancelled/);
  assert.equal(u.phase, "cancelled");
  assert.equal(h.resets, 1);
  assert.equal(h.eof, -1);
  assert.ok(h.unsubscribed);
});

test("an upload cut by a lost link opens again and sends only what the host lacks", async () => {
  const bytes = new Uint8Array(2 * 1024 * 1024 + 5).map((_, i) => (i * 13 + (i >> 7)) & 255);
  const kept = 700 * 1024 + 3;
  const h = fakeHost(1 << 20, 64 * 1024, (h) => setTimeout(() => h.push("tcp/eof", { offset: 0 })));
  let opens = 0;
  h.open = (p: any) => {
    opens++;
    assert.equal(p.resume, opens < 3 ? true : false);
    if (opens === 1) {
      h.lose = true; // the first attempt's first write finds the link lost
      return { offset: 0 };
    }
    if (opens === 2) return { offset: kept, prefixSha256: createHash("sha256").update(bytes.subarray(0, kept)).digest("hex") };
    return { offset: 0 };
  };
  const u = new Upload(() => h.c, source(bytes), "/srv", "a.bin");
  const first = u.channel;
  const done = u.run();
  while (u.phase !== "done" && u.phase !== "failed") {
    await new Promise((r) => setTimeout(r, 0));
    h.credit(64 * 1024);
  }
  await done;
  assert.equal(opens, 2);
  assert.notEqual(h.opened.channel, first, "a new channel for the second attempt");
  // The second attempt's stream starts at the kept offset: stream offset 0 is file byte `kept`.
  assert.ok(Buffer.concat(h.got).equals(Buffer.from(bytes.subarray(kept))));
  assert.equal(h.eof, bytes.length - kept);
  assert.equal(h.commit.sha256, createHash("sha256").update(bytes).digest("hex"));
  assert.equal(u.hashed, kept);
  assert.equal(u.fraction, 1);
});

test("a kept prefix that differs is sent again from the start", async () => {
  const bytes = new Uint8Array(300 * 1024).map((_, i) => (i * 7) & 255);
  const h = fakeHost(1 << 20, 64 * 1024, (h) => setTimeout(() => h.push("tcp/eof", { offset: 0 })));
  h.open = (p: any) => (p.resume ? { offset: 1000, prefixSha256: "00".repeat(32) } : { offset: 0 });
  const u = new Upload(() => h.c, source(bytes), "/srv", "a.bin");
  const done = u.run();
  while (u.phase !== "done" && u.phase !== "failed") {
    await new Promise((r) => setTimeout(r, 0));
    h.credit(64 * 1024);
  }
  await done;
  assert.deepEqual(h.opens.map((o: any) => o.resume), [true, false]);
  assert.ok(Buffer.concat(h.got).equals(Buffer.from(bytes)));
  assert.equal(h.commit.sha256, createHash("sha256").update(bytes).digest("hex"));
});

/**
 * replaced runs an upload whose client's session ends once `after` bytes
 * went up (the host restarted, say): the page has no client for a while,
 * then a new one, which the upload's next tries must use. keeps says what
 * the new session's host kept of the file (its partial file).
 */
async function replaced(bytes: Uint8Array, after: number, keeps: (got: Buffer) => Buffer) {
  const ended = (h: { push: (m: string, p: object) => void }) => setTimeout(() => h.push("tcp/eof", { offset: 0 }));
  const old = fakeHost(256 * 1024, 64 * 1024, ended);
  const neu = fakeHost(256 * 1024, 64 * 1024, ended);
  let kept: Buffer = Buffer.alloc(0);
  neu.open = (p: any) => {
    if (!p.resume || kept.length === 0) return { offset: 0 };
    return { offset: kept.length, prefixSha256: createHash("sha256").update(kept).digest("hex") };
  };
  let current: UploadClient | null = old.c;
  let without = 0; // looks for a client that found none
  const clientOf = () => {
    if (current === null && ++without === 1) setTimeout(() => (current = neu.c)); // the next session is up for the try after
    return current;
  };
  const u = new Upload(clientOf, source(bytes), "/srv", "a.bin");
  const done = u.run();
  while (u.phase !== "done" && u.phase !== "failed") {
    await new Promise((r) => setTimeout(r, 0));
    if (!old.dead && Buffer.concat(old.got).length >= after) {
      old.die();
      current = null;
      kept = keeps(Buffer.concat(old.got));
    }
    old.credit(64 * 1024);
    neu.credit(64 * 1024);
  }
  await done;
  return { old, neu, kept, without, u };
}

test("an upload whose session is replaced continues on the new client from the part the host kept", async () => {
  const bytes = new Uint8Array(2 * 1024 * 1024 + 11).map((_, i) => (i * 29 + (i >> 10)) & 255);
  const { old, neu, kept, without, u } = await replaced(bytes, 700 * 1024, (got) => got);
  assert.ok(kept.length >= 700 * 1024 && kept.length < bytes.length, `the old host got ${kept.length} bytes`);
  assert.equal(old.opens.length, 1, "no try went to the old client after its session ended");
  assert.equal(old.commit, null);
  assert.ok(without >= 1, "the upload looked for a client while there was none");
  assert.deepEqual(neu.opens.map((o: any) => o.resume), [true]);
  assert.ok(Buffer.concat(neu.got).equals(Buffer.from(bytes.subarray(kept.length))), "the new host got the rest, from the kept offset");
  assert.equal(neu.eof, bytes.length - kept.length);
  assert.equal(neu.commit.sha256, createHash("sha256").update(bytes).digest("hex"));
  assert.equal(u.hashed, kept.length);
  assert.equal(u.phase, "done");
  assert.equal(u.fraction, 1);
  assert.ok(neu.unsubscribed);
});

test("an upload whose session is replaced by a host that kept nothing starts over and lands exact", async () => {
  const bytes = new Uint8Array(1024 * 1024 + 3).map((_, i) => (i * 17 + (i >> 8)) & 255);
  const { old, neu, without, u } = await replaced(bytes, 300 * 1024, () => Buffer.alloc(0));
  assert.equal(old.opens.length, 1);
  assert.ok(without >= 1);
  assert.deepEqual(neu.opens.map((o: any) => o.resume), [true]);
  assert.ok(Buffer.concat(neu.got).equals(Buffer.from(bytes)), "the new host got every byte");
  assert.equal(neu.eof, bytes.length);
  assert.equal(neu.commit.sha256, createHash("sha256").update(bytes).digest("hex"));
  assert.equal(u.hashed, 0);
  assert.equal(u.phase, "done");
});

test("an upload waits for a session as long as it takes, spending no try, and says so", { timeout: 20_000 }, async () => {
  const bytes = new Uint8Array(512 * 1024 + 7).map((_, i) => (i * 31 + (i >> 9)) & 255);
  const ended = (h: { push: (m: string, p: object) => void }) => setTimeout(() => h.push("tcp/eof", { offset: 0 }));
  const old = fakeHost(256 * 1024, 64 * 1024, ended);
  const neu = fakeHost(256 * 1024, 64 * 1024, ended);
  let current: UploadClient | null = old.c;
  let looks = 0; // looks for a client while there was none
  const phases = new Set<string>();
  const u = new Upload(
    () => {
      if (current === null && ++looks === 5 * 8) current = neu.c; // five times the tries an upload may spend
      return current;
    },
    source(bytes),
    "/srv",
    "a.bin",
    (x) => phases.add(x.phase),
  );
  u.waitMs = 1;
  const done = u.run();
  while (u.phase !== "done" && u.phase !== "failed") {
    await new Promise((r) => setTimeout(r, 0));
    if (!old.dead && Buffer.concat(old.got).length >= 100 * 1024) {
      old.die();
      current = null;
    }
    old.credit(64 * 1024);
    neu.credit(64 * 1024);
  }
  await done;
  assert.equal(looks, 40);
  assert.ok(phases.has("waiting"), `phases ${[...phases]}: never "waiting"`);
  assert.equal(u.phase, "done");
  assert.ok(Buffer.concat(neu.got).equals(Buffer.from(bytes)), "the new host (which kept nothing) got every byte");
  assert.equal(neu.commit.sha256, createHash("sha256").update(bytes).digest("hex"));
});

test("a cancel while waiting for a session ends the upload", { timeout: 20_000 }, async () => {
  const u = new Upload(() => null, source(new Uint8Array(10)), "/srv", "a.bin");
  u.waitMs = 1;
  const done = u.run().catch((e) => e);
  while (u.phase !== "waiting") await new Promise((r) => setTimeout(r, 0));
  u.cancel();
  assert.equal(String(await done), "Error: cancelled");
  assert.equal(u.phase, "cancelled");
});

test("tries that move the upload on do not use the tries up; tries in a row that do not, do", { timeout: 20_000 }, async () => {
  const bytes = new Uint8Array(1024 * 1024).map((_, i) => (i * 3 + (i >> 11)) & 255);
  const h = fakeHost(1 << 20, 64 * 1024, (h) => setTimeout(() => h.push("tcp/eof", { offset: 0 })));
  // Every try is cut after one more 64 KiB message reached the host: far
  // more cuts than ATTEMPTS, each with progress.
  let host = Buffer.alloc(0);
  h.open = (p: any) => {
    assert.ok(p.resume);
    return host.length === 0 ? { offset: 0 } : { offset: host.length, prefixSha256: createHash("sha256").update(host).digest("hex") };
  };
  const write = h.c.sendData;
  h.c.sendData = (ch, method, params: any) => {
    write(ch, method, params);
    if (method === "tcp/data") {
      host = Buffer.concat([host, Buffer.from(params.data, "base64")]);
      h.lose = true; // the next write finds the link lost
    }
  };
  const u = new Upload(() => h.c, source(bytes), "/srv", "a.bin");
  u.retryMs = 1;
  const done = u.run();
  while (u.phase !== "done" && u.phase !== "failed") {
    await new Promise((r) => setTimeout(r, 0));
    h.credit(64 * 1024);
  }
  await done;
  assert.ok(h.opens.length > 3 * 8, `${h.opens.length} tries`);
  assert.ok(host.equals(Buffer.from(bytes)));
  assert.equal(h.commit.sha256, createHash("sha256").update(bytes).digest("hex"));
});

test("tries that each end their session and get nothing more across use the tries up", { timeout: 20_000 }, async () => {
  const bytes = new Uint8Array(256 * 1024).map((_, i) => (i * 5) & 255);
  const hosts: ReturnType<typeof fakeHost>[] = [];
  let current: UploadClient | null = null;
  const next = () => {
    // Each session's host dies at the upload's first write and keeps nothing.
    const h = fakeHost(1 << 20, 64 * 1024);
    h.lose = true;
    h.c.writable = () => {
      h.die();
      current = null;
      return Promise.reject(new Error("connection lost"));
    };
    hosts.push(h);
    current = h.c;
  };
  next();
  let gone = false; // the page saw the session end: no client at the first look after
  const u = new Upload(
    () => {
      if (current === null && !gone) {
        gone = true;
        return null;
      }
      if (current === null) next(); // the page's next session comes then
      gone = false;
      return current;
    },
    source(bytes),
    "/srv",
    "a.bin",
  );
  u.waitMs = 1;
  u.retryMs = 1;
  const err = await u.run().then(
    () => null,
    (e) => e,
  );
  assert.ok(err instanceof Error, "the upload failed");
  assert.equal(u.phase, "failed");
  assert.equal(hosts.filter((h) => h.opens.length > 0).length, 8, "8 tries, one per session");
});

test("a cancel during the wait between tries ends the upload at once", { timeout: 20_000 }, async () => {
  const h = fakeHost(1 << 20, 64 * 1024);
  h.lose = true; // the first try is cut; the next would wait a minute first
  const u = new Upload(() => h.c, source(new Uint8Array(1000)), "/srv", "a.bin");
  u.retryMs = 60_000;
  const done = u.run().catch((e) => e);
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  while (!(u as any).wake) await new Promise((r) => setTimeout(r, 0)); // in the wait
  u.cancel();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise((r) => (timer = setTimeout(() => r("still waiting after 10 s"), 10_000)));
  const got = await Promise.race([done, late]);
  clearTimeout(timer);
  assert.equal(String(got), "Error: cancelled");
  assert.equal(u.phase, "cancelled");
});
