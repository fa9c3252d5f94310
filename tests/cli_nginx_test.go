package tests

import (
	"strings"
	"testing"
	"time"
)

// TestCLIThroughNginx: the CLI behind a real nginx that carries TCP only
// (UDP to its port filtered), one daemon under /vm1/ with the prefix
// stripped and one under /vm2/ with it kept (listener.base_path), as
// docs/operations.md shows. `ls` and `run` with --transport auto reach
// each its own host over the WebSocket mapping, the first command without
// waiting out WebTransport (it raced both), the next going straight to
// what worked; nginx's access log holds no token.
func TestCLIThroughNginx(t *testing.T) {
	nginxPath(t)
	port := freeLoopbackPort(t)
	vm1 := startServerWith(t, "", markerTerminal("vm1"), "")
	vm2 := startServerWith(t, "  base_path = \"/vm2\"\n", markerTerminal("vm2"), "")
	blackHoleUDP(t, port)
	n := startNginx(t, port,
		nginxRoute{Prefix: "/vm1/", Upstream: "https://" + vm1.host + "/"}, // prefix stripped
		nginxRoute{Prefix: "/vm2/", Upstream: "https://" + vm2.host},       // prefix kept
	)
	for _, vm := range []struct {
		name string
		s    *server
	}{{"vm1", vm1}, {"vm2", vm2}} {
		url := "https://" + n.Addr + "/" + vm.name + "/"
		conn := []string{"--token", vm.s.token, "--cert-hash", n.CertHash}
		for i := range 2 {
			start := time.Now()
			stdout, stderr, code := vm.s.run(t, append([]string{"ls", url}, conn...)...)
			took := time.Since(start)
			if code != 0 || !strings.Contains(stdout, "TERMINAL  TITLE") {
				t.Fatalf("%s: ls %s exited %d\nstdout:\n%s\nstderr:\n%s", vm.name, url, code, stdout, stderr)
			}
			// Logged, not asserted: a benchmark, not a timed test.
			t.Logf("%s: ls through nginx (auto, %s) took %v", vm.name, map[int]string{0: "first", 1: "remembered"}[i], took.Round(time.Millisecond))
		}
		stdout, stderr, code := vm.s.run(t, append(append([]string{"run", url}, conn...), "--", "sh", "-c", "echo marker=$MARKER")...)
		if code != 0 || strings.TrimSpace(stdout) != "marker="+vm.name {
			t.Fatalf("%s: run through nginx exited %d with %q, want marker=%s\nstderr:\n%s", vm.name, code, stdout, vm.name, stderr)
		}
	}
	log := n.AccessLogText(t)
	for _, s := range []*server{vm1, vm2} {
		if strings.Contains(log, s.token) {
			t.Errorf("nginx's access log holds a token:\n%s", log)
		}
	}
	for _, want := range []string{"GET /vm1/transport-io", "GET /vm2/transport-io"} {
		if !strings.Contains(log, want) {
			t.Errorf("nginx's access log has no %q: the CLI did not go through the proxy?\n%s", want, log)
		}
	}
	if strings.Contains(log, "\"GET /transport-io") {
		t.Errorf("a request escaped the prefixes:\n%s", log)
	}
}
