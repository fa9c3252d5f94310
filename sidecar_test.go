package sidecar

import (
	"bytes"
	"os"
	"testing"
)

// TestDefaultConfigIsConfigHCL: the embedded default is the file itself.
func TestDefaultConfigIsConfigHCL(t *testing.T) {
	b, err := os.ReadFile("config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, DefaultConfig) || len(b) == 0 {
		t.Fatalf("DefaultConfig (%d bytes) differs from config.hcl (%d bytes)", len(DefaultConfig), len(b))
	}
}
