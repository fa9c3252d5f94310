// Unit tests of pace.ts: a hidden pane's credit at a bounded rate.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Pacer, type Clock } from "../src/pace.js";

/** A fake clock: timers run when advance passes their time. */
function fakeClock(): Clock & { advance(ms: number): void } {
  let now = 1000;
  let timers: { at: number; f: () => void; id: number }[] = [];
  let ids = 0;
  return {
    now: () => now,
    setTimeout(f, ms) {
      const id = ++ids;
      timers.push({ at: now + ms, f, id });
      return id;
    },
    clearTimeout(t) {
      timers = timers.filter((x) => x.id !== t);
    },
    advance(ms) {
      const end = now + ms;
      for (;;) {
        timers.sort((a, b) => a.at - b.at);
        const t = timers[0];
        if (!t || t.at > end) break;
        timers.shift();
        now = t.at;
        t.f();
      }
      now = end;
    },
  };
}

test("credits go no faster than the rate", () => {
  const clock = fakeClock();
  const p = new Pacer(1000, clock); // 1000 characters a second
  const released: number[] = [];
  for (let i = 0; i < 4; i++) p.credit(500, () => released.push(i));
  assert.deepEqual(released, [0]); // the first at once
  assert.equal(p.size, 3);
  clock.advance(499);
  assert.deepEqual(released, [0]);
  clock.advance(1);
  assert.deepEqual(released, [0, 1]); // 500 characters took 500 ms
  clock.advance(1000);
  assert.deepEqual(released, [0, 1, 2, 3]);
  assert.equal(p.size, 0);
});

test("flush releases everything held at once, and paces afresh", () => {
  const clock = fakeClock();
  const p = new Pacer(1000, clock);
  const released: number[] = [];
  for (let i = 0; i < 3; i++) p.credit(1000, () => released.push(i));
  p.flush();
  assert.deepEqual(released, [0, 1, 2]);
  p.credit(10, () => released.push(3));
  assert.deepEqual(released, [0, 1, 2, 3]);
  clock.advance(10_000); // no timer left to release anything twice
  assert.deepEqual(released, [0, 1, 2, 3]);
});

test("after a quiet while credit goes at once again", () => {
  const clock = fakeClock();
  const p = new Pacer(1000, clock);
  let n = 0;
  p.credit(100, () => n++);
  clock.advance(200);
  p.credit(100, () => n++);
  assert.equal(n, 2);
});
