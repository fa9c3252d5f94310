package main

import (
	"bytes"
	"testing"

	"github.com/sidecar-dev/sidecar/rpc"
)

// TestLsSharing: where the host names holders, ls adds HOLDER and SHARED
// columns and shows each attached client's identity and access.
func TestLsSharing(t *testing.T) {
	st := rpc.RootState{Terminals: []rpc.TerminalInfo{
		{Resource: "ahp-terminal:/t1", Title: "sh", Claim: rpc.Claim{Kind: "client", ClientID: "c1"}, Attached: []string{"c1", "c2"},
			Holder: "alice", Shares: []rpc.TerminalShare{{With: rpc.ShareWith{Principal: "bob"}, Access: "write"}, {With: rpc.ShareWith{Role: "viewer"}, Access: "read"}},
			AttachedBy: []rpc.AttachedClient{{ClientID: "c1", Principal: "alice", Access: "write"}, {ClientID: "c2", Principal: "vera\x1b", Access: "read"}}},
		{Resource: "ahp-terminal:/t2", Title: "top", Claim: rpc.Claim{Kind: "client", ClientID: "c3"}, Away: []string{"c3"}},
	}}
	var out bytes.Buffer
	if err := writeHost(&out, st, nil, false, ""); err != nil {
		t.Fatal(err)
	}
	want := `TERMINAL  TITLE  HOLDER  SHARED                                CLAIM      ATTACHED                                     STATUS
t1        sh     alice   bob:read-write,role=viewer:read-only  client:c1  c1(alice:read-write),c2(vera\x1b:read-only)  attached
t2        top    -       -                                     client:c3  c3 (away)                                    detached
`
	if out.String() != want {
		t.Errorf("ls printed\n%s\nwant\n%s", out.String(), want)
	}
}

func TestWriteShares(t *testing.T) {
	var out bytes.Buffer
	if err := writeShares(&out, []rpc.TerminalShare{{With: rpc.ShareWith{Principal: "alice"}, Access: "read"}, {With: rpc.ShareWith{Role: "user"}, Access: "write"}}); err != nil {
		t.Fatal(err)
	}
	if want := "WITH       ACCESS\nalice      read-only\nrole user  read-write\n"; out.String() != want {
		t.Errorf("got\n%q\nwant\n%q", out.String(), want)
	}
	out.Reset()
	_ = writeShares(&out, nil)
	if want := "not shared: only its holder and owners may attach\n"; out.String() != want {
		t.Errorf("got %q", out.String())
	}
}
