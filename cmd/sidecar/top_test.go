package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/sidecar-dev/sidecar/rpc"
)

// point is a data point of v with string attributes kv (key, value, ...).
func point(v float64, kv ...string) *metricspb.NumberDataPoint {
	p := &metricspb.NumberDataPoint{Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: v}}
	for i := 0; i+1 < len(kv); i += 2 {
		p.Attributes = append(p.Attributes, &commonpb.KeyValue{Key: kv[i],
			Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: kv[i+1]}}})
	}
	return p
}

// TestRateTable: the DISK table shows each device's read and write rates
// from two samples one second apart, and "-" before there are two.
func TestRateTable(t *testing.T) {
	sample := func(at time.Time, read, write float64) *snapshotView {
		return &snapshotView{at: at, metrics: map[string][]*metricspb.NumberDataPoint{
			"system.disk.io": {
				point(read, "system.device", "sda", "disk.io.direction", "read"),
				point(write, "system.device", "sda", "disk.io.direction", "write"),
			},
		}}
	}
	t0 := time.Unix(1000, 0)
	v := &topView{cur: sample(t0, 1000, 0)}
	args := []string{"DISK", "READ/s", "WRITE/s", "system.disk.io", "system.device", "disk.io.direction", "read", "write"}
	got := v.rateTable(nil, args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7])
	want := []string{"", "DISK                   READ/s      WRITE/s", "sda                         -            -"}
	if !slices.Equal(got, want) {
		t.Fatalf("one sample:\n%q\nwant\n%q", got, want)
	}
	v.prev, v.cur = v.cur, sample(t0.Add(time.Second), 1000+2048, 512)
	got = v.rateTable(nil, args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7])
	want[2] = "sda                      2.0K         512B"
	if !slices.Equal(got, want) {
		t.Fatalf("two samples:\n%q\nwant\n%q", got, want)
	}
}

// TestTopShowsSkipped: the first line says how many samples the host
// skipped for us (the batches' "skipped", summed), and nothing when none.
func TestTopShowsSkipped(t *testing.T) {
	s := &snapshotView{at: time.Unix(1000, 0).UTC(), res: map[string]string{"host.name": "h1"}, metrics: map[string][]*metricspb.NumberDataPoint{}}
	v := &topView{cur: s}
	if got := v.layout(100)[0]; got != "h1  up 0h 00m  load 0.00 0.00 0.00  "+s.at.Format("15:04:05") {
		t.Fatalf("first line %q", got)
	}
	v.skipped = 6
	if got := v.layout(100)[0]; !strings.HasSuffix(got, "  (6 samples skipped)") {
		t.Fatalf("first line %q, want it to end with the samples skipped", got)
	}
}

// TestTopHistory: history keeps the host's points once each, in order,
// at most maxHistory; sparklines scale a share to 1 and a rate to the
// highest value shown, newest at the right, one cell per point.
func TestTopHistory(t *testing.T) {
	var h history
	res := &rpc.TelemetryHistoryResult{
		IntervalMs:     1000,
		TimeUnixNano:   []int64{1, 2, 3},
		CPUUtilization: []float64{0, 0.5, 1}, MemoryUsageBytes: []uint64{1, 2, 4}, MemoryLimitBytes: []uint64{4, 4, 4},
		NetworkReceive: []uint64{0, 100, 50}, NetworkTransmit: []uint64{0, 100, 50},
		DiskRead: []uint64{0, 0, 0}, DiskWrite: []uint64{0, 0, 8},
	}
	h.add(res)
	h.add(res) // the same points again: kept once
	if len(h.at) != 3 || h.last() != 3 || h.mem[2] != 1 || h.net[1] != 200 {
		t.Fatalf("history %+v", h)
	}
	if got, top := sparkline(h.cpu, 10, true); got != "▁▅█" || top != 1 {
		t.Errorf("CPU sparkline %q (top %v)", got, top)
	}
	if got, top := sparkline(h.net, 2, false); got != "█▅" || top != 200 {
		t.Errorf("network sparkline, 2 cells: %q (top %v)", got, top)
	}
	big := &rpc.TelemetryHistoryResult{}
	for i := range maxHistory + 10 {
		big.TimeUnixNano = append(big.TimeUnixNano, int64(10+i))
		big.CPUUtilization = append(big.CPUUtilization, 0)
		big.MemoryUsageBytes = append(big.MemoryUsageBytes, 0)
		big.MemoryLimitBytes = append(big.MemoryLimitBytes, 1)
		big.NetworkReceive = append(big.NetworkReceive, 0)
		big.NetworkTransmit = append(big.NetworkTransmit, 0)
		big.DiskRead = append(big.DiskRead, 0)
		big.DiskWrite = append(big.DiskWrite, 0)
	}
	h.add(big)
	if len(h.at) != maxHistory || h.last() != int64(10+maxHistory+9) || len(h.cpu) != maxHistory {
		t.Errorf("after %d points more: %d kept, last %d", maxHistory+10, len(h.at), h.last())
	}
	// Columns of unequal length (a hostile host): the points without
	// every figure are dropped, nothing panics.
	h2 := history{}
	h2.add(&rpc.TelemetryHistoryResult{TimeUnixNano: []int64{1, 2}, CPUUtilization: []float64{0.5}})
	if len(h2.at) != 0 {
		t.Errorf("points without every column kept: %+v", h2)
	}
}
