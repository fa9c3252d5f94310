package main

import (
	"errors"
	"testing"
	"time"
)

// TestSplitRemote: which argument of cp is the host's, and where its URL
// ends and its path starts.
func TestSplitRemote(t *testing.T) {
	for _, tt := range []struct {
		arg       string
		via       bool
		url, path string
		ok        bool
	}{
		{"wss://h:4433/ahp:/srv/a", false, "wss://h:4433/ahp", "/srv/a", true},
		{"https://[::1]:4433/:/x", false, "https://[::1]:4433/", "/x", true},
		{"https://h:4433:/x", false, "https://h:4433", "/x", true},
		{"https://h/vm:1/:/x", false, "https://h/vm:1/", "/x", true},
		{"wss://h/ahp:/srv/a:/b", false, "wss://h/ahp", "/srv/a:/b", true}, // the first ":/" after the host
		{"wss://h/ahp:srv/a", false, "wss://h/ahp", "srv/a", true},         // relative: refused by cp
		{"wss://h/ahp", false, "wss://h/ahp", "", true},                    // no path: refused by cp
		{"./a://b", false, "", "", false},                                  // a local name holding "://"
		{"://x", false, "", "", false},
		{"/tmp/x", false, "", "", false},
		{":/etc/hosts", true, viaURL, "/etc/hosts", true},
		{"stdio::/etc/hosts", true, viaURL, "/etc/hosts", true},
		{":/etc/hosts", false, "", "", false},
	} {
		url, path, ok := splitRemote(tt.arg, tt.via)
		if url != tt.url || path != tt.path || ok != tt.ok {
			t.Errorf("splitRemote(%q, %v) = %q, %q, %v; want %q, %q, %v", tt.arg, tt.via, url, path, ok, tt.url, tt.path, tt.ok)
		}
	}
}

// TestCPUsage: cp's usage errors exit 2 with their words, before any
// connection is made.
func TestCPUsage(t *testing.T) {
	for _, tt := range []struct {
		a, b, via, transport string
		want                 string
	}{
		{"wss://h/ahp:/a", "wss://h/ahp:/b", "", "", "both arguments are remote: copy between the host and a local path"},
		{"a", "b", "", "", "neither argument is remote: write the host's side as URL:PATH (or :PATH with --via)"},
		{"./a://b", "c", "", "", "neither argument is remote: write the host's side as URL:PATH (or :PATH with --via)"},
		{"wss://h/ahp:srv/a", ".", "", "", `the remote path must be absolute: URL:/PATH, got "srv/a"`},
		{".", "wss://h/ahp", "", "", `the remote path must be absolute: URL:/PATH, got ""`},
		{"wss://h/ahp:/a", ".", "ssh vm sidecar stdio", "", "wss://h/ahp and --via are exclusive: write the remote side as :PATH"},
		{":/a", ".", "", "", "neither argument is remote: write the host's side as URL:PATH (or :PATH with --via)"},
		{"ftp://h:/a", ".", "", "", `invalid URL "ftp://h": scheme must be https:// (transport-io) or wss:// (plain AHP), or http:// or ws:// for a peer without TLS`},
		{"wss://h/ahp:/a", ".", "", "webtransport", "wss://h/ahp: --transport webtransport needs an https:// URL, or wss:// with the path /transport-io (wss://…/ahp is plain AHP)"},
	} {
		if tt.transport == "" {
			tt.transport = "auto"
		}
		cf := connFlags{via: tt.via, transport: tt.transport, timeout: time.Second}
		err := cp(&cf, tt.a, tt.b, false, false)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || ee.err.Error() != tt.want {
			t.Errorf("cp %q %q (via %q): %v\nwant exit 2: %s", tt.a, tt.b, tt.via, err, tt.want)
		}
	}
}
