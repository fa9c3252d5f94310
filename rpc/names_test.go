package rpc

import "testing"

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
	if IsControlMethod("x-test/reset") {
		t.Fatal("x-test/reset is a control method before it is declared")
	}
	m := NewStreamMethods("x-test/data", "x-test/eof", "x-test/reset")
	if !IsControlMethod(m.Reset) || IsControlMethod(m.Data) || IsControlMethod(m.EOF) {
		t.Fatalf("after NewStreamMethods: reset %v, data %v, eof %v", IsControlMethod(m.Reset), IsControlMethod(m.Data), IsControlMethod(m.EOF))
	}
	if !IsControlMethod(TCPStream.Reset) {
		t.Fatal("tcp/reset is not a control method")
	}
}
