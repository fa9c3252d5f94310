package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/sidecar-dev/sidecar/auth"
)

// RoleLimits is a role block: what narrows a role below what the rest
// of the configuration allows everyone (docs/operations.md "Roles and
// sharing"):
//
//	role "user" {
//	  tcp_allow = ["127.0.0.1:5432", "10.1.0.0/16"]
//	  deny      = ["files.write"]
//	}
//
// The block's label is a role: "owner", "user" or "viewer".
type RoleLimits struct {
	// TCPAllow, when set (not nil), narrows tcp.allow for the role: a
	// destination must be within tcp.allow and match one of these
	// entries, each an IP address or CIDR ("10.1.0.0/16"), optionally
	// with one port ("127.0.0.1:5432", "[::1]:5432"). An empty list
	// refuses every destination to the role.
	TCPAllow []string
	// Deny lists permissions (auth.Permission names: "terminal.create",
	// "files.read") refused to every identity of the role though the
	// role allows them.
	Deny []string
}

// roleNames are the labels a role block may have (auth.Roles; config
// does not import auth).
var roleNames = []string{"owner", "user", "viewer"}

// AllowEntry is one parsed tcp_allow entry: a prefix and a port (0:
// any).
type AllowEntry struct {
	Prefix netip.Prefix
	Port   int
}

// Contains reports whether addr:port matches the entry.
func (e AllowEntry) Contains(addr netip.Addr, port int) bool {
	return e.Prefix.Contains(addr.Unmap().WithZone("")) && (e.Port == 0 || e.Port == port)
}

// ParseAllowEntry parses a role's tcp_allow entry: "10.0.0.0/8",
// "127.0.0.1", "::1", "127.0.0.1:5432", "[::1]:5432".
func ParseAllowEntry(s string) (AllowEntry, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return AllowEntry{Prefix: p.Masked()}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		return AllowEntry{Prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil && ap.Port() != 0 {
		a := ap.Addr().Unmap()
		return AllowEntry{Prefix: netip.PrefixFrom(a, a.BitLen()), Port: int(ap.Port())}, nil
	}
	return AllowEntry{}, fmt.Errorf("%q is neither a CIDR (\"10.0.0.0/8\"), an IP address, nor an address with a port (\"127.0.0.1:5432\", \"[::1]:5432\")", s)
}

// decodeRoles decodes the role blocks of content into c.Roles.
func (c *Config) decodeRoles(blocks hcl.Blocks) hcl.Diagnostics {
	var diags hcl.Diagnostics
	seen := map[string]*hcl.Block{}
	for _, blk := range blocks {
		if blk.Type != "role" {
			continue
		}
		name := blk.Labels[0]
		if !slices.Contains(roleNames, name) {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid role block",
				Detail: fmt.Sprintf("role %q is not a role: write owner, user or viewer.", name), Subject: blk.LabelRanges[0].Ptr()})
			continue
		}
		if prev := seen[name]; prev != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate role block",
				Detail: fmt.Sprintf("Only one role %q block is allowed; another was defined at %s.", name, prev.DefRange), Subject: blk.DefRange.Ptr()})
			continue
		}
		seen[name] = blk
		var r RoleLimits
		fields := []field{{"tcp_allow", &r.TCPAllow}, {"deny", &r.Deny}}
		bc, d := blk.Body.Content(attrSchema(fields))
		diags = append(diags, d...)
		prefix := "role." + name + "."
		diags = append(diags, c.decodeAttrs(prefix, bc.Attributes, fields)...)
		if bc.Attributes["tcp_allow"] != nil && r.TCPAllow == nil {
			r.TCPAllow = []string{} // set, and empty: refuse every destination
		}
		if c.Roles == nil {
			c.Roles = map[string]RoleLimits{}
		}
		c.Roles[name] = r
	}
	return diags
}

// roles checks the role blocks' entries.
func (v *validator) roles() {
	names := make([]string, 0, len(v.c.Roles))
	for n := range v.c.Roles {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if !slices.Contains(roleNames, n) {
			v.bad("role", "%q is not a role: write owner, user or viewer", n)
			continue
		}
		for _, a := range v.c.Roles[n].TCPAllow {
			if _, err := ParseAllowEntry(a); err != nil {
				v.bad("role."+n+".tcp_allow", "%v", err)
			}
		}
		for _, d := range v.c.Roles[n].Deny {
			if _, err := auth.ParsePermission(d); err != nil {
				v.bad("role."+n+".deny", "%v", err)
			}
		}
	}
}

// RoleLimits returns the role blocks' deny lists as auth.RoleLimits
// (validated by Load; an unknown name is skipped).
func (c *Config) RoleLimits() auth.RoleLimits {
	l := auth.RoleLimits{}
	for n, r := range c.Roles {
		for _, d := range r.Deny {
			if p, err := auth.ParsePermission(d); err == nil {
				l[auth.Role(n)] |= auth.Perms(p)
			}
		}
	}
	return l
}

// TCPAllowText is how a refusal shows a role's tcp_allow: its entries,
// comma-separated, "nothing" when empty.
func TCPAllowText(list []string) string {
	if len(list) == 0 {
		return "nothing"
	}
	return strings.Join(list, ", ")
}
