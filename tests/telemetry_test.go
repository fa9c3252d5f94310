package tests

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"
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
