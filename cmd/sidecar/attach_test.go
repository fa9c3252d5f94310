package main

import "testing"

// TestDisposedMessage: attach says that the terminal it showed was
// disposed of, by whom when the host says (terminal/exited disposedBy),
// and nothing when it ended on its own or by our own dispose.
func TestDisposedMessage(t *testing.T) {
	const uri = "ahp-terminal:/t-1"
	for _, tc := range []struct {
		name, by, self string
		gone           bool
		want           string
	}{
		{"by another client", "cli-9", "cli-1", true, "terminal ahp-terminal:/t-1 was disposed by client cli-9"},
		{"by another client, name escaped", "x\x1b]0;t\a", "cli-1", true, `terminal ahp-terminal:/t-1 was disposed by client x\x1b]0;t\a`},
		{"host does not say who", "", "cli-1", true, "terminal ahp-terminal:/t-1 was disposed"},
		{"by this client", "cli-1", "cli-1", false, ""},
		{"exited on its own", "", "cli-1", false, ""},
	} {
		if got := disposedMessage(uri, tc.by, tc.self, tc.gone); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
