package tests

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// nginxIdleTimeout is nginx's proxy_read_timeout (and send) in
// TestSeveralSidecarsBehindNginx: a deployment's 60 s shortened so that
// the test idles past it, twice, in under a minute. It must stay above
// the keepalive interval of the transport-io WebSocket mapping and of
// /ahp (15 s: transportio.KeepaliveInterval, transport.KeepaliveInterval),
// as 60 s is: a proxy that cuts connections idle for less than that cuts
// idle sessions (docs/operations.md §5).
const nginxIdleTimeout = 20 * time.Second

// TestSeveralSidecarsBehindNginx: two daemons (host ordinals 1 and 2)
// behind one real nginx with a path route each (/vm1/ prefix stripped,
// /vm2/ kept: listener.base_path), TCP only (UDP filtered). A CLI client
// (attach) of each, and the page of vm2, reach their own host; after
// nginx is restarted (every connection cut) each resumes on its own host,
// the same terminal; then all idle for twice nginx's proxy_read_timeout
// (nginxIdleTimeout) and no connection drops: no host logs a reconnect
// meanwhile, and each still answers.
func TestSeveralSidecarsBehindNginx(t *testing.T) {
	nginxPath(t)
	withPage := true
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(chromium); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no chromium for the page's part: %v", err)
		}
		withPage = false
		t.Logf("no chromium: the page's part is left out (%v)", err)
	}
	port := freeLoopbackPort(t)
	proxy := fmt.Sprintf("https://127.0.0.1:%d", port)
	origins := fmt.Sprintf("  origins = [%q]\n", proxy)
	vm1 := startServerWith(t, origins+"  host_ordinal = 1\n", markerTerminal("vm1"), "")
	vm2 := startServerWith(t, origins+"  host_ordinal = 2\n  base_path = \"/vm2\"\n", markerTerminal("vm2"), "")
	for i, s := range []*server{vm1, vm2} {
		s.p.stderr.waitFor(t, "the host ordinal", 0, fmt.Sprintf(`"host_ordinal":%d`, i+1))
	}
	blackHoleUDP(t, port)
	n := startNginxOpts(t, port, nginxOptions{ReadTimeout: fmt.Sprintf("%ds", int(nginxIdleTimeout/time.Second))},
		nginxRoute{Prefix: "/vm1/", Upstream: "https://" + vm1.host + "/"}, // prefix stripped
		nginxRoute{Prefix: "/vm2/", Upstream: "https://" + vm2.host},       // prefix kept
	)
	if !strings.Contains(n.Config, "proxy_read_timeout 20s;") {
		t.Fatalf("nginx config without the short proxy_read_timeout:\n%s", n.Config)
	}

	type client struct {
		name string
		s    *server
		att  *ptyProc
		pos  int // where to look for its next output
	}
	clients := []*client{{name: "vm1", s: vm1}, {name: "vm2", s: vm2}}
	echo := func(c *client, what string) {
		t.Helper()
		c.att.typeText(t, "echo "+what+"=$MARKER\r")
		c.pos = c.att.out.waitFor(t, c.name+" "+what, c.pos, "\r\n"+what+"="+c.name+"\r\n")
	}
	for _, c := range clients {
		c.att = startInPTY(t, "attach", proxy+"/"+c.name+"/", "--token", c.s.token, "--cert-hash", n.CertHash)
		c.pos = c.att.out.waitFor(t, c.name+" prompt", 0, "XPROMPT> ")
		echo(c, "first")
	}
	var b *browser
	if withPage {
		b = newBrowser(t)
		b.login(proxy+"/vm2/", vm2.token)
		b.poll("page connected", `document.getElementById("status").textContent === "connected (WebSocket)"`, waitTimeout)
		b.must("new terminal", chromedp.Click("#new", chromedp.ByID))
		b.poll("page prompt", promptBack, waitTimeout)
		b.typeText("echo page=$MARKER\r")
		b.poll("the page's own host", screenHas(`^page=vm2$`), waitTimeout)
	}

	// nginx restarted: every connection through it cut; each client
	// resumes on its own host.
	n.restart(t)
	for _, c := range clients {
		c.pos = c.att.out.waitFor(t, c.name+" resumed after the restart", c.pos, "sidecar: resumed")
		echo(c, "again")
	}
	reconnects := func(s *server) int { return strings.Count(s.p.stderr.String(), `"@message":"client reconnected"`) }
	want2 := 1
	if withPage {
		b.poll("page connected again", `document.getElementById("status").textContent === "connected (WebSocket)"`, waitTimeout)
		b.typeText("echo again=$MARKER\r")
		b.poll("the page's own host again", screenHas(`^again=vm2$`), waitTimeout)
		want2 = 2
	}
	vm1.p.stderr.waitFor(t, "vm1's reconnect", 0, `"@message":"client reconnected"`)
	if got := reconnects(vm1); got != 1 {
		t.Errorf("vm1 logged %d reconnects after the restart, want 1", got)
	}
	deadline := time.Now().Add(waitTimeout)
	for reconnects(vm2) < want2 && time.Now().Before(deadline) {
		vm2.p.stderr.waitMatch(time.Second, func(s string) bool { return strings.Count(s, `"@message":"client reconnected"`) >= want2 })
	}
	if got := reconnects(vm2); got != want2 {
		t.Errorf("vm2 logged %d reconnects after the restart, want %d (attach and the page)", got, want2)
	}

	// Idle past proxy_read_timeout, twice: the keepalives keep every
	// connection through nginx.
	before := []int{reconnects(vm1), reconnects(vm2)}
	idle := 2*nginxIdleTimeout + 2*time.Second
	t.Logf("idling %v behind nginx's proxy_read_timeout of %v", idle, nginxIdleTimeout)
	time.Sleep(idle) // the idling is what is tested, not a synchronisation
	for i, s := range []*server{vm1, vm2} {
		if got := reconnects(s); got != before[i] {
			t.Errorf("%s: %d reconnects while idle: a connection dropped behind nginx", clients[i].name, got-before[i])
		}
	}
	for _, c := range clients {
		if screen := c.att.out.String()[c.pos:]; strings.Contains(screen, "connection lost") {
			t.Errorf("%s: attach lost its connection while idle:\n%s", c.name, screen)
		}
		echo(c, "idle")
	}
	if withPage {
		var status string
		if err := b.eval(`document.getElementById("status").textContent`, &status); err != nil || status != "connected (WebSocket)" {
			t.Errorf("page after idling: status %q (%v)", status, err)
		}
		b.typeText("echo idle=$MARKER\r")
		b.poll("the page after idling", screenHas(`^idle=vm2$`), waitTimeout)
	}
	for _, c := range clients {
		c.att.typeText(t, "exit\r")
		if code := c.att.wait(t); code != 0 {
			t.Errorf("%s: attach exited %d, want 0", c.name, code)
		}
	}
}
