// The page's OIDC sign-in (docs/operations.md "OIDC"): where the daemon
// has auth.oidc with a client_id, GET web/oidc/config answers
// {"login": "web/oidc/login"} and the login form shows "Sign in". The
// daemon's callback sends the browser back to the page with the ID token
// in the fragment (#oidc_token=JWT, or #oidc_error=MESSAGE), never in a
// query: the page takes it, removes it from the address bar and history,
// and uses the token as its bearer like a typed one.

/** SignIn is what the callback put in the fragment. */
export type SignIn = { token: string } | { error: string };

/** takeFragment reads a sign-in result from a location.hash ("#oidc_token=…"), or null when the hash holds none. */
export function takeFragment(hash: string): SignIn | null {
  const p = new URLSearchParams(hash.replace(/^#/, ""));
  const token = p.get("oidc_token");
  if (token) return { token };
  const error = p.get("oidc_error");
  if (error !== null) return { error: error || "the sign-in failed" };
  return null;
}

/** loginPath asks the daemon whether it offers the sign-in: the path to go to (relative to the page), or null. */
export async function loginPath(base: string): Promise<string | null> {
  try {
    const res = await fetch(new URL("web/oidc/config", base), { cache: "no-store" });
    if (!res.ok) return null;
    const body = await res.json();
    return typeof body?.login === "string" && /^web\/oidc\/[a-z]+$/.test(body.login) ? body.login : null;
  } catch {
    return null;
  }
}
