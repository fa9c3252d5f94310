package preview

import "github.com/prometheus/client_golang/prometheus"

var (
	descRequests = prometheus.NewDesc("sidecar_preview_requests_total",
		"Port preview requests, by how they ended: proxied (the app answered, or its WebSocket ended), unauthenticated (no valid session cookie or token), cross_site (Sec-Fetch-Site or Origin refused), denied (tcp.allow or the daemon's own port), limit (preview.max_connections_per_principal in progress already), too_large (headers or body over the bound), bad_gateway (the app could not be reached or failed).",
		[]string{"result"}, nil)
	descActive = prometheus.NewDesc("sidecar_preview_active",
		"Port preview requests in progress now (open WebSockets and streams included).", nil, nil)
	descUpgrades = prometheus.NewDesc("sidecar_preview_upgrades_total",
		"Port preview requests asking for a protocol upgrade (WebSocket).", nil, nil)
	descToApp = prometheus.NewDesc("sidecar_preview_sent_bytes_total",
		"Bytes written to previewed apps (request lines, headers and bodies, WebSocket traffic).", nil, nil)
	descFromApp = prometheus.NewDesc("sidecar_preview_received_bytes_total",
		"Bytes read from previewed apps (status lines, headers and bodies, WebSocket traffic).", nil, nil)
	descSessions = prometheus.NewDesc("sidecar_preview_sessions",
		"Preview sessions (cookies) kept now, expired ones not yet forgotten included.", nil, nil)
)

// Collector returns the preview's metrics (sidecar_preview_*) for a
// Prometheus registry; docs/operations.md lists them.
func (s *Server) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Server }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descActive, descUpgrades, descToApp, descFromApp, descSessions} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := &c.s.stats
	for i, name := range resultNames {
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(st.results[i].Load()), name)
	}
	ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(st.active.Load()))
	ch <- prometheus.MustNewConstMetric(descUpgrades, prometheus.CounterValue, float64(st.upgrades.Load()))
	ch <- prometheus.MustNewConstMetric(descToApp, prometheus.CounterValue, float64(st.toApp.Load()))
	ch <- prometheus.MustNewConstMetric(descFromApp, prometheus.CounterValue, float64(st.fromApp.Load()))
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(c.s.sessions.Len()))
}
