package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestSetGCPercent: serve and forward collect at their own GC percent
// unless $GOGC says otherwise (then the runtime already took it from the
// environment, and it is left alone).
func TestSetGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	old, had := os.LookupEnv("GOGC")
	_ = os.Unsetenv("GOGC")
	t.Cleanup(func() {
		if had {
			_ = os.Setenv("GOGC", old)
		}
	})
	for _, p := range []int{forwardGCPercent, serveGCPercent} {
		setGCPercent(p)
		if got := debug.SetGCPercent(100); got != p {
			t.Errorf("without GOGC: GC percent %d, want %d", got, p)
		}
	}
	t.Setenv("GOGC", "") // as in an environment file with GOGC=
	setGCPercent(serveGCPercent)
	if got := debug.SetGCPercent(100); got != serveGCPercent {
		t.Errorf("with GOGC empty: GC percent %d, want %d", got, serveGCPercent)
	}
	t.Setenv("GOGC", "75")
	setGCPercent(forwardGCPercent)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set: GC percent %d, want it left alone (100)", got)
	}
}
