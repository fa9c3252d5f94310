package telemetry

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestHistoryPoints: each reading after the first adds a point of rates
// over the time since the one before, exactly; a failed reading adds
// none; a counter that went back counts as no traffic; the ring keeps
// its newest points, oldest first, and Points filters by time.
func TestHistoryPoints(t *testing.T) {
	h := NewHistory(HistoryWindow / 3) // room for 3 points
	if h.size != 3 || h.Window() != HistoryWindow {
		t.Fatalf("ring of %d, window %v", h.size, h.Window())
	}
	t0 := time.Unix(1_800_000_000, 0)
	readings := []struct {
		at  time.Duration
		c   counters
		err error
	}{
		{0, counters{cpuBusy: 10, cpuTotal: 100, memUsed: 5, memLimit: 10, netRx: 1000, netTx: 2000, diskRead: 0, diskWritten: 0}, nil},
		{2 * time.Second, counters{cpuBusy: 11.5, cpuTotal: 102, memUsed: 6, memLimit: 10, netRx: 3000, netTx: 2000, diskRead: 4096, diskWritten: 8192}, nil},
		{3 * time.Second, counters{}, errors.New("no /proc")},
		{4 * time.Second, counters{cpuBusy: 11.5, cpuTotal: 104, memUsed: 7, memLimit: 10, netRx: 100, netTx: 2200, diskRead: 4096, diskWritten: 8192}, nil},
		{5 * time.Second, counters{cpuBusy: 12.5, cpuTotal: 105, memUsed: 8, memLimit: 10, netRx: 200, netTx: 2200, diskRead: 4096, diskWritten: 8192}, nil},
		{6 * time.Second, counters{cpuBusy: 13, cpuTotal: 106, memUsed: 9, memLimit: 10, netRx: 300, netTx: 2200, diskRead: 4096, diskWritten: 8192}, nil},
	}
	i := 0
	h.read = func() (counters, error) { return readings[i].c, readings[i].err }
	h.now = func() time.Time { return t0.Add(readings[i].at) }
	for i = range readings {
		h.sample()
	}
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	want := []HistoryPoint{
		{TimeUnixNano: at(4 * time.Second), CPUUtilization: 0, MemoryUsageBytes: 7, MemoryLimitBytes: 10, NetworkReceive: 0, NetworkTransmit: 100},
		{TimeUnixNano: at(5 * time.Second), CPUUtilization: 1, MemoryUsageBytes: 8, MemoryLimitBytes: 10, NetworkReceive: 100},
		{TimeUnixNano: at(6 * time.Second), CPUUtilization: 0.5, MemoryUsageBytes: 9, MemoryLimitBytes: 10, NetworkReceive: 100},
	}
	if got := h.Points(0); !reflect.DeepEqual(got, want) {
		t.Errorf("points\n%+v\nwant\n%+v", got, want)
	}
	if got := h.Points(at(4 * time.Second)); !reflect.DeepEqual(got, want[1:]) {
		t.Errorf("points after 4 s\n%+v\nwant\n%+v", got, want[1:])
	}
	// The first point, before the ring turned: 1.5 of 2 CPU-seconds busy,
	// 1000 B/s received, 2048 and 4096 B/s of disk.
	h2 := NewHistory(time.Second)
	i = 0
	h2.read, h2.now = h.read, h.now
	for i = range 2 {
		h2.sample()
	}
	first := HistoryPoint{TimeUnixNano: at(2 * time.Second), CPUUtilization: 0.75, MemoryUsageBytes: 6, MemoryLimitBytes: 10, NetworkReceive: 1000, DiskRead: 2048, DiskWrite: 4096}
	if got := h2.Points(0); len(got) != 1 || got[0] != first {
		t.Errorf("first point %+v, want %+v", got, first)
	}
	r := historyResult(time.Second, []HistoryPoint{{TimeUnixNano: 7, CPUUtilization: 0.12345, NetworkReceive: 10.6, DiskWrite: 0.4}})
	if r.IntervalMs != 1000 || r.TimeUnixNano[0] != 7 || r.CPUUtilization[0] != 0.123 || r.NetworkReceive[0] != 11 || r.DiskWrite[0] != 0 || len(r.MemoryLimitBytes) != 1 {
		t.Errorf("columns %+v", r)
	}
}

// TestHistoryBound: the ring never holds more than
// min(HistoryWindow/interval, MaxHistoryPoints) points.
func TestHistoryBound(t *testing.T) {
	for _, c := range []struct {
		interval time.Duration
		want     int
	}{{time.Second, 900}, {10 * time.Millisecond, MaxHistoryPoints}, {time.Hour, 1}} {
		h := NewHistory(c.interval)
		n := 0.0
		now := time.Unix(0, 0)
		h.read = func() (counters, error) { n++; return counters{cpuBusy: n, cpuTotal: 2 * n}, nil }
		h.now = func() time.Time { now = now.Add(c.interval); return now }
		for range c.want + 50 {
			h.sample()
		}
		if got := len(h.Points(0)); got != c.want {
			t.Errorf("interval %v: %d points, want %d", c.interval, got, c.want)
		}
	}
}
