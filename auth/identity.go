// Package auth names who is connected and what their role lets them do
// (DESIGN.md §5 "Identities"; docs/operations.md "Identities and roles").
//
// An Identity is what a listener's authentication decided about the
// request that opened a connection: a principal name and a role. The
// host checks the role of every request (never the client); the
// transports decide identities from bearer credentials.
package auth

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Role is what an identity may do in the host.
type Role string

// The roles, from most to least allowed.
const (
	// Owner may do everything, including killing others' terminals and
	// changing claims.
	Owner Role = "owner"
	// User has their own terminals, forwards within tcp.allow, files and
	// previews.
	User Role = "user"
	// Viewer may list, read telemetry, and attach read-only to terminals
	// shared with them.
	Viewer Role = "viewer"
)

// Roles lists every role, most allowed first.
var Roles = []Role{Owner, User, Viewer}

// ParseRole returns the role named s ("owner", "user" or "viewer"), or
// an error naming the roles there are.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown role %q (owner, user or viewer)", s)
}

// Identity is who authenticated a connection.
type Identity struct {
	// Name is the principal: "token" for the single auth.token, an entry's
	// name in the tokens file, an OIDC claim's value, "stdio" for a
	// client on the daemon's stdin. A reconnect resumes a client's state
	// only for the same Name; quotas per principal count by it.
	Name string
	// Role is what Name may do.
	Role Role
	// Method is how Name was authenticated: "token", "tokens_file",
	// "oidc", "ticket", "stdio" (for logs and the audit trail).
	Method string
	// Expiry is when the credential stops being valid (zero: never). A
	// connection past it is closed as unauthorized "expired" (seed 002
	// §4, §10.2).
	Expiry time.Time
	// Deny is the permissions refused to Name though Role allows them:
	// its tokens file entry's deny (docs/operations.md "Identities").
	Deny PermSet
	// RoleDeny is the permissions refused to every identity of Role: the
	// role block's deny (config.RoleLimits.Deny), set by the
	// authenticator (RoleLimits.Apply).
	RoleDeny PermSet
	// TCPAllow, when not nil, narrows where Name may open TCP
	// connections below tcp.allow and the role's tcp_allow: its tokens
	// file entry's tcp_allow. (A pointer keeps Identity comparable.)
	TCPAllow *TCPLimit
}

// TCPLimit is an identity's own tcp_allow: entries as
// config.ParseAllowEntry reads them ("127.0.0.1:5432", "10.0.0.0/8");
// none refuses every destination.
type TCPLimit struct {
	Entries []string
}

// PermSet is a set of permissions (a bit each, in the order of
// Permissions), comparable so that Identity is.
type PermSet uint32

// Perms returns the set of ps.
func Perms(ps ...Permission) PermSet {
	var s PermSet
	for _, p := range ps {
		if i := slices.Index(Permissions, p); i >= 0 {
			s |= 1 << i
		}
	}
	return s
}

// Has reports whether p is in s.
func (s PermSet) Has(p Permission) bool {
	i := slices.Index(Permissions, p)
	return i >= 0 && s&(1<<i) != 0
}

// List returns s's permissions in the order of Permissions.
func (s PermSet) List() []Permission {
	var out []Permission
	for i, p := range Permissions {
		if s&(1<<i) != 0 {
			out = append(out, p)
		}
	}
	return out
}

// Allows reports whether id may do p: its role allows it and neither
// its role block nor its own entry denies it.
func (id Identity) Allows(p Permission) bool {
	return id.Role.Allows(p) && !id.RoleDeny.Has(p) && !id.Deny.Has(p)
}

// RoleLimits is what the role blocks of the configuration take away
// from every identity of a role (config role "user" { deny = [...] }).
type RoleLimits map[Role]PermSet

// Apply returns id with its role's denied permissions (RoleDeny).
func (l RoleLimits) Apply(id Identity) Identity {
	if d := l[id.Role]; d != 0 {
		id.RoleDeny = d
	}
	return id
}

// WithRoleLimits returns a as an Authenticator whose identities carry
// l's denials for their role.
func WithRoleLimits(a Authenticator, l RoleLimits) Authenticator {
	if len(l) == 0 {
		return a
	}
	return Func(func(ctx context.Context, credential string) (Identity, error) {
		id, err := a.Authenticate(ctx, credential)
		if err != nil {
			return id, err
		}
		return l.Apply(id), nil
	})
}

// Anonymous is the identity of a connection that nothing authenticated
// (host.Server.ServeConn, in-process tests): the owner, named "".
var Anonymous = Identity{Role: Owner}

// String returns "name (role)".
func (id Identity) String() string {
	return fmt.Sprintf("%s (%s)", id.Name, id.Role)
}
