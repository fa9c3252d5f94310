package host

import (
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sidecar-dev/sidecar/adapters"
)

// The Prometheus view of the host's counters (host/stats.go). Every
// series is read from the host at scrape time (const metrics), so
// counting costs the per-message path nothing beyond the atomics the
// host keeps anyway. Labels are bounded sets: never a clientId, a
// channel URI or a peer address. docs/operations.md lists the metrics.

// Scrape bounds of MetricsHandler.
const (
	// metricsMaxInFlight bounds the scrapes served at once; more are
	// answered 503 at once (each reads every connection's counters).
	metricsMaxInFlight = 4
	// metricsTimeout bounds one scrape; past it the answer is 503.
	metricsTimeout = 10 * time.Second
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("sidecar_"+name, help, labels, nil)
}

var (
	descConnections = desc("connections_open",
		"Client connections open now, by transport.", "transport")
	descConnectionsTotal = desc("connections_total",
		"Client connections accepted and served, by transport.", "transport")
	descRefused = desc("connections_refused_total",
		"Client connections refused before being served, closed 1013: limit (listener.max_connections open already), principal_limit (its principal's listener.max_connections_per_principal), uninitialized_limit (its principal's listener.max_uninitialized not initialized yet); or shutdown (1001).", "reason")
	descDisconnects = desc("disconnects_total",
		"Served client connections that ended, by reason.", "reason")
	descSubscriptions = desc("subscriptions",
		"Subscriptions of the open connections, by channel kind and delivery (windowed or ordinary).", "kind", "delivery")
	descSentBytes = desc("sent_bytes_total",
		"Bytes of JSON-RPC message text written to clients (UTF-8 as carried, without the transport's framing).")
	descReceivedBytes = desc("received_bytes_total",
		"Bytes of JSON-RPC message text read from clients (UTF-8 as carried, without the transport's framing).")
	descSentMessages = desc("sent_messages_total",
		"JSON-RPC messages written to clients (one WebSocket message or transport-io EMIT frame each; a channel/frame fragment counts as one).")
	descReceivedMessages = desc("received_messages_total",
		"JSON-RPC messages read from clients (one WebSocket message or transport-io EMIT frame each).")
	descCreditWaits = desc("credit_waits_total",
		"Times a windowed subscription's window filled, so that its next message waited for channel/credit.")
	descCreditWaitSeconds = desc("credit_wait_seconds_total",
		"Time windowed subscriptions waited for channel/credit, counted when credit ends a wait.")
	descGaps = desc("gaps_total",
		"channel/gap notifications sent to clients.")
	descOverloaded = desc("overloaded_total",
		"Requests answered -32050 Overloaded (delivery.max_concurrent_requests in progress already).")
	descDropped = desc("dropped_total",
		"Messages or records not delivered, by reason: ordinary_backlog (actions of an ordinary subscription whose queue overflowed, replaced by channel/gap), telemetry_batch (metrics batches a subscriber was not ready for), log_record (log records a subscriber fell too far behind for), unknown_event (transport-io emits for events not in the contract).", "reason")
	descDatagramsDropped = desc("datagrams_dropped_total",
		"transport-io datagrams dropped, by reason: overflow and stale (outbound, overflowDropped and staleDropped), sequence and receive (inbound: out of order, or not taken in time).", "reason")
	descRetained = desc("retained_clients",
		"Clients whose connection was lost and whose state is kept for a reconnect (journal.reconnect_grace).")
	descResumes = desc("resumes_total",
		"reconnect requests, by result: resumed, refused (another principal or not its resume token), expired (nothing kept).", "result")
)

// Collector returns a prometheus.Collector of the host's metrics
// (sidecar_*), its own and its kinds' (adapters.Kind.Metrics), for a
// registry of the caller's; MetricsHandler uses it.
func (s *Server) Collector() prometheus.Collector { return hostCollector{s} }

type hostCollector struct{ s *Server }

// hostDescs are the host's own series that kinds add to: a kind's
// series of one of these names adds its label values under the host's
// desc.
var hostDescs = map[string]*prometheus.Desc{"dropped_total": descDropped}

