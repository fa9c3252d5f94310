package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/auth"
)

// TestRoleBlocks: role blocks are labeled by a role, one each; their
// tcp_allow entries are addresses, CIDRs or addresses with a port, and a
// bad one is reported at its line.
func TestRoleBlocks(t *testing.T) {
	for _, tt := range []struct {
		src, want string
	}{
		{`role "user" { tcp_allow = ["127.0.0.1:5432", "::1", "10.0.0.0/8", "[::1]:22"] }`, ""},
		{`role "admin" { tcp_allow = [] }`, `role "admin" is not a role: write owner, user or viewer.`},
		{`role "user" { tcp_allow = ["localhost:80"] }`, `Invalid role.user.tcp_allow: "localhost:80" is neither a CIDR`},
		{"role \"user\" {}\nrole \"user\" {}", `Only one role "user" block is allowed`},
		{`role "user" { tcp_deny = [] }`, `Unsupported argument`},
	} {
		p := writeFile(t, "roles.hcl", tt.src)
		c, err := Load(p)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.src, err)
			} else if got := c.Roles["user"].TCPAllow; len(got) != 4 {
				t.Errorf("%s: tcp_allow %q", tt.src, got)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.src, err, tt.want)
		}
	}
	c, err := Load(writeFile(t, "empty.hcl", `role "viewer" { tcp_allow = [] }`))
	if err != nil || c.Roles["viewer"].TCPAllow == nil || len(c.Roles["viewer"].TCPAllow) != 0 {
		t.Errorf("an empty tcp_allow: %+v, %v (want set and empty)", c, err)
	}
	e, _ := ParseAllowEntry("127.0.0.1:5432")
	if !e.Contains(netip.MustParseAddr("127.0.0.1"), 5432) || e.Contains(netip.MustParseAddr("127.0.0.1"), 5433) {
		t.Errorf("entry %+v", e)
	}
}

// TestRoleDeny: a role block's deny names permissions (an unknown one is
// an error at its line) and becomes auth.RoleLimits.
func TestRoleDeny(t *testing.T) {
	c, err := Load(writeFile(t, "deny.hcl", `role "user" { deny = ["terminal.create", "files.write"] }`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RoleLimits()[auth.User].List(); !slices.Equal(got, []auth.Permission{auth.TerminalCreate, auth.FilesWrite}) {
		t.Errorf("RoleLimits: %v", got)
	}
	_, err = Load(writeFile(t, "bad.hcl", "\nrole \"user\" { deny = [\"terminal.fly\"] }"))
	if err == nil || !strings.Contains(err.Error(), `role.user.deny: unknown permission "terminal.fly"`) {
		t.Errorf("unknown permission: %v", err)
	}
}
