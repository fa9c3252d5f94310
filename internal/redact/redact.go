// Package redact keeps credentials out of log output: the value of every
// token= or ticket= parameter (a query string: ?token=, &ticket=; also a
// key=value pair of a text log line) and the literal secrets it is
// given (the daemon's token) are replaced with Redacted.
package redact

import (
	"bytes"
	"io"
	"regexp"
	"sync"
)

// Redacted replaces what is taken out.
const Redacted = "REDACTED"

// MinSecretBytes is the shortest literal secret replaced wherever it
// appears: a shorter one would take ordinary words out of every line
// (a token that short is no secret anyway).
const MinSecretBytes = 8

// param matches a credential parameter and its value: the value ends
// where a query parameter, a quoted string or a JSON escape (\u0026 for
// &) would.
var param = regexp.MustCompile(`(?i)(token|ticket)=[^&;\s"'\\]+`)

// Text returns s with the values of token= and ticket= parameters and
// every secret (MinSecretBytes or longer) replaced with Redacted.
func Text(s string, secrets ...string) string {
	return string(redactBytes([]byte(s), secrets))
}

func redactBytes(b []byte, secrets []string) []byte {
	out := param.ReplaceAll(b, []byte("${1}="+Redacted))
	for _, sec := range secrets {
		if len(sec) >= MinSecretBytes {
			out = bytes.ReplaceAll(out, []byte(sec), []byte(Redacted))
		}
	}
	return out
}

// Writer is an io.Writer that redacts each Write before passing it on.
// A log line must reach it in one Write (hclog writes each record so);
// a credential split over two Writes would pass. Its methods may be
// called from any goroutine.
type Writer struct {
	w       io.Writer
	mu      sync.Mutex
	secrets []string
}

// NewWriter returns a Writer onto w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// AddSecret makes w replace sec (when MinSecretBytes or longer) from now on.
func (w *Writer) AddSecret(sec string) {
	w.mu.Lock()
	w.secrets = append(w.secrets, sec)
	w.mu.Unlock()
}

// Write writes p redacted; it reports len(p) when all of it was written.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	out := redactBytes(p, w.secrets)
	w.mu.Unlock()
	if _, err := w.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
