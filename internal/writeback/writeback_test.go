package writeback

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestWriter: what is written lands in the file in order, from the
// offset given, and the writeback start tracks whole chunks.
func TestWriter(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := []byte("prefix")
	if _, err := f.Write(head); err != nil {
		t.Fatal(err)
	}
	w := New(f, int64(len(head)))
	want := bytes.Clone(head)
	block := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	for i := range 20 {
		b := block[:len(block)-i]
		if n, err := w.Write(b); n != len(b) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		want = append(want, b...)
	}
	if w.off != int64(len(want)) || w.started > w.off || w.off-w.started >= Chunk || w.started == int64(len(head)) {
		t.Errorf("off %d started %d, want off %d and writeback started past the first chunk", w.off, w.started, len(want))
	}
	got, err := os.ReadFile(f.Name())
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("file: %d bytes, exact %v, %v", len(got), bytes.Equal(got, want), err)
	}
}
