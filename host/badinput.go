package host

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/internal/printable"
)

// peerText is s, supplied by a peer, for a log line: control characters
// escaped and cut to printable.MaxLogBytes, with its length when cut.
func peerText(s string) string { return printable.Log(s) }

// badKind is what logBad counts under: a message, its level and the
// error code (never peer text, so the kinds are few).
type badKind struct {
	msg   string
	level hclog.Level
	code  int64
}

// logBad logs refused input from the client at level, at a bounded rate
// (internal/lograte): per connection and kind (msg and the value that
// follows "code" in args), the first within a second in full, the others
// counted and logged once when the second ends ("msg: more like it",
// with count), or when the connection ends. A client sending bad input
// in a loop costs the log two lines a second per kind, not one per
// message.
func (c *conn) logBad(level hclog.Level, msg string, args ...any) {
	k := badKind{msg: msg, level: level}
	for i := 0; i+1 < len(args); i += 2 {
		if code, ok := args[i+1].(int64); ok && args[i] == "code" {
			k.code = code
		}
	}
	if c.bad.First(k, 0, func(n int, window time.Duration) { c.logMore(k, n) }) {
		c.log.Log(level, msg, append([]any{"client", c.id()}, args...)...)
	}
}

func (c *conn) logMore(k badKind, n int) {
	args := []any{"client", c.id(), "count", n}
	if k.code != 0 {
		args = append(args, "code", k.code)
	}
	c.log.Log(k.level, k.msg+": more like it", args...)
}

// flushBadLog logs the counts of refused input not logged yet (the
// connection ended) and stops the windows' timers.
func (c *conn) flushBadLog() { c.bad.Stop(c.logMore) }
