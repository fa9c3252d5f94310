// Unit tests of the page's read-only state (share.ts, docs/protocol.md
// "Roles and sharing"): the catalogue's attachedBy or a -32009 rejection
// of its own input makes the page read only; shareTarget reads the
// Share… prompt.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Share, PERMISSION_DENIED, shareTarget, sharesText } from "../src/share.js";

const ME = "web-me";
const client = (clientId: string) => ({ kind: "client" as const, clientId });

test("the catalogue's read access makes the page read only, and write access lifts it", () => {
  const s = new Share(ME);
  s.snapshot({ claim: client("web-alice"), cols: 80, rows: 24 });
  const entry = (access: "read" | "write") => ({
    resource: "ahp-terminal:/t1",
    claim: client("web-alice"),
    attached: ["web-alice", ME],
    attachedBy: [
      { clientId: "web-alice", principal: "alice", access: "write" as const },
      { clientId: ME, principal: "vera", access },
    ],
  });
  assert.deepEqual(s.catalogue(entry("read")), { readOnly: true });
  assert.equal(s.readOnly, true);
  assert.equal(s.notice(), "Read only: this terminal is shared with you to watch; your keystrokes are not sent.");
  assert.deepEqual(s.catalogue(entry("read")), {}, "no change, nothing to redraw");
  assert.deepEqual(s.catalogue(entry("write")), { readOnly: false });
  assert.equal(s.readOnly, false);
  // A catalogue without attachedBy (an older host) changes nothing.
  assert.deepEqual(s.catalogue({ resource: "ahp-terminal:/t1", attached: [ME] }), {});
});

test("a -32009 rejection of the page's own input makes it read only; another client's does not", () => {
  const s = new Share(ME);
  s.snapshot({ claim: client("web-alice"), cols: 80, rows: 24 });
  const reason = "permission denied: terminal.input needs role user or owner; vera is viewer";
  assert.deepEqual(s.action({ type: "terminal/input" }, { clientId: "web-other", clientSeq: 1 }, reason, PERMISSION_DENIED), {});
  assert.equal(s.readOnly, false);
  assert.deepEqual(s.action({ type: "terminal/input" }, { clientId: ME, clientSeq: 2 }, "input queue full"), {});
  assert.equal(s.readOnly, false, "another rejection is not read only");
  assert.deepEqual(s.action({ type: "terminal/input" }, { clientId: ME, clientSeq: 3 }, reason, PERMISSION_DENIED), { readOnly: true });
  assert.equal(s.readOnly, true);
  assert.deepEqual(s.action({ type: "terminal/resized", cols: 10, rows: 5 }, { clientId: ME, clientSeq: 4 }, reason, PERMISSION_DENIED), {});
  assert.deepEqual(s.size, { cols: 80, rows: 24 }, "a refused resize changes nothing");
});

test("shareTarget reads a name or role:ROLE; sharesText lists the shares", () => {
  assert.deepEqual(shareTarget(" alice "), { principal: "alice" });
  assert.deepEqual(shareTarget("role:viewer"), { role: "viewer" });
  assert.equal(shareTarget("role:admin"), null);
  assert.equal(shareTarget("  "), null);
  assert.equal(
    sharesText({
      resource: "ahp-terminal:/t1",
      shares: [
        { with: { principal: "alice" }, access: "read" },
        { with: { role: "user" }, access: "write" },
      ],
    }),
    "alice (read-only), role user (read-write)",
  );
  assert.equal(sharesText(undefined), "");
});
