package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/sidecar-dev/sidecar/rpc"
)

// lsState is a root state with one terminal in each status.
func lsState() rpc.RootState {
	zero, three := 0, 3
	return rpc.RootState{
		Agents: []json.RawMessage{},
		Terminals: []rpc.TerminalInfo{
			{Resource: "ahp-terminal:/t-att", Title: "sh", Claim: rpc.Claim{Kind: "client", ClientID: "c1"}, Attached: []string{"c1", "c2\x1b[2J"}},
			{Resource: "ahp-terminal:/t-det", Title: "top", Claim: rpc.Claim{Kind: "client", ClientID: "c3"}, Away: []string{"c3"}},
			{Resource: "ahp-terminal:/t-ok", Title: "make", Claim: rpc.Claim{Kind: "client", ClientID: "c1"}, ExitCode: &zero},
			{Resource: "ahp-terminal:/t-3", Title: "false", Claim: rpc.Claim{Kind: "client", ClientID: "c1"}, ExitCode: &three},
			{Resource: "ahp-terminal:/t-k", Title: "sleep", Claim: rpc.Claim{Kind: "client", ClientID: "c1"}, Signal: "SIGKILL"},
		},
	}
}

// TestLsTable: ls tells an attached terminal from a detached one (STATUS,
// and the client ids in ATTACHED), escaping the ids as every peer's text.
func TestLsTable(t *testing.T) {
	var out bytes.Buffer
	if err := writeHost(&out, lsState(), nil, false, ""); err != nil {
		t.Fatal(err)
	}
	want := `TERMINAL  TITLE  CLAIM      ATTACHED      STATUS
t-att     sh     client:c1  c1,c2\x1b[2J  attached
t-det     top    client:c3  c3 (away)     detached
t-ok      make   client:c1  -             exited (0)
t-3       false  client:c1  -             exited (3)
t-k       sleep  client:c1  -             killed (SIGKILL)
`
	if out.String() != want {
		t.Errorf("ls printed\n%s\nwant\n%s", out.String(), want)
	}
}

// TestLsJSON: ls --json gives each terminal a "status" (attached,
// detached, exited) beside the host's fields, "attached" included.
func TestLsJSON(t *testing.T) {
	var out bytes.Buffer
	if err := writeHost(&out, lsState(), nil, true, ""); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Agents    []json.RawMessage `json:"agents"`
		Terminals []struct {
			Resource string   `json:"resource"`
			Status   string   `json:"status"`
			Attached []string `json:"attached"`
			ExitCode *int     `json:"exitCode"`
		} `json:"terminals"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, out.String())
	}
	want := []struct {
		status   string
		attached int
	}{{"attached", 2}, {"detached", 0}, {"exited", 0}, {"exited", 0}, {"exited", 0}}
	if len(got.Terminals) != len(want) || got.Agents == nil {
		t.Fatalf("ls --json: %d terminals, agents %v; want %d and []:\n%s", len(got.Terminals), got.Agents, len(want), out.String())
	}
	for i, w := range want {
		if g := got.Terminals[i]; g.Status != w.status || len(g.Attached) != w.attached {
			t.Errorf("terminal %s: status %q, %d attached; want %q, %d", g.Resource, g.Status, len(g.Attached), w.status, w.attached)
		}
	}
	if c := got.Terminals[3].ExitCode; c == nil || *c != 3 {
		t.Errorf("exitCode of t-3: %v, want 3", c)
	}
}

// lsTunnels is a tunnels state with a -R of each lifecycle the host
// reports and a -L with two participants.
func lsTunnels() []rpc.TunnelPort {
	addr := func(h string, p int) *rpc.TunnelAddress { return &rpc.TunnelAddress{Host: h, Port: p} }
	me := rpc.TunnelRequester{Kind: "client", ClientID: "c1"}
	return []rpc.TunnelPort{
		{Resource: "ahp-tunnel:/r1", Direction: rpc.TunnelClientToHost, RequestedLocalAddress: rpc.TunnelAddress{Host: "127.0.0.1"},
			RequestedRemoteAddress: rpc.TunnelAddress{Host: "localhost", Port: 8080}, RequestedBy: me,
			Client: &rpc.TunnelClient{ClientID: "c1", State: rpc.TunnelClientState{Status: rpc.TunnelReady,
				LocalAddress: addr("127.0.0.1", 41000), RemoteAddress: addr("localhost", 8080)}}},
		{Resource: "ahp-tunnel:/r2", Direction: rpc.TunnelClientToHost, RequestedLocalAddress: rpc.TunnelAddress{Host: "127.0.0.1", Port: 9000},
			RequestedRemoteAddress: rpc.TunnelAddress{Host: "127.0.0.1", Port: 5432}, RequestedBy: rpc.TunnelRequester{Kind: "client", ClientID: "c2"},
			Client: &rpc.TunnelClient{ClientID: "c2", State: rpc.TunnelClientState{Status: rpc.TunnelUnavailable, Reason: "link lost\x1b[2J"}}},
		{Resource: "ahp-tunnel:/l1", Direction: rpc.TunnelHostToClient, RequestedLocalAddress: rpc.TunnelAddress{Host: "127.0.0.1", Port: 3000},
			RequestedRemoteAddress: rpc.TunnelAddress{Host: "127.0.0.1", Port: 3000}, RequestedBy: me,
			Clients: []rpc.TunnelClient{
				{ClientID: "c1", State: rpc.TunnelClientState{Status: rpc.TunnelReady, LocalAddress: addr("127.0.0.1", 3001), RemoteAddress: addr("127.0.0.1", 3000)}},
				{ClientID: "c3", State: rpc.TunnelClientState{Status: rpc.TunnelFailed, Error: &rpc.TunnelErrorInfo{ErrorType: "bind", Message: "address in use"}}},
			}},
		{Resource: "ahp-tunnel:/h1", Direction: rpc.TunnelHostToClient, RequestedLocalAddress: rpc.TunnelAddress{Host: "::1", Port: 5000},
			RequestedRemoteAddress: rpc.TunnelAddress{Host: "::1", Port: 5000}, RequestedBy: rpc.TunnelRequester{Kind: "host"}},
	}
}

// TestLsForwards: ls lists every forward of the tunnels channel, both
// directions, who asked, each participant with where it listens (the
// effective address once ready) and its lifecycle with the reason, peer
// text escaped.
func TestLsForwards(t *testing.T) {
	var out bytes.Buffer
	st := lsState()
	st.Terminals = st.Terminals[:1]
	if err := writeHost(&out, st, lsTunnels(), false, ""); err != nil {
		t.Fatal(err)
	}
	want := `TERMINAL  TITLE  CLAIM      ATTACHED      STATUS
t-att     sh     client:c1  c1,c2\x1b[2J  attached

FORWARD  DIRECTION  BY    CLIENT  LISTEN           TO              STATE
r1       -R         c1    c1      127.0.0.1:41000  localhost:8080  ready
r2       -R         c2    c2      127.0.0.1:9000   127.0.0.1:5432  unavailable (link lost\x1b[2J)
l1       -L         c1    c1      127.0.0.1:3001   127.0.0.1:3000  ready
l1       -L         c1    c3      127.0.0.1:3000   127.0.0.1:3000  failed (address in use)
h1       -L         host  -       [::1]:5000       [::1]:5000      -
`
	if out.String() != want {
		t.Errorf("ls printed\n%s\nwant\n%s", out.String(), want)
	}
}

// TestLsForwardsJSON: ls --json has "tunnels", the TunnelsState with
// every entry as the host sent it (a hostToClient entry's "clients" even
// when empty); without a tunnels channel it has none.
func TestLsForwardsJSON(t *testing.T) {
	var out bytes.Buffer
	if err := writeHost(&out, lsState(), lsTunnels(), true, ""); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Tunnels *struct {
			Ports []json.RawMessage `json:"ports"`
		} `json:"tunnels"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, out.String())
	}
	if got.Tunnels == nil || len(got.Tunnels.Ports) != 4 {
		t.Fatalf("ls --json tunnels: %s", out.String())
	}
	for i, p := range lsTunnels() {
		want, _ := json.Marshal(p)
		var a, b any
		_ = json.Unmarshal(want, &a)
		_ = json.Unmarshal(got.Tunnels.Ports[i], &b)
		if aj, bj := fmt.Sprint(a), fmt.Sprint(b); aj != bj {
			t.Errorf("entry %d: %s, want %s", i, got.Tunnels.Ports[i], want)
		}
	}
	if !bytes.Contains(got.Tunnels.Ports[3], []byte(`"clients": []`)) {
		t.Errorf("host-requested entry lacks \"clients\": []: %s", got.Tunnels.Ports[3])
	}
	out.Reset()
	if err := writeHost(&out, lsState(), nil, true, ""); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out.Bytes(), []byte(`"tunnels"`)) {
		t.Errorf("ls --json without a tunnels channel has \"tunnels\":\n%s", out.String())
	}
}

