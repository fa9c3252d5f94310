package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
)

// Dialer opens destinations for createTcpConnection: it resolves the
// host, checks every resolved address with its port against the Policy
// (a name that resolves to any refused address is refused whole, so DNS
// cannot steer a dial to a metadata address or the daemon's own
// listener), then dials the allowed addresses in order
// within Timeout.
type Dialer struct {
	Policy  *Policy
	Timeout time.Duration // whole dial, name resolution included; 0 means 10 s
	// Resolver resolves names; nil means net.DefaultResolver.
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
	// Roles narrows Policy for a role (config role block's tcp_allow):
	// DialAs refuses a destination of that role outside it.
	Roles map[auth.Role]*RoleAllow
}

// RoleAllow is a role's tcp_allow (config.RoleLimits): the entries a
// destination must match, on top of Policy.
type RoleAllow struct {
	role    auth.Role
	who     string // set: an identity's own tcp_allow (its tokens file entry)
	entries []config.AllowEntry
	text    string
}

// NewRoleAllow parses role's tcp_allow list (config.ParseAllowEntry).
func NewRoleAllow(role auth.Role, list []string) (*RoleAllow, error) {
	r := &RoleAllow{role: role, text: config.TCPAllowText(list)}
	for _, s := range list {
		e, err := config.ParseAllowEntry(s)
		if err != nil {
			return nil, fmt.Errorf("role %q tcp_allow: %w", role, err)
		}
		r.entries = append(r.entries, e)
	}
	return r, nil
}

// check returns "" when addr:port is within r, else the refusal's detail.
func (r *RoleAllow) check(addr netip.Addr, port int) string {
	for _, e := range r.entries {
		if e.Contains(addr, port) {
			return ""
		}
	}
	if r.who != "" {
		return fmt.Sprintf(": permission denied: tcp.open for %s is limited to the tcp_allow of its tokens file entry (%s)", r.who, r.text)
	}
	return fmt.Sprintf(": permission denied: tcp.open for role %s is limited to its tcp_allow (%s)", r.role, r.text)
}

// RolesOf returns the roles' narrowings of tcp.allow (Dialer.Roles):
// one for each role block with tcp_allow set.
func RolesOf(roles map[string]config.RoleLimits) (map[auth.Role]*RoleAllow, error) {
	out := map[auth.Role]*RoleAllow{}
	for name, r := range roles {
		if r.TCPAllow == nil {
			continue
		}
		ra, err := NewRoleAllow(auth.Role(name), r.TCPAllow)
		if err != nil {
			return nil, err
		}
		out[auth.Role(name)] = ra
	}
	return out, nil
}

// Narrowed reports whether role has a tcp_allow of its own (Roles).
func (d *Dialer) Narrowed(role auth.Role) bool { return d.Roles[role] != nil }

// NarrowedFor reports whether id's destinations are narrowed beyond
// tcp.allow: by its role's tcp_allow or its own (Identity.TCPAllow).
func (d *Dialer) NarrowedFor(id auth.Identity) bool {
	return d.Narrowed(id.Role) || id.TCPAllow != nil
}

// CheckAs makes the checks DialAs makes of a resolved address before
// dialing it, without dialing: nil when role may reach addr:port, else
// an *OpenError KindDenied with the same message (the preview checks a
// request with it, as a pooled connection to the app is not dialed
// again).
func (d *Dialer) CheckAs(role auth.Role, addr netip.Addr, port int) error {
	return d.CheckFor(auth.Identity{Role: role}, addr, port)
}

// CheckFor is CheckAs for id: its role's tcp_allow and its own, as
// DialFor checks them.
func (d *Dialer) CheckFor(id auth.Identity, addr netip.Addr, port int) error {
	detail := d.deny(id.Role, addr, port)
	if own := ownAllow(id); detail == "" && own != nil {
		detail = own.check(addr, port)
	}
	if detail != "" {
		return &OpenError{Kind: KindDenied, Host: addr.Unmap().String(), Port: port, Addr: addr.Unmap().String(), Detail: detail}
	}
	return nil
}

// ownAllow is id's own tcp_allow (its tokens file entry's), nil when it
// has none.
func ownAllow(id auth.Identity) *RoleAllow {
	if id.TCPAllow == nil {
		return nil
	}
	own := &RoleAllow{text: config.TCPAllowText(id.TCPAllow.Entries), who: id.Name}
	for _, s := range id.TCPAllow.Entries {
		if e, err := config.ParseAllowEntry(s); err == nil { // the tokens file's Parse validated it
			own.entries = append(own.entries, e)
		}
	}
	return own
}

