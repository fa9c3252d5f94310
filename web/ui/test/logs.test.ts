// Unit tests of logs.ts: the sources offered, the channel URIs, the
// records of an OTLP/JSON export as rows, the text filter, and the bound.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LogBuffer, MAX_ROWS, channelFor, fmtTime, logSources, matches, printable, readLogs, skippedOf, type LogRow } from "../src/logs.js";

test("sources: the daemon's log always, the journal and files only where advertised", () => {
  assert.deepEqual(
    logSources({ telemetry: { logs: "ahp-otlp://logs{?level}", metrics: "ahp-otlp://metrics" } }).map((s) => s.id),
    ["daemon"],
  );
  assert.deepEqual(logSources(undefined).map((s) => s.id), ["daemon"]);
  // logFilePaths without logFiles: not offered.
  assert.deepEqual(logSources({ telemetry: { logFilePaths: ["/etc/shadow"] } }).map((s) => s.id), ["daemon"]);
  const all = logSources({
    telemetry: {
      journal: "ahp-otlp://logs/journal{?unit,priority,since,until}",
      logFiles: "ahp-otlp://logs/files{?path*}",
      logFilePaths: ["/var/log/app/*.log", "/var/log/nginx/error.log", 7],
    },
  });
  assert.deepEqual(
    all.map((s) => [s.id, s.kind, s.path]),
    [
      ["daemon", "daemon", undefined],
      ["journal", "journal", undefined],
      ["files", "files", undefined],
      ["file:/var/log/app/*.log", "files", "/var/log/app/*.log"],
      ["file:/var/log/nginx/error.log", "files", "/var/log/nginx/error.log"],
    ],
  );
  // One entry: "every file" would be the same channel's files, so only the entry.
  assert.deepEqual(logSources({ telemetry: { logFiles: "x", logFilePaths: ["/a.log"] } }).map((s) => s.id), ["daemon", "file:/a.log"]);
});

test("channelFor builds each channel with its filters, defaults left out", () => {
  const [daemon, journal, files, glob] = logSources({ telemetry: { journal: "j", logFiles: "f", logFilePaths: ["/var/log/app/*.log", "/b.log"] } });
  assert.equal(channelFor(daemon!), "ahp-otlp://logs");
  assert.equal(channelFor(daemon!, { level: "info" }), "ahp-otlp://logs");
  assert.equal(channelFor(daemon!, { level: "warn", unit: "ssh" }), "ahp-otlp://logs?level=warn");
  assert.equal(channelFor(journal!), "ahp-otlp://logs/journal");
  assert.equal(channelFor(journal!, { unit: " ssh ", priority: "err", level: "debug" }), "ahp-otlp://logs/journal?unit=ssh&priority=err");
  assert.equal(channelFor(journal!, { unit: "a b&c", priority: "" }), "ahp-otlp://logs/journal?unit=a+b%26c");
  assert.equal(channelFor(files!), "ahp-otlp://logs/files");
  assert.equal(channelFor(glob!), "ahp-otlp://logs/files?path=%2Fvar%2Flog%2Fapp%2F*.log");
});

const filePayload = {
  resourceLogs: [
    {
      resource: { attributes: [{ key: "service.name", value: { stringValue: "sidecar" } }] },
      scopeLogs: [
        {
          scope: { name: "sidecar.logs.files" },
          logRecords: [
            { observedTimeUnixNano: "1767225600250000000", body: { stringValue: "GET /health 200" }, attributes: [{ key: "log.file.path", value: { stringValue: "/var/log/app/web.log" } }, { key: "log.file.name", value: { stringValue: "web.log" } }] },
            { observedTimeUnixNano: "1767225600251999999", body: { stringValue: "tab\there \u001b[31mred\r" }, attributes: [{ key: "log.file.name", value: { stringValue: "web.log" } }] },
          ],
        },
      ],
    },
  ],
};

test("readLogs: a file's lines, in order, controls escaped", () => {
  const rows = readLogs(filePayload);
  assert.deepEqual(rows, [
    { timeMs: 1767225600250, severity: "-", level: "", source: "web.log", body: "GET /health 200" },
    { timeMs: 1767225600251, severity: "-", level: "", source: "web.log", body: "tab\\there \\x1b[31mred\\r" },
  ]);
});

