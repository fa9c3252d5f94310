package telemetry

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// metric finds a metric by name.
func metric(md *metricspb.MetricsData, name string) *metricspb.Metric {
	for _, rm := range md.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == name {
					return m
				}
			}
		}
	}
	return nil
}

func points(m *metricspb.Metric) []*metricspb.NumberDataPoint {
	switch d := m.Data.(type) {
	case *metricspb.Metric_Gauge:
		return d.Gauge.DataPoints
	case *metricspb.Metric_Sum:
		return d.Sum.DataPoints
	}
	return nil
}

func attr(p *metricspb.NumberDataPoint, key string) (string, bool) {
	for _, a := range p.Attributes {
		if a.Key == key {
			if s := a.Value.GetStringValue(); s != "" {
				return s, true
			}
			return strconv.FormatInt(a.Value.GetIntValue(), 10), true
		}
	}
	return "", false
}

// procMemTotal reads MemTotal (kB) from /proc/meminfo.
func procMemTotal(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Skip("no /proc/meminfo")
	}
	m := regexp.MustCompile(`(?m)^MemTotal:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no MemTotal in /proc/meminfo")
	}
	v, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return v
}

// procCPUs counts the cpuN lines of /proc/stat.
func procCPUs(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/stat")
	if err != nil {
		t.Skip("no /proc/stat")
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	re := regexp.MustCompile(`^cpu\d+ `)
	for sc.Scan() {
		if re.MatchString(sc.Text()) {
			n++
		}
	}
	return n
}

// TestSampleAgreesWithProc: the figures agree with /proc on this machine.
func TestSampleAgreesWithProc(t *testing.T) {
	s := NewSampler(Options{ServiceVersion: "v-test", Self: func() Self { return Self{Clients: 2, Gaps: 3} }})
	s.Prime()
	md := sampleWithCPU(t, s)

	if m := metric(md, "system.memory.limit"); m == nil {
		t.Fatal("no system.memory.limit")
	} else if got, want := points(m)[0].GetAsInt(), procMemTotal(t)*1024; got != want {
		t.Errorf("system.memory.limit = %d, want MemTotal*1024 = %d", got, want)
	}
	ncpu := procCPUs(t)
	if m := metric(md, "system.cpu.logical.count"); m == nil || points(m)[0].GetAsInt() != int64(ncpu) {
		t.Errorf("system.cpu.logical.count = %v, want %d", m, ncpu)
	}
	util := metric(md, "system.cpu.utilization")
	if util == nil {
		t.Fatal("no system.cpu.utilization after Prime")
	}
	if got, want := len(points(util)), len(cpuModes)*(ncpu+1); got != want {
		t.Errorf("%d utilization points, want %d (7 modes × (total + %d CPUs))", got, want, ncpu)
	}
	cores := map[string]bool{}
	for _, p := range points(util) {
		if v := p.GetAsDouble(); v < 0 || v > 1 {
			t.Errorf("utilization %v out of [0,1]", v)
		}
		if n, ok := attr(p, "cpu.logical_number"); ok {
			cores[n] = true
		}
	}
	if len(cores) != ncpu {
		t.Errorf("utilization for %d cores, want %d", len(cores), ncpu)
	}
	for _, name := range []string{"system.memory.usage", "system.memory.utilization", "system.cpu.load_average.1m",
		"system.paging.usage", "system.filesystem.usage", "system.network.io", "system.process.count", "system.uptime",
		"sidecar.clients", "sidecar.gaps", "sidecar.io"} {
		if metric(md, name) == nil {
			t.Errorf("no %s", name)
		}
	}
	if m := metric(md, "sidecar.clients"); m != nil && points(m)[0].GetAsInt() != 2 {
		t.Errorf("sidecar.clients = %d, want 2", points(m)[0].GetAsInt())
	}
	// The root file system is always there, by mount point.
	root := false
	for _, p := range points(metric(md, "system.filesystem.usage")) {
		if mp, _ := attr(p, "system.filesystem.mountpoint"); mp == "/" {
			root = true
		}
	}
	if !root {
		t.Error("no system.filesystem.usage for /")
	}
	res := map[string]string{}
	for _, a := range md.ResourceMetrics[0].Resource.Attributes {
		res[a.Key] = a.Value.GetStringValue()
	}
	hn, _ := os.Hostname()
	if res["service.name"] != "sidecar" || res["service.version"] != "v-test" || res["host.name"] != hn || res["os.type"] != "linux" || res["host.arch"] == "" {
		t.Errorf("resource = %v", res)
	}
}

// sampleWithCPU samples until the kernel's CPU times (10 ms ticks) moved
// on every CPU since the last sample, so that utilization can be measured
// (a real interval of 1 s always has them; a test's microseconds may not).
func sampleWithCPU(t *testing.T, s *Sampler) *metricspb.MetricsData {
	t.Helper()
	want := len(cpuModes) * (procCPUs(t) + 1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		md := s.Sample()
		if m := metric(md, "system.cpu.utilization"); m != nil && len(points(m)) == want || time.Now().After(deadline) {
			return md
		}
		for i := 0; i < 1e6; i++ { // let the clock tick over
			_ = i * i
		}
	}
}

// TestPayloadRoundTrip: the payload is compact OTLP/JSON that protojson
// parses back into the same MetricsData; time stamps strictly increase.
func TestPayloadRoundTrip(t *testing.T) {
	fixed := time.Unix(1736870400, 0)
	s := NewSampler(Options{Now: func() time.Time { return fixed }})
	s.Prime()
	md1 := s.Sample()
	payload, err := EncodeMetrics(md1)
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := jsonCompact(&compact, payload); err != nil || !bytes.Equal(compact.Bytes(), payload) {
		t.Errorf("payload is not compact JSON (err %v)", err)
	}
	back, err := DecodeMetrics(payload)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(md1, back) {
		t.Error("payload does not round-trip through protojson")
	}
	text := string(payload)
	for _, want := range []string{`"resourceMetrics":[`, `"timeUnixNano":"1736870400000000000"`, `"aggregationTemporality":2`, `"asInt":"`} {
		if !strings.Contains(text, want) {
			t.Errorf("payload lacks %s", want)
		}
	}
	if strings.Contains(text, "AGGREGATION_TEMPORALITY") {
		t.Error("enum written as a name, OTLP/JSON wants its number")
	}
	// The clock did not move: the next batch is still later.
	md2 := s.Sample()
	t1 := points(metric(md1, "system.memory.limit"))[0].TimeUnixNano
	t2 := points(metric(md2, "system.memory.limit"))[0].TimeUnixNano
	if t2 <= t1 {
		t.Errorf("time stamps %d then %d: want increasing", t1, t2)
	}
}

