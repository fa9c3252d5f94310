package transportio

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"

	"github.com/sidecar-dev/sidecar/internal/syncbuf"
)

// TestCongestionLogLines: one line per change of state, with the last
// congestion window and latest RTT and the losses so far;
// application_limited and a repeated state write nothing; the totals of
// all the connection's recorders once the last one closed.
func TestCongestionLogLines(t *testing.T) {
	var out syncbuf.Buffer
	tr := CongestionLog(&out)(context.Background(), false, quic.ConnectionIDFromBytes([]byte{0x39, 0x03, 0xd7, 0x70, 0xff}))
	r := tr.AddProducer()
	other := tr.AddProducer() // a second producer of the same connection
	other.RecordEvent(qlog.PacketDropped{Trigger: qlog.PacketDropDOSPrevention})
	r.RecordEvent(qlog.CongestionStateUpdated{State: qlog.CongestionStateSlowStart})
	r.RecordEvent(qlog.MetricsUpdated{CongestionWindow: 40960, LatestRTT: 65432 * time.Microsecond})
	r.RecordEvent(qlog.CongestionStateUpdated{State: qlog.CongestionStateApplicationLimited})
	r.RecordEvent(qlog.CongestionStateUpdated{State: qlog.CongestionStateSlowStart})
	r.RecordEvent(qlog.MetricsUpdated{SmoothedRTT: time.Second}) // neither window nor latest RTT
	r.RecordEvent(qlog.CongestionStateUpdated{State: qlog.CongestionStateCongestionAvoidance})
	r.RecordEvent(qlog.PacketLost{})
	r.RecordEvent(qlog.PacketLost{})
	r.RecordEvent(qlog.CongestionStateUpdated{State: qlog.CongestionStateRecovery})
	r.RecordEvent(qlog.PacketDropped{Trigger: qlog.PacketDropDOSPrevention})
	r.RecordEvent(qlog.PacketDropped{Trigger: qlog.PacketDropDuplicate}) // not counted
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); strings.Contains(got, "closed") {
		t.Fatalf("totals written while a recorder is open:\n%s", got)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^quic cc \d\d:\d\d:\d\d\.\d\d\d server 3903d770 slow_start cwnd=0 latest_rtt=0s lost=0
quic cc \d\d:\d\d:\d\d\.\d\d\d server 3903d770 congestion_avoidance cwnd=40960 latest_rtt=65.4ms lost=0
quic cc \d\d:\d\d:\d\d\.\d\d\d server 3903d770 recovery cwnd=40960 latest_rtt=65.4ms lost=2
quic cc \d\d:\d\d:\d\d\.\d\d\d server 3903d770 closed lost=2 dropped_unprocessed=2
$`)
	if got := out.String(); !want.MatchString(got) {
		t.Fatalf("log:\n%s", got)
	}
}

// TestCongestionLogWebTransport: with CongestionLogEnv set, both ends of a
// real WebTransport session (QUICConfig) log their slow start.
func TestCongestionLogWebTransport(t *testing.T) {
	var out syncbuf.Buffer
	prev := congestionLogOutput
	congestionLogOutput = &out
	t.Cleanup(func() { congestionLogOutput = prev })
	t.Setenv("QLOGDIR", "")
	t.Setenv(CongestionLogEnv, "1")
	wtCallPair(t, &Handlers{})
	got := out.String()
	for _, role := range []string{"client", "server"} {
		if !regexp.MustCompile(`(?m)^quic cc \S+ ` + role + ` [0-9a-f]+ slow_start cwnd=`).MatchString(got) {
			t.Errorf("no %s slow_start line in:\n%s", role, got)
		}
	}
	if strings.Contains(got, "application_limited") {
		t.Errorf("application_limited logged:\n%s", got)
	}
}