test("readLogs: the journal's and the daemon's records", () => {
  const rows = readLogs({
    resourceLogs: [
      {
        scopeLogs: [
          {
            scope: { name: "sidecar.logs.journal" },
            logRecords: [
              {
                timeUnixNano: "1767225600000000000",
                observedTimeUnixNano: "1767225600004000000",
                severityNumber: 17,
                severityText: "err",
                body: { stringValue: "error: kex_exchange_identification" },
                attributes: [
                  { key: "systemd.unit", value: { stringValue: "ssh.service" } },
                  { key: "syslog.identifier", value: { stringValue: "sshd" } },
                  { key: "process.pid", value: { intValue: "812" } },
                ],
              },
              { timeUnixNano: "1767225601000000000", severityNumber: 10, severityText: "notice", body: { stringValue: "n" }, attributes: [{ key: "systemd.unit", value: { stringValue: "cron.service" } }] },
              { timeUnixNano: "1767225602000000000", severityNumber: 5, severityText: "debug", body: { intValue: "42" } },
            ],
          },
          {
            scope: { name: "sidecar.conn" },
            logRecords: [{ timeUnixNano: 1767225603000000000, severityNumber: 13, severityText: "WARN", body: { stringValue: "closing connection" }, attributes: [{ key: "peer", value: { stringValue: "127.0.0.1:50122" } }] }],
          },
        ],
      },
    ],
  });
  assert.deepEqual(
    rows.map((r) => [r.timeMs, r.severity, r.level, r.source, r.body]),
    [
      [1767225600000, "err", "error", "sshd[812]", "error: kex_exchange_identification"],
      [1767225601000, "notice", "info", "cron.service", "n"],
      [1767225602000, "debug", "debug", "-", "42"],
      [1767225603000, "WARN", "warn", "sidecar.conn", "closing connection"],
    ],
  );
});

test("readLogs: malformed payloads give no rows, never a throw", () => {
  for (const p of [undefined, null, 7, "x", {}, { resourceLogs: 3 }, { resourceLogs: [null, { scopeLogs: [null, { logRecords: [null, 5] }] }] }]) assert.deepEqual(readLogs(p), []);
  assert.deepEqual(readLogs({ resourceLogs: [{ scopeLogs: [{ logRecords: [{}] }] }] }), [{ timeMs: 0, severity: "-", level: "", source: "-", body: "" }]);
});

test("skippedOf reads the host's skipped count", () => {
  assert.equal(skippedOf({ skipped: 40 }), 40);
  assert.equal(skippedOf({}), 0);
  assert.equal(skippedOf({ skipped: "40" }), 0);
  assert.equal(skippedOf({ skipped: -1 }), 0);
  assert.equal(skippedOf(undefined), 0);
});

test("matches: the text filter, any case, over severity, source and body", () => {
  const r: LogRow = { timeMs: 1, severity: "err", level: "error", source: "sshd[812]", body: "Connection closed" };
  assert.ok(matches(r, ""));
  assert.ok(matches(r, "  "));
  assert.ok(matches(r, "connection CLOSED"));
  assert.ok(matches(r, "sshd"));
  assert.ok(matches(r, "ERR"));
  assert.ok(!matches(r, "nginx"));
});

test("LogBuffer keeps the newest max rows and counts what it dropped", () => {
  const row = (i: number): LogRow => ({ timeMs: i, severity: "-", level: "", source: "a", body: String(i) });
  const b = new LogBuffer(5);
  assert.deepEqual(b.push([1, 2, 3].map(row)), []);
  const gone = b.push([4, 5, 6, 7].map(row));
  assert.deepEqual(gone.map((r) => r.body), ["1", "2"]);
  assert.deepEqual(b.rows.map((r) => r.body), ["3", "4", "5", "6", "7"]);
  assert.equal(b.dropped, 2);
  // A batch larger than the bound keeps its newest.
  assert.equal(b.push([8, 9, 10, 11, 12, 13, 14].map(row)).length, 7);
  assert.deepEqual(b.rows.map((r) => r.body), ["10", "11", "12", "13", "14"]);
  assert.equal(b.dropped, 9);
  b.skipped = 3;
  b.clear();
  assert.deepEqual([b.rows.length, b.dropped, b.skipped], [0, 0, 0]);

  const big = new LogBuffer();
  assert.equal(big.max, MAX_ROWS);
  for (let i = 0; i < 30; i++) big.push(Array.from({ length: 128 }, (_, j) => row(i * 128 + j)));
  assert.equal(big.rows.length, MAX_ROWS);
  assert.equal(big.dropped, 30 * 128 - MAX_ROWS);
  assert.equal(big.rows[0]!.timeMs, 30 * 128 - MAX_ROWS);
  assert.equal(big.rows[MAX_ROWS - 1]!.timeMs, 30 * 128 - 1);
});

test("fmtTime and printable", () => {
  assert.equal(fmtTime(new Date(2026, 0, 2, 3, 4, 5, 67).getTime()), "2026-01-02 03:04:05.067");
  assert.equal(fmtTime(0), "-");
  assert.equal(printable("plain é"), "plain é");
  assert.equal(printable("a\u0000b\u007fc\u009bd\ne"), "a\\x00b\\x7fc\\u009bd\\ne");
});
