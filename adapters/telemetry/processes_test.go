package telemetry

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/internal/proctest"
	"github.com/sidecar-dev/sidecar/rpc"
)

// startChild starts argv as a child, killed and waited for at cleanup.
func startChild(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

func find(res *rpc.ProcessesListResult, pid int) (rpc.ProcessInfo, bool) {
	for _, p := range res.Processes {
		if int(p.PID) == pid {
			return p, true
		}
	}
	return rpc.ProcessInfo{}, false
}

func listCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestProcessesList: a sleep this test started is listed with its pid,
// parent (this process), owner, command and command line, state and
// start time; a busy loop is measured busy, and sorted by CPU it comes
// before the sleep; limits and sort keys out of range are refused.
func TestProcessesList(t *testing.T) {
	p, err := NewProcesses(true, "")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-2 * time.Second) // the kernel's start times have jiffy precision
	sleep := startChild(t, "sleep", "61")
	busy := startChild(t, "sh", "-c", "while :; do :; done")
	proctest.WaitBusy(t, busy.Process.Pid, 5)
	ctx := listCtx(t)
	res, err := p.List(ctx, rpc.ProcessesListParams{SortBy: "pid", Limit: rpc.MaxProcessesListed})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total < 3 || len(res.Processes) != min(res.Total, rpc.MaxProcessesListed) {
		t.Fatalf("total %d, listed %d", res.Total, len(res.Processes))
	}
	for i := 1; i < len(res.Processes); i++ {
		if res.Processes[i-1].PID >= res.Processes[i].PID {
			t.Fatalf("sorted by pid: %d before %d", res.Processes[i-1].PID, res.Processes[i].PID)
		}
	}
	if res.IntervalMs < cpuWindow.Milliseconds() {
		t.Errorf("the first listing measured CPU over %d ms, want at least %v", res.IntervalMs, cpuWindow)
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := find(res, sleep.Process.Pid)
	if !ok {
		t.Fatalf("the sleep (pid %d) is not listed", sleep.Process.Pid)
	}
	start := time.Unix(0, got.StartTimeUnixNano)
	if got.Command != "sleep" || got.CommandLine != "sleep 61" || got.ParentPID != int32(os.Getpid()) ||
		got.Owner != me.Username || got.Status != "sleep" || start.Before(before) || start.After(time.Now()) ||
		got.MemoryUsageBytes == 0 {
		t.Errorf("the sleep is listed as %+v (started %v)", got, start)
	}
	if got.CPUUtilization > 0.05 {
		t.Errorf("the sleep used %.2f of a CPU", got.CPUUtilization)
	}

	// By CPU: the loop is busy (at least 2 % of a CPU even on a machine
	// loaded many times over; a sleep uses none) and comes first of the two.
	res, err = p.List(ctx, rpc.ProcessesListParams{SortBy: "cpu", Limit: rpc.MaxProcessesListed})
	if err != nil {
		t.Fatal(err)
	}
	ib, is := -1, -1
	for i, pr := range res.Processes {
		switch int(pr.PID) {
		case busy.Process.Pid:
			ib = i
			if pr.CPUUtilization < 0.02 {
				t.Errorf("the busy loop used %.2f of a CPU", pr.CPUUtilization)
			}
		case sleep.Process.Pid:
			is = i
		}
	}
	if ib < 0 || is < 0 || ib > is {
		t.Errorf("sorted by CPU: the busy loop at %d, the sleep at %d", ib, is)
	}
	if res.IntervalMs <= 0 {
		t.Errorf("the second listing's interval is %d ms", res.IntervalMs)
	}

	res, err = p.List(ctx, rpc.ProcessesListParams{})
	if err != nil || len(res.Processes) != min(res.Total, defaultProcessesListed) {
		t.Errorf("no limit: %v, %d listed of %d", err, len(res.Processes), res.Total)
	}
	for _, bad := range []rpc.ProcessesListParams{{Limit: -1}, {Limit: rpc.MaxProcessesListed + 1}, {SortBy: "name"}} {
		_, err := p.List(ctx, bad)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
			t.Errorf("%+v: error %v, want invalid params", bad, err)
		}
	}
}

