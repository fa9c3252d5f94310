package client

import "time"

// SetTuneRTT sets the round trip t's window tuning compares with, so
// tests can make every window count as consumed fast (a long one) or
// never (zero disables growth by making no window fast enough).
func SetTuneRTT(t *TCPConn, d time.Duration) {
	t.tune.mu.Lock()
	t.tune.rtt = d
	t.tune.mu.Unlock()
}

// ReadBufferSize is t.readBufferSize: ReadFrom's next buffer size for a
// wanted one.
func ReadBufferSize(t *TCPConn, want int) int { return t.readBufferSize(want) }

// Unreleased is what t has received but not released yet (UTF-16 bytes).
func Unreleased(t *TCPConn) int64 {
	in, _ := t.sub.parts()
	received, released := in.Counters()
	return int64(received - released)
}

// LastLines is lastLines, for tests.
var LastLines = lastLines