// deny returns "" when role may reach a:port (Policy, then the role's
// tcp_allow), else the refusal's detail.
func (d *Dialer) deny(role auth.Role, a netip.Addr, port int) string {
	if reason, ok := d.Policy.CheckDest(a, port); !ok {
		return ": " + reason
	}
	if ra := d.Roles[role]; ra != nil {
		return ra.check(a, port)
	}
	return ""
}

// LoopbackSendBuffer is the send buffer (SO_SNDBUF, bytes; Linux keeps
// twice this) of a connection to a loopback destination, the usual one.
// The host credits a client's bytes once written to the socket; with the
// kernel's autotuned buffer (up to net.ipv4.tcp_wmem's 4 MiB) a destination
// that does not read took about 4 MiB of every upload into kernel memory
// before the client saw any backpressure, and its credits looked like a
// fast reader's. 256 KiB is about half a millisecond of the fastest
// forwarded stream on loopback, where acknowledgements come at once.
// Other destinations keep autotuning (their round trips need it).
const LoopbackSendBuffer = 128 << 10

// DefaultDialTimeout is used when Dialer.Timeout is zero.
const DefaultDialTimeout = 10 * time.Second

// Dial resolves host, checks and dials it. Errors are *OpenError.
func (d *Dialer) Dial(ctx context.Context, host string, port int) (*net.TCPConn, error) {
	return d.DialAs(ctx, "", host, port)
}

// DialAs is Dial for a caller of role: a destination must also be within
// the role's tcp_allow (Roles), if it has one; else *OpenError
// KindDenied naming it.
func (d *Dialer) DialAs(ctx context.Context, role auth.Role, host string, port int) (*net.TCPConn, error) {
	return d.DialFor(ctx, auth.Identity{Role: role}, host, port)
}

// DialFor is DialAs for id's role, and a destination must also be within
// id's own tcp_allow (auth.Identity.TCPAllow: its tokens file entry's),
// if it has one; else *OpenError KindDenied naming the rule.
func (d *Dialer) DialFor(ctx context.Context, id auth.Identity, host string, port int) (*net.TCPConn, error) {
	role, own := id.Role, ownAllow(id)
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fail := func(kind FailKind, addr, detail string, err error) error {
		return &OpenError{Kind: kind, Host: host, Port: port, Addr: addr, Detail: detail, Err: err}
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		var r interface {
			LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
		} = net.DefaultResolver
		if d.Resolver != nil {
			r = d.Resolver
		}
		addrs, err = r.LookupNetIP(ctx, "ip", host)
		if err != nil {
			var dnsErr *net.DNSError
			switch {
			case ctx.Err() != nil:
				return nil, fail(KindTimeout, "", fmt.Sprintf(" resolving the name after %v", timeout), err)
			case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
				return nil, fail(KindNoSuchHost, "", "", err)
			}
			return nil, fail(KindFailed, "", "cannot resolve the name", err)
		}
		if len(addrs) == 0 {
			return nil, fail(KindNoSuchHost, "", "", nil)
		}
	}
	for _, a := range addrs {
		if detail := d.deny(role, a, port); detail != "" {
			return nil, fail(KindDenied, a.Unmap().String(), detail, nil)
		}
		if own != nil {
			if detail := own.check(a, port); detail != "" {
				return nil, fail(KindDenied, a.Unmap().String(), detail, nil)
			}
		}
	}
	var last error
	var lastAddr string
	var nd net.Dialer
	for _, a := range addrs {
		target := net.JoinHostPort(a.Unmap().String(), strconv.Itoa(port))
		c, err := nd.DialContext(ctx, "tcp", target)
		if err == nil {
			tc := c.(*net.TCPConn)
			_ = tc.SetNoDelay(true)
			// Armed: should the daemon die (SIGKILL, OOM), the kernel
			// closes the socket with an RST, not the FIN of a complete
			// upload; a graceful close disarms it (Channel.close).
			_ = tc.SetLinger(0)
			if a.IsLoopback() {
				_ = tc.SetWriteBuffer(LoopbackSendBuffer)
			}
			return tc, nil
		}
		last, lastAddr = err, a.Unmap().String()
		if ctx.Err() != nil {
			break
		}
	}
	return nil, classify(last, host, lastAddr, port, timeout, ctx)
}

// classify turns a dial error into an *OpenError.
func classify(err error, host, addr string, port int, timeout time.Duration, ctx context.Context) error {
	e := &OpenError{Kind: KindFailed, Host: host, Port: port, Addr: addr, Err: err}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		e.Kind = KindRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		e.Kind = KindUnreachable
	case ctx.Err() == context.DeadlineExceeded, errors.As(err, &ne) && ne.Timeout():
		e.Kind = KindTimeout
		e.Detail = fmt.Sprintf(" after %v", timeout)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		e.Detail = "address not available"
	case errors.Is(err, context.Canceled):
		e.Detail = "the client went away"
	}
	return e
}
