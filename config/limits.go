package config

// Bounds that Validate enforces on top of "greater than zero". Each says what it protects.
const (
	// MinMaximumFrameBytes is the smallest delivery.maximum_frame_bytes (UTF-16 bytes).
	// The Windowed Delivery spec requires maximumFrameBytes to be at least 1024 in both
	// directions, so a channel/frame fragment can always carry at least one character.
	MinMaximumFrameBytes = 1024

	// MaxMaximumFrameBytes is the largest delivery.maximum_frame_bytes (UTF-16 bytes).
	// Every JSON-RPC message travels as one transport-io EMIT frame of at most 1 MiB of
	// UTF-8. Text in the BMP above U+07FF takes 3 UTF-8 bytes for 2 UTF-16 bytes, so
	// 512 KiB of UTF-16 can grow to 768 KiB of UTF-8 and still fit with its envelope.
	MaxMaximumFrameBytes = 512 * 1024

	// MinTCPWindowBytes is the smallest tcp.window_bytes (UTF-16 bytes). A forwarded
	// connection carries at most one window per round trip, and a window of base64 in
	// UTF-16 holds 3/8 of its size in stream bytes: 64 KiB is 24 KiB a round trip, already
	// under 10 Mbit/s at 20 ms. Smaller windows are legal on the wire but only a mistake
	// here (a value in KiB or stream bytes meant as UTF-16 bytes).
	MinTCPWindowBytes = 64 * 1024

	// MaxTransportQueueFrames is the largest delivery.transport_queue_frames. A
	// transport-io peer closes the session (WT_PEER_TOO_SLOW) when 256 emit frames are
	// pending; the transport queue must stay below that.
	MaxTransportQueueFrames = 255

	// MaxTokenFileBytes bounds how much of auth.token_file ResolveToken reads: a token
	// file is one line; anything bigger is a mistake (a wrong path), not a token.
	MaxTokenFileBytes = 4096
)
