package tcp

import (
	"testing"
	"time"
)

// TestOpenFailLog: a client's failures with one code are logged in full
// once per window; the rest of the window is counted and logged once as
// "failed more times" with the count; another code or client is its own;
// after the window the next failure is logged in full again; stop logs
// what was counted.
func TestOpenFailLog(t *testing.T) {
	type line struct {
		msg  string
		args []any
	}
	lines := make(chan line, 16)
	log := func(msg string, args ...any) { lines <- line{msg, args} }
	l := &openFailLog{window: 20 * time.Millisecond}
	if !l.first("c1", -32009, log) {
		t.Fatal("the first failure was not to be logged")
	}
	for range 5 {
		if l.first("c1", -32009, log) {
			t.Fatal("a failure within the window was to be logged")
		}
	}
	if !l.first("c1", -32012, log) || !l.first("c2", -32009, log) {
		t.Fatal("another code or client shares the window")
	}
	// Only c1's -32009 window counted anything: one summary, when it ends.
	select {
	case ln := <-lines:
		if ln.msg != "createTcpConnection failed more times" || ln.args[1] != "c1" || ln.args[3] != int64(-32009) || ln.args[5] != 5 {
			t.Errorf("summary %q %v, want c1 -32009 counted 5", ln.msg, ln.args)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no summary within 10 s")
	}
	// The window has ended (its summary came): the next one is in full;
	// its window lasts until stop.
	l.window = time.Hour
	if !l.first("c1", -32009, log) {
		t.Error("a failure after the window was not to be logged")
	}
	l.first("c1", -32009, log)
	l.stop(log)
	select {
	case ln := <-lines:
		if ln.args[5].(int) != 1 {
			t.Errorf("stop logged %v, want a count of 1", ln.args)
		}
	default:
		t.Error("stop did not log the count")
	}
	if !l.first("c1", -32009, log) {
		t.Error("after stop every failure is logged")
	}
}
