// Package printable makes peer-supplied text safe to show on a person's
// terminal.
package printable

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// String is s for a line or a table on a person's terminal: control
// characters (C0, DEL, C1: an escape sequence in a terminal's title or a
// SOCKS destination would clear or retitle the screen of whoever reads
// it, a tab or \r would break a table's columns) and invalid UTF-8 are
// written as Go escapes (\x1b, \u009b, \t, \xff). Clean text is returned
// as it is, without allocating.
func String(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b []byte
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b = fmt.Appendf(b, `\x%02x`, s[i])
		case unicode.IsControl(r):
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u009b', '\t'
			b = append(b, q[1:len(q)-1]...)
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}

// Truncated is String of at most max bytes of s, cut at a character
// boundary, followed by "…(N bytes)" giving s's length when it was cut:
// peer-supplied text in a log line, which must not grow with the
// peer's input (a 1,000,000-character clientId repeated in every line).
func Truncated(s string, max int) string {
	if len(s) <= max {
		return String(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return String(s[:cut]) + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// MaxLogBytes bounds each piece of peer-supplied text in a log line (a
// method name, a channel URI, an Origin header, an error quoting the
// input): the log must not grow with what a peer sends.
const MaxLogBytes = 200

// Log is peer-supplied text s for a log line: Truncated to MaxLogBytes.
func Log(s string) string { return Truncated(s, MaxLogBytes) }
