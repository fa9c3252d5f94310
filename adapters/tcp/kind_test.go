package tcp

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sidecar-dev/sidecar/internal/lograte"
)

// TestOpenFailLog: a client's failures with one code are logged in full
// once per window; the rest of the window is counted and logged once as
// "failed more times" with the count, exactly when the window
// (lograte.DefaultWindow) ends; another code or client is its own;
// after the window the next failure is logged in full again; stop logs
// what was counted. It runs in a synctest bubble: the window is the
// production one, and no failure can fall out of it on a slow machine.
func TestOpenFailLog(t *testing.T) {
	synctest.Test(t, testOpenFailLog)
}

func testOpenFailLog(t *testing.T) {
	type line struct {
		msg  string
		args []any
	}
	lines := make(chan line, 16)
	log := func(msg string, args ...any) { lines <- line{msg, args} }
	noLine := func(when string) {
		t.Helper()
		synctest.Wait() // the window timers that are due have run
		select {
		case ln := <-lines:
			t.Fatalf("%s: logged %q %v", when, ln.msg, ln.args)
		default:
		}
	}
	var l openFailLog
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
	time.Sleep(lograte.DefaultWindow - time.Nanosecond)
	noLine("before the window ended")
	time.Sleep(time.Nanosecond)
	synctest.Wait()
	select {
	case ln := <-lines:
		if ln.msg != "createTcpConnection failed more times" || ln.args[1] != "c1" || ln.args[3] != int64(-32009) || ln.args[5] != 5 || ln.args[7] != "1s" {
			t.Errorf("summary %q %v, want c1 -32009 counted 5 within 1s", ln.msg, ln.args)
		}
	default:
		t.Fatal("no summary when the window ended")
	}
	noLine("the windows that counted nothing ended")
	// The window has ended: the next one is in full; its window lasts
	// until stop.
	if !l.first("c1", -32009, log) {
		t.Error("a failure after the window was not to be logged")
	}
	l.first("c1", -32009, log)
	time.Sleep(lograte.DefaultWindow / 2)
	l.stop(log)
	select {
	case ln := <-lines:
		if ln.args[5].(int) != 1 {
			t.Errorf("stop logged %v, want a count of 1", ln.args)
		}
	default:
		t.Error("stop did not log the count")
	}
	time.Sleep(lograte.DefaultWindow)
	noLine("after stop, when the stopped window would have ended")
	if !l.first("c1", -32009, log) {
		t.Error("after stop every failure is logged")
	}
}
