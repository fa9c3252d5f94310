package transportio

import (
	"testing"
	"time"
)

// The WebSocket and the WebTransport listener of one daemon share its
// allocator: peers of both get distinct origins, in the daemon's ordinal;
// two daemons with distinct ordinals never issue the same value (§7.3).
func TestSharedOriginsAcrossListeners(t *testing.T) {
	if _, err := NewSharedOrigins(MaxHostOrdinals); err == nil {
		t.Fatal("ordinal 1024 accepted")
	}
	shared, err := NewSharedOrigins(5)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan uint32, 4)
	record := func(s *Session) { got <- s.Origin(); echo(s) }
	ws := &Listener{Origins: shared}
	other := &Listener{Origins: shared} // as the WebTransport mapping's
	wsPair(t, ws, Config{}, record)
	wsPair(t, other, Config{}, record)
	third := &Listener{HostOrdinal: 6}
	wsPair(t, third, Config{}, record)

	seen := map[uint32]bool{}
	ordinals := map[uint32]int{}
	for range 3 {
		select {
		case o := <-got:
			if o == 0 || seen[o] {
				t.Fatalf("origin %#x issued twice or zero", o)
			}
			seen[o] = true
			ordinals[o>>22]++
		case <-time.After(10 * time.Second):
			t.Fatal("no session")
		}
	}
	if ordinals[5] != 2 || ordinals[6] != 1 {
		t.Errorf("origins by ordinal %v, want 2 of ordinal 5 and 1 of ordinal 6", ordinals)
	}
	if shared.Ordinal() != 5 {
		t.Errorf("Ordinal() = %d", shared.Ordinal())
	}
}
