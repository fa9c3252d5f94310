package main

import (
	"bytes"
	"encoding/json"
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
	if err := writeHost(&out, lsState(), false, ""); err != nil {
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
	if err := writeHost(&out, lsState(), true, ""); err != nil {
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

// TestLsPreview: with the daemon's address known, every listening port
// has its preview URL, in the table and in --json.
func TestLsPreview(t *testing.T) {
	st := rpc.RootState{Agents: []json.RawMessage{}, Terminals: []rpc.TerminalInfo{},
		Ports: []rpc.ListeningPort{{Address: "127.0.0.1", Port: 3000, Process: "node"}, {Address: "::", Port: 8080}}}
	pre := previewPrefix("wss://h.example:4433/vm1/ahp")
	var out bytes.Buffer
	if err := writeHost(&out, st, false, pre); err != nil {
		t.Fatal(err)
	}
	want := `TERMINAL  TITLE  CLAIM  ATTACHED  STATUS

LISTENING       PROCESS  PREVIEW
127.0.0.1:3000  node     https://h.example:4433/vm1/ports/3000/
[::]:8080                https://h.example:4433/vm1/ports/8080/
`
	if out.String() != want {
		t.Errorf("ls printed\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	if err := writeHost(&out, st, true, pre); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Ports []struct {
			Port    int    `json:"port"`
			Process string `json:"process"`
			Preview string `json:"preview"`
		} `json:"ports"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got.Ports) != 2 ||
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