// TestProcessesSignal: a signal goes to a process of the terminals' user
// with the start time listed; it is refused (and the process lives) when
// signals are off, for another user's process, for a pid reused since,
// for pid 1 and the daemon itself, for an unknown signal.
func TestProcessesSignal(t *testing.T) {
	ctx := listCtx(t)
	p, err := NewProcesses(true, "")
	if err != nil {
		t.Fatal(err)
	}
	sleep := startChild(t, "sleep", "62")
	res, err := p.List(ctx, rpc.ProcessesListParams{SortBy: "start", Limit: rpc.MaxProcessesListed})
	if err != nil {
		t.Fatal(err)
	}
	info, ok := find(res, sleep.Process.Pid)
	if !ok {
		t.Fatal("the sleep is not listed")
	}
	off, _ := NewProcesses(false, "")
	other, _ := NewProcesses(true, "")
	other.uid = uint32(os.Getuid()) + 4242
	pid := info.PID
	for _, c := range []struct {
		p      *Processes
		params rpc.ProcessesSignalParams
		code   int64
		msg    string
	}{
		{off, rpc.ProcessesSignalParams{PID: pid, Signal: "SIGTERM"}, rpc.CodePermissionDenied, "telemetry.process_signals = false"},
		{other, rpc.ProcessesSignalParams{PID: pid, Signal: "SIGTERM"}, rpc.CodePermissionDenied, "only processes of the terminals' user"},
		{p, rpc.ProcessesSignalParams{PID: pid, Signal: "SIGTERM", StartTimeUnixNano: info.StartTimeUnixNano - int64(time.Second)}, rpc.CodeNotFound, "not the one listed"},
		{p, rpc.ProcessesSignalParams{PID: pid, Signal: "TERM"}, rpc.CodeInvalidParams, `unknown signal "TERM"`},
		{p, rpc.ProcessesSignalParams{PID: 1, Signal: "SIGTERM"}, rpc.CodeInvalidParams, "pid 1 and below"},
		{p, rpc.ProcessesSignalParams{PID: int32(os.Getpid()), Signal: "SIGTERM"}, rpc.CodeInvalidParams, "the sidecar daemon itself"},
		// A thread of this process (the test stands for the daemon):
		// kill(2) would stop the whole process.
		{p, rpc.ProcessesSignalParams{PID: otherThread(t), Signal: "SIGSTOP"}, rpc.CodeInvalidParams, "is a thread of process"},
	} {
		err := c.p.Signal(ctx, c.params)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != c.code || !strings.Contains(re.Message, c.msg) {
			t.Errorf("%+v: %v, want code %d saying %q", c.params, err, c.code, c.msg)
		}
	}
	if err := sleep.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the sleep did not survive the refusals: %v", err)
	}
	if err := p.Signal(ctx, rpc.ProcessesSignalParams{PID: pid, Signal: "SIGTERM", StartTimeUnixNano: info.StartTimeUnixNano}); err != nil {
		t.Fatal(err)
	}
	err = sleep.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("the sleep ended with %v, want SIGTERM", err)
	}
	err = p.Signal(ctx, rpc.ProcessesSignalParams{PID: pid, Signal: "SIGTERM"})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeNotFound {
		t.Errorf("a process that ended: %v, want not found", err)
	}
}

// otherThread is the id of a thread of this process other than its
// leader (the Go runtime always has several).
func otherThread(t *testing.T) int32 {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if id, err := strconv.Atoi(e.Name()); err == nil && id != os.Getpid() {
			return int32(id)
		}
	}
	t.Fatal("no thread besides the leader")
	return 0
}

// TestTruncateUTF8: a long command line is cut at a rune boundary within
// the bound, with "…"; invalid UTF-8 is replaced.
func TestTruncateUTF8(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdefghij", 10, "abcdefghij"},
		{"abcdefghijk", 10, "abcdefg…"},
		{"ééééé", 8, "éé…"}, // 2 bytes each: 5 of the 8 left for runes, cut to 4
		{"a\xffb", 10, "a\uFFFDb"},
	} {
		if got := truncateUTF8(c.in, c.n); got != c.want || len(got) > max(c.n, len(c.want)) {
			t.Errorf("truncateUTF8(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
