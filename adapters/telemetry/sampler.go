// Package telemetry is the sidecar's telemetry adapter (DESIGN.md §5): one
// Sampler reads the machine's figures (CPU, load, memory, swap, file
// systems, disks, network, processes, uptime, the container's cgroup) and
// the sidecar's own, and encodes them once per sample as an OTLP/JSON
// ExportMetricsServiceRequest with the OpenTelemetry proto types and
// protojson; a Hub samples only while some subscriber can take a batch and
// hands the batch to every one that can (live recovery: a subscriber
// without credit misses samples and never gets a backlog). The log side
// (logs.go) turns the sidecar's own hclog records into OTLP/JSON
// LogsData through a bounded Ring.
//
// Metric names, units and attributes follow the OpenTelemetry semantic
// conventions for system and container metrics; docs/protocol.md lists
// them.
package telemetry

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/disk"
	"github.com/shirou/gopsutil/v4/host"
	"github.com/shirou/gopsutil/v4/load"
	"github.com/shirou/gopsutil/v4/mem"
	"github.com/shirou/gopsutil/v4/net"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/sidecar-dev/sidecar/adapters"
)

// Self is the sidecar's own figures at one instant, provided by the host.
type Self = adapters.HostStats

// SelfStats returns the sidecar's own figures; the host implements it.
type SelfStats func() Self

// Options configure a Sampler. Zero fields take defaults.
type Options struct {
	ServiceName    string // resource service.name; default "sidecar"
	ServiceVersion string // resource service.version
	Self           SelfStats
	// Now is the clock of the time stamps; default time.Now.
	Now func() time.Time
	// CgroupRoot is where cgroups are mounted; default /sys/fs/cgroup.
	CgroupRoot string
	// ProcRoot is /proc (tests point it elsewhere for the cgroup files).
	ProcRoot string
}

// Sampler reads the machine and encodes one batch per Sample. It keeps the
// previous CPU times for utilization and caches what is expensive to read
// (host facts once, mounts every mountsRefresh, the process scan every
// processesRefresh). Not safe for concurrent use: the Hub's goroutine owns
// it.
type Sampler struct {
	opts     Options
	ctx      context.Context
	resource resourceFacts
	start    time.Time // the sidecar's start: start time of its own counters
	boot     time.Time // the machine's boot: start time of system counters
	cgroup   *cgroupReader
	inCont   bool

	prevCPU  []cpu.TimesStat
	lastTime time.Time

	mountsAt time.Time
	mounts   []disk.PartitionStat
	disks    map[string]bool // whole block devices (/sys/block), nil if unknown

	procsAt time.Time
	procs   map[string]int64 // process.state -> count
}

type resourceFacts struct {
	hostName, hostArch, osType, containerID string
}