// TestLsPreview: with the daemon's address known, every listening port
// has its preview URL, in the table and in --json, but the daemon's own
// (the port of the URL ls reached it at), which the preview refuses.
func TestLsPreview(t *testing.T) {
	st := rpc.RootState{Agents: []json.RawMessage{}, Terminals: []rpc.TerminalInfo{},
		Ports: []rpc.ListeningPort{{Address: "127.0.0.1", Port: 3000, Process: "node"}, {Address: "::", Port: 8080}, {Address: "::", Port: 4433, Process: "sidecar"}}}
	pre := previewPrefix("wss://h.example:4433/vm1/ahp")
	var out bytes.Buffer
	if err := writeHost(&out, st, nil, false, pre); err != nil {
		t.Fatal(err)
	}
	want := `TERMINAL  TITLE  CLAIM  ATTACHED  STATUS

LISTENING       PROCESS  PREVIEW
127.0.0.1:3000  node     https://h.example:4433/vm1/ports/3000/
[::]:8080                https://h.example:4433/vm1/ports/8080/
[::]:4433       sidecar  -
`
	if out.String() != want {
		t.Errorf("ls printed\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	if err := writeHost(&out, st, nil, true, pre); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Ports []struct {
			Port    int    `json:"port"`
			Process string `json:"process"`
			Preview string `json:"preview"`
		} `json:"ports"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got.Ports) != 3 || got.Ports[2].Preview != "" ||
		got.Ports[0].Preview != "https://h.example:4433/vm1/ports/3000/" || got.Ports[0].Process != "node" || got.Ports[1].Port != 8080 {
		t.Errorf("ls --json: %v %+v\n%s", err, got, out.String())
	}
}

func TestPreviewPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"wss://127.0.0.1:4433/ahp":     "https://127.0.0.1:4433/ports/",
		"wss://h:1/vm1/ahp":            "https://h:1/vm1/ports/",
		"https://h:1/vm1/":             "https://h:1/vm1/ports/",
		"https://h:1/vm1/transport-io": "https://h:1/vm1/ports/",
		"https://h:1":                  "https://h:1/ports/",
		"ws://127.0.0.1:8080/ahp":      "http://127.0.0.1:8080/ports/",
		"ssh://h":                      "",
		"not a url":                    "",
	} {
		if got := previewPrefix(in); got != want {
			t.Errorf("previewPrefix(%q) = %q, want %q", in, got, want)
		}
	}
}