func (h hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descConnections, descConnectionsTotal, descRefused, descDisconnects, descSubscriptions,
		descSentBytes, descReceivedBytes, descSentMessages, descReceivedMessages,
		descCreditWaits, descCreditWaitSeconds, descGaps, descOverloaded, descDropped,
		descDatagramsDropped, descRetained, descResumes,
	} {
		ch <- d
	}
	seen := map[string]bool{}
	for _, m := range h.s.kinds.metrics() {
		if d := kindDesc(m); d != nil && !seen[m.Name] {
			seen[m.Name] = true
			ch <- d
		}
	}
}

// kindDesc is the desc of a kind's series m, or nil when the host
// describes its name already.
func kindDesc(m adapters.Metric) *prometheus.Desc {
	if hostDescs[m.Name] != nil {
		return nil
	}
	var labels []string
	if m.Label != "" {
		labels = []string{m.Label}
	}
	return desc(m.Name, m.Help, labels...)
}

func (h hostCollector) Collect(ch chan<- prometheus.Metric) {
	st := h.s.stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	for i, k := range transportKinds {
		gauge(descConnections, st.connections[i], string(k))
		counter(descConnectionsTotal, st.accepted[i], string(k))
	}
	for i, name := range refusalNames {
		counter(descRefused, st.refused[i], name)
	}
	for i, name := range disconnectNames {
		counter(descDisconnects, st.disconnects[i], name)
	}
	labels := h.s.kinds.labels()
	for label := range st.subscriptions {
		if !slices.Contains(labels, label) {
			labels = append(labels, label) // a channel's label its kind did not list
		}
	}
	for _, label := range labels {
		var n [2]int
		if c := st.subscriptions[label]; c != nil {
			n = *c
		}
		gauge(descSubscriptions, n[0], label, "ordinary")
		gauge(descSubscriptions, n[1], label, "windowed")
	}
	t := st.totals
	counter(descSentBytes, t.traffic.sentBytes)
	counter(descReceivedBytes, t.traffic.receivedBytes)
	counter(descSentMessages, t.traffic.sentMessages)
	counter(descReceivedMessages, t.traffic.receivedMessages)
	counter(descCreditWaits, t.sched.CreditWaits)
	ch <- prometheus.MustNewConstMetric(descCreditWaitSeconds, prometheus.CounterValue, t.sched.CreditWait.Seconds())
	counter(descGaps, t.sched.GapsSent)
	counter(descOverloaded, st.overloaded)
	counter(descDropped, t.sched.Collapsed, "ordinary_backlog")
	counter(descDropped, t.sessions.unknownEvent, "unknown_event")
	counter(descDatagramsDropped, t.sessions.dgOverflow, "overflow")
	counter(descDatagramsDropped, t.sessions.dgStale, "stale")
	counter(descDatagramsDropped, t.sessions.dgSequence, "sequence")
	counter(descDatagramsDropped, t.sessions.dgReceive, "receive")
	gauge(descRetained, st.retained)
	for i, name := range resumeNames {
		counter(descResumes, st.resumes[i], name)
	}
	for _, m := range h.s.kinds.metrics() {
		d := hostDescs[m.Name]
		if d == nil {
			d = kindDesc(m)
		}
		typ := prometheus.GaugeValue
		if m.Counter {
			typ = prometheus.CounterValue
		}
		var labels []string
		if m.Label != "" {
			labels = []string{m.LabelValue}
		}
		ch <- prometheus.MustNewConstMetric(d, typ, m.Value, labels...)
	}
}

// MetricsRegistry returns a Prometheus registry of its own (not the
// global default) holding the host's metrics (Collector), the Go
// runtime's (go_*), the process's (process_*), and extra (the port
// preview's sidecar_preview_*, from sidecar serve).
func MetricsRegistry(s *Server, extra ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		s.Collector(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	reg.MustRegister(extra...)
	return reg
}

// MetricsHandler serves the exposition of MetricsRegistry(s) (the
// Prometheus text format, or OpenMetrics when the scraper asks for it):
// what `sidecar serve` serves at /metrics on its metrics listener
// (config block metrics). At most metricsMaxInFlight scrapes run at
// once, each within metricsTimeout (503 beyond either).
func MetricsHandler(s *Server, extra ...prometheus.Collector) http.Handler {
	reg := MetricsRegistry(s, extra...)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:            reg, // promhttp_metric_handler_errors_total
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: metricsMaxInFlight,
		Timeout:             metricsTimeout,
		EnableOpenMetrics:   true,
	})
}
