package tiopipe

import (
	"bytes"
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/transportio"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPair: both handshakes are done when Pair returns, an EMIT crosses
// each way, and the tap sees the client's frames.
func TestPair(t *testing.T) {
	contract := transportio.MustContract(transportio.Event{Name: "ahp"})
	var rec Recorder
	c, s := Pair(t, contract, contract, rec.Tap)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, x := range []struct{ from, to *transportio.Session }{{c, s}, {s, c}} {
		if err := x.from.Emit("ahp", []byte(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
		m, err := x.to.Receive(ctx)
		if err != nil || m.Event != "ahp" || string(m.Payload) != `{"n":1}` {
			t.Fatalf("received %q %q %v", m.Event, m.Payload, err)
		}
	}
	if !bytes.Contains(rec.Bytes(), []byte(`{"n":1}`)) {
		t.Fatal("the tap did not see the client's EMIT")
	}
}
