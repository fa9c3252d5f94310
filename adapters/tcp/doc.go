// Package tcp is the TCP adapter of the sidecar's ahp-tcp: channels
// (reference/ahp.md §6b, v3, with our offset extension): the destination
// policy and dialer, the byte-exact encoding of tcp/data, tcp/eof and
// tcp/reset, and the machine's listening ports (RootState.ports).
//
// It holds no connection state: the host's channel (host/tcp.go) and the
// client (client/tcp.go) own the sockets and drive the windowed delivery
// engine; this package only checks, dials, encodes and decodes.
//
// Units: offsets are DecodedOffset (bytes of the TCP stream, after base64
// decoding); message sizes are delivery.UTF16Bytes of the exact JSON text.
package tcp
