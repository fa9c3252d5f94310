package tests

import (
	"bufio"
	"context"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sidecar-dev/sidecar/rpc"
)

// TestTopOnceJSON: `sidecar top URL --once --json` prints one OTLP/JSON
// batch that protojson parses into MetricsData, with this machine's memory
// total (/proc/meminfo) and CPU count (/proc/stat).
func TestTopOnceJSON(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	out, errOut, code := s.run(t, append([]string{"top", s.url, "--once", "--json"}, s.connArgs()...)...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	md := &metricspb.MetricsData{}
	if err := protojson.Unmarshal([]byte(strings.TrimSpace(out)), md); err != nil {
		t.Fatalf("output is not OTLP/JSON metrics: %v\n%.500s", err, out)
	}
	if strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("--once printed more than one line")
	}
	find := func(name string) *metricspb.NumberDataPoint {
		for _, rm := range md.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name != name {
						continue
					}
					if g := m.GetGauge(); g != nil {
						return g.DataPoints[0]
					}
					if s := m.GetSum(); s != nil {
						return s.DataPoints[0]
					}
				}
			}
		}
		t.Fatalf("no metric %s", name)
		return nil
	}
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Skip("no /proc/meminfo")
	}
	m := regexp.MustCompile(`(?m)^MemTotal:\s+(\d+) kB`).FindSubmatch(meminfo)
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	if got := find("system.memory.limit").GetAsInt(); got != kb*1024 {
		t.Errorf("system.memory.limit %d, want MemTotal %d kB × 1024 = %d", got, kb, kb*1024)
	}
	f, err := os.Open("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cpus := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if regexp.MustCompile(`^cpu\d+ `).MatchString(sc.Text()) {
			cpus++
		}
	}
	if got := find("system.cpu.logical.count").GetAsInt(); got != int64(cpus) {
		t.Errorf("system.cpu.logical.count %d, want %d", got, cpus)
	}
	res := map[string]string{}
	for _, a := range md.ResourceMetrics[0].Resource.Attributes {
		res[a.Key] = a.Value.GetStringValue()
	}
	if res["service.name"] != "sidecar" || res["host.name"] == "" || res["os.type"] != "linux" {
		t.Errorf("resource %v", res)
	}
}

// TestTelemetryHistory: a client that connects after a CPU burst sees
// the burst in telemetry/history (the host samples whether or not anyone
// subscribes), with the machine's memory total, and the capability says
// how far back the history reaches (its bound, 3600 points, of 100 ms).
func TestTelemetryHistory(t *testing.T) {
	t.Parallel()
	s := startServer(t, "telemetry {\n  interval = \"100ms\"\n}\n")
	// The burst: every CPU busy for a second, before any client.
	start := time.Now()
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < time.Second {
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	c := tcpClient(t, s)
	if hs := c.Initialized().Telemetry.HistorySeconds; hs != 360 {
		t.Errorf("historySeconds %d, want 360", hs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var h rpc.TelemetryHistoryResult
	if err := c.Call(ctx, rpc.MethodTelemetryHistory, rpc.TelemetryHistoryParams{}, &h); err != nil {
		t.Fatal(err)
	}
	if h.IntervalMs != 100 || len(h.TimeUnixNano) < 5 || len(h.CPUUtilization) != len(h.TimeUnixNano) || len(h.DiskWrite) != len(h.TimeUnixNano) {
		t.Fatalf("history of %d ms, %d points, %d CPU figures", h.IntervalMs, len(h.TimeUnixNano), len(h.CPUUtilization))
	}
	meminfo, _ := os.ReadFile("/proc/meminfo")
	m := regexp.MustCompile(`(?m)^MemTotal:\s+(\d+) kB`).FindSubmatch(meminfo)
	kb, _ := strconv.ParseUint(string(m[1]), 10, 64)
	busiest := 0.0
	for i, at := range h.TimeUnixNano {
		// Points that end inside the burst (one interval in, so that the
		// whole interval is the burst's).
		if at > start.Add(150*time.Millisecond).UnixNano() && at <= end.UnixNano() {
			busiest = max(busiest, h.CPUUtilization[i])
		}
		if h.MemoryLimitBytes[i] != kb*1024 {
			t.Fatalf("point %d: memory limit %d, want MemTotal %d kB × 1024", i, h.MemoryLimitBytes[i], kb)
		}
	}
	if busiest < 0.8 {
		t.Errorf("the busiest point of the burst: %.3f of the CPUs, want at least 0.8\n%v\n%v", busiest, h.TimeUnixNano, h.CPUUtilization)
	}
}
