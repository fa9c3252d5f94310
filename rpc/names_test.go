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
