package transportio

import (
	"strings"
	"testing"
)

// TestReasonFromBody: the reason after "NNN word: " on the body's first
// line, bounded and printable, or "".
func TestReasonFromBody(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"401 unauthorized: expired\n", "expired"},
		{"401 unauthorized: revoked", "revoked"},
		{"503 authorize failed: try again\nmore\n", "try again"},
		{"no colon here\n", ""},
		{"", ""},
		{"401 unauthorized: bad\x01byte\n", ""},
		{"401 unauthorized: " + strings.Repeat("x", 500), strings.Repeat("x", MaxReasonBytes)},
	} {
		if got := ReasonFromBody(strings.NewReader(c.body)); got != c.want {
			t.Errorf("ReasonFromBody(%q) = %q, want %q", c.body, got, c.want)
		}
	}
	if got := ReasonFromBody(nil); got != "" {
		t.Errorf("nil body: %q", got)
	}
}
