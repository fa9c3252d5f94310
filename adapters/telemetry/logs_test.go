package telemetry

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

func TestRingLevelsAndBound(t *testing.T) {
	r := NewRing(4, func() time.Time { return time.Unix(5, 0) })
	r.Accept("x", hclog.Error, "kept by nobody")
	if r.Head() != 0 {
		t.Fatal("a ring without subscribers kept a record")
	}
	r.SetMinLevel(hclog.Info)
	r.Accept("x", hclog.Debug, "below")
	r.Accept("x", hclog.Info, "i1", "k", 1)
	r.Accept("x", hclog.Warn, "w1")
	recs, cur, missed := r.Read(0, hclog.Warn, 10)
	if len(recs) != 1 || recs[0].Msg != "w1" || cur != 2 || missed != 0 {
		t.Errorf("Read(0, warn) = %v, %d, %d", recs, cur, missed)
	}
	for i := 0; i < 6; i++ {
		r.Accept("x", hclog.Info, "more")
	}
	recs, cur, missed = r.Read(2, hclog.Info, 2)
	if missed != 2 || len(recs) != 2 || recs[0].Seq != 5 || cur != 6 {
		t.Errorf("behind the ring: %d records from %d, cursor %d, missed %d; want 2 from 5, 6, 2", len(recs), recs[0].Seq, cur, missed)
	}
	if r.Dropped() != 2 {
		t.Errorf("Dropped = %d", r.Dropped())
	}
}

func TestTeeAndEncodeLogs(t *testing.T) {
	r := NewRing(16, func() time.Time { return time.Unix(1736870400, 0) })
	r.SetMinLevel(hclog.Debug)
	woken := 0
	r.SetNotify(func() { woken++ })
	var out bytes.Buffer
	base := hclog.New(&hclog.LoggerOptions{Name: "sidecar", Output: &out, Level: hclog.Info})
	log := Tee(base, r).Named("conn").With("peer", "p1")
	log.Debug("hidden from stderr, kept for debug subscribers")
	log.Warn("closing", "error", errors.New("boom"), "n", 3, "ok", true)
	if strings.Contains(out.String(), "hidden") || !strings.Contains(out.String(), "closing") {
		t.Errorf("base logger output %q", out.String())
	}
	recs, _, _ := r.Read(0, hclog.Debug, 10)
	if len(recs) != 2 || woken != 2 {
		t.Fatalf("%d records, %d wake-ups; want 2, 2", len(recs), woken)
	}
	payload, err := EncodeLogs(NewSampler(Options{}).Resource(), recs)
	if err != nil {
		t.Fatal(err)
	}
	ld := &logspb.LogsData{}
	if err := protojson.Unmarshal(payload, ld); err != nil {
		t.Fatal(err)
	}
	sl := ld.ResourceLogs[0].ScopeLogs[0]
	if sl.Scope.Name != "sidecar.conn" || len(sl.LogRecords) != 2 {
		t.Fatalf("scope %q with %d records", sl.Scope.Name, len(sl.LogRecords))
	}
	w := sl.LogRecords[1]
	if w.SeverityNumber != logspb.SeverityNumber_SEVERITY_NUMBER_WARN || w.Body.GetStringValue() != "closing" || w.TimeUnixNano != 1736870400000000000 {
		t.Errorf("record %v", w)
	}
	attrs := map[string]string{}
	for _, a := range w.Attributes {
		attrs[a.Key] = protojson.Format(a.Value)
	}
	if !strings.Contains(attrs["peer"], "p1") || !strings.Contains(attrs["error"], "boom") || !strings.Contains(attrs["n"], `"3"`) {
		t.Errorf("attributes %v", attrs)
	}
	if !strings.Contains(string(payload), `"severityNumber":13`) {
		t.Errorf("severity not a number: %s", payload)
	}
}

func TestParseLevel(t *testing.T) {
	for _, s := range []string{"trace", "debug", "info", "warn", "error", "fatal"} {
		if _, ok := ParseLevel(s); !ok {
			t.Errorf("%s refused", s)
		}
	}
	if _, ok := ParseLevel("loud"); ok {
		t.Error("loud accepted")
	}
}

// TestRingRedacts: a record's message and attributes reach the logs
// channel with the values of token= and ticket= parameters taken out.
func TestRingRedacts(t *testing.T) {
	r := NewRing(4, func() time.Time { return time.Unix(5, 0) })
	r.SetMinLevel(hclog.Debug)
	r.Accept("x", hclog.Warn, "refused /ahp?token=s3cret", "origin", "https://e.example/?ticket=t1ck3t", "error", errors.New("GET /x?a=1&token=s3cret"))
	recs, _, _ := r.Read(0, hclog.Debug, 10)
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	text := recs[0].Msg
	for _, a := range recs[0].Attrs {
		text += " " + a.GetKey() + "=" + a.GetValue().GetStringValue()
	}
	if strings.Contains(text, "s3cret") || strings.Contains(text, "t1ck3t") {
		t.Errorf("a credential in the record: %s", text)
	}
	if want := "refused /ahp?token=REDACTED origin=https://e.example/?ticket=REDACTED error=GET /x?a=1&token=REDACTED"; text != want {
		t.Errorf("record %q, want %q", text, want)
	}
}
