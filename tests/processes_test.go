package tests

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/internal/proctest"
	"github.com/sidecar-dev/sidecar/rpc"
)

// TestTopProcesses: `sidecar top --once` prints sparklines of the host's
// history and its processes below its summary, sorted by CPU: a busy loop this test started (the
// daemon's machine is this one) is there with its pid, owner and command
// line, busy.
func TestTopProcesses(t *testing.T) {
	t.Parallel()
	s := startServer(t, "telemetry {\n  interval = \"100ms\"\n}\n")
	// The history has points to draw (the host samples from its start).
	c := tcpClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for {
		var h rpc.TelemetryHistoryResult
		if err := c.Call(ctx, rpc.MethodTelemetryHistory, nil, &h); err != nil {
			t.Fatal(err)
		}
		if len(h.TimeUnixNano) >= 3 {
			break
		}
		select { // a bounded poll of the host, one interval apart
		case <-ctx.Done():
			t.Fatalf("the history has %d points after %v", len(h.TimeUnixNano), waitTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
	busy := exec.Command("sh", "-c", "while :; do :; done", "top-test-busy-loop")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = busy.Process.Kill()
		_ = busy.Wait()
	})
	proctest.WaitBusy(t, busy.Process.Pid, 5)
	out, errOut, code := s.run(t, append([]string{"top", s.url, "--once"}, s.connArgs()...)...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	// The history's sparklines (telemetry/history) above the table.
	if !regexp.MustCompile(`(?m)^HISTORY \(last \d+s\)\nCPU   [▁▂▃▄▅▆▇█]+ +[\d.]+%\nMem   [▁▂▃▄▅▆▇█]+ `).MatchString(out) {
		t.Errorf("no history sparklines:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^\s+PID USER\s+CPU%\s+RSS STATE\s+COMMAND\s+\(\d+ processes, by cpu\)$`).MatchString(out) {
		t.Fatalf("no process table header:\n%s", out)
	}
	m := regexp.MustCompile(`(?m)^\s*` + strconv.Itoa(busy.Process.Pid) + `\s+(\S+)\s+([\d.]+)\s+\S+\s+(\S+)\s+(.*)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the busy loop (pid %d) is not among the processes by CPU:\n%s", busy.Process.Pid, out)
	}
	if cpu, _ := strconv.ParseFloat(m[2], 64); cpu < 2 || m[3] != "running" && m[3] != "sleep" || m[4] != "sh -c while :; do :; done top-test-busy-loop" {
		t.Errorf("the busy loop's line: CPU %s%%, state %s, command %q", m[2], m[3], m[4])
	}
}

// TestProcessesThroughHost: processes/list through the real daemon
// lists a sleep this test started, and processes/signal ends it with the
// signal asked for; a signal to the daemon itself, or to a host that
// turned signals off, is refused with the rule named, and the sleep
// survives that.
func TestProcessesThroughHost(t *testing.T) {
	t.Parallel()
	on := startServer(t, "")
	off := startServer(t, "telemetry {\n  process_signals = false\n}\n")
	sleep := exec.Command("sleep", "3607")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sleep.Process.Kill()
		_ = sleep.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c := tcpClient(t, on)
	if caps := c.Initialized().Processes; caps == nil || !caps.Signal {
		t.Fatalf("processes capability %+v, want signal true", caps)
	}
	res, err := c.Processes(ctx, "pid", rpc.MaxProcessesListed)
	if err != nil {
		t.Fatal(err)
	}
	var listed *rpc.ProcessInfo
	for i, p := range res.Processes {
		if int(p.PID) == sleep.Process.Pid {
			listed = &res.Processes[i]
		}
	}
	if listed == nil || listed.CommandLine != "sleep 3607" || listed.Command != "sleep" {
		t.Fatalf("the sleep (pid %d) listed as %+v", sleep.Process.Pid, listed)
	}
	var re *rpc.Error
	err = tcpClient(t, off).SignalProcess(ctx, rpc.ProcessesSignalParams{PID: listed.PID, Signal: "SIGTERM"})
	if !errors.As(err, &re) || re.Code != rpc.CodePermissionDenied || !strings.Contains(re.Message, "telemetry.process_signals = false") {
		t.Errorf("signals off: %v", err)
	}
	err = c.SignalProcess(ctx, rpc.ProcessesSignalParams{PID: int32(on.p.cmd.Process.Pid), Signal: "SIGKILL"})
	if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, "the sidecar daemon itself") {
		t.Errorf("the daemon itself: %v", err)
	}
	if err := sleep.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the sleep did not survive the refusals: %v", err)
	}
	if err := c.SignalProcess(ctx, rpc.ProcessesSignalParams{PID: listed.PID, Signal: "SIGUSR1", StartTimeUnixNano: listed.StartTimeUnixNano}); err != nil {
		t.Fatal(err)
	}
	err = sleep.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGUSR1 {
		t.Fatalf("the sleep ended with %v, want %v", err, fmt.Sprint(syscall.SIGUSR1))
	}
}
