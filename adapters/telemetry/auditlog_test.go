package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/audit"
)

// TestAuditRecord: an event becomes a record whose body is the action,
// with enduser.id, enduser.role and the event's attributes typed.
func TestAuditRecord(t *testing.T) {
	at := time.Unix(1_800_000_000, 5)
	r := auditRecord(audit.Clean(audit.Event{Time: at, Action: "tcp.close", Principal: "alice", Role: "user", Attrs: map[string]any{
		"server.port": 8080, "sent.bytes": uint64(10), "duration": 1500 * time.Millisecond, "reset": false, "server.address": "127.0.0.1",
	}}))
	if r.Body != "tcp.close" || !r.Time.Equal(at) || r.SeverityText != "INFO" {
		t.Fatalf("record %+v", r)
	}
	want := []string{
		`key:"audit.action" value:{string_value:"tcp.close"}`,
		`key:"enduser.id" value:{string_value:"alice"}`,
		`key:"enduser.role" value:{string_value:"user"}`,
		`key:"duration" value:{double_value:1.5}`,
		`key:"reset" value:{bool_value:false}`,
		`key:"sent.bytes" value:{int_value:10}`,
		`key:"server.address" value:{string_value:"127.0.0.1"}`,
		`key:"server.port" value:{int_value:8080}`,
	}
	if len(r.Attrs) != len(want) {
		t.Fatalf("attributes %v", r.Attrs)
	}
	for i, a := range r.Attrs {
		if got := a.String(); !sameProtoText(got, want[i]) {
			t.Errorf("attribute %d: %s, want %s", i, got, want[i])
		}
	}
}

// sameProtoText compares prototext ignoring its unstable spacing.
func sameProtoText(a, b string) bool {
	strip := func(s string) string {
		out := make([]byte, 0, len(s))
		for i := 0; i < len(s); i++ {
			if s[i] != ' ' {
				out = append(out, s[i])
			}
		}
		return string(out)
	}
	return strip(a) == strip(b)
}

// TestAuditReader: a run emits what the feed holds (the backlog), says
// it is primed, then each new event; the next run goes on after the
// last event emitted.
func TestAuditReader(t *testing.T) {
	feed, err := audit.New(audit.Options{Ring: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	for _, a := range []string{"a", "b", "c", "d", "e", "f"} {
		feed.Record(audit.Event{Action: a})
	}
	r := &auditReader{feed: feed}
	got := make(chan string, 16)
	primed := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, func(l LineRecord) bool { got <- l.Body; return true }, func() { close(primed) })
	}()
	next := func() string {
		select {
		case b := <-got:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("no record")
			return ""
		}
	}
	for _, want := range []string{"c", "d", "e", "f"} { // the ring's 4
		if b := next(); b != want {
			t.Fatalf("backlog %q, want %q", b, want)
		}
	}
	<-primed
	feed.Record(audit.Event{Action: "live"})
	if b := next(); b != "live" {
		t.Fatalf("live %q", b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	feed.Record(audit.Event{Action: "between"})
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx, func(l LineRecord) bool { got <- l.Body; return true }, func() {}) }()
	if b := next(); b != "between" {
		t.Fatalf("the next run began with %q, want the event after its last", b)
	}
}
