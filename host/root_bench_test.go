package host

import (
	"fmt"
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
