package client

import (
	"os"
	"path"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// noFollow opens a partial file without following a symbolic link there.
const noFollow = syscall.O_NOFOLLOW

// lchtimesIn sets the times of entry name inside root without following
// it (a symbolic link keeps its own mtime), relative to the descriptor
// of its directory inside root, so never outside it.
func lchtimesIn(root *os.Root, name string, t time.Time) error {
	d, err := root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer d.Close()
	ts := unix.NsecToTimespec(t.UnixNano())
	if err := unix.UtimesNanoAt(int(d.Fd()), path.Base(name), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "lchtimes", Path: name, Err: err}
	}
	return nil
}
