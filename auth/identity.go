// Package auth names who is connected and what their role lets them do
// (DESIGN.md §5 "Identities"; docs/operations.md "Identities and roles").
//
// An Identity is what a listener's authentication decided about the
// request that opened a connection: a principal name and a role. The
// host checks the role of every request (never the client); the
// transports decide identities from bearer credentials.
package auth

import (
	"fmt"
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
}

// Anonymous is the identity of a connection that nothing authenticated
// (host.Server.ServeConn, in-process tests): the owner, named "".
var Anonymous = Identity{Role: Owner}

// String returns "name (role)".
func (id Identity) String() string {
	return fmt.Sprintf("%s (%s)", id.Name, id.Role)
}
