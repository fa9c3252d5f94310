package files

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Open flags: never follow a symbolic link at the last component, never
// block opening a FIFO (refused once its type is seen).
const (
	syscallNoFollow = syscall.O_NOFOLLOW
	syscallNonblock = syscall.O_NONBLOCK
)

// Lchtimes sets the access and modification times of name in dir
// without following it when it is a symbolic link (os.Root has no
// Lchtimes): relative to dir's own descriptor, so never outside it.
func Lchtimes(dir *os.Root, name string, t time.Time) error {
	d, err := dir.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	ts := unix.NsecToTimespec(t.UnixNano())
	if err := unix.UtimesNanoAt(int(d.Fd()), name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "lchtimes", Path: name, Err: err}
	}
	return nil
}
