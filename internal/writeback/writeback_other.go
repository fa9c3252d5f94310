//go:build !linux

package writeback

import "os"

func startWriteback(*os.File, int64, int64) {}
