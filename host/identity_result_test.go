package host_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/rpc"
)

// TestInitializeIdentity: the initialize and reconnect results carry our
// extension identity, the connection's principal and role, as exact
// JSON; each connection gets its own.
func TestInitializeIdentity(t *testing.T) {
	srv := newServer(t, func(c *config.Config) { c.Journal.ReconnectGrace = time.Hour })
	for _, id := range []auth.Identity{
		{Name: "alice", Role: auth.Owner, Method: "tokens_file"},
		{Name: "bob", Role: auth.User, Method: "tokens_file"},
		{Name: "vera", Role: auth.Viewer, Method: "oidc"},
	} {
		hc := connectIdentity(t, srv, id)
		r, _ := hc.mustCall(rpc.MethodInitialize, rpc.InitializeParams{Channel: rpc.RootChannel, ProtocolVersions: []string{"0.5.0"}, ClientID: id.Name + "-1"})
		want := `"identity":{"principal":"` + id.Name + `","role":"` + string(id.Role) + `"}`
		if !strings.Contains(string(r.Result), want) {
			t.Fatalf("%s: initialize result lacks %s: %s", id, want, r.Result)
		}
		var res rpc.InitializeResult
		if err := json.Unmarshal(r.Result, &res); err != nil {
			t.Fatal(err)
		}
		hc.cut()

		again := connectIdentity(t, srv, id)
		m, _ := again.reconnect(resumeParams(id.Name+"-1", res.Resume.Token, nil))
		if m.Error != nil {
			t.Fatalf("%s: reconnect: %s", id, m.Raw)
		}
		if !strings.Contains(string(m.Result), want) {
			t.Fatalf("%s: reconnect result lacks %s: %s", id, want, m.Result)
		}
	}
}