// NewSampler returns a Sampler; host facts are read here, once.
func NewSampler(opts Options) *Sampler {
	if opts.ServiceName == "" {
		opts.ServiceName = "sidecar"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = "/sys/fs/cgroup"
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	s := &Sampler{opts: opts, ctx: context.Background(), start: opts.Now()}
	hn, _ := os.Hostname()
	selfCg, _ := os.ReadFile(filepath.Join(opts.ProcRoot, "self/cgroup"))
	mi, _ := os.ReadFile(filepath.Join(opts.ProcRoot, "self/mountinfo"))
	s.resource = resourceFacts{hostName: hn, hostArch: hostArch(runtime.GOARCH), osType: runtime.GOOS, containerID: containerID(selfCg, mi)}
	s.inCont = inContainer(s.resource.containerID)
	if s.inCont {
		s.cgroup = newCgroupReader(opts.CgroupRoot, selfCg)
	}
	if bt, err := host.BootTimeWithContext(s.ctx); err == nil {
		s.boot = time.Unix(int64(bt), 0)
	}
	return s
}

// hostArch maps GOARCH to the semantic conventions' host.arch values.
func hostArch(goarch string) string {
	switch goarch {
	case "386":
		return "x86"
	case "ppc64le":
		return "ppc64"
	}
	return goarch // amd64, arm64, arm32 is "arm", ppc64, s390x
}

// Prime reads the CPU times so that the next Sample's utilization covers
// the time since now (the Hub calls it when sampling starts after idling).
func (s *Sampler) Prime() {
	if t, err := cpu.TimesWithContext(s.ctx, true); err == nil {
		s.prevCPU = t
	}
}

// Sample reads the machine and returns one batch stamped with Options.Now.
// Time stamps strictly increase from one sample to the next.
func (s *Sampler) Sample() *metricspb.MetricsData { return s.SampleAt(s.opts.Now()) }

// SampleAt is Sample stamped with now (the Hub's clock).
func (s *Sampler) SampleAt(now time.Time) *metricspb.MetricsData {
	if !now.After(s.lastTime) {
		now = s.lastTime.Add(time.Nanosecond)
	}
	s.lastTime = now
	b := newBuilder(now)
	s.cpuMetrics(b)
	s.memoryMetrics(b)
	s.fsMetrics(b, now)
	s.diskMetrics(b)
	s.netMetrics(b)
	s.processMetrics(b, now)
	if up, ok := uptime(s.opts.ProcRoot); ok {
		b.gauge("system.uptime", "s", dbl(up))
	}
	s.containerMetrics(b)
	system := b.take()
	if s.opts.Self != nil {
		s.selfMetrics(b, s.opts.Self())
	}
	own := b.take()
	return s.metricsData(system, own)
}

// Collect samples and encodes the batch as compact OTLP/JSON.
func (s *Sampler) Collect() ([]byte, error) { return EncodeMetrics(s.Sample()) }

// CollectAt is Collect stamped with now.
func (s *Sampler) CollectAt(now time.Time) ([]byte, error) { return EncodeMetrics(s.SampleAt(now)) }

func (s *Sampler) cpuMetrics(b *builder) {
	cur, err := cpu.TimesWithContext(s.ctx, true)
	if err != nil {
		return
	}
	b.sum("system.cpu.logical.count", "{cpu}", false, 0, integer(int64(len(cur))))
	prev := s.prevCPU
	s.prevCPU = cur
	if len(prev) != len(cur) {
		return // first sample, or CPUs came and went: no interval to measure
	}
	var pts []*metricspb.NumberDataPoint
	var total, totalAll [len(cpuModes)]float64
	var totalSpan float64
	for i := range cur {
		d := modeTimes(cur[i])
		p := modeTimes(prev[i])
		var span float64
		for m := range d {
			d[m] = max(d[m]-p[m], 0)
			span += d[m]
		}
		if span <= 0 {
			continue
		}
		totalSpan += span
		for m, name := range cpuModes {
			totalAll[m] += d[m]
			pts = append(pts, dbl(d[m]/span, attrStr("cpu.mode", name), attrInt("cpu.logical_number", int64(i))))
		}
	}
	if totalSpan <= 0 {
		return
	}
	// The machine's total first: the points without cpu.logical_number.
	var all []*metricspb.NumberDataPoint
	for m, name := range cpuModes {
		total[m] = totalAll[m] / totalSpan
		all = append(all, dbl(total[m], attrStr("cpu.mode", name)))
	}
	b.gauge("system.cpu.utilization", "1", append(all, pts...)...)
}

// cpuModes are the cpu.mode values reported, in modeTimes order.
var cpuModes = [...]string{"user", "nice", "system", "idle", "iowait", "interrupt", "steal"}

func modeTimes(t cpu.TimesStat) [len(cpuModes)]float64 {
	// Guest time is already included in user and nice on Linux.
	return [...]float64{t.User, t.Nice, t.System, t.Idle, t.Iowait, t.Irq + t.Softirq, t.Steal}
}

func (s *Sampler) memoryMetrics(b *builder) {
	if l, err := load.AvgWithContext(s.ctx); err == nil {
		b.gauge("system.cpu.load_average.1m", "{thread}", dbl(l.Load1))
		b.gauge("system.cpu.load_average.5m", "{thread}", dbl(l.Load5))
		b.gauge("system.cpu.load_average.15m", "{thread}", dbl(l.Load15))
	}
	if v, err := mem.VirtualMemoryWithContext(s.ctx); err == nil && v.Total > 0 {
		used := v.Total - min(v.Available, v.Total) // semconv: MemTotal - MemAvailable
		states := []struct {
			name string
			v    uint64
		}{{"used", used}, {"free", v.Free}, {"cached", v.Cached}, {"buffers", v.Buffers}}
		var usage, util []*metricspb.NumberDataPoint
		for _, st := range states {
			usage = append(usage, integer(int64(st.v), attrStr("system.memory.state", st.name)))
			util = append(util, dbl(float64(st.v)/float64(v.Total), attrStr("system.memory.state", st.name)))
		}
		b.sum("system.memory.usage", "By", false, 0, usage...)
		b.gauge("system.memory.utilization", "1", util...)
		b.sum("system.memory.limit", "By", false, 0, integer(int64(v.Total)))
		b.sum("system.memory.linux.available", "By", false, 0, integer(int64(v.Available)))
		b.sum("system.memory.shared", "By", false, 0, integer(int64(v.Shared)))
	}
	if sw, err := mem.SwapMemoryWithContext(s.ctx); err == nil {
		b.sum("system.paging.usage", "By", false, 0,
			integer(int64(sw.Used), attrStr("system.paging.state", "used")),
			integer(int64(sw.Free), attrStr("system.paging.state", "free")))
		if sw.Total > 0 {
			b.gauge("system.paging.utilization", "1",
				dbl(float64(sw.Used)/float64(sw.Total), attrStr("system.paging.state", "used")),
				dbl(float64(sw.Free)/float64(sw.Total), attrStr("system.paging.state", "free")))
		}
	}
}

// refreshMounts re-reads the mounts and block devices every mountsRefresh.
func (s *Sampler) refreshMounts(now time.Time) {
	if !s.mountsAt.IsZero() && now.Sub(s.mountsAt) < mountsRefresh {
		return
	}
	s.mountsAt = now
	parts, _ := disk.PartitionsWithContext(s.ctx, false) // real devices, no pseudo file systems
	seen := map[string]bool{}
	var keep []disk.PartitionStat
	hasRoot := false
	slices.SortFunc(parts, func(a, b disk.PartitionStat) int { return strings.Compare(a.Mountpoint, b.Mountpoint) })
	for _, p := range parts {
		// One mount per device: bind mounts and snaps repeat the same one.
		if seen[p.Device] || p.Fstype == "squashfs" || strings.HasPrefix(p.Device, "/dev/loop") {
			continue
		}
		seen[p.Device] = true
		hasRoot = hasRoot || p.Mountpoint == "/"
		keep = append(keep, p)
	}
	if !hasRoot { // in a container "/" is an overlay, which is "nodev"
		keep = append([]disk.PartitionStat{{Device: "rootfs", Mountpoint: "/"}}, keep...)
	}
	s.mounts = keep[:min(len(keep), maxDevices)]
	s.disks = nil
	if ents, err := os.ReadDir("/sys/block"); err == nil {
		s.disks = map[string]bool{}
		for _, e := range ents {
			n := e.Name()
			if !strings.HasPrefix(n, "loop") && !strings.HasPrefix(n, "ram") {
				s.disks[n] = true
			}
		}
	}
}

func (s *Sampler) fsMetrics(b *builder, now time.Time) {
	s.refreshMounts(now)
	var usage, util []*metricspb.NumberDataPoint
	for _, p := range s.mounts {
		u, err := disk.UsageWithContext(s.ctx, p.Mountpoint)
		if err != nil || u.Total == 0 {
			continue
		}
		fstype := p.Fstype
		if fstype == "" {
			fstype = u.Fstype
		}
		mode := "rw"
		if slices.Contains(p.Opts, "ro") {
			mode = "ro"
		}
		attrs := func(state string) []kv {
			return []kv{attrStr("system.device", p.Device), attrStr("system.filesystem.mountpoint", p.Mountpoint),
				attrStr("system.filesystem.type", fstype), attrStr("system.filesystem.mode", mode),
				attrStr("system.filesystem.state", state)}
		}
		reserved := u.Total - min(u.Total, u.Free+u.Used)
		for _, st := range []struct {
			name string
			v    uint64
		}{{"used", u.Used}, {"free", u.Free}, {"reserved", reserved}} {
			usage = append(usage, integer(int64(st.v), attrs(st.name)...))
			util = append(util, dbl(float64(st.v)/float64(u.Total), attrs(st.name)...))
		}
	}
	if len(usage) > 0 {
		b.sum("system.filesystem.usage", "By", false, 0, usage...)
		b.gauge("system.filesystem.utilization", "1", util...)
	}
}

func (s *Sampler) diskMetrics(b *builder) {
	io, err := disk.IOCountersWithContext(s.ctx)
	if err != nil {
		return
	}
	names := make([]string, 0, len(io))
	for n := range io {
		if s.disks != nil && !s.disks[n] || strings.HasPrefix(n, "loop") || strings.HasPrefix(n, "ram") {
			continue
		}
		names = append(names, n)
	}
	slices.Sort(names)
	names = names[:min(len(names), maxDevices)]
	var bytesPts, opsPts, timePts []*metricspb.NumberDataPoint
	for _, n := range names {
		c := io[n]
		dev := attrStr("system.device", n)
		bytesPts = append(bytesPts, integer(int64(c.ReadBytes), dev, attrStr("disk.io.direction", "read")),
			integer(int64(c.WriteBytes), dev, attrStr("disk.io.direction", "write")))
		opsPts = append(opsPts, integer(int64(c.ReadCount), dev, attrStr("disk.io.direction", "read")),
			integer(int64(c.WriteCount), dev, attrStr("disk.io.direction", "write")))
		timePts = append(timePts, dbl(float64(c.IoTime)/1000, dev))
	}
	if len(names) > 0 {
		start := nanos(s.boot)
		b.sum("system.disk.io", "By", true, start, bytesPts...)
		b.sum("system.disk.operations", "{operation}", true, start, opsPts...)
		b.sum("system.disk.io_time", "s", true, start, timePts...)
	}
}

func (s *Sampler) netMetrics(b *builder) {
	nics, err := net.IOCountersWithContext(s.ctx, true)
	if err != nil || len(nics) == 0 {
		return
	}
	slices.SortFunc(nics, func(a, b net.IOCountersStat) int { return strings.Compare(a.Name, b.Name) })
	nics = nics[:min(len(nics), maxDevices)]
	var io, pkts, errs, drops []*metricspb.NumberDataPoint
	for _, n := range nics {
		ifc := attrStr("network.interface.name", n.Name)
		rx, tx := attrStr("network.io.direction", "receive"), attrStr("network.io.direction", "transmit")
		io = append(io, integer(int64(n.BytesRecv), ifc, rx), integer(int64(n.BytesSent), ifc, tx))
		pkts = append(pkts, integer(int64(n.PacketsRecv), ifc, rx), integer(int64(n.PacketsSent), ifc, tx))
		errs = append(errs, integer(int64(n.Errin), ifc, rx), integer(int64(n.Errout), ifc, tx))
		drops = append(drops, integer(int64(n.Dropin), ifc, rx), integer(int64(n.Dropout), ifc, tx))
	}
	start := nanos(s.boot)
	b.sum("system.network.io", "By", true, start, io...)
	b.sum("system.network.packet.count", "{packet}", true, start, pkts...)
	b.sum("system.network.errors", "{error}", true, start, errs...)
	b.sum("system.network.packet.dropped", "{packet}", true, start, drops...)
}

func (s *Sampler) processMetrics(b *builder, now time.Time) {
	if s.procs == nil || now.Sub(s.procsAt) >= processesRefresh {
		s.procsAt = now
		s.procs = countProcesses(s.opts.ProcRoot)
	}
	var pts []*metricspb.NumberDataPoint
	for _, st := range []string{"running", "sleeping", "stopped", "defunct"} {
		pts = append(pts, integer(s.procs[st], attrStr("process.state", st)))
	}
	b.sum("system.process.count", "{process}", false, 0, pts...)
}

// countProcesses counts /proc/PID by the state letter of /proc/PID/stat.
func countProcesses(procRoot string) map[string]int64 {
	counts := map[string]int64{}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return counts
	}
	buf := make([]byte, 512)
	for _, e := range ents {
		name := e.Name()
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		f, err := os.Open(filepath.Join(procRoot, name, "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		n, _ := f.Read(buf)
		_ = f.Close()
		line := buf[:n]
		i := bytes.LastIndexByte(line, ')')
		if i < 0 || i+2 >= len(line) {
			continue
		}
		switch line[i+2] {
		case 'R':
			counts["running"]++
		case 'S', 'D', 'I':
			counts["sleeping"]++
		case 'T', 't':
			counts["stopped"]++
		case 'Z', 'X':
			counts["defunct"]++
		}
	}
	return counts
}

// uptime reads /proc/uptime (seconds, with hundredths).
func uptime(procRoot string) (float64, bool) {
	b, err := os.ReadFile(filepath.Join(procRoot, "uptime"))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}

func (s *Sampler) containerMetrics(b *builder) {
	if s.cgroup == nil {
		return
	}
	c, ok := s.cgroup.read()
	if !ok {
		return
	}
	b.sum("container.memory.usage", "By", false, 0, integer(int64(c.MemoryUsage)))
	if c.MemoryLimit > 0 {
		b.sum("container.memory.limit", "By", false, 0, integer(int64(c.MemoryLimit)))
	}
	b.sum("container.cpu.time", "s", true, 0, dbl(c.CPUUsage.Seconds()))
	if c.CPULimit > 0 {
		b.gauge("container.cpu.limit", "{cpu}", dbl(c.CPULimit))
	}
}

func (s *Sampler) selfMetrics(b *builder, st Self) {
	start := nanos(s.start)
	b.sum("sidecar.clients", "{client}", false, 0, integer(int64(st.Clients)))
	b.sum("sidecar.subscriptions", "{subscription}", false, 0, integer(int64(st.Subscriptions)))
	b.sum("sidecar.io", "By", true, start,
		integer(int64(st.BytesSent), attrStr("network.io.direction", "transmit")),
		integer(int64(st.BytesReceived), attrStr("network.io.direction", "receive")))
	b.sum("sidecar.credit.wait.time", "s", true, start, dbl(st.CreditWait.Seconds()))
	b.sum("sidecar.gaps", "{gap}", true, start, integer(int64(st.Gaps)))
}
