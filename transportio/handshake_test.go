package transportio

import (
	"errors"
	"strings"
	"testing"
)

// Checklist 20: malformed handshakes are protocol errors.
func TestParseHandshakeMalformed(t *testing.T) {
	for _, p := range []string{
		`[]`, `"x"`, `{}`, `{"v":"0","feat":[],"events":[]}`, `{"v":0.5,"feat":[],"events":[]}`, `{"v":-1,"feat":[],"events":[]}`,
		`{"v":0,"feat":[1],"events":[]}`, `{"v":0,"feat":"x","events":[]}`, `{"v":0,"events":[]}`, `{"v":0,"feat":[]}`,
		`{"v":0,"feat":[],"events":[["a",1]]}`, `{"v":0,"feat":[],"events":[["a","1","reliable"]]}`,
		`{"v":0,"feat":[],"events":[["a",1,"stream"]]}`, `{"v":0,"feat":[],"events":[["a",4294967296,"reliable"]]}`,
		`{"v":0,"feat":[],"events":[["a",1.5,"reliable"]]}`, `not json`,
	} {
		if _, err := ParseHandshake([]byte(p)); err == nil {
			t.Errorf("%s: accepted", p)
		} else if fe := (*FrameError)(nil); !errors.As(err, &fe) || fe.Code != "WT_PROTOCOL_ERROR" {
			t.Errorf("%s: %v", p, err)
		}
	}
	h, err := ParseHandshake([]byte(goldenHandshakeObj))
	if err != nil || len(h.Events) != 3 || h.Events[1] != (WireEvent{"cursor", 1185214141, LaneUnreliable}) {
		t.Fatalf("golden handshake: %+v %v", h, err)
	}
}

// Checklist 14–19, 23 (id 0), 24.
func TestNegotiate(t *testing.T) {
	local := MustContract(Event{Name: "chat"}, Event{Name: "cursor", Lane: LaneUnreliable})
	ev := func(name string, id uint32, lane Lane) WireEvent { return WireEvent{name, id, lane} }
	cases := []struct {
		name   string
		peer   Handshake
		code   CloseCode
		reason string
	}{
		{"v1", Handshake{V: 1}, CloseProtocolVersionMismatch, "peer speaks protocol v1 and this is v0"},
		{"lane", Handshake{Events: []WireEvent{ev("cursor", EventID("cursor"), LaneReliable)}}, CloseContractMismatch, "event 'cursor' is 'unreliable' here and 'reliable' at the peer"},
		{"id", Handshake{Events: []WireEvent{ev("chat", 999, LaneReliable)}}, CloseContractMismatch, "event 'chat' is id 836792189 here and 999 at the peer"},
		{"same id other name", Handshake{Events: []WireEvent{ev("a", EventID("chat"), LaneReliable)}}, CloseContractMismatch, "peer event 'a' has id 836792189, which is 'chat' here"},
		{"id 0", Handshake{Events: []WireEvent{ev("z", 0, LaneReliable)}}, CloseContractMismatch, "peer event 'z' has the reserved id 0"},
		{"peer only", Handshake{Events: []WireEvent{ev("extra", EventID("extra"), LaneReliable)}}, 0, ""},
		{"unknown feat", Handshake{Feat: []string{"unknown-future-token"}}, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := Negotiate(local, []string{"emit-per-room"}, c.peer)
			if c.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if len(n.Feat) != 0 {
					t.Errorf("feat = %v, want the empty intersection", n.Feat)
				}
				return
			}
			var se *SessionError
			if !errors.As(err, &se) || se.Code != c.code || se.Reason != c.reason {
				t.Fatalf("got %v, want %s %q", err, c.code, c.reason)
			}
		})
	}
}

func TestContractErrors(t *testing.T) {
	if _, err := NewContract(Event{Name: "a", ID: 7}, Event{Name: "b", ID: 7}); err == nil || !strings.Contains(err.Error(), "'a' and 'b'") {
		t.Errorf("collision: %v", err)
	}
	if _, err := NewContract(Event{Name: "a"}, Event{Name: "a"}); err == nil {
		t.Error("duplicate name accepted")
	}
	if _, err := NewContract(Event{Name: "c", Lane: LaneUnreliable, Shape: ShapeReturns}); err == nil {
		t.Error("callable unreliable event accepted")
	}
	// Checklist 25: sorted by code point (Go byte order), astral after U+FFFF.
	c := MustContract(Event{Name: "\U0001F600"}, Event{Name: "\uFFFD"}, Event{Name: "a"})
	got := c.Table()
	if got[0].Name != "a" || got[1].Name != "\uFFFD" || got[2].Name != "\U0001F600" {
		t.Errorf("order %v", got)
	}
}

func TestTruncateReason(t *testing.T) {
	if got := TruncateReason(strings.Repeat("a", 300), 123); len(got) != 123 {
		t.Errorf("300×a → %d bytes", len(got))
	}
	if got := TruncateReason(strings.Repeat("é", 300), 123); got != strings.Repeat("é", 61) {
		t.Errorf("300×é → %d bytes", len(got))
	}
	if got := TruncateReason(strings.Repeat("€", 2000), MaxCloseReason); len(got) != 1023 {
		t.Errorf("2000×€ → %d bytes, want 1023", len(got))
	}
}

// Checklist 7: refusal reasons are 1 to 123 bytes.
func TestRefuse(t *testing.T) {
	var re *RefusalError
	if err := Refuse(strings.Repeat("x", 123)); !errors.As(err, &re) {
		t.Errorf("123×x: %v", err)
	}
	for _, r := range []string{"", strings.Repeat("é", 62), "\xff"} {
		if err := Refuse(r); !errors.Is(err, ErrBadRefusal) {
			t.Errorf("%q accepted: %v", r, err)
		}
	}
	if c, r := refusal(Refused); c != CloseUnauthorized || r != "refused" {
		t.Errorf("Refused → %v %q", c, r)
	}
	if c, r := refusal(errors.New("backend down")); c != CloseNoError || r != "authorize failed" {
		t.Errorf("backend error → %v %q", c, r)
	}
	if c, r := refusal(Refuse("")); c != CloseNoError || r != "authorize failed" {
		t.Errorf("bad reason → %v %q", c, r)
	}
}

// Checklist 84–85.
func TestWebSocketCloseCodes(t *testing.T) {
	for code, ws := range map[CloseCode]int{0: 1000, 1003: 4003, 1006: 4006, 1007: 4007} {
		if code.WebSocketCode() != ws {
			t.Errorf("%v → %d", code, code.WebSocketCode())
		}
		if back, ok := CloseCodeFromWebSocket(ws); !ok || back != code {
			t.Errorf("%d → %v %v", ws, back, ok)
		}
	}
	for _, ws := range []int{1001, 1006, 1007, 1011, 3999, 5000} {
		if _, ok := CloseCodeFromWebSocket(ws); ok {
			t.Errorf("%d read as a session code", ws)
		}
	}
}
