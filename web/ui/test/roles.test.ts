// Unit tests of roles.ts: what the page says it is and what each role may start.
import { test } from "node:test";
import assert from "node:assert/strict";
import { identityText, mayCreate, mayFiles, mayShare, readIdentity } from "../src/roles.js";

test("the identity of an initialize result, and none from an older host", () => {
  assert.deepEqual(readIdentity({ identity: { principal: "alice", role: "viewer" } }), { principal: "alice", role: "viewer" });
  assert.equal(readIdentity({ protocolVersion: "0.5.0" }), null);
  assert.equal(readIdentity({ identity: { principal: 7 } }), null);
  assert.equal(identityText({ principal: "alice", role: "viewer" }), "alice (viewer)");
  assert.equal(identityText(null), "");
});

test("what each role may start", () => {
  const owner = { principal: "olga", role: "owner" };
  const user = { principal: "bob", role: "user" };
  const viewer = { principal: "vera", role: "viewer" };
  assert.deepEqual([mayCreate(owner), mayCreate(user), mayCreate(viewer), mayCreate(null)], [true, true, false, true]);
  assert.deepEqual([mayFiles(owner), mayFiles(user), mayFiles(viewer)], [true, true, false]);
  assert.equal(mayShare(owner, "bob"), true);
  assert.equal(mayShare(user, "bob"), true);
  assert.equal(mayShare(user, "olga"), false);
  assert.equal(mayShare(user, undefined), false);
  assert.equal(mayShare(viewer, "vera"), false);
});
