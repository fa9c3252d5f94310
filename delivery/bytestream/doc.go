// Package bytestream is the codec of byte-stream channels, shared by both
// ends (the host's adapters and the client library): the data, end of
// stream and reset messages of a channel whose messages rpc.StreamMethods
// names (the TCP channel's: tcp/data, tcp/eof, tcp/reset), the decoded-byte
// offsets that make such a stream resumable, the binary form of a data
// message that transports carry without looking inside (binary.go), and
// what a sender retains for a resume (Retained).
//
// It knows no channel kind: a kind gives its method names, and the same
// code serves every byte stream (seed 001 "TCP byte offsets", DESIGN.md §6;
// docs/protocol.md "TCP channels" and "transport-io").
package bytestream

import "errors"

// ErrProtocol marks a malformed data or end-of-stream message (bad base64,
// a gap in the offsets, data after the end of stream) or a resume whose
// offsets do not match. It ends the channel with a reset, never the whole
// connection.
var ErrProtocol = errors.New("bytestream: protocol error")
