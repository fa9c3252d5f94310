package host

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/rpc"
)

// BenchmarkCatalogueViewAction: one change of a 50-terminal catalogue
// sent to 100 non-owner subscribers of 4 identities, as the ordinary
// subscriptions' views do it under the journal's lock (per op: one
// change, 100 views).
func BenchmarkCatalogueViewAction(b *testing.B) {
	r := &root{}
	list := make([]rpc.TerminalInfo, 50)
	for i := range list {
		list[i] = rpc.TerminalInfo{Resource: fmt.Sprintf("ahp-terminal:/t%d", i), Title: "bash", Holder: fmt.Sprintf("user%d", i%4),
			Claim: rpc.Claim{Kind: "client", ClientID: fmt.Sprintf("c%d", i)}}
	}
	enc, err := rpc.Marshal(rpc.RootTerminalsAction{Type: rpc.ActionRootTerminals, Terminals: list})
	if err != nil {
		b.Fatal(err)
	}
	views := make([]adapters.View, 100)
	for i := range views {
		views[i] = r.View(auth.Identity{Name: fmt.Sprintf("user%d", i%4), Role: auth.User})
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		text := rpc.AppendActionEnvelope(nil, rpc.RootChannel, enc, uint64(i+1)) // each change its own text
		for _, v := range views {
			if out := v.Action(text); len(out) >= len(text) {
				b.Fatal("nothing filtered")
			}
		}
	}
}

// TestViewCacheBound: the catalogue views cache a change's text for at
// most maxCachedViews identities; past it the cache starts again, and
// every identity still gets its own view.
func TestViewCacheBound(t *testing.T) {
	r := &root{}
	list := []rpc.TerminalInfo{{Resource: "ahp-terminal:/t", Holder: "user7"}}
	enc, err := rpc.Marshal(rpc.RootTerminalsAction{Type: rpc.ActionRootTerminals, Terminals: list})
	if err != nil {
		t.Fatal(err)
	}
	text := rpc.AppendActionEnvelope(nil, rpc.RootChannel, enc, 1)
	for i := range 3 * maxCachedViews {
		out := string(r.View(auth.Identity{Name: fmt.Sprintf("user%d", i), Role: auth.User}).Action(text))
		if got, want := strings.Contains(out, "ahp-terminal:/t"), i == 7; got != want {
			t.Fatalf("user%d sees the terminal: %v, want %v (%s)", i, got, want, out)
		}
		if n := len(r.views.seen); n > maxCachedViews {
			t.Fatalf("%d identities cached, bound %d", n, maxCachedViews)
		}
	}
}
