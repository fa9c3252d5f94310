// Package writeback starts the kernel's writeback of a file being
// written as it grows, so that the fsync that ends a file transfer
// (issue 30: a file is synced before it is renamed into place) finds
// little left to write. Without it the pages of a 1 GiB file stay dirty
// until that fsync (the kernel's background writeback starts only past
// dirty_background_ratio, 10 % of memory), which then writes them all
// while the transfer waits.
package writeback

import "os"

// Chunk is how many bytes are written before their writeback is
// started.
const Chunk = 8 << 20

// Writer writes to f (at its current offset, which it tracks from off)
// and, each Chunk bytes, asks the kernel to start writing them to the
// disk without waiting (sync_file_range SYNC_FILE_RANGE_WRITE on Linux;
// nothing elsewhere).
type Writer struct {
	f       *os.File
	off     int64 // the file offset of the next byte written
	started int64 // writeback started below this offset
}

// New returns a Writer on f whose next write lands at offset off.
func New(f *os.File, off int64) *Writer { return &Writer{f: f, off: off, started: off} }

// Write writes p to the file.
func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.started >= Chunk {
		startWriteback(w.f, w.started, w.off-w.started)
		w.started = w.off
	}
	return n, err
}
