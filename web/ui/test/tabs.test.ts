// Unit tests of names.ts and tabs.ts: what a terminal is called, the open
// tabs and what a reload restores, the page's shortcuts and font size.
import { test } from "node:test";
import assert from "node:assert/strict";
import { numbered, pathFromCwd, shortPath, terminalId, terminalName } from "../src/names.js";
import { Tabs, decodeTabs, fontSize, nextFontSize, restorable, shortcut } from "../src/tabs.js";

test("a cwd from OSC 7 or terminal/cwdChanged becomes a path", () => {
  assert.equal(pathFromCwd("file://box/home/me/src"), "/home/me/src");
  assert.equal(pathFromCwd("file:///tmp/a%20dir"), "/tmp/a dir");
  assert.equal(pathFromCwd("file://box"), "/");
  assert.equal(pathFromCwd("/srv"), "/srv");
  assert.equal(pathFromCwd("file://box/bad%zz"), "/bad%zz");
  assert.equal(pathFromCwd("http://x/y"), null);
  assert.equal(pathFromCwd(""), null);
  assert.equal(pathFromCwd(undefined), null);
  assert.equal(shortPath("/home/me/src/"), "src");
  assert.equal(shortPath("/"), "/");
});

test("a terminal is named by its title and cwd, its id only when there is nothing else", () => {
  const uri = "ahp-terminal:/web-abc123";
  assert.equal(terminalId(uri), "web-abc123");
  assert.deepEqual(terminalName({ uri }), { name: "web-abc123", detail: "", tooltip: "web-abc123" });
  assert.deepEqual(terminalName({ uri, title: "bash", cwd: "file://box/home/me/src" }), {
    name: "bash",
    detail: "src",
    tooltip: "bash\n/home/me/src\nweb-abc123",
  });
  // The title says where already: no detail twice.
  assert.equal(terminalName({ uri, title: "me@box: ~/src", cwd: "file:///home/me/src" }).detail, "");
  // Control characters never reach a label; a long title is cut (the tooltip keeps it).
  assert.equal(terminalName({ uri, title: "a\x1b[31mb\x07" }).name, "a[31mb");
  const long = "x".repeat(100);
  const n = terminalName({ uri, title: long });
  assert.equal(n.name.length, 40);
  assert.ok(n.name.endsWith("…"));
  assert.ok(n.tooltip.startsWith(long));
  assert.equal(terminalName({ uri, title: "  " }).name, "web-abc123");
});

test("tabs open after the active one, close to a neighbour, and step around", () => {
  const t = new Tabs();
  t.open("ahp-terminal:/a");
  t.open("ahp-terminal:/b");
  t.step(-1);
  t.open("ahp-terminal:/c"); // after a, before b
  assert.deepEqual(t.state(), { tabs: ["ahp-terminal:/a", "ahp-terminal:/c", "ahp-terminal:/b"], active: "ahp-terminal:/c" });
  t.open("ahp-terminal:/a"); // already open: shown, not added
  assert.deepEqual(t.tabs.length, 3);
  assert.equal(t.active, "ahp-terminal:/a");
  assert.equal(t.step(-1), "ahp-terminal:/b"); // wraps
  assert.equal(t.step(1), "ahp-terminal:/a");
  assert.equal(t.nth(2), "ahp-terminal:/c");
  assert.equal(t.nth(9), "ahp-terminal:/b");
  t.close("ahp-terminal:/b"); // the last: its left neighbour
  assert.equal(t.active, "ahp-terminal:/c");
  t.close("ahp-terminal:/a"); // not active: nothing else changes
  assert.equal(t.active, "ahp-terminal:/c");
  t.close("ahp-terminal:/c");
  assert.deepEqual(t.state(), { tabs: [], active: null });
  assert.equal(t.step(1), null);
});

test("saved tabs are read back defensively and restored only where the host has them", () => {
  const saved = JSON.stringify(new Tabs({ tabs: ["ahp-terminal:/a", "ahp-terminal:/b"], active: "ahp-terminal:/b" }).state());
  assert.deepEqual(decodeTabs(saved), { tabs: ["ahp-terminal:/a", "ahp-terminal:/b"], active: "ahp-terminal:/b" });
  assert.equal(decodeTabs(null), null);
  assert.equal(decodeTabs("{"), null);
  assert.equal(decodeTabs('{"tabs":[]}'), null);
  assert.deepEqual(decodeTabs('{"tabs":["ahp-terminal:/a",7,"https://x","ahp-terminal:/a"],"active":"https://x"}'), { tabs: ["ahp-terminal:/a"], active: "ahp-terminal:/a" });
  assert.equal(decodeTabs(JSON.stringify({ tabs: Array.from({ length: 100 }, (_, i) => `ahp-terminal:/t${i}`) }))!.tabs.length, 32);
  const r = restorable({ tabs: ["ahp-terminal:/a", "ahp-terminal:/b"], active: "ahp-terminal:/b" }, (u) => u === "ahp-terminal:/a");
  assert.deepEqual(r, { state: { tabs: ["ahp-terminal:/a"], active: "ahp-terminal:/a" }, gone: ["ahp-terminal:/b"] });
});

test("shortcuts are Alt+Shift only: the shell's and the browser's keys are left alone", () => {
  const k = (code: string, m: Partial<{ altKey: boolean; shiftKey: boolean; ctrlKey: boolean; metaKey: boolean }> = {}) => ({
    code,
    altKey: true,
    shiftKey: true,
    ctrlKey: false,
    metaKey: false,
    ...m,
  });
  assert.deepEqual(shortcut(k("KeyN")), { do: "new" });
  assert.deepEqual(shortcut(k("BracketRight")), { do: "step", delta: 1 });
  assert.deepEqual(shortcut(k("ArrowLeft")), { do: "step", delta: -1 });
  assert.deepEqual(shortcut(k("Digit3")), { do: "nth", n: 3 });
  assert.deepEqual(shortcut(k("KeyF")), { do: "find" });
  assert.deepEqual(shortcut(k("KeyS")), { do: "split" });
  assert.deepEqual(shortcut(k("Equal")), { do: "font", delta: 1 });
  assert.deepEqual(shortcut(k("Minus")), { do: "font", delta: -1 });
  assert.equal(shortcut(k("KeyN", { shiftKey: false })), null, "Alt+N is the shell's");
  assert.equal(shortcut(k("KeyT", { altKey: false, ctrlKey: true })), null, "Ctrl+Shift+T is the browser's");
  assert.equal(shortcut(k("KeyN", { ctrlKey: true })), null);
  assert.equal(shortcut(k("KeyQ")), null);
  assert.equal(shortcut(k("Digit0")), null);
});

test("the font size is remembered within bounds", () => {
  assert.equal(fontSize(null), 14);
  assert.equal(fontSize("18"), 18);
  assert.equal(fontSize("1e9"), 14);
  assert.equal(fontSize("13.5"), 14);
  assert.equal(fontSize("junk"), 14);
  assert.equal(nextFontSize(32, 1), 32);
  assert.equal(nextFontSize(8, -1), 8);
  assert.equal(nextFontSize(14, 1), 15);
});

test("terminals with the same name are numbered in a stable order", () => {
  const got = numbered([
    { key: "a", label: "sh" },
    { key: "b", label: "sh" },
    { key: "c", label: "vim" },
    { key: "d", label: "sh" },
    { key: "b", label: "sh" },
  ]);
  assert.deepEqual([...got], [
    ["a", ""],
    ["b", " 2"],
    ["c", ""],
    ["d", " 3"],
  ]);
});
