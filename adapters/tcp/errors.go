package tcp

import (
	"fmt"
	"strings"
)

// FailKind classifies why a destination could not be opened. The host maps
// KindDenied to PermissionDenied (-32009) and every other kind to
// TcpConnectionOpenFailed (-32012).
type FailKind int

const (
	// KindDenied: a resolved address is not allowed by tcp.allow.
	KindDenied FailKind = iota + 1
	// KindRefused: nothing listens at the destination (ECONNREFUSED).
	KindRefused
	// KindTimeout: the dial (name resolution included) took longer than
	// tcp.dial_timeout.
	KindTimeout
	// KindNoSuchHost: the name does not resolve.
	KindNoSuchHost
	// KindUnreachable: no route to the host or network.
	KindUnreachable
	// KindFailed: any other failure.
	KindFailed
)

// OpenError is why a destination could not be opened. Its message is meant
// for a person at the client and never carries raw system error text.
type OpenError struct {
	Kind FailKind
	Host string // as requested
	Port int
	Addr string // the resolved address concerned, if any
	// Detail completes the message (the rule that refused, the timeout).
	Detail string
	// Err is the underlying error, for logs only.
	Err error
}

func (e *OpenError) Error() string {
	dest := joinHostPort(e.Host, e.Port)
	switch e.Kind {
	case KindDenied:
		what := dest
		if e.Addr != "" && e.Addr != e.Host {
			what = fmt.Sprintf("%s (%s)", dest, e.Addr)
		}
		return fmt.Sprintf("connect to %s not allowed by policy%s", what, e.Detail)
	case KindRefused:
		return fmt.Sprintf("connect to %s refused", dest)
	case KindTimeout:
		return fmt.Sprintf("connect to %s timed out%s", dest, e.Detail)
	case KindNoSuchHost:
		return fmt.Sprintf("cannot resolve %q: no such host", e.Host)
	case KindUnreachable:
		return fmt.Sprintf("connect to %s failed: no route to host", dest)
	}
	if e.Detail != "" {
		return fmt.Sprintf("connect to %s failed: %s", dest, e.Detail)
	}
	return fmt.Sprintf("connect to %s failed", dest)
}

func (e *OpenError) Unwrap() error { return e.Err }

func joinHostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}
