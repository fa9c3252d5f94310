// Unit tests of preview.ts: which ports the page links, where, and what
// it says of an app that looks broken under its prefix.
import { test } from "node:test";
import assert from "node:assert/strict";
import { brokenHint, previewHref, previewable, subdomainLogin } from "../src/preview.js";

test("every port is linked but the daemon's own and out-of-range ones", () => {
  const loc = { port: "4433", protocol: "https:" };
  assert.equal(previewable(3000, loc), true);
  assert.equal(previewable(4433, loc), false);
  assert.equal(previewable(443, { port: "", protocol: "https:" }), false);
  assert.equal(previewable(0, loc), false);
  assert.equal(previewable(70000, loc), false);
  assert.equal(previewHref(3000), "ports/3000/");
});

test("subdomain mode opens the port's own origin with a ticket", () => {
  assert.equal(subdomainLogin(3000, "preview.example.com", { port: "4433" }, "a+b"), "https://3000.preview.example.com:4433/.sidecar/login?ticket=a%2Bb");
  assert.equal(subdomainLogin(3000, "p.example", { port: "" }, "t"), "https://3000.p.example/.sidecar/login?ticket=t");
});

test("an app that asked for paths outside its prefix is said to look broken, with the fix", () => {
  assert.equal(brokenHint(undefined, undefined), "");
  assert.equal(brokenHint({ outside: [], outsideCount: 0 }, undefined), "");
  const h = brokenHint({ outside: ["/abs.js"], outsideCount: 1 }, undefined);
  assert.match(h, /^Looks broken under the prefix: it asked for \/abs\.js outside its preview/);
  assert.match(h, /preview\.subdomain/);
  assert.match(brokenHint({ outside: ["/a", "/b", "/c", "/d"], outsideCount: 9 }, "p.example"), /\/a, \/b, \/c, …/);
});
