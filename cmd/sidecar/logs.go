package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

func logsCmd() *cobra.Command {
	var cf connFlags
	var files []string
	var unit, level, since string
	var follow, asJSON, auditLog bool
	cmd := &cobra.Command{
		Use:   "logs URL",
		Short: "Print the host's logs: the systemd journal or configured log files",
		Long: "logs subscribes to one of the host's log channels and prints its records, one a line:\n" +
			"time, severity, source (unit or identifier and pid; the file's name), body. --file F\n" +
			"follows the files F (each a path or glob of the host's telemetry.log_files, or a file\n" +
			"one matches); otherwise the journal (--unit, --level, --since filter it), else every\n" +
			"configured file when the host has no journal. Without -f it prints what the host holds\n" +
			"for the channel (up to its last 1024 records) and exits; with -f it goes on, like\n" +
			"journalctl -f or kubectl logs -f, reconnecting as the connection needs. --json prints\n" +
			"each batch as the OTLP/JSON ExportLogsServiceRequest the host sent. --audit prints the\n" +
			"host's audit events instead (who did what: the owner role only).\n\n" +
			"Exit status: 0; 1 when the host refuses the channel (a file not configured, no journal);\n" +
			"255 when the connection fails; 2 for a usage error.",
		Example: "  sidecar logs wss://vm:4433/ahp --unit ssh -f\n" +
			"  sidecar logs wss://vm:4433/ahp --file /var/log/app/web.log -f\n" +
			"  sidecar logs wss://vm:4433/ahp --level warning --since 1h",
		Args: func(cmd *cobra.Command, args []string) error {
			if auditLog && (len(files) > 0 || unit != "" || level != "" || since != "") {
				return errors.New("--audit reads the audit events: not with --file, --unit, --level or --since")
			}
			if len(files) > 0 && (unit != "" || level != "" || since != "") {
				return errors.New("--unit, --level and --since filter the journal: not with --file")
			}
			if level != "" {
				if _, ok := journalLevel(level); !ok {
					return fmt.Errorf("--level %q: want debug, info, notice, warning, err, crit, alert, emerg (or trace, warn, error, fatal)", level)
				}
			}
			if since != "" {
				if _, err := sinceTime(since, time.Now()); err != nil {
					return err
				}
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLogs(&cf, args[0], files, unit, level, since, follow, asJSON, auditLog)
		},
	}
	cf.register(cmd)
	fs := cmd.Flags()
	fs.StringArrayVar(&files, "file", nil, "follow this log file (a path or glob of telemetry.log_files); repeatable")
	fs.StringVar(&unit, "unit", "", "the journal's records of this systemd unit (ssh: ssh.service)")
	fs.StringVar(&level, "level", "", "the journal's records at this severity or above (warning, err, …)")
	fs.StringVar(&since, "since", "", "the journal's records since this time (RFC 3339) or duration ago (1h)")
	fs.BoolVarP(&follow, "follow", "f", false, "keep printing new records")
	fs.BoolVar(&asJSON, "json", false, "print each batch as OTLP/JSON")
	fs.BoolVar(&auditLog, "audit", false, "print the host's audit events (ahp-otlp://logs/audit; owner only)")
	return cmd
}

// journalLevel maps --level to a journal priority name.
func journalLevel(l string) (string, bool) {
	switch l {
	case "trace", "debug":
		return "debug", true
	case "info", "notice", "warning", "err", "crit", "alert", "emerg":
		return l, true
	case "warn":
		return "warning", true
	case "error":
		return "err", true
	case "fatal":
		return "crit", true
	}
	return "", false
}

// sinceTime parses --since: an RFC 3339 time or a duration before now.
func sinceTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time or a duration (1h)", s)
	}
	return now.Add(-d), nil
}

// logsChannel picks the channel: files when --file, else the journal,
// else every configured file.
func logsChannel(tel *rpc.TelemetryCapability, files []string, unit, level, since string) (string, error) {
	if tel == nil {
		tel = &rpc.TelemetryCapability{}
	}
	q := url.Values{}
	switch {
	case len(files) > 0:
		if tel.LogFiles == "" {
			return "", errors.New("the host follows no log files (its telemetry.log_files is empty)")
		}
		q["path"] = files
		return rpc.LogFilesChannel + "?" + q.Encode(), nil
	case tel.Journal != "":
		if unit != "" {
			q.Set("unit", unit)
		}
		if level != "" {
			p, _ := journalLevel(level)
			q.Set("priority", p)
		}
		if since != "" {
			t, _ := sinceTime(since, time.Now())
			q.Set("since", t.UTC().Format(time.RFC3339))
		}
		if len(q) == 0 {
			return rpc.JournalChannel, nil
		}
		return rpc.JournalChannel + "?" + q.Encode(), nil
	case unit != "" || level != "" || since != "":
		return "", errors.New("the host has no journal channel (no systemd journal, or telemetry.journal is off)")
	case tel.LogFiles != "":
		return rpc.LogFilesChannel, nil
	}
	return "", errors.New("the host offers no log channel: no journal, and telemetry.log_files is empty")
}

