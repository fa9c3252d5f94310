package pty

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/rpc"
)

// TestEncodeBufBound: the envelope a terminal encodes for one PTY read
// (ReadChunk bytes) fits the buffer it keeps between outputs
// (MaxEncodeBuf) even in the worst case, every byte a control character
// escaped as \u00XX, with the longest terminal URI: the kept buffer never
// has to grow past its bound.
func TestEncodeBufBound(t *testing.T) {
	uri := rpc.TerminalScheme + "/" + strings.Repeat("t", MaxTerminalID)
	worst := AppendDataHead(nil, uri, bytes.Repeat([]byte{0x01}, ReadChunk))
	worst = append(worst, "18446744073709551615"+rpc.ActionEnvelopeEnd...)
	if len(worst) > MaxEncodeBuf {
		t.Errorf("worst-case envelope of one read: %d bytes, over MaxEncodeBuf (%d)", len(worst), MaxEncodeBuf)
	}
	if !strings.Contains(string(worst), `\u0001`) {
		t.Fatalf("control characters not escaped as \\u0001: %.80s", worst)
	}
}
