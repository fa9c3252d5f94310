// Package transportio implements the transport-io wire protocol, version 0
// (seed 002), in both roles: framing (§5), the handshake with its event
// table (§4), the emit lane with its 256-frame bound (§3.1, §9), calls in
// the returns and yields shapes with CALL_CREDIT (§3.2, §6), the unreliable
// lane with allocated origins and last-write-wins sequences (§7), one-byte
// reset codes and session close codes (§8, §10) and the session lifecycle
// (§11).
//
// The codecs (frame.go, handshake.go, datagram.go) are pure functions over
// []byte in the manner of quic-go's internal/wire: Parse, Append and Len per
// kind, no I/O. The accounting units (queue.go, origin.go) have no
// goroutines and take the time as an argument. Session (session.go) runs a
// session over a Carrier, which a mapping provides: WebTransport (all lanes),
// the §3.3 WebSocket mapping (emit lane, DATAGRAM frames) and stdio (emit
// lane only; a slow reader blocks and is never disconnected).
//
// Where the seed is ambiguous this package follows the decisions recorded in
// docs/conformance.md (the checklist of reference/transport-io.md).
package transportio