func runLogs(cf *connFlags, target string, files []string, unit, level, since string, follow, asJSON, auditLog bool) error {
	ctx, caught, stop := signalContext(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	cf.onReconnect = func(st client.ReconnectStatus) {
		if l := reconnectLine(st); l != "" {
			fmt.Fprintf(os.Stderr, "sidecar: %s\n", l)
		}
	}
	conn, err := cf.dial(ctx, target)
	if err != nil {
		return dialFailed(err, cf.dialSignal(ctx, err, caught))
	}
	defer conn.Close()
	uri, err := logsChannel(conn.Initialized().Telemetry, files, unit, level, since)
	if auditLog {
		uri, err = rpc.AuditChannel, nil
	}
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	logs, err := conn.SubscribeLogs(ctx, uri)
	if err != nil {
		var re *rpc.Error
		if errors.As(err, &re) {
			return &exitError{code: 1, err: errors.New(printable(re.Message))}
		}
		return &exitError{code: 255, err: err}
	}
	// Without -f: the backlog the snapshot announced, then exit.
	var remaining int64
	known := false
	for {
		b, err := logs.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, client.ErrBadLogs) {
				return &exitError{code: 1, err: err}
			}
			return &exitError{code: 255, err: err}
		}
		if b.Snapshot {
			remaining, known = int64(b.Backlog), true
		} else {
			if b.Skipped > 0 {
				fmt.Fprintf(os.Stderr, "sidecar: %d records skipped (this client fell behind the host's ring)\n", b.Skipped)
			}
			if asJSON {
				if _, err := fmt.Fprintf(os.Stdout, "%s\n", b.Payload); err != nil {
					return err
				}
			} else if err := printRecords(os.Stdout, b.Data); err != nil {
				return err
			}
			remaining -= int64(b.Records()) + int64(b.Skipped)
		}
		if !follow && known && remaining <= 0 {
			return nil
		}
	}
}

// printRecords writes each record as a line: time, severity, source,
// body (control characters shown escaped).
func printRecords(w io.Writer, ld *logspb.LogsData) error {
	var sb strings.Builder
	for _, rl := range ld.ResourceLogs {
		for _, sl := range rl.ScopeLogs {
			for _, r := range sl.LogRecords {
				ns := r.TimeUnixNano
				if ns == 0 {
					ns = r.ObservedTimeUnixNano
				}
				sev := r.SeverityText
				if sev == "" {
					sev = "-"
				}
				if sl.Scope.GetName() == auditScope {
					fmt.Fprintf(&sb, "%s %s\n", time.Unix(0, int64(ns)).Format("2006-01-02T15:04:05.000Z07:00"), printable(auditText(r)))
					continue
				}
				fmt.Fprintf(&sb, "%s %-7s %s %s\n", time.Unix(0, int64(ns)).Format("2006-01-02T15:04:05.000Z07:00"),
					sev, printable(recordSource(r.Attributes)), printable(r.Body.GetStringValue()))
			}
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// auditScope is the audit channel's instrumentation scope.
const auditScope = "sidecar.audit"

// auditText is an audit record as "principal (role): action k=v ...";
// an anonymous one (an auth.failure at a door) as "peer-address: action
// ...", or "-: action ..." without an address.
func auditText(r *logspb.LogRecord) string {
	var who, role, peer string
	var rest []string
	for _, kv := range r.Attributes {
		switch kv.Key {
		case "enduser.id":
			who = kv.Value.GetStringValue()
		case "enduser.role":
			role = kv.Value.GetStringValue()
		case "audit.action":
		default:
			v := kv.Value.GetStringValue()
			switch x := kv.Value.GetValue().(type) {
			case *commonpb.AnyValue_IntValue:
				v = strconv.FormatInt(x.IntValue, 10)
			case *commonpb.AnyValue_DoubleValue:
				v = strconv.FormatFloat(x.DoubleValue, 'f', -1, 64)
			case *commonpb.AnyValue_BoolValue:
				v = strconv.FormatBool(x.BoolValue)
			}
			if kv.Key == "network.peer.address" {
				peer = v
			}
			rest = append(rest, kv.Key+"="+strconv.Quote(v))
		}
	}
	if who == "" {
		who = cmp.Or(peer, "-")
	}
	if role != "" {
		who += " (" + role + ")"
	}
	return who + ": " + r.Body.GetStringValue() + " " + strings.Join(rest, " ")
}

// recordSource names where a record came from: the journal's identifier
// (or unit) and pid, a file's name.
func recordSource(attrs []*commonpb.KeyValue) string {
	a := map[string]*commonpb.AnyValue{}
	for _, kv := range attrs {
		a[kv.Key] = kv.Value
	}
	src := a["syslog.identifier"].GetStringValue()
	if src == "" {
		src = a["systemd.unit"].GetStringValue()
	}
	if src == "" {
		src = a["log.file.name"].GetStringValue()
	}
	if pid, ok := a["process.pid"]; ok {
		src += "[" + strconv.FormatInt(pid.GetIntValue(), 10) + "]"
	}
	if src == "" {
		src = "-"
	}
	return src + ":"
}
