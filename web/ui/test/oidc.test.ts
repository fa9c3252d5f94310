// Unit tests of oidc.ts: the sign-in's result read from the fragment.
import { test } from "node:test";
import assert from "node:assert/strict";
import { takeFragment } from "../src/oidc.js";

test("the callback's token and errors are read from the fragment", () => {
  assert.deepEqual(takeFragment("#oidc_token=eyJ.a-b_c.d"), { token: "eyJ.a-b_c.d" });
  assert.deepEqual(takeFragment("#oidc_error=This+sign-in+expired%3B+sign+in+again."), { error: "This sign-in expired; sign in again." });
  assert.deepEqual(takeFragment("#oidc_error="), { error: "the sign-in failed" });
  assert.equal(takeFragment(""), null);
  assert.equal(takeFragment("#other=1"), null);
  assert.equal(takeFragment("#oidc_token="), null);
});
