package tests

import (
	"fmt"
	"strings"
	"testing"
)

// TestLimitsPerTokenThroughBinary (issue 16 case 7): through the real
// daemon, clients of one token choosing new clientIds (62 terminals from
// one token, before) meet terminal.max_per_principal, each refusal -32009
// naming it; terminals outlive their connection, so a new connection
// makes no room either.
func TestLimitsPerTokenThroughBinary(t *testing.T) {
	s := startServerTerminal(t, strings.Replace(terminalConfig, "terminal {\n", "terminal {\n  max_per_client = 2\n  max_per_principal = 3\n", 1), "")
	n := 0
	create := func(rc *rawConn) message {
		n++
		return rc.call("createTerminal", map[string]any{"channel": fmt.Sprintf("ahp-terminal:/tok%d", n), "command": []string{"sleep", "300"}})
	}
	a := s.dialRaw(t)
	a.initialize("tok-a")
	for range 2 {
		if m := create(a); m.Error != nil {
			t.Fatalf("createTerminal: %s", m.raw)
		}
	}
	if m := create(a); m.Error == nil || m.Error.Code != -32009 || m.Error.Message != "terminal limit reached: 2 terminals for this client (terminal.max_per_client); dispose one first" {
		t.Fatalf("third terminal of one clientId: %s", m.raw)
	}
	a.close()
	b := s.dialRaw(t)
	b.initialize("tok-b")
	if m := create(b); m.Error != nil {
		t.Fatalf("createTerminal as tok-b: %s", m.raw)
	}
	for _, id := range []string{"tok-b", "tok-c"} {
		rc := b
		if id != "tok-b" {
			rc = s.dialRaw(t)
			rc.initialize(id)
		}
		if m := create(rc); m.Error == nil || m.Error.Code != -32009 || m.Error.Message != "terminal limit reached: 3 terminals for this token (terminal.max_per_principal); dispose one first" {
			t.Fatalf("a fourth terminal of the token as %s: %s", id, m.raw)
		}
	}
}
