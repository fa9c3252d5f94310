package proctest

import (
	"os"
	"os/exec"
	"testing"
)

// TestCPUTicks: a busy child is measured busy once WaitBusy returns, and
// a process that is gone is an error.
func TestCPUTicks(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	WaitBusy(t, pid, 3)
	if n, err := CPUTicks(pid); err != nil || n < 3 {
		t.Errorf("CPUTicks = %d, %v; want at least 3", n, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := CPUTicks(pid); !os.IsNotExist(err) {
		t.Errorf("a reaped process: %v, want not exist", err)
	}
	if n, err := CPUTicks(os.Getpid()); err != nil || n < 0 {
		t.Errorf("this process: %d, %v", n, err)
	}
}
