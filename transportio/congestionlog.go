package transportio

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
)

// CongestionLogEnv names the environment variable that, set to anything
// but empty (and QLOGDIR unset), makes each QUIC connection of QUICConfig
// (and bench/quicrelay's) write its congestion controller's state changes
// to standard error: CongestionLog. A developer's tool, like QLOGDIR, but
// cheap enough to leave on through a benchmark without changing it.
const CongestionLogEnv = "QUIC_CC_LOG"

// congestionLogOutput is where QUICConfig's congestion log goes (tests).
var congestionLogOutput io.Writer = os.Stderr

// CongestionLog returns a quic.Config Tracer that writes to w one line per
// change of a connection's congestion state (slow_start,
// congestion_avoidance, recovery; application_limited, which quic-go
// reports on most acknowledgements of a sender that does not fill its
// window, is left out), with the congestion window (bytes) and latest round
// trip of the last metrics update before it and the packets declared lost
// so far:
//
//	quic cc 09:12:01.123 server 3903d770 congestion_avoidance cwnd=40960 latest_rtt=65.4ms lost=0
//
// (wall clock, the role, the first 4 bytes of the connection ID in hex).
// That line is quic-go's hybrid slow start ending at the first window of a
// direction that only carried acknowledgements and credits (bench/README.md).
// When the connection ends, a last line gives its totals: the packets it
// declared lost, and the packets it received but dropped because its
// connection had 256 waiting to be processed (quic-go's own bound: the
// receiving process was behind; the sender sees them as losses):
//
//	quic cc 09:12:11.456 server 3903d770 closed lost=12 dropped_unprocessed=431
//
// (a process that exits before quic-go closed the connection's trace, as
// `sidecar forward` on SIGTERM, writes no totals: the peer's show the same
// packets the other way).
//
// Lines of concurrent connections do not interleave.
func CongestionLog(w io.Writer) func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
	var mu sync.Mutex // one line at a time on w
	return func(_ context.Context, isClient bool, id quic.ConnectionID) qlogwriter.Trace {
		role := "server"
		if isClient {
			role = "client"
		}
		b := id.Bytes()
		return &ccTrace{w: w, mu: &mu, tag: fmt.Sprintf("%s %x", role, b[:min(len(b), 4)])}
	}
}

type ccTrace struct {
	w   io.Writer
	mu  *sync.Mutex // w's, shared by the connections of one CongestionLog
	tag string

	// tmu guards the rest: the connection's totals over its recorders
	// (quic-go may add more than one producer to a trace; the last to
	// close writes them) and each recorder's state.
	tmu       sync.Mutex
	producers int
	lost      int
	dropped   int // received, dropped unprocessed
}

func (t *ccTrace) AddProducer() qlogwriter.Recorder {
	t.tmu.Lock()
	t.producers++
	t.tmu.Unlock()
	return &ccRecorder{t: t}
}

func (t *ccTrace) SupportsSchemas(string) bool { return true }

// line writes one line for the connection.
func (t *ccTrace) line(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "quic cc %s %s "+format+"\n", append([]any{time.Now().Format("15:04:05.000"), t.tag}, args...)...)
}

// ccRecorder keeps what the next state line reports (under t.tmu).
type ccRecorder struct {
	t      *ccTrace
	cwnd   int
	rtt    time.Duration
	state  qlog.CongestionState
	said   bool // state holds the last state written
	closed bool
}

func (r *ccRecorder) RecordEvent(ev qlogwriter.Event) {
	t := r.t
	t.tmu.Lock()
	defer t.tmu.Unlock()
	switch e := ev.(type) {
	case qlog.MetricsUpdated:
		if e.CongestionWindow != 0 {
			r.cwnd = e.CongestionWindow
		}
		if e.LatestRTT != 0 {
			r.rtt = e.LatestRTT
		}
	case qlog.PacketLost:
		t.lost++
	case qlog.PacketDropped:
		if e.Trigger == qlog.PacketDropDOSPrevention {
			t.dropped++
		}
	case qlog.CongestionStateUpdated:
		if e.State == qlog.CongestionStateApplicationLimited || r.said && e.State == r.state {
			return
		}
		r.state, r.said = e.State, true
		t.line("%s cwnd=%d latest_rtt=%v lost=%d", e.State, r.cwnd, r.rtt.Round(100*time.Microsecond), t.lost)
	}
}

// Close writes the connection's totals once its last recorder closed.
func (r *ccRecorder) Close() error {
	t := r.t
	t.tmu.Lock()
	defer t.tmu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	if t.producers--; t.producers == 0 {
		t.line("closed lost=%d dropped_unprocessed=%d", t.lost, t.dropped)
	}
	return nil
}
