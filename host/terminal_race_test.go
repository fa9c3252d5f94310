package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/sidecar-dev/sidecar/rpc"
)

// TestDisposeDuringCreate races disposeTerminal from one connection with
// createTerminal of the same URI on another; under -race this checks the
// terminal reserved in the map is not read unsynchronised while its
// process starts.
func TestDisposeDuringCreate(t *testing.T) {
	srv := newServer(t, nil)
	creator := connect(t, srv)
	creator.initialize("creator")
	disposer := connect(t, srv)
	disposer.initialize("disposer")
	for i := 0; i < 20; i++ {
		ch := fmt.Sprintf("ahp-terminal:/race%d", i)
		var wg sync.WaitGroup
		wg.Add(1)
		stop := make(chan struct{})
		go func() {
			defer wg.Done()
			id := 1000000 + i*1000
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				text, _ := rpc.Request(uint64(id+n), rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: ch})
				if err := disposer.mc.WriteMessage(t.Context(), text); err != nil {
					return
				}
				m, err := disposer.read()
				for err == nil && !m.isResponse(id+n) {
					m, err = disposer.read()
				}
				if err != nil || m.Error == nil {
					return // disposed (or connection gone)
				}
				if n > 500 {
					return
				}
			}
		}()
		creator.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"sleep", "30"}})
		close(stop)
		wg.Wait()
	}
}

// TestDisposedTerminalStaysOutOfCatalogue: after disposeTerminal the root
// catalogue must not list the terminal again. The reader's exit path
// (readLoop) calls root.update(…, false) unconditionally, re-adding it.
func TestDisposedTerminalStaysOutOfCatalogue(t *testing.T) {
	srv := newServer(t, nil)
	hc := connect(t, srv)
	hc.initialize("c1")
	const ch = "ahp-terminal:/ghost"
	hc.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"sleep", "30"}})
	hc.mustCall(rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: ch})
	// Shutdown waits for the dispose goroutine (kill, reader exit, Drop).
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	es, err := srv.Journal().Read(rpc.RootChannel, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var last []rpc.TerminalInfo
	var seen int
	for _, e := range es {
		var n struct {
			Params rpc.ActionEnvelope `json:"params"`
		}
		if err := json.Unmarshal(e.Text, &n); err != nil {
			t.Fatal(err)
		}
		var a rpc.RootTerminalsAction
		if json.Unmarshal(n.Params.Action, &a) == nil && a.Type == rpc.ActionRootTerminals {
			last = a.Terminals
			seen++
		}
	}
	if seen < 2 || len(last) != 0 {
		t.Fatalf("after dispose the last of %d root/terminalsChanged lists %v, want none", seen, resources(last))
	}
}
