// Who the page is connected as and what its role lets it offer
// (docs/protocol.md "initialize", identity; section 13 "Roles and
// sharing"). The host enforces every role whatever the page offers: this
// only hides what would be refused.

/** Identity is the initialize (and reconnect) result's identity extension. */
export interface Identity {
  principal: string;
  role: string; // "owner", "user" or "viewer"
}

/** readIdentity takes the identity out of an initialize or reconnect result; null when the host sent none. */
export function readIdentity(r: any): Identity | null {
  const id = r?.identity;
  if (typeof id?.principal !== "string" || typeof id?.role !== "string") return null;
  return { principal: id.principal, role: id.role };
}

/** identityText is what the header says: "alice (viewer)"; empty when unknown. */
export function identityText(id: Identity | null): string {
  if (!id) return "";
  return `${id.principal || "anonymous"} (${id.role})`;
}

/** mayCreate: terminal.create is user or owner. An unknown identity (an older host) may try. */
export function mayCreate(id: Identity | null): boolean {
  return id === null || id.role !== "viewer";
}

/** mayFiles: files.read and files.write are user or owner. */
export function mayFiles(id: Identity | null): boolean {
  return id === null || id.role !== "viewer";
}

/** mayShare: terminal.share is the terminal's holder's, or an owner's. */
export function mayShare(id: Identity | null, holder: string | undefined): boolean {
  if (id === null) return true;
  if (id.role === "owner") return true;
  return id.role !== "viewer" && holder !== undefined && holder === id.principal;
}
