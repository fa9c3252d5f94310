package files

import "syscall"

// Open flags: never follow a symbolic link at the last component, never
// block opening a FIFO (refused once its type is seen).
const (
	syscallNoFollow = syscall.O_NOFOLLOW
	syscallNonblock = syscall.O_NONBLOCK
)
