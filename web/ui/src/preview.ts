// The port preview (docs/protocol.md "Port preview"): the daemon serves
// each listening port's web server at <base>/ports/<port>/, behind the
// session cookie that POST web/session sets for the token. This module
// holds what the page decides about it, without the DOM.

/** What GET web/preview says the daemon noticed of one port's app. */
export interface PortStatus {
  /** The first paths a page of the app asked for outside its prefix (absolute paths). */
  outside: string[];
  outsideCount: number;
}

/** The body of GET web/preview. */
export interface PreviewStatus {
  prefix: string;
  subdomain?: string;
  ports: Record<string, PortStatus>;
}

/**
 * previewable says whether the page links port: not the daemon's own
 * listener (the page's port: the policy refuses it), nor a port number
 * out of range.
 */
export function previewable(port: number, pageLocation: { port: string; protocol: string }): boolean {
  const own = Number(pageLocation.port || (pageLocation.protocol === "http:" ? 80 : 443));
  return Number.isInteger(port) && port >= 1 && port <= 65535 && port !== own;
}

/** previewHref is port's preview, relative to the page (its base path). */
export function previewHref(port: number): string {
  return `ports/${port}/`;
}

/**
 * subdomainLogin is the URL that opens port on its own origin in
 * subdomain mode: https://<port>.<subdomain>[:page port]/.sidecar/login?ticket=T.
 */
export function subdomainLogin(port: number, subdomain: string, pageLocation: { port: string }, ticket: string): string {
  const p = pageLocation.port ? `:${pageLocation.port}` : "";
  return `https://${port}.${subdomain}${p}/.sidecar/login?ticket=${encodeURIComponent(ticket)}`;
}

/**
 * brokenHint is what the page says beside a port whose app asked for
 * paths outside its prefix ("" when nothing was noticed): an app that
 * uses absolute paths (/app.js) loads them from the daemon, not from
 * itself, under a prefix.
 */
export function brokenHint(ps: PortStatus | undefined, subdomain: string | undefined): string {
  if (!ps || ps.outsideCount === 0) return "";
  const paths = ps.outside.slice(0, 3).join(", ") + (ps.outside.length > 3 || ps.outsideCount > ps.outside.length ? ", …" : "");
  const fix = subdomain
    ? "open it on its own origin (subdomain link), or set the app's base path to its preview prefix"
    : "set the app's base path to its preview prefix (X-Forwarded-Prefix), or use sidecar forward -L, or preview.subdomain";
  return `Looks broken under the prefix: it asked for ${paths} outside its preview (absolute paths reach the daemon, not the app). Fix: ${fix}.`;
}
