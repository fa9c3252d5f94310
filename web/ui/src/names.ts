// What the page calls a terminal: its title (OSC 0/2, or the name or
// command it was created with), where it is (its cwd, from OSC 7), and
// its id only when there is nothing better.

/** The terminal facts a name is made of. */
export interface Naming {
  uri: string; // ahp-terminal:/<id>
  title?: string; // the host's title: OSC 0/2, else the createTerminal name or command, else the shell
  cwd?: string; // a file:// URI (terminal/cwdChanged, the state's cwd) or a path
}

export interface Name {
  name: string; // what a tab or list entry shows first
  detail: string; // where: the cwd's last directory ("" when unknown or already in the name)
  tooltip: string; // everything, the id included
}

/** terminalId is the id part of a terminal's URI. */
export function terminalId(uri: string): string {
  return uri.replace(/^ahp-terminal:\/*/, "");
}

/**
 * pathFromCwd turns an OSC 7 payload or a cwd URI (file://host/path,
 * percent-encoded) into a path; a plain absolute path is returned as is;
 * anything else is null.
 */
export function pathFromCwd(cwd: string | undefined): string | null {
  if (!cwd) return null;
  if (cwd.startsWith("/")) return cwd;
  const m = /^file:\/\/[^/]*(\/.*)?$/i.exec(cwd.trim());
  if (!m) return null;
  const raw = m[1] ?? "/";
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

/** shortPath is a path's last directory ("/" for the root). */
export function shortPath(path: string): string {
  const parts = path.split("/").filter(Boolean);
  return parts.length === 0 ? "/" : parts[parts.length - 1]!;
}

/** Control characters never reach the page's labels (a title is whatever a program printed). */
function clean(s: string | undefined): string {
  return (s ?? "").replace(/[\u0000-\u001f\u007f-\u009f]/g, "").trim();
}

/** MAX_NAME is the most characters a tab shows of a title (the tooltip has all of it). */
export const MAX_NAME = 40;

export function terminalName(n: Naming): Name {
  const id = terminalId(n.uri);
  const title = clean(n.title);
  const path = pathFromCwd(n.cwd);
  let name = title || id;
  if (name.length > MAX_NAME) name = name.slice(0, MAX_NAME - 1) + "…";
  let detail = path ? shortPath(path) : "";
  // A shell's title often says where it is already ("me@box: ~/src").
  if (detail && detail !== "/" && title.includes(detail)) detail = "";
  const tooltip = [title || null, path, id].filter((x) => x).join("\n");
  return { name, detail, tooltip };
}

/**
 * numbered tells apart terminals that would show the same label: in the
 * order given (the host's catalogue, a stable order), the first keeps its
 * name and the next ones get " 2", " 3"… It returns the suffix of each
 * key ("" for most).
 */
export function numbered(items: { key: string; label: string }[]): Map<string, string> {
  const seen = new Map<string, number>();
  const out = new Map<string, string>();
  for (const it of items) {
    if (out.has(it.key)) continue;
    const n = (seen.get(it.label) ?? 0) + 1;
    seen.set(it.label, n);
    out.set(it.key, n === 1 ? "" : ` ${n}`);
  }
  return out;
}
