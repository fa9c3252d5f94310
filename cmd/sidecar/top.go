package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"golang.org/x/term"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

func topCmd() *cobra.Command {
	var cf connFlags
	var once, asJSON bool
	var interval time.Duration
	var sortBy string
	cmd := &cobra.Command{
		Use:   "top URL",
		Short: "Live view of the host's CPU, memory, load, disks, network and processes",
		Long: "top subscribes to the host's ahp-otlp://metrics channel and redraws a view that fits the\n" +
			"terminal every batch, the host's processes below it (processes/list), sorted by --sort;\n" +
			"in the live view the keys P (CPU), M (memory), N (pid), S (start, newest first) and\n" +
			"C (command) sort them, as in top. --once prints one batch and the first 15 processes and\n" +
			"exits; with --json that batch is the OTLP/JSON ExportMetricsServiceRequest exactly as\n" +
			"the host sent it, for scripts.",
		Example: "  sidecar top wss://127.0.0.1:4433/ahp\n  sidecar top wss://127.0.0.1:4433/ahp --once --json | jq .",
		Args: func(cmd *cobra.Command, args []string) error {
			// Not given: the host's telemetry.interval. Given, it must be
			// positive, as --connect-timeout.
			if cmd.Flags().Changed("interval") && interval <= 0 {
				return fmt.Errorf("--interval %s: must be positive", interval)
			}
			if !slices.Contains(topSortKeys, sortBy) {
				return fmt.Errorf("--sort %q: want one of %s", sortBy, strings.Join(topSortKeys, ", "))
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTop(&cf, args[0], once, asJSON, interval, sortBy)
		},
	}
	cf.register(cmd)
	fs := cmd.Flags()
	fs.BoolVar(&once, "once", false, "print one batch and exit")
	fs.BoolVar(&asJSON, "json", false, "with --once: print the batch as OTLP/JSON")
	fs.DurationVar(&interval, "interval", 0, "ask for a batch this often (at least the host's telemetry.interval)")
	fs.StringVar(&sortBy, "sort", "cpu", "sort the processes by cpu, memory, pid, start (newest first) or command")
	return cmd
}

// topSortKeys are the process orders of processes/list, and topSortByKey
// the live view's keys for them (top's P, M, N; S start, C command).
var (
	topSortKeys  = []string{"cpu", "memory", "pid", "start", "command"}
	topSortByKey = map[byte]string{'P': "cpu", 'M': "memory", 'N': "pid", 'S': "start", 'C': "command"}
)

// topOnceProcesses is how many processes --once prints.
const topOnceProcesses = 15

func runTop(cf *connFlags, url string, once, asJSON bool, interval time.Duration, sortBy string) error {
	if asJSON && !once {
		return &exitError{code: 2, err: errors.New("--json needs --once")}
	}
	ctx, caught, stop := signalContext(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// Reconnection steps reach the view's loop (the live view shows them
	// on its bottom line, other output on stderr); a full channel drops
	// a step, the next one says where it stands.
	recon := make(chan client.ReconnectStatus, 16)
	cf.onReconnect = func(st client.ReconnectStatus) {
		select {
		case recon <- st:
		default:
		}
	}
	conn, err := cf.dial(ctx, url)
	if err != nil {
		return dialFailed(err, cf.dialSignal(ctx, err, caught))
	}
	defer conn.Close()
	metrics, err := conn.SubscribeMetrics(ctx, interval)
	if err != nil {
		return &exitError{code: 255, err: err}
	}

	live := !once && term.IsTerminal(int(os.Stdout.Fd()))
	var v *topView
	var keys <-chan byte // q, Ctrl-C and the sort keys; nil (never) without raw mode
	procs := newProcFetcher(conn, sortBy)
	hist := newHistFetcher(conn)
	if !asJSON {
		v = newTopView(os.Stdout, live)
		v.sortBy = sortBy
		if live {
			v.hint = "Ctrl-C to quit"
			// Raw stdin, so that q is read here at once rather than left in the tty's
			// input queue for the shell, and Ctrl-C arrives as a key (ISIG is off).
			if fd := int(os.Stdin.Fd()); term.IsTerminal(fd) {
				if old, err := term.MakeRaw(fd); err == nil {
					defer func() { _ = term.Restore(fd, old) }()
					keys = readTopKeys(os.Stdin)
					v.hint = "q to quit · sort processes: P cpu, M memory, N pid, S start, C command"
				}
			}
			v.baseHint = v.hint
			v.start()
			defer v.end()
		}
	}
	winch := make(chan os.Signal, 1)
	if live {
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
	}
	type batch struct {
		client.MetricsBatch
		err error
	}
	batches := make(chan batch)
	go func() {
		defer close(batches)
		for {
			b, err := metrics.Next(ctx)
			select {
			case batches <- batch{b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case k := <-keys:
			if k == 'q' || k == 'Q' || k == 0x03 {
				return nil
			}
			if by, ok := topSortByKey[k&^0x20]; ok && by != v.sortBy { // either case
				v.sortBy = by
				v.procs = sortProcesses(v.procs, by)
				v.draw()
				procs.fetch(ctx, by, v.processRows())
			}
		case res := <-hist.results:
			if v != nil {
				v.hist.add(res)
				v.draw()
			}
		case res := <-procs.results:
			if res.sortBy == v.sortBy {
				v.procs, v.procsErr = res.list, res.err
				v.draw()
			}
		case <-winch:
			v.draw()
		case st := <-recon:
			l := reconnectLine(st)
			switch {
			case l == "":
			case v != nil && live:
				if st.State == client.Resumed {
					l = v.baseHint
				}
				v.hint = l
				v.draw()
			default:
				fmt.Fprintf(os.Stderr, "sidecar: %s\n", l)
			}
		case b, ok := <-batches:
			if !ok {
				return nil
			}
			if b.err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if errors.Is(b.err, client.ErrBadMetrics) {
					return &exitError{code: 1, err: b.err}
				}
				return &exitError{code: 255, err: b.err}
			}
			if asJSON {
				_, err := fmt.Fprintf(os.Stdout, "%s\n", b.Payload)
				return err
			}
			v.update(b.Data)
			v.skipped += b.Skipped
			if once {
				// One listing, waited for (a host measures CPU use over
				// 250 ms when nobody listed lately), and the history.
				v.procs, v.procsErr = conn.Processes(ctx, v.sortBy, topOnceProcesses)
				if hist.offered {
					var res rpc.TelemetryHistoryResult
					if err := conn.Call(ctx, rpc.MethodTelemetryHistory, rpc.TelemetryHistoryParams{}, &res); err == nil {
						v.hist.add(&res)
					}
				}
				v.draw()
				return nil
			}
			v.draw()
			procs.fetch(ctx, v.sortBy, v.processRows())
			hist.fetch(ctx, v.hist.last())
		}
	}
}

// readQuitKeys reads keys from r (a terminal in raw mode) and closes the returned
// channel at q, Q or Ctrl-C; other keys are dropped. The goroutine stays blocked in
// Read until the process exits, which is soon after the view ends.
func readTopKeys(r io.Reader) <-chan byte {
	keys := make(chan byte, 16)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := r.Read(buf)
			for _, b := range buf[:n] {
				select {
				case keys <- b:
				default: // keys typed faster than drawn: dropped
				}
				if b == 'q' || b == 'Q' || b == 0x03 {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return keys
}

// procFetcher lists the host's processes beside the view's loop, at most
// one request in flight (a fetch asked meanwhile is skipped: the next
// batch asks again); results arrive on results.
type procFetcher struct {
	conn     *client.Conn
	offered  bool
	inFlight atomic.Bool
	results  chan procResult
}

type procResult struct {
	sortBy string
	list   *rpc.ProcessesListResult
	err    error
}

func newProcFetcher(conn *client.Conn, _ string) *procFetcher {
	return &procFetcher{conn: conn, offered: conn.Initialized().Processes != nil, results: make(chan procResult, 1)}
}

// fetch starts a listing of limit processes sorted by sortBy unless one
// is in flight or the host offers none.
func (f *procFetcher) fetch(ctx context.Context, sortBy string, limit int) {
	if !f.offered || limit <= 0 || !f.inFlight.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer f.inFlight.Store(false)
		list, err := f.conn.Processes(ctx, sortBy, min(limit, rpc.MaxProcessesListed))
		select {
		case f.results <- procResult{sortBy, list, err}:
		case <-ctx.Done():
		}
	}()
}

// histFetcher reads the host's telemetry/history beside the view's loop:
// all of it first, then the points since the last one, at most one
// request in flight.
type histFetcher struct {
	conn     *client.Conn
	offered  bool
	inFlight atomic.Bool
	results  chan *rpc.TelemetryHistoryResult
}

func newHistFetcher(conn *client.Conn) *histFetcher {
	tc := conn.Initialized().Telemetry
	return &histFetcher{conn: conn, offered: tc != nil && tc.HistorySeconds > 0, results: make(chan *rpc.TelemetryHistoryResult, 1)}
}

// fetch asks for the points after since (0: all) unless a request is in
// flight or the host keeps no history. A failure is dropped: the next
// batch asks again.
func (f *histFetcher) fetch(ctx context.Context, since int64) {
	if !f.offered || !f.inFlight.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer f.inFlight.Store(false)
		var res rpc.TelemetryHistoryResult
		if err := f.conn.Call(ctx, rpc.MethodTelemetryHistory, rpc.TelemetryHistoryParams{SinceUnixNano: since}, &res); err != nil {
			return
		}
		select {
		case f.results <- &res:
		case <-ctx.Done():
		}
	}()
}

// history is what the view keeps of the host's history, newest last, at
// most maxHistory points.
type history struct {
	at               []int64
	cpu, mem, net, d []float64 // CPU share, memory share, network and disk bytes/s
}

const maxHistory = 3600

// add appends res's points after the last one kept.
func (h *history) add(res *rpc.TelemetryHistoryResult) {
	for i, at := range res.TimeUnixNano {
		if n := len(h.at); n > 0 && at <= h.at[n-1] || i >= len(res.CPUUtilization) || i >= len(res.MemoryLimitBytes) ||
			i >= len(res.NetworkReceive) || i >= len(res.NetworkTransmit) || i >= len(res.DiskRead) || i >= len(res.DiskWrite) {
			continue
		}
		mem := 0.0
		if l := res.MemoryLimitBytes[i]; l > 0 {
			mem = float64(res.MemoryUsageBytes[i]) / float64(l)
		}
		h.at = append(h.at, at)
		h.cpu = append(h.cpu, res.CPUUtilization[i])
		h.mem = append(h.mem, mem)
		h.net = append(h.net, float64(res.NetworkReceive[i]+res.NetworkTransmit[i]))
		h.d = append(h.d, float64(res.DiskRead[i]+res.DiskWrite[i]))
	}
	if n := len(h.at); n > maxHistory {
		cut := n - maxHistory
		h.at, h.cpu, h.mem, h.net, h.d = h.at[cut:], h.cpu[cut:], h.mem[cut:], h.net[cut:], h.d[cut:]
	}
}

// last is the time of the newest point, 0 if none.
func (h *history) last() int64 {
	if len(h.at) == 0 {
		return 0
	}
	return h.at[len(h.at)-1]
}

// sparkline draws the last width values of vs, one cell each, newest at
// the right: a share (top 1) as is, a rate against the highest shown.
func sparkline(vs []float64, width int, share bool) (string, float64) {
	vs = vs[max(0, len(vs)-width):]
	top := 1.0
	if !share {
		top = 0
		for _, v := range vs {
			top = max(top, v)
		}
	}
	const ticks = "▁▂▃▄▅▆▇█"
	cells := []rune(ticks)
	var b strings.Builder
	for _, v := range vs {
		i := 0
		if top > 0 {
			i = int(min(max(v/top, 0), 1)*float64(len(cells)-1) + 0.5)
		}
		b.WriteRune(cells[i])
	}
	return b.String(), top
}

// sortProcesses reorders a listing at once when the sort key changes
// (the next listing brings the host's own order, and the top ones).
func sortProcesses(res *rpc.ProcessesListResult, by string) *rpc.ProcessesListResult {
	if res == nil {
		return nil
	}
	out := *res
	out.Processes = slices.Clone(res.Processes)
	slices.SortStableFunc(out.Processes, func(a, b rpc.ProcessInfo) int {
		switch by {
		case "memory":
			return cmp.Compare(b.MemoryUsageBytes, a.MemoryUsageBytes)
		case "pid":
			return cmp.Compare(a.PID, b.PID)
		case "start":
			return cmp.Compare(b.StartTimeUnixNano, a.StartTimeUnixNano)
		case "command":
			return strings.Compare(a.Command, b.Command)
		}
		return cmp.Compare(b.CPUUtilization, a.CPUUtilization)
	})
	return &out
}

// topView renders batches; it keeps the previous one for rates.
type topView struct {
	w         io.Writer
	live      bool
	hint      string // live view: shown on the bottom line, e.g. "q to quit"
	baseHint  string // the hint a reconnection status gives way to again
	cur, prev *snapshotView
	skipped   uint64 // samples the host could not send us (the batches' "skipped"), in all
	// The processes: the last listing (nil before the first, or when the
	// host offers none), its error, and the order asked for.
	procs    *rpc.ProcessesListResult
	procsErr error
	sortBy   string
	// hist is the host's recent history (telemetry/history), for the
	// sparklines.
	hist history
	// rows is the height the last draw had for the view (0: not live),
	// summaryLines the lines above the process table.
	rows, summaryLines int
}

// snapshotView is one batch, indexed for drawing.
type snapshotView struct {
	at      time.Time
	res     map[string]string
	metrics map[string][]*metricspb.NumberDataPoint
}

func newTopView(w io.Writer, live bool) *topView { return &topView{w: w, live: live} }

// start switches to the alternate screen and hides the cursor; end undoes it.
func (v *topView) start() { fmt.Fprint(v.w, "\x1b[?1049h\x1b[?25l") }
func (v *topView) end()   { fmt.Fprint(v.w, "\x1b[?25h\x1b[?1049l") }

func (v *topView) update(md *metricspb.MetricsData) {
	s := &snapshotView{res: map[string]string{}, metrics: map[string][]*metricspb.NumberDataPoint{}}
	for _, rm := range md.ResourceMetrics {
		for _, a := range rm.GetResource().GetAttributes() {
			s.res[a.Key] = a.Value.GetStringValue()
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				var pts []*metricspb.NumberDataPoint
				switch d := m.Data.(type) {
				case *metricspb.Metric_Gauge:
					pts = d.Gauge.DataPoints
				case *metricspb.Metric_Sum:
					pts = d.Sum.DataPoints
				}
				s.metrics[m.Name] = pts
				for _, p := range pts {
					if t := time.Unix(0, int64(p.TimeUnixNano)); t.After(s.at) {
						s.at = t
					}
				}
			}
		}
	}
	v.prev, v.cur = v.cur, s
}

func value(p *metricspb.NumberDataPoint) float64 {
	if d, ok := p.Value.(*metricspb.NumberDataPoint_AsDouble); ok {
		return d.AsDouble
	}
	return float64(p.GetAsInt())
}

func attrOf(p *metricspb.NumberDataPoint, key string) (string, bool) {
	for _, a := range p.Attributes {
		if a.Key == key {
			if iv, ok := a.Value.GetValue().(*commonpb.AnyValue_IntValue); ok {
				return strconv.FormatInt(iv.IntValue, 10), true
			}
			return a.Value.GetStringValue(), true
		}
	}
	return "", false
}

// find returns the value of the point of name whose attributes match kv pairs.
func (s *snapshotView) find(name string, kv ...string) (float64, bool) {
	for _, p := range s.metrics[name] {
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			if got, has := attrOf(p, kv[i]); !has || got != kv[i+1] {
				ok = false
				break
			}
		}
		if ok {
			return value(p), true
		}
	}
	return 0, false
}

// rate is the per-second change of a counter point between two batches.
func (v *topView) rate(name string, kv ...string) (float64, bool) {
	if v.prev == nil {
		return 0, false
	}
	a, ok1 := v.prev.find(name, kv...)
	b, ok2 := v.cur.find(name, kv...)
	dt := v.cur.at.Sub(v.prev.at).Seconds()
	if !ok1 || !ok2 || dt <= 0 || b < a {
		return 0, false
	}
	return (b - a) / dt, true
}

// rateTable appends a blank line, a header (title, colA, colB) and, for
// every value of attribute key among metric's points, the per-second
// rates of its dirKey=dirA and dirKey=dirB series ("-" until two samples
// give a rate).
func (v *topView) rateTable(lines []string, title, colA, colB, metric, key, dirKey, dirA, dirB string) []string {
	lines = append(lines, "", fmt.Sprintf("%-16s %12s %12s", title, colA, colB))
	names := map[string]bool{}
	for _, p := range v.cur.metrics[metric] {
		if n, ok := attrOf(p, key); ok {
			names[n] = true
		}
	}
	for _, n := range sortedKeys(names) {
		a, ok1 := v.rate(metric, key, n, dirKey, dirA)
		b, ok2 := v.rate(metric, key, n, dirKey, dirB)
		if ok1 && ok2 {
			lines = append(lines, fmt.Sprintf("%-16s %12s %12s", trunc(n, 16), bytesH(a), bytesH(b)))
		} else {
			lines = append(lines, fmt.Sprintf("%-16s %12s %12s", trunc(n, 16), "-", "-"))
		}
	}
	return lines
}

// layout builds the lines for a width.
func (v *topView) layout(width int) []string {
	s := v.cur
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	up, _ := s.find("system.uptime")
	l1, _ := s.find("system.cpu.load_average.1m")
	l5, _ := s.find("system.cpu.load_average.5m")
	l15, _ := s.find("system.cpu.load_average.15m")
	head := fmt.Sprintf("%s  up %s  load %.2f %.2f %.2f  %s", s.res["host.name"], duration(up), l1, l5, l15, s.at.Format("15:04:05"))
	if v.skipped > 0 {
		// Telemetry is live only: what we missed while not reading is
		// not sent later, but the host says how much (docs/protocol.md).
		head += fmt.Sprintf("  (%d samples skipped)", v.skipped)
	}
	add("%s", head)
	var procs []string
	for _, st := range []string{"running", "sleeping", "stopped", "defunct"} {
		if n, ok := s.find("system.process.count", "process.state", st); ok && n > 0 {
			procs = append(procs, fmt.Sprintf("%d %s", int(n), st))
		}
	}
	add("processes: %s", strings.Join(procs, ", "))

	// CPU: the total, then each core, as many per line as fit.
	barW := max(10, min(40, width-20))
	if idle, ok := s.find("system.cpu.utilization", "cpu.mode", "idle"); ok && v.totalPoint() {
		add("CPU  %s %5.1f%%", bar(1-idle, barW), (1-idle)*100)
	} else {
		add("CPU  (measuring)")
	}
	var cores []string
	for i := 0; ; i++ {
		idle, ok := s.find("system.cpu.utilization", "cpu.logical_number", strconv.Itoa(i), "cpu.mode", "idle")
		if !ok {
			break
		}
		cores = append(cores, fmt.Sprintf("%3d %s %3.0f%%", i, bar(1-idle, 10), (1-idle)*100))
	}
	perLine := max(1, width/20)
	for i := 0; i < len(cores); i += perLine {
		add("%s", strings.Join(cores[i:min(i+perLine, len(cores))], "  "))
	}

	total, _ := s.find("system.memory.limit")
	used, _ := s.find("system.memory.usage", "system.memory.state", "used")
	if total > 0 {
		add("Mem  %s %s / %s", bar(used/total, barW), bytesH(used), bytesH(total))
	}
	swUsed, _ := s.find("system.paging.usage", "system.paging.state", "used")
	swFree, _ := s.find("system.paging.usage", "system.paging.state", "free")
	if swUsed+swFree > 0 {
		add("Swap %s %s / %s", bar(swUsed/(swUsed+swFree), barW), bytesH(swUsed), bytesH(swUsed+swFree))
	}
	if cu, ok := s.find("container.memory.usage"); ok {
		lim := "unlimited"
		if l, ok := s.find("container.memory.limit"); ok {
			lim = bytesH(l)
		}
		cpuLim := "unlimited"
		if l, ok := s.find("container.cpu.limit"); ok {
			cpuLim = fmt.Sprintf("%.2f CPUs", l)
		}
		cpuUse := ""
		if r, ok := v.rate("container.cpu.time"); ok {
			cpuUse = fmt.Sprintf(" using %.2f", r)
		}
		add("Container  mem %s / %s  cpu%s of %s", bytesH(cu), lim, cpuUse, cpuLim)
	}

	if n := len(v.hist.at); n > 1 {
		w := max(10, width-22)
		shown := min(n, w)
		span := time.Duration(v.hist.at[n-1]-v.hist.at[n-shown]) * time.Nanosecond
		add("")
		add("HISTORY (last %s)", span.Round(time.Second))
		cpuLine, _ := sparkline(v.hist.cpu, w, true)
		add("CPU   %s %5.1f%%", cpuLine, v.hist.cpu[n-1]*100)
		memLine, _ := sparkline(v.hist.mem, w, true)
		add("Mem   %s %5.1f%%", memLine, v.hist.mem[n-1]*100)
		netLine, netTop := sparkline(v.hist.net, w, false)
		add("Net   %s %s/s max", netLine, bytesH(netTop))
		diskLine, diskTop := sparkline(v.hist.d, w, false)
		add("Disk  %s %s/s max", diskLine, bytesH(diskTop))
	}

	add("")
	add("%-24s %10s %10s %5s", "FILESYSTEM", "USED", "SIZE", "USE%")
	mounts := map[string]bool{}
	for _, p := range s.metrics["system.filesystem.usage"] {
		if mp, ok := attrOf(p, "system.filesystem.mountpoint"); ok {
			mounts[mp] = true
		}
	}
	for _, mp := range sortedKeys(mounts) {
		u, _ := s.find("system.filesystem.usage", "system.filesystem.mountpoint", mp, "system.filesystem.state", "used")
		f, _ := s.find("system.filesystem.usage", "system.filesystem.mountpoint", mp, "system.filesystem.state", "free")
		r, _ := s.find("system.filesystem.usage", "system.filesystem.mountpoint", mp, "system.filesystem.state", "reserved")
		size := u + f + r
		if size > 0 {
			add("%-24s %10s %10s %4.0f%%", trunc(mp, 24), bytesH(u), bytesH(size), u/size*100)
		}
	}

	lines = v.rateTable(lines, "DISK", "READ/s", "WRITE/s", "system.disk.io", "system.device", "disk.io.direction", "read", "write")
	lines = v.rateTable(lines, "NETWORK", "RECEIVE/s", "TRANSMIT/s", "system.network.io", "network.interface.name", "network.io.direction", "receive", "transmit")
	if c, ok := s.find("sidecar.clients"); ok {
		subs, _ := s.find("sidecar.subscriptions")
		add("")
		add("sidecar %s: %d client%s, %d subscription%s", s.res["service.version"], int(c), plural(int(c), "", "s"), int(subs), plural(int(subs), "", "s"))
	}
	v.summaryLines = len(lines)
	return v.processTable(lines, width)
}

// processTable adds the process listing to lines: a header naming the
// order, then one line per process (pid, owner, CPU % of one CPU, RSS,
// state, command line cut to the width).
func (v *topView) processTable(lines []string, width int) []string {
	switch {
	case v.procsErr != nil && !errors.Is(v.procsErr, client.ErrProcessesNotOffered):
		return append(lines, "", "processes: "+printable(v.procsErr.Error()))
	case v.procs == nil:
		return lines
	}
	lines = append(lines, "", fmt.Sprintf("%7s %-10s %6s %8s %-8s %s   (%d processes, by %s)", "PID", "USER", "CPU%", "RSS", "STATE", "COMMAND", v.procs.Total, v.sortBy))
	for _, p := range v.procs.Processes {
		cmdline := p.CommandLine
		if cmdline == "" {
			cmdline = "[" + p.Command + "]" // a kernel thread, or a zombie
		}
		l := fmt.Sprintf("%7d %-10s %6.1f %8s %-8s %s", p.PID, trunc(printable(p.Owner), 10), p.CPUUtilization*100, bytesH(float64(p.MemoryUsageBytes)), trunc(p.Status, 8), printable(cmdline))
		lines = append(lines, trunc(l, max(width, 40)))
	}
	return lines
}

// processRows is how many processes fit below the summary in the live
// view (a screenful at most; 0 before the first draw).
func (v *topView) processRows() int {
	if v.rows == 0 {
		return topOnceProcesses
	}
	return max(v.rows-v.summaryLines-2, 1)
}

// totalPoint reports whether utilization has the machine's total (points
// without cpu.logical_number), which find with only cpu.mode matches first.
func (v *topView) totalPoint() bool {
	for _, p := range v.cur.metrics["system.cpu.utilization"] {
		if _, ok := attrOf(p, "cpu.logical_number"); !ok {
			return true
		}
	}
	return false
}

// draw renders the current batch: on a terminal it fits the window (lines
// cut to the width, as many as the height allows) and repaints from the
// top; otherwise it prints the lines once.
func (v *topView) draw() {
	if v == nil || v.cur == nil {
		return
	}
	width, height := 100, 0
	if v.live {
		if w, h, err := term.GetSize(int(os.Stdout.Fd())); err == nil && w > 0 { // a new pty can be 0x0
			width, height = w, h
		}
	}
	lines := v.layout(width)
	var b strings.Builder
	if v.live {
		b.WriteString("\x1b[H") // home; each line clears its rest, then the screen below
		rows := height
		if v.hint != "" && height > 1 {
			rows = height - 1 // the bottom line is the hint's
		}
		v.rows = rows
		if rows > 0 && len(lines) > rows {
			lines = lines[:rows]
		}
		if v.hint != "" && height <= 1 {
			lines = append(lines, v.hint) // height unknown: the hint follows the view
		}
		for i, l := range lines {
			b.WriteString(trunc(l, width))
			b.WriteString("\x1b[K")
			if i < len(lines)-1 {
				b.WriteString("\r\n")
			}
		}
		b.WriteString("\x1b[J")
		if v.hint != "" && height > 1 {
			fmt.Fprintf(&b, "\x1b[%d;1H\x1b[7m%s\x1b[0m\x1b[K", height, trunc(v.hint, width))
		}
	} else {
		for _, l := range lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	_, _ = io.WriteString(v.w, b.String())
}

func bar(frac float64, width int) string {
	frac = min(max(frac, 0), 1)
	n := int(frac*float64(width) + 0.5)
	return "[" + strings.Repeat("|", n) + strings.Repeat(" ", width-n) + "]"
}

func bytesH(v float64) string {
	units := []string{"B", "K", "M", "G", "T", "P"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f%s", v, units[i])
	}
	return fmt.Sprintf("%.1f%s", v, units[i])
}

func duration(sec float64) string {
	d := time.Duration(sec) * time.Second
	days := int(d.Hours()) / 24
	if days > 0 {
		return fmt.Sprintf("%dd %dh", days, int(d.Hours())%24)
	}
	return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
}

// trunc cuts s to n runes.
func trunc(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	return string(r[:n])
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
