// The process list (docs/protocol.md "Processes": processes/list and
// processes/signal): how it is sorted and shown.

export interface Process {
  pid: number;
  parentPid?: number;
  owner?: string;
  command?: string;
  commandLine?: string;
  cpuUtilization?: number; // 1 = one CPU all along
  memoryUsageBytes?: number;
  status?: string;
  startTimeUnixNano?: number;
}

/** The host's sort keys (processes/list sortBy), and how each column is named. */
export const SORTS = [
  { key: "pid", label: "PID" },
  { key: "user", label: "User" },
  { key: "cpu", label: "CPU %" },
  { key: "memory", label: "RSS" },
  { key: "state", label: "State" },
  { key: "command", label: "Command" },
  { key: "start", label: "Started" },
] as const;

export type SortKey = (typeof SORTS)[number]["key"];

/** hostSort is the sortBy the host knows for a column (user and state sort on the page). */
export function hostSort(k: SortKey): string {
  return k === "user" || k === "state" ? "cpu" : k;
}

/** sortProcesses orders the list as the column asks: numbers highest first (pid lowest first), text A to Z, start newest first. */
export function sortProcesses(list: Process[], k: SortKey): Process[] {
  const text = (p: Process) => (k === "user" ? (p.owner ?? "") : k === "state" ? (p.status ?? "") : (p.commandLine || p.command || ""));
  const num = (p: Process) => (k === "cpu" ? (p.cpuUtilization ?? 0) : k === "memory" ? (p.memoryUsageBytes ?? 0) : k === "start" ? (p.startTimeUnixNano ?? 0) : p.pid);
  return [...list].sort((a, b) => {
    if (k === "user" || k === "state" || k === "command") return text(a).localeCompare(text(b)) || a.pid - b.pid;
    if (k === "pid") return a.pid - b.pid;
    return num(b) - num(a) || a.pid - b.pid;
  });
}

/** bytes formats a resident set. */
export function bytes(n: number | undefined): string {
  const b = n ?? 0;
  if (b < 1024 * 1024) return `${(b / 1024).toFixed(0)} KiB`;
  if (b < 1024 ** 3) return `${(b / 1024 ** 2).toFixed(1)} MiB`;
  return `${(b / 1024 ** 3).toFixed(2)} GiB`;
}

/** cpu formats a CPU share as top does (100 % = one CPU). */
export function cpu(u: number | undefined): string {
  return `${(100 * (u ?? 0)).toFixed(1)}`;
}

/** SIGNALS are the ones processes/signal takes, the gentlest first. */
export const SIGNALS = ["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGKILL", "SIGSTOP", "SIGCONT", "SIGUSR1", "SIGUSR2"];
