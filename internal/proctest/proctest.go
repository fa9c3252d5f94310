// Package proctest helps tests that measure processes.
package proctest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CPUTicks is the CPU time (user + system, clock ticks) process pid has
// used, from /proc/PID/stat.
func CPUTicks(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command may hold spaces and parentheses
	if i < 0 || i+2 > len(s) {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[i+2:]) // from field 3, state, on
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	utime, err1 := strconv.Atoi(f[11]) // field 14
	stime, err2 := strconv.Atoi(f[12]) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return utime + stime, nil
}

// WaitBusy waits, for at most 30 s, until process pid has used ticks of
// CPU time: on a machine loaded many times over, a child just started may
// not have run at all yet, and a test that measures it busy would fail.
func WaitBusy(t testing.TB, pid, ticks int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := CPUTicks(pid)
		if err != nil {
			t.Fatal(err)
		}
		if n >= ticks {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d used %d clock ticks of CPU in 30 s, want %d", pid, n, ticks)
		}
		time.Sleep(10 * time.Millisecond) // a bounded poll of /proc, not a synchronisation
	}
}
