package telemetry

import (
	"context"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Kind is the telemetry channel kind (ahp-otlp://metrics and
// ahp-otlp://logs, ahp.md §6) on the host's registry: the machine's
// sampler and the ring of the sidecar's own log records (Channels). It
// tees the host's logger into the logs channel (adapters.LogTee), so it is
// registered first. Register it with NewKind.
type Kind struct {
	guard   *adapters.Guard
	env     adapters.Env
	ts      *Channels
	procs   *Processes
	history *History
	logs    *HostLogs
}

// NewKind is the telemetry kind's adapters.Factory.
func NewKind(env adapters.Env) (adapters.Kind, error) {
	procs, err := NewProcesses(env.Config.Telemetry.ProcessSignals, env.Config.Terminal.User)
	if err != nil {
		return nil, err
	}
	history := NewHistory(env.Config.Telemetry.Interval)
	history.Start()
	k := &Kind{env: env, guard: env.Guard, procs: procs, history: history, ts: NewChannels(ChannelsConfig{
		Interval:       env.Config.Telemetry.Interval,
		ServiceVersion: env.Version,
		Self:           env.Host,
		Seq:            env.Journal.Seq,
		Log:            env.Log,
	})}
	mode := env.Config.Telemetry.Journal
	if mode == "" {
		mode = "auto"
	}
	journal, why := JournalAvailable(mode, "journalctl")
	log := k.ts.Logger().Named("telemetry")
	if !journal {
		log.Debug("no journal channel", "reason", why)
	}
	feed, _ := env.Audit.(audit.Feed) // the audit channel's events
	k.logs = NewHostLogs(HostLogsConfig{
		Files:    env.Config.Telemetry.LogFiles,
		Journal:  journal,
		Resource: k.ts.sampler.Resource,
		Seq:      env.Journal.Seq,
		Log:      log,
		Audit:    feed,
	})
	return k, nil
}

// HostLogs returns the machine's log channels (tests).
func (k *Kind) HostLogs() *HostLogs { return k.logs }

// Channels returns the kind's channels (tests set the Hub's clock).
func (k *Kind) Channels() *Channels { return k.ts }

// Name implements adapters.Kind.
func (k *Kind) Name() string { return "telemetry" }

// Labels implements adapters.Kind.
func (k *Kind) Labels() []string { return []string{"metrics", "logs", "log_files", "journal", "audit"} }

// Logger implements adapters.LogTee.
func (k *Kind) Logger() hclog.Logger { return k.ts.Logger() }

// Lookup implements adapters.Kind: ahp-otlp://metrics[?interval=…] and
// ahp-otlp://logs[?level=…], the same for every caller.
func (k *Kind) Lookup(uri string, caller adapters.Caller) adapters.Channel {
	if !strings.HasPrefix(uri, rpc.TelemetryScheme) || !caller.Identity.Allows(permission(uri)) {
		return nil
	}
	if ch := k.ts.Channel(uri); ch != nil {
		return ch
	}
	if ch, _ := k.logs.Channel(uri); ch != nil {
		return ch
	}
	return nil
}

// Refuse implements adapters.Refuser: why a machine log channel is
// refused (a file outside telemetry.log_files, a bad filter, no journal).
func (k *Kind) Refuse(uri string, caller adapters.Caller) *rpc.Error {
	if !strings.HasPrefix(uri, rpc.TelemetryScheme) {
		return nil
	}
	if e := k.guard.CheckOn(caller.Identity, permission(uri), uri); e != nil {
		return e
	}
	_, e := k.logs.Channel(uri)
	return e
}

// permission is what subscribing to the telemetry channel uri needs:
// the metrics, telemetry.metrics; the audit channel, audit.read; a log
// (the daemon's, which names clients and commands, or the machine's),
// telemetry.logs.
func permission(uri string) auth.Permission {
	switch uri {
	case rpc.MetricsChannel:
		return auth.TelemetryMetrics
	case AuditURI:
		return auth.AuditRead
	}
	return auth.TelemetryLogs
}

// Requests implements adapters.Kind: processes/list, processes/signal and
// telemetry/history (the channels always exist: no request creates
// them).
func (k *Kind) Requests() []adapters.Request {
	return append(k.procs.Requests(), k.history.Request())
}

// Advertise implements adapters.Kind: the telemetry capability, and
// processes (our extension).
func (k *Kind) Advertise(res *rpc.InitializeResult) {
	res.Telemetry = k.ts.Capability()
	res.Telemetry.HistorySeconds = int64(k.history.Window().Seconds())
	res.Processes = k.procs.Capability()
	if len(k.logs.cfg.Files) > 0 {
		res.Telemetry.LogFiles = rpc.LogFilesPattern
		res.Telemetry.LogFilePaths = k.logs.cfg.Files
	}
	if k.logs.cfg.Journal {
		res.Telemetry.Journal = rpc.JournalPattern
	}
}

// ConnEnded implements adapters.Kind: nothing (subscriptions end alone).
func (k *Kind) ConnEnded(adapters.ConnID) {}

// ClientGone implements adapters.Kind: nothing.
func (k *Kind) ClientGone(string) {}

// Metrics implements adapters.Kind: what subscribers missed, in
// sidecar_dropped_total (telemetry_batch, log_record).
func (k *Kind) Metrics() []adapters.Metric {
	return []adapters.Metric{
		{Name: "dropped_total", Label: "reason", LabelValue: "telemetry_batch", Value: float64(k.ts.Stats().Missed), Counter: true},
		{Name: "dropped_total", Label: "reason", LabelValue: "log_record", Value: float64(k.ts.LogRecordsMissed()), Counter: true},
		{Name: "dropped_total", Label: "reason", LabelValue: "host_log_record", Value: float64(k.logs.Skipped()), Counter: true},
		{Name: "dropped_total", Label: "reason", LabelValue: "audit_line", Value: float64(k.auditStats().Dropped), Counter: true},
		{Name: "dropped_total", Label: "reason", LabelValue: "audit_event", Value: float64(k.auditStats().Missed), Counter: true},
		{Name: "log_lines_truncated_total", Help: "Records of the machine's log channels cut at 16 KiB (lines of files, journal messages), or journal entries over 1 MiB skipped.",
			Value: float64(k.logs.Truncated()), Counter: true},
	}
}

// auditStats returns the audit feed's counters (zeros when none).
func (k *Kind) auditStats() audit.Stats {
	if k.logs.cfg.Audit == nil {
		return audit.Stats{}
	}
	return k.logs.cfg.Audit.Stats()
}

// Shutdown implements adapters.Kind: sampling and the logs pump stop.
func (k *Kind) Shutdown(context.Context) {
	k.logs.Close()
	k.ts.Close()
	k.history.Close()
}

var (
	_ adapters.Kind    = (*Kind)(nil)
	_ adapters.LogTee  = (*Kind)(nil)
	_ adapters.Refuser = (*Kind)(nil)
)
