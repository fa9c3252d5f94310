// Unit tests of history.ts, processes.ts and tunnels.ts: the sparklines'
// points, the process list's order, the forwards' state.
import { test } from "node:test";
import assert from "node:assert/strict";
import { emptyHistory, merge, since, sparkPoints, rate, type HistoryResult } from "../src/history.js";
import { sortProcesses, hostSort, type Process } from "../src/processes.js";
import { applyTunnel, describe, participants, type Tunnel } from "../src/tunnels.js";

function result(times: number[]): HistoryResult {
  return {
    intervalMs: 1000,
    timeUnixNano: times,
    cpuUtilization: times.map((_, i) => i / 10),
    memoryUsageBytes: times.map(() => 100),
    memoryLimitBytes: times.map(() => 1000),
    networkReceiveBytesPerSecond: times.map(() => 1),
    networkTransmitBytesPerSecond: times.map(() => 2),
    diskReadBytesPerSecond: times.map(() => 3),
    diskWriteBytesPerSecond: times.map(() => 4),
  };
}

test("history merges only newer points, within its bound", () => {
  const h = emptyHistory();
  assert.equal(since(h), undefined);
  merge(h, result([1, 2, 3]), 4);
  assert.deepEqual(h.time, [1, 2, 3]);
  assert.equal(since(h), 3);
  merge(h, result([2, 3, 4, 5]), 4); // 2 and 3 again: an overlap is skipped
  assert.deepEqual(h.time, [2, 3, 4, 5]);
  assert.deepEqual(h.network, [3, 3, 3, 3]);
  assert.deepEqual(h.disk, [7, 7, 7, 7]);
  assert.equal(h.cpu.length, 4);
});

test("sparkPoints spans the box, 0 at the bottom", () => {
  assert.equal(sparkPoints([], 100, 20), "");
  assert.equal(sparkPoints([0, 1, 0.5], 100, 20), "0,20 50,0 100,10");
  assert.equal(sparkPoints([0, 0], 10, 20), "0,20 10,20");
  assert.equal(sparkPoints([2], 10, 20, 4), "0,10");
  assert.equal(rate(2048), "2.0 KiB/s");
});

test("processes sort as their column says", () => {
  const ps: Process[] = [
    { pid: 30, owner: "root", command: "b", cpuUtilization: 0.1, memoryUsageBytes: 5, status: "sleep", startTimeUnixNano: 1 },
    { pid: 10, owner: "dev", command: "c", cpuUtilization: 0.9, memoryUsageBytes: 1, status: "running", startTimeUnixNano: 3 },
    { pid: 20, owner: "adm", command: "a", cpuUtilization: 0.5, memoryUsageBytes: 9, status: "zombie", startTimeUnixNano: 2 },
  ];
  const pids = (k: Parameters<typeof sortProcesses>[1]) => sortProcesses(ps, k).map((p) => p.pid);
  assert.deepEqual(pids("pid"), [10, 20, 30]);
  assert.deepEqual(pids("cpu"), [10, 20, 30]);
  assert.deepEqual(pids("memory"), [20, 30, 10]);
  assert.deepEqual(pids("start"), [10, 20, 30]);
  assert.deepEqual(pids("command"), [20, 30, 10]);
  assert.deepEqual(pids("user"), [20, 10, 30]);
  assert.deepEqual(pids("state"), [10, 30, 20]);
  assert.equal(hostSort("user"), "cpu");
  assert.equal(hostSort("start"), "start");
});

test("tunnels follow the channel's actions", () => {
  const r: Tunnel = {
    resource: "ahp-tunnel:/9f2c",
    direction: "clientToHost",
    requestedLocalAddress: { host: "127.0.0.1", port: 0 },
    requestedRemoteAddress: { host: "127.0.0.1", port: 3000 },
    requestedBy: { kind: "client", clientId: "sidecar-ab12" },
    client: { clientId: "sidecar-ab12", state: { status: "accepted" } },
  };
  let list = applyTunnel([], { type: "tunnel/portSet", port: r });
  assert.equal(describe(list[0]!).state, "accepted");
  assert.equal(describe(list[0]!).text, "workload 127.0.0.1:0 → client 127.0.0.1:3000");
  list = applyTunnel(list, {
    type: "tunnel/portClientUpdated",
    resource: r.resource,
    clientId: "sidecar-ab12",
    state: { status: "ready", localAddress: { host: "127.0.0.1", port: 41234 }, remoteAddress: { host: "127.0.0.1", port: 3000 } },
  });
  assert.deepEqual(describe(list[0]!), { flag: "-R", text: "workload 127.0.0.1:41234 → client 127.0.0.1:3000", who: "sidecar-ab12", state: "ready", detail: "" });
  list = applyTunnel(list, { type: "tunnel/portClientSet", resource: r.resource, client: { clientId: "x", state: { status: "pending" } } });
  assert.equal(participants(list[0]!).length, 2);
  list = applyTunnel(list, { type: "tunnel/portClientRemoved", resource: r.resource, clientId: "x" });
  assert.equal(participants(list[0]!).length, 1);
  list = applyTunnel(list, { type: "tunnel/portClientUpdated", resource: r.resource, clientId: "sidecar-ab12", state: { status: "unavailable", reason: "the client's connection was lost" } });
  assert.equal(describe(list[0]!).detail, "the client's connection was lost");
  const l: Tunnel = { resource: "ahp-tunnel:/51aa", direction: "hostToClient", requestedLocalAddress: { host: "127.0.0.1", port: 8080 }, requestedRemoteAddress: { host: "::1", port: 5432 }, requestedBy: { kind: "client", clientId: "c" }, clients: [{ clientId: "c", state: { status: "ready" } }] };
  list = applyTunnel(list, { type: "tunnel/portSet", port: l });
  assert.equal(describe(list[1]!).text, "client 127.0.0.1:8080 → workload [::1]:5432");
  assert.equal(describe(list[1]!).flag, "-L");
  list = applyTunnel(list, { type: "tunnel/portRemoved", resource: r.resource });
  assert.deepEqual(list.map((t) => t.resource), ["ahp-tunnel:/51aa"]);
  assert.equal(applyTunnel(list, { type: "unknown" }), list);
});
