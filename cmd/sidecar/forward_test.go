package main

import "testing"

// TestListenNetwork: -L and -D listen as ssh does: an IPv4 bind address
// (0.0.0.0 included) on IPv4 only, an IPv6 one on IPv6 only, a name (or
// anything unparsable, left to net.Listen's error) on both.
func TestListenNetwork(t *testing.T) {
	for bind, want := range map[string]string{
		"0.0.0.0:8080":   "tcp4",
		"127.0.0.1:8080": "tcp4",
		"[::]:8080":      "tcp6",
		"[::1]:8080":     "tcp6",
		"localhost:8080": "tcp",
		":8080":          "tcp",
		"no-port":        "tcp",
	} {
		if got := listenNetwork(bind); got != want {
			t.Errorf("listenNetwork(%q) = %q, want %q", bind, got, want)
		}
	}
}
