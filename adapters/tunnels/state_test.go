package tunnels

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/rpc"
)

func reversePort(res, client string) rpc.TunnelPort {
	return rpc.TunnelPort{Resource: res, Direction: rpc.TunnelClientToHost,
		RequestedLocalAddress: rpc.TunnelAddress{Host: "127.0.0.1", Port: 0}, RequestedRemoteAddress: rpc.TunnelAddress{Host: "localhost", Port: 3000},
		RequestedBy: rpc.TunnelRequester{Kind: "client", ClientID: client}, CreatedAt: "2025-01-01T00:00:00Z",
		Client: &rpc.TunnelClient{ClientID: client, State: rpc.TunnelClientState{Status: rpc.TunnelAccepted}}}
}

// TestCheckPort: a client may request for itself and assign only itself;
// resources, addresses and states are checked, and each refusal says why.
func TestCheckPort(t *testing.T) {
	ok := reversePort("ahp-tunnel:/ok", "me")
	if err := checkPort(&ok, "me"); err != nil {
		t.Fatalf("valid entry refused: %v", err)
	}
	for want, mutate := range map[string]func(p *rpc.TunnelPort){
		"ahp-tunnel:/<id>":            func(p *rpc.TunnelPort) { p.Resource = "ahp-tunnel:/a b" },
		"requestedBy must be":         func(p *rpc.TunnelPort) { p.RequestedBy.ClientID = "you" },
		"may assign only itself":      func(p *rpc.TunnelPort) { p.Client.ClientID = "you" },
		"exactly one client":          func(p *rpc.TunnelPort) { p.Client = nil },
		"requestedRemoteAddress.port": func(p *rpc.TunnelPort) { p.RequestedRemoteAddress.Port = 0 },
		"requestedLocalAddress.host":  func(p *rpc.TunnelPort) { p.RequestedLocalAddress.Host = "" },
		"not a URL":                   func(p *rpc.TunnelPort) { p.RequestedRemoteAddress.Host = "http://x/" },
		"is not pending":              func(p *rpc.TunnelPort) { p.Client.State.Status = "bogus" },
		"direction":                   func(p *rpc.TunnelPort) { p.Direction = "sideways" },
		"createdAt is required":       func(p *rpc.TunnelPort) { p.CreatedAt = "" },
		"needs localAddress":          func(p *rpc.TunnelPort) { p.Client.State = rpc.TunnelClientState{Status: rpc.TunnelReady} },
		"longer than":                 func(p *rpc.TunnelPort) { p.Title = strings.Repeat("x", MaxTextBytes+1) },
		"only itself to a hostToClient": func(p *rpc.TunnelPort) {
			p.Direction, p.Client = rpc.TunnelHostToClient, nil
			p.Clients = []rpc.TunnelClient{{ClientID: "me"}, {ClientID: "me"}}
		},
	} {
		p := reversePort("ahp-tunnel:/x", "me")
		mutate(&p)
		if err := checkPort(&p, "me"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	if err := checkResource("ahp-tunnel:/" + strings.Repeat("a", MaxIDBytes+1)); err == nil {
		t.Error("an id over MaxIDBytes was accepted")
	}
}

// TestBindAddr: loopback only unless allowed, no port below 1024 unless
// allowed (port 0 is any), localhost is 127.0.0.1, names are refused.
func TestBindAddr(t *testing.T) {
	for _, tc := range []struct {
		host              string
		port              int
		wide, privileged  bool
		want, wantRefusal string
	}{
		{host: "127.0.0.1", port: 0, want: "127.0.0.1:0"},
		{host: "localhost", port: 8080, want: "127.0.0.1:8080"},
		{host: "::1", port: 8080, want: "[::1]:8080"},
		{host: "0.0.0.0", port: 8080, wantRefusal: "tunnels.allow_non_loopback is false"},
		{host: "0.0.0.0", port: 8080, wide: true, want: "0.0.0.0:8080"},
		{host: "127.0.0.1", port: 80, wantRefusal: "tunnels.allow_privileged_ports is false"},
		{host: "127.0.0.1", port: 80, privileged: true, want: "127.0.0.1:80"},
		{host: "example.com", port: 8080, wantRefusal: "must be an IP address or localhost"},
	} {
		ap, err := bindAddr(rpc.TunnelAddress{Host: tc.host, Port: tc.port}, tc.wide, tc.privileged)
		switch {
		case tc.wantRefusal != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantRefusal) {
				t.Errorf("%s:%d: got %v, want %q", tc.host, tc.port, err, tc.wantRefusal)
			}
		case err != nil || ap.String() != tc.want:
			t.Errorf("%s:%d: got %v %v, want %s", tc.host, tc.port, ap, err, tc.want)
		}
	}
}

// TestUnwrapSyscall: a listen error is told as its cause alone
// ("address already in use"), as docs/operations.md shows it.
func TestUnwrapSyscall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = net.Listen("tcp", ln.Addr().String())
	if got := fmt.Sprint(unwrapSyscall(err)); got != "address already in use" {
		t.Fatalf("unwrapSyscall(%v) = %q, want %q", err, got, "address already in use")
	}
}
