package client

import "syscall"

// noFollow opens a partial file without following a symbolic link there.
const noFollow = syscall.O_NOFOLLOW
