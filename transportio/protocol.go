package transportio

import "fmt"

// Version is the protocol version this package speaks (§4.2). During Stage 0
// peers require exact equality.
const Version = 0

// FrameType is the type byte of a stream frame (§5.2).
type FrameType uint8

// Frame types (§5.2). 0x00 and 0x0A–0xFF are reserved and invalid.
const (
	FrameHandshake    FrameType = 0x01 // emit stream, frame 0 only
	FrameEmit         FrameType = 0x02 // emit stream
	FrameCallRequest  FrameType = 0x03 // call stream, first frame only
	FrameCallResponse FrameType = 0x04 // call stream
	FrameCallError    FrameType = 0x05 // call stream, terminal
	FrameJoin         FrameType = 0x06 // emit stream, server to client only
	FrameLeave        FrameType = 0x07 // emit stream, server to client only
	FrameCallCredit   FrameType = 0x08 // call stream, initiator to responder, yields only
	FrameDatagram     FrameType = 0x09 // emit stream, WebSocket mapping only (§3.3)
)

var frameTypeNames = [...]string{"", "HANDSHAKE", "EMIT", "CALL_REQUEST", "CALL_RESPONSE", "CALL_ERROR", "JOIN", "LEAVE", "CALL_CREDIT", "DATAGRAM"}

func (t FrameType) String() string {
	if t >= 1 && int(t) < len(frameTypeNames) {
		return frameTypeNames[t]
	}
	return fmt.Sprintf("reserved(0x%02x)", uint8(t))
}

// Valid reports whether t is a defined frame type.
func (t FrameType) Valid() bool { return t >= FrameHandshake && t <= FrameDatagram }

// isCallFrame reports whether t carries the 16 MiB call cap (§5.1).
func (t FrameType) isCallFrame() bool {
	return t == FrameCallRequest || t == FrameCallResponse || t == FrameCallError
}

// Codec is the codec byte of a frame or datagram (§5.3).
type Codec uint8

// Codecs (§5.3). 0x00 and 0x03–0xFF are reserved; a version 0 peer rejects
// them with WT_UNSUPPORTED_CODEC.
const (
	CodecJSON  Codec = 0x01 // JSON, UTF-8 encoded
	CodecBytes Codec = 0x02 // the application's bytes as they are
)

func (c Codec) String() string {
	switch c {
	case CodecJSON:
		return "JSON"
	case CodecBytes:
		return "bytes"
	}
	return fmt.Sprintf("reserved(0x%02x)", uint8(c))
}

// Valid reports whether c is a version 0 codec.
func (c Codec) Valid() bool { return c == CodecJSON || c == CodecBytes }

// EventIDNotApplicable is the event id of frames whose meaning comes from the
// stream or their own payload (§5.4).
const EventIDNotApplicable uint32 = 0

// ResetCode is a stream reset code: one byte, because the browser API clamps
// stream error codes to an octet (§8, §10.1).
type ResetCode uint8

// Reset codes (§10.1). Every other value is reserved.
const (
	ResetNoError        ResetCode = 0 // implicit in a clean FIN; never sent explicitly
	ResetAborted        ResetCode = 1 // the initiator cancelled
	ResetTooManyStreams ResetCode = 9 // over MaxConcurrentCalls inbound call streams
)

// CloseCode is a session close code (§10.2), u32 in the WebTransport close.
type CloseCode uint32

// Session close codes (§10.2).
const (
	CloseNoError                 CloseCode = 0    // normal close; also a lost connection (§11)
	CloseProtocolVersionMismatch CloseCode = 1000 // peers disagree on v
	CloseContractMismatch        CloseCode = 1001 // a shared event is declared differently
	CloseHandshakeTimeout        CloseCode = 1002 // no handshake within HandshakeTimeout
	ClosePeerTooSlow             CloseCode = 1003 // emit queue exceeded MaxEmitQueue
	CloseProtocolError           CloseCode = 1004 // unrecoverable framing violation
	CloseIdleTimeout             CloseCode = 1005 // nothing received within the idle deadline (§3.3)
	CloseReliabilityRefused      CloseCode = 1006 // reliable-only transport, undeclared unreliable event
	CloseUnauthorized            CloseCode = 1007 // the listener's authorize refused; final
)

var closeNames = map[CloseCode]string{
	CloseNoError:                 "WT_NO_ERROR",
	CloseProtocolVersionMismatch: "WT_PROTOCOL_VERSION_MISMATCH",
	CloseContractMismatch:        "WT_CONTRACT_MISMATCH",
	CloseHandshakeTimeout:        "WT_HANDSHAKE_TIMEOUT",
	ClosePeerTooSlow:             "WT_PEER_TOO_SLOW",
	CloseProtocolError:           "WT_PROTOCOL_ERROR",
	CloseIdleTimeout:             "WT_IDLE_TIMEOUT",
	CloseReliabilityRefused:      "WT_RELIABILITY_REFUSED",
	CloseUnauthorized:            "WT_UNAUTHORIZED",
}

func (c CloseCode) String() string {
	if n, ok := closeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("close(%d)", uint32(c))
}

// Known reports whether c is in the §10.2 table.
func (c CloseCode) Known() bool { _, ok := closeNames[c]; return ok }

// WebSocketCode is the WebSocket close code carrying c (§3.3): 1000 for
// WT_NO_ERROR, 3000+c otherwise.
func (c CloseCode) WebSocketCode() int {
	if c == CloseNoError {
		return 1000
	}
	return 3000 + int(c)
}

// CloseCodeFromWebSocket maps a WebSocket close code back to a session close
// code. ok is false for a code outside the §3.3 table (1006 lost
// connection, 1001 going away, …), which is the socket's own and not a
// session code (§3.3, §11).
func CloseCodeFromWebSocket(ws int) (code CloseCode, ok bool) {
	if ws == 1000 {
		return CloseNoError, true
	}
	if ws >= 4000 && ws <= 4999 {
		return CloseCode(ws - 3000), true
	}
	return CloseNoError, false
}

// Lane is the delivery guarantee an event declares (§3).
type Lane string

// Lanes.
const (
	LaneReliable   Lane = "reliable"
	LaneUnreliable Lane = "unreliable"
)

// Kind names the mapping that carries a session.
type Kind string

// Mappings.
const (
	KindWebTransport Kind = "webtransport"
	KindWebSocket    Kind = "websocket"
	KindStdio        Kind = "stdio"
)

// ReliableOnly reports whether the mapping carries only the reliable lane
// (§2, §3.3).
func (k Kind) ReliableOnly() bool { return k != KindWebTransport }
