package main

import (
	"strings"
	"testing"
)

// TestParseDest: connect's HOST:PORT, IPv6 in brackets or as ssh's %h:%p
// writes it, and what it refuses, each refusal naming the problem.
func TestParseDest(t *testing.T) {
	for _, tc := range []struct {
		in       string
		host     string
		port     int
		errNames string // "" when it parses
	}{
		{"localhost:22", "localhost", 22, ""},
		{"127.0.0.1:2222", "127.0.0.1", 2222, ""},
		{"[::1]:22", "::1", 22, ""},
		{"::1:22", "::1", 22, ""},
		{"fe80::1:443", "fe80::1", 443, ""},
		{"localhost", "", 0, "want host:port"},
		{":22", "", 0, "no host"},
		{"localhost:0", "", 0, "not a port"},
		{"localhost:65536", "", 0, "not a port"},
		{"localhost:ssh", "", 0, "not a port"},
		{"a:b:22", "", 0, "want host:port"},
		{"http://x/:22", "", 0, "host"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			host, port, err := parseDest(tc.in)
			if tc.errNames != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errNames) {
					t.Fatalf("parseDest(%q) = %q, %d, %v; want an error naming %q", tc.in, host, port, err, tc.errNames)
				}
				return
			}
			if err != nil || host != tc.host || port != tc.port {
				t.Fatalf("parseDest(%q) = %q, %d, %v; want %q, %d", tc.in, host, port, err, tc.host, tc.port)
			}
		})
	}
}
