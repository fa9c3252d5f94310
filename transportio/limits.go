package transportio

import "time"

// Limits of version 0. Each one is normative unless marked otherwise; the
// comment says what it bounds and what happens at the limit.
const (
	// FrameHeaderLen is the fixed overhead of a stream frame: 4 length
	// bytes plus 8 header bytes (§5.1).
	FrameHeaderLen = 12
	// MinFrameLength is the smallest Length field: the 8 header bytes and at
	// least one payload byte. Smaller is a protocol error (§5.1).
	MinFrameLength = 9
	// MaxPayload caps every frame except the call frames: 1 MiB. A larger
	// Length is WT_PAYLOAD_TOO_LARGE, decided from the header (§5.1).
	MaxPayload = 1 << 20
	// MaxCallPayload caps CALL_REQUEST, CALL_RESPONSE and CALL_ERROR: 16 MiB.
	MaxCallPayload = 16 << 20

	// DatagramHeaderLen is the fixed overhead of a datagram (§7.2).
	DatagramHeaderLen = 13
	// DefaultDatagramSize is the effective datagram size when the transport
	// reports none (§7.4): payloads are then at most 1011 bytes.
	DefaultDatagramSize = 1024

	// MaxEmitQueue bounds the frames pending on the emit lane per peer
	// (queued or write not complete). One more closes the session as
	// WT_PEER_TOO_SLOW; the lane never discards (§9).
	MaxEmitQueue = 256
	// DatagramRingSize bounds queued outbound datagrams per peer; on
	// overflow the oldest is discarded and counted as overflowDropped (§9).
	DatagramRingSize = 64
	// DatagramTTL: a queued datagram older than this at dequeue is
	// discarded and counted as staleDropped (§9).
	DatagramTTL = 150 * time.Millisecond
	// DatagramLaneMark: on the WebSocket mapping, DATAGRAM frames move from
	// the ring onto the emit lane only while it holds fewer frames than
	// this, so a burst can never close the session as WT_PEER_TOO_SLOW
	// (§3.3).
	DatagramLaneMark = 32

	// InitialCallCredit is a yields responder's starting window (§6.6).
	InitialCallCredit = 32
	// CallCreditBatch is the initiator's refill batch; never above the
	// initial window, or both sides wait for ever (§6.6).
	CallCreditBatch = 16
	// MaxConcurrentCalls bounds inbound call streams per session; the excess
	// stream is reset with WT_TOO_MANY_STREAMS unread (§10.1).
	MaxConcurrentCalls = 256

	// HandshakeTimeout: no valid handshake within this of establishment
	// closes the session as WT_HANDSHAKE_TIMEOUT (§4.1).
	HandshakeTimeout = 5000 * time.Millisecond
	// KeepaliveInterval: a WebSocket peer that has sent nothing for this
	// long sends an empty binary message (§3.3).
	KeepaliveInterval = 15000 * time.Millisecond
	// IdleTimeout: a WebSocket peer that has received nothing for this long
	// closes the session as WT_IDLE_TIMEOUT (§3.3).
	IdleTimeout = 45000 * time.Millisecond

	// SequenceRetention: receiver (origin, event) state is forgotten after
	// this long without a datagram for the pair (§7.3).
	SequenceRetention = 60 * time.Second
	// OriginQuarantine: a released origin returns to the pool no sooner
	// than this (§7.3).
	OriginQuarantine = 120 * time.Second
	// OrdinalQuarantine: a departed host's ordinal is reallocated no sooner
	// than this (§7.3).
	OrdinalQuarantine = 300 * time.Second
	// MaxHostOrdinals is the number of 10-bit host ordinals (§7.3).
	MaxHostOrdinals = 1024
	// originCounterBits is the per-host counter width under the ordinal.
	originCounterBits = 22

	// MaxCloseReason caps a session close reason in bytes (§10.2), cut on a
	// character boundary.
	MaxCloseReason = 1024
	// MaxWebSocketCloseReason caps a close reason on the WebSocket mapping
	// (§3.3) and a refusal reason everywhere (§4).
	MaxWebSocketCloseReason = 123
	// MaxCallErrorMessage caps the message of a CALL_ERROR we send, in bytes.
	MaxCallErrorMessage = 1024
)
