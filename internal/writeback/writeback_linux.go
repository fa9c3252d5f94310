package writeback

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback starts writing [off, off+n) of f to the disk and does
// not wait; a failure only means the final fsync does the work.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
