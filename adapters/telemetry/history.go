package telemetry

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/disk"
	"github.com/shirou/gopsutil/v4/mem"
	"github.com/shirou/gopsutil/v4/net"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/rpc"
)

// History is the host's ring of recent summary samples (CPU, memory,
// network, disk), one per interval for the last HistoryWindow, so that a
// client that comes later can draw the last minutes at once
// (telemetry/history, our extension: docs/protocol.md "Telemetry
// history"). It samples whether or not anyone subscribes; it is not a
// replay of ahp-otlp://metrics, which stays live only (seed 000: a
// telemetry subscription recovers live).
type History struct {
	interval time.Duration
	size     int // the ring's bound, in points
	read     func() (counters, error)
	now      func() time.Time

	mu     sync.Mutex
	ring   []HistoryPoint // at most cap(ring); oldest at next once full
	next   int
	prev   counters
	prevAt time.Time
	primed bool

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// HistoryWindow is how far back the history reaches, and MaxHistoryPoints
// the most points it keeps (a short telemetry.interval keeps less time).
const (
	HistoryWindow    = 15 * time.Minute
	MaxHistoryPoints = 3600
)

// HistoryPoint is one point of the history: the machine over the interval
// that ends at TimeUnixNano. Rates are bytes per second.
type HistoryPoint struct {
	TimeUnixNano                       int64
	CPUUtilization                     float64 // busy share of all CPUs, 0 to 1
	MemoryUsageBytes, MemoryLimitBytes uint64
	NetworkReceive, NetworkTransmit    float64 // every interface but loopback
	DiskRead, DiskWrite                float64 // whole block devices
}

// counters are the cumulative figures one reading takes.
type counters struct {
	cpuBusy, cpuTotal     float64 // seconds, all CPUs
	memUsed, memLimit     uint64  // bytes
	netRx, netTx          uint64  // bytes, every interface but loopback
	diskRead, diskWritten uint64  // bytes, whole block devices
}

// NewHistory returns a History sampling every interval (started by
// Start), keeping min(HistoryWindow/interval, MaxHistoryPoints) points.
func NewHistory(interval time.Duration) *History {
	n := max(1, min(int(HistoryWindow/max(interval, time.Millisecond)), MaxHistoryPoints))
	return &History{
		interval: interval, size: n, read: readCounters, now: time.Now,
		ring: make([]HistoryPoint, 0, n),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// Window is how far back the history reaches once full.
func (h *History) Window() time.Duration { return time.Duration(h.size) * h.interval }

// Start starts sampling; Close stops it and waits.
func (h *History) Start() {
	go func() {
		defer close(h.done)
		t := time.NewTicker(h.interval)
		defer t.Stop()
		h.sample()
		for {
			select {
			case <-t.C:
				h.sample()
			case <-h.stop:
				return
			}
		}
	}()
}

// Close stops sampling and waits for the sampler (Start must have run).
// It may be called more than once (a host's shutdown may be).
func (h *History) Close() {
	h.stopOnce.Do(func() { close(h.stop) })
	<-h.done
}

// sample takes one reading; from the second on, each adds a point: the
// rates over the time since the one before. A failed reading adds none.
func (h *History) sample() {
	c, err := h.read()
	if err != nil {
		return
	}
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.primed {
		if dt := now.Sub(h.prevAt).Seconds(); dt > 0 {
			p := HistoryPoint{
				TimeUnixNano:     now.UnixNano(),
				MemoryUsageBytes: c.memUsed,
				MemoryLimitBytes: c.memLimit,
				NetworkReceive:   rate(h.prev.netRx, c.netRx, dt),
				NetworkTransmit:  rate(h.prev.netTx, c.netTx, dt),
				DiskRead:         rate(h.prev.diskRead, c.diskRead, dt),
				DiskWrite:        rate(h.prev.diskWritten, c.diskWritten, dt),
			}
			if total := c.cpuTotal - h.prev.cpuTotal; total > 0 {
				p.CPUUtilization = min(max((c.cpuBusy-h.prev.cpuBusy)/total, 0), 1)
			}
			h.push(p)
		}
	}
	h.prev, h.prevAt, h.primed = c, now, true
}

// rate is a counter's increase per second; a counter that went back (a
// device gone, a wrap) counts as no traffic.
func rate(before, after uint64, dt float64) float64 {
	if after < before {
		return 0
	}
	return float64(after-before) / dt
}

func (h *History) push(p HistoryPoint) {
	if len(h.ring) < h.size {
		h.ring = append(h.ring, p)
		return
	}
	h.ring[h.next] = p
	h.next = (h.next + 1) % len(h.ring)
}

// Points returns the points after since (all when since is 0), oldest
// first.
func (h *History) Points(since int64) []HistoryPoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HistoryPoint, 0, len(h.ring))
	for i := range h.ring {
		p := h.ring[(h.next+i)%len(h.ring)]
		if p.TimeUnixNano > since {
			out = append(out, p)
		}
	}
	return out
}

// Request is telemetry/history.
func (h *History) Request() adapters.Request {
	return adapters.Request{Method: rpc.MethodTelemetryHistory, Permission: auth.TelemetryMetrics, Serve: func(_ context.Context, _ adapters.Caller, raw json.RawMessage) (any, *rpc.Error) {
		var p rpc.TelemetryHistoryParams
		if len(raw) > 0 && string(raw) != "null" {
			if e := rpc.DecodeParams(raw, &p); e != nil {
				return nil, e
			}
		}
		return historyResult(h.interval, h.Points(p.SinceUnixNano)), nil
	}}
}

// historyResult lays pts out in columns, CPU to 0.001, rates to whole
// bytes per second: 900 points (15 minutes at 1 s) take about 60 KB.
func historyResult(interval time.Duration, pts []HistoryPoint) rpc.TelemetryHistoryResult {
	n := len(pts)
	r := rpc.TelemetryHistoryResult{
		IntervalMs:   interval.Milliseconds(),
		TimeUnixNano: make([]int64, n), CPUUtilization: make([]float64, n),
		MemoryUsageBytes: make([]uint64, n), MemoryLimitBytes: make([]uint64, n),
		NetworkReceive: make([]uint64, n), NetworkTransmit: make([]uint64, n),
		DiskRead: make([]uint64, n), DiskWrite: make([]uint64, n),
	}
	for i, p := range pts {
		r.TimeUnixNano[i] = p.TimeUnixNano
		r.CPUUtilization[i] = math.Round(p.CPUUtilization*1000) / 1000
		r.MemoryUsageBytes[i], r.MemoryLimitBytes[i] = p.MemoryUsageBytes, p.MemoryLimitBytes
		r.NetworkReceive[i], r.NetworkTransmit[i] = uint64(math.Round(p.NetworkReceive)), uint64(math.Round(p.NetworkTransmit))
		r.DiskRead[i], r.DiskWrite[i] = uint64(math.Round(p.DiskRead)), uint64(math.Round(p.DiskWrite))
	}
	return r
}

// readCounters takes one reading of the machine with gopsutil.
func readCounters() (counters, error) {
	var c counters
	t, err := cpu.Times(false)
	if err != nil || len(t) == 0 {
		return c, err
	}
	idle := t[0].Idle + t[0].Iowait
	c.cpuTotal = t[0].User + t[0].System + t[0].Nice + t[0].Iowait + t[0].Irq + t[0].Softirq + t[0].Steal + t[0].Idle
	c.cpuBusy = c.cpuTotal - idle
	if vm, err := mem.VirtualMemory(); err == nil {
		c.memUsed, c.memLimit = vm.Used, vm.Total
	}
	if nics, err := net.IOCounters(true); err == nil {
		for _, n := range nics {
			if n.Name != "lo" {
				c.netRx += n.BytesRecv
				c.netTx += n.BytesSent
			}
		}
	}
	if io, err := disk.IOCounters(); err == nil {
		whole := wholeDisks()
		for name, d := range io {
			if whole != nil && !whole[name] || strings.HasPrefix(name, "loop") || strings.HasPrefix(name, "ram") {
				continue
			}
			c.diskRead += d.ReadBytes
			c.diskWritten += d.WriteBytes
		}
	}
	return c, nil
}

// wholeDisks are the whole block devices (/sys/block), so that a
// partition's bytes are not counted twice; nil if unknown.
func wholeDisks() map[string]bool {
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		return nil
	}
	m := make(map[string]bool, len(ents))
	for _, e := range ents {
		m[e.Name()] = true
	}
	return m
}
