// The logs panel's logic (docs/protocol.md "otlp/exportLogs" and "The
// machine's logs"): which log channels the host offers, the channel URI
// for a source and its filters, the records of an OTLP/JSON
// ExportLogsServiceRequest as rows (time, severity, source, body, as
// `sidecar logs` prints them), and the bounded list the panel shows.

/** MAX_ROWS is how many records the panel keeps: the oldest go first. */
export const MAX_ROWS = 2000;

export const DAEMON_LOGS = "ahp-otlp://logs";
export const FILE_LOGS = "ahp-otlp://logs/files";
export const JOURNAL_LOGS = "ahp-otlp://logs/journal";

/** The daemon's levels (`ahp-otlp://logs?level=`), info being the default. */
export const LEVELS = ["trace", "debug", "info", "warn", "error", "fatal"] as const;
/** The journal's priorities (`…/journal?priority=`), most urgent first; each takes the more urgent too. */
export const PRIORITIES = ["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"] as const;

export type SourceKind = "daemon" | "journal" | "files";

/** A log channel the picker offers: id is the option's value. */
export interface LogSource {
  id: string;
  kind: SourceKind;
  label: string;
  path?: string; // files: one telemetry.log_files entry (absent: every file)
}

/**
 * logSources lists what the initialize result offers: the daemon's own
 * log always, the journal where `telemetry.journal` is advertised, and,
 * where `telemetry.logFiles` is, every configured file together and each
 * `logFilePaths` entry (a path or a glob) on its own. Nothing else: a
 * path the host does not list is never offered.
 */
export function logSources(init: any): LogSource[] {
  const t = init?.telemetry ?? {};
  const out: LogSource[] = [{ id: "daemon", kind: "daemon", label: "sidecar (this daemon)" }];
  if (typeof t.journal === "string" && t.journal) out.push({ id: "journal", kind: "journal", label: "Journal (systemd)" });
  if (typeof t.logFiles === "string" && t.logFiles) {
    const paths: string[] = Array.isArray(t.logFilePaths) ? t.logFilePaths.filter((p: unknown): p is string => typeof p === "string" && p !== "") : [];
    if (paths.length !== 1) out.push({ id: "files", kind: "files", label: "Every log file" });
    for (const p of paths) out.push({ id: `file:${p}`, kind: "files", label: p, path: p });
  }
  return out;
}

/** The filters the host applies (the text filter is the page's). */
export interface LogFilters {
  level?: string; // the daemon's log: one of LEVELS
  unit?: string; // the journal: a systemd unit (ssh: ssh.service)
  priority?: string; // the journal: one of PRIORITIES
}

/** channelFor is the channel URI of a source with its filters (a default or empty filter is left out). */
export function channelFor(s: LogSource, f: LogFilters = {}): string {
  const q = new URLSearchParams();
  let base: string;
  switch (s.kind) {
    case "daemon":
      base = DAEMON_LOGS;
      if (f.level && f.level !== "info") q.set("level", f.level);
      break;
    case "journal":
      base = JOURNAL_LOGS;
      if (f.unit?.trim()) q.set("unit", f.unit.trim());
      if (f.priority) q.set("priority", f.priority);
      break;
    case "files":
      base = FILE_LOGS;
      if (s.path) q.set("path", s.path);
      break;
  }
  const qs = q.toString();
  return qs ? `${base}?${qs}` : base;
}

/** A record as the panel shows it. */
export interface LogRow {
  timeMs: number; // the record's time, else when the host observed it; 0 if neither
  severity: string; // severityText, "-" when none (a file's line)
  level: "" | "debug" | "info" | "warn" | "error"; // from severityNumber, for colour
  source: string; // identifier[pid], unit, file name, else the logger (scope)
  body: string;
}

function nanosToMs(v: unknown): number {
  if (typeof v === "number") return Number.isFinite(v) && v > 0 ? nanosToMs(BigInt(Math.trunc(v)).toString()) : 0;
  if (typeof v === "string" && /^\d+$/.test(v)) return v.length > 6 ? Number(v.slice(0, -6)) : 0;
  return 0;
}

function levelOf(n: unknown): LogRow["level"] {
  if (typeof n !== "number" || n <= 0) return "";
  if (n >= 17) return "error";
  if (n >= 13) return "warn";
  if (n >= 9) return "info";
  return "debug";
}

