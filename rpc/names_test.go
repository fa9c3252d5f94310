package rpc

import (
	"fmt"
	"sync/atomic"
	"testing"
)

func TestIsControlMethod(t *testing.T) {
	for m, want := range map[string]bool{
		"channel/credit": true, "unsubscribe": true, "tcp/reset": true,
		"channel/frame": false, "channel/snapshot": false, "action": false,
		"dispatchAction": false, "auth/required": false, "made/up": false, "": false,
	} {
		if IsControlMethod(m) != want {
			t.Errorf("IsControlMethod(%q) = %v", m, !want)
		}
	}
}

// TestDeclareControlMethod: a kind's declared control method (a byte
// stream's reset, through NewStreamMethods) is one from then on; its data
// and end of stream stay data.
func TestDeclareControlMethod(t *testing.T) {
	// Declarations are for the process's life: a name of its own per run
	// (go test -count=N).
	k := fmt.Sprintf("x-test%d", declareRuns.Add(1))
	if IsControlMethod(k + "/reset") {
		t.Fatalf("%s/reset is a control method before it is declared", k)
	}
	m := NewStreamMethods(k+"/data", k+"/eof", k+"/reset")
	if !IsControlMethod(m.Reset) || IsControlMethod(m.Data) || IsControlMethod(m.EOF) {
		t.Fatalf("after NewStreamMethods: reset %v, data %v, eof %v", IsControlMethod(m.Reset), IsControlMethod(m.Data), IsControlMethod(m.EOF))
	}
	if !IsControlMethod(TCPStream.Reset) {
		t.Fatal("tcp/reset is not a control method")
	}
}

var declareRuns atomic.Int64