func TestCgroupV2(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "kubepods", "pod1")
	write(t, filepath.Join(root, "cgroup.controllers"), "cpu memory")
	write(t, filepath.Join(dir, "memory.current"), "1048576\n")
	write(t, filepath.Join(dir, "memory.max"), "4194304\n")
	write(t, filepath.Join(dir, "cpu.max"), "50000 100000\n")
	write(t, filepath.Join(dir, "cpu.stat"), "usage_usec 2500000\nuser_usec 1\n")
	r := newCgroupReader(root, []byte("0::/kubepods/pod1\n"))
	c, ok := r.read()
	want := Cgroup{Version: 2, MemoryUsage: 1 << 20, MemoryLimit: 4 << 20, CPUUsage: 2500 * time.Millisecond, CPULimit: 0.5}
	if !ok || c != want {
		t.Errorf("read = %+v %v, want %+v", c, ok, want)
	}
	// Unlimited, and a namespaced cgroup ("0::/" with the files at the root).
	write(t, filepath.Join(root, "memory.max"), "max\n")
	write(t, filepath.Join(root, "cpu.max"), "max 100000\n")
	write(t, filepath.Join(root, "memory.current"), "7\n")
	c, _ = newCgroupReader(root, []byte("0::/\n")).read()
	if c.MemoryLimit != 0 || c.CPULimit != 0 || c.MemoryUsage != 7 {
		t.Errorf("unlimited: %+v", c)
	}
}

func TestCgroupV1(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "memory", "docker", "abc", "memory.usage_in_bytes"), "300\n")
	write(t, filepath.Join(root, "memory", "docker", "abc", "memory.limit_in_bytes"), "9223372036854771712\n")
	write(t, filepath.Join(root, "cpu,cpuacct", "cpu.cfs_quota_us"), "150000\n") // host path absent: the root
	write(t, filepath.Join(root, "cpu,cpuacct", "cpu.cfs_period_us"), "100000\n")
	write(t, filepath.Join(root, "cpu,cpuacct", "cpuacct.usage"), "2000000000\n")
	r := newCgroupReader(root, []byte("4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n"))
	c, ok := r.read()
	want := Cgroup{Version: 1, MemoryUsage: 300, CPUUsage: 2 * time.Second, CPULimit: 1.5}
	if !ok || c != want {
		t.Errorf("read = %+v %v, want %+v", c, ok, want)
	}
	if newCgroupReader(t.TempDir(), []byte("0::/\n")) != nil {
		t.Error("a reader for an empty cgroup root")
	}
}

func TestContainerID(t *testing.T) {
	id := strings.Repeat("0123456789abcdef", 4)
	if got := containerID([]byte("0::/system.slice/docker-"+id+".scope\n"), nil); got != id {
		t.Errorf("from cgroup: %q", got)
	}
	mi := "1 2 0:1 /var/lib/docker/containers/" + id + "/hostname /etc/hostname rw - ext4 /dev/sda1 rw\n"
	if got := containerID([]byte("0::/\n"), []byte(mi)); got != id {
		t.Errorf("from mountinfo: %q", got)
	}
	if got := containerID([]byte("0::/\n"), []byte("1 2 0:1 / / rw - ext4 /dev/sda1 rw\n")); got != "" {
		t.Errorf("none: %q", got)
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