/** printable writes control characters (a terminal's escape sequences, \r) as escapes, like `sidecar logs`. */
export function printable(s: string): string {
  // eslint-disable-next-line no-control-regex
  return s.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => {
    const n = c.charCodeAt(0);
    if (c === "\t") return "\\t";
    if (c === "\n") return "\\n";
    if (c === "\r") return "\\r";
    return n < 0x80 ? `\\x${n.toString(16).padStart(2, "0")}` : `\\u${n.toString(16).padStart(4, "0")}`;
  });
}

/** anyText is an OTLP AnyValue as text. */
function anyText(v: any): string {
  if (v == null || typeof v !== "object") return "";
  if (typeof v.stringValue === "string") return v.stringValue;
  if (v.intValue !== undefined) return String(v.intValue);
  if (v.doubleValue !== undefined) return String(v.doubleValue);
  if (v.boolValue !== undefined) return String(v.boolValue);
  if (v.bytesValue !== undefined) return String(v.bytesValue);
  if (v.arrayValue) return `[${(v.arrayValue.values ?? []).map(anyText).join(", ")}]`;
  if (v.kvlistValue) return `{${(v.kvlistValue.values ?? []).map((kv: any) => `${kv?.key}=${anyText(kv?.value)}`).join(", ")}}`;
  return "";
}

/** sourceOf names where a record came from, as `sidecar logs` does; the daemon's records by their logger. */
function sourceOf(attrs: any[], scope: string): string {
  const a = new Map<string, any>();
  for (const kv of Array.isArray(attrs) ? attrs : []) if (typeof kv?.key === "string") a.set(kv.key, kv.value);
  let src = anyText(a.get("syslog.identifier")) || anyText(a.get("systemd.unit")) || anyText(a.get("log.file.name"));
  if (!src && !scope.startsWith("sidecar.logs.")) src = scope;
  const pid = a.get("process.pid");
  if (pid !== undefined) src += `[${anyText(pid)}]`;
  return printable(src || "-");
}

/** readLogs turns an ExportLogsServiceRequest into rows, in the order the host sent them; anything malformed is skipped. */
export function readLogs(payload: any): LogRow[] {
  const rows: LogRow[] = [];
  for (const rl of Array.isArray(payload?.resourceLogs) ? payload.resourceLogs : []) {
    for (const sl of Array.isArray(rl?.scopeLogs) ? rl.scopeLogs : []) {
      const scope = typeof sl?.scope?.name === "string" ? sl.scope.name : "";
      for (const r of Array.isArray(sl?.logRecords) ? sl.logRecords : []) {
        if (r == null || typeof r !== "object") continue;
        rows.push({
          timeMs: nanosToMs(r.timeUnixNano) || nanosToMs(r.observedTimeUnixNano),
          severity: printable(typeof r.severityText === "string" && r.severityText ? r.severityText : "-"),
          level: levelOf(r.severityNumber),
          source: sourceOf(r.attributes, scope),
          body: printable(anyText(r.body)),
        });
      }
    }
  }
  return rows;
}

/** matches reports whether a row holds the text filter q (any case) in its severity, source or body. */
export function matches(r: LogRow, q: string): boolean {
  const t = q.trim().toLowerCase();
  return !t || `${r.severity} ${r.source} ${r.body}`.toLowerCase().includes(t);
}

/** fmtTime is a record's local time, to the millisecond (as `sidecar logs`, without the zone). */
export function fmtTime(ms: number): string {
  if (!ms) return "-";
  const d = new Date(ms);
  const p = (n: number, w = 2) => String(n).padStart(w, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

/**
 * LogBuffer keeps the newest max records in their order: push adds a
 * batch and returns the rows it dropped (the oldest) so the panel can
 * take them off the page; dropped counts them all since the last clear,
 * and skipped what the host said it skipped.
 */
export class LogBuffer {
  rows: LogRow[] = [];
  dropped = 0;
  skipped = 0;

  constructor(readonly max = MAX_ROWS) {}

  push(batch: LogRow[]): LogRow[] {
    this.rows.push(...batch);
    const over = this.rows.length - this.max;
    if (over <= 0) return [];
    this.dropped += over;
    return this.rows.splice(0, over);
  }

  clear(): void {
    this.rows = [];
    this.dropped = 0;
    this.skipped = 0;
  }
}

/** skippedOf is a message's `skipped` (our extension: records the host could not send this subscriber), 0 when absent or malformed. */
export function skippedOf(params: any): number {
  const n = params?.skipped;
  return typeof n === "number" && Number.isFinite(n) && n > 0 ? Math.floor(n) : 0;
}
