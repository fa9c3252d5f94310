// The machine's last minutes for the metrics panel's sparklines
// (docs/protocol.md "Telemetry history"): telemetry/history once, then
// only the points after the newest one held, within a bound.

/** The telemetry/history result: columns of equal length, oldest first. */
export interface HistoryResult {
  intervalMs: number;
  timeUnixNano: number[];
  cpuUtilization: number[];
  memoryUsageBytes: number[];
  memoryLimitBytes: number[];
  networkReceiveBytesPerSecond: number[];
  networkTransmitBytesPerSecond: number[];
  diskReadBytesPerSecond: number[];
  diskWriteBytesPerSecond: number[];
}

/** MAX_POINTS bounds what the page keeps (the host's own bound: 3600). */
export const MAX_POINTS = 3600;

/** The series the page draws, each a column of History. */
export interface History {
  time: number[]; // Unix nanoseconds (as numbers: precise to about 0.25 µs, enough to ask for what is newer)
  cpu: number[]; // 0 to 1
  memory: number[]; // bytes
  network: number[]; // bytes per second, received and sent
  disk: number[]; // bytes per second, read and written
}

export function emptyHistory(): History {
  return { time: [], cpu: [], memory: [], network: [], disk: [] };
}

/** merge adds the points of r newer than h's newest, keeping the newest max. */
export function merge(h: History, r: HistoryResult, max = MAX_POINTS): History {
  const last = h.time.length > 0 ? h.time[h.time.length - 1]! : -Infinity;
  const at = (a: number[] | undefined, i: number) => a?.[i] ?? 0;
  for (let i = 0; i < (r.timeUnixNano?.length ?? 0); i++) {
    const t = r.timeUnixNano[i]!;
    if (t <= last) continue;
    h.time.push(t);
    h.cpu.push(at(r.cpuUtilization, i));
    h.memory.push(at(r.memoryUsageBytes, i));
    h.network.push(at(r.networkReceiveBytesPerSecond, i) + at(r.networkTransmitBytesPerSecond, i));
    h.disk.push(at(r.diskReadBytesPerSecond, i) + at(r.diskWriteBytesPerSecond, i));
  }
  const extra = h.time.length - max;
  if (extra > 0) for (const k of ["time", "cpu", "memory", "network", "disk"] as const) h[k].splice(0, extra);
  return h;
}

/** since is the sinceUnixNano of the next request: the newest point held, or undefined for all. */
export function since(h: History): number | undefined {
  return h.time.length > 0 ? h.time[h.time.length - 1] : undefined;
}

/**
 * sparkPoints lays values out as an SVG polyline's points in a w × h box:
 * time left to right, 0 at the bottom, top at max (the largest value when
 * not given, so a flat series stays at the bottom).
 */
export function sparkPoints(values: number[], w: number, h: number, max?: number): string {
  if (values.length === 0) return "";
  const top = max ?? Math.max(...values);
  const step = values.length > 1 ? w / (values.length - 1) : 0;
  return values
    .map((v, i) => {
      const y = top > 0 ? h - (Math.min(v, top) / top) * h : h;
      return `${+(i * step).toFixed(1)},${+y.toFixed(1)}`;
    })
    .join(" ");
}

/** rate formats bytes per second. */
export function rate(bps: number): string {
  if (bps < 1024) return `${Math.round(bps)} B/s`;
  if (bps < 1024 * 1024) return `${(bps / 1024).toFixed(1)} KiB/s`;
  return `${(bps / 1024 / 1024).toFixed(1)} MiB/s`;
}
