package telemetry

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Processes answers processes/list and processes/signal (our extension,
// docs/protocol.md "Processes"): the host's processes read with gopsutil,
// their CPU use measured between two readings. One listing runs at a
// time (a burst of requests waits its turn rather than multiplying the
// cost of reading /proc); what it keeps between listings is one figure
// per process, at most maxTrackedProcesses.
type Processes struct {
	mu   sync.Mutex // one listing at a time; guards prev, prevAt
	prev map[int32]cpuReading
	// prevAt is when prev was read.
	prevAt time.Time

	signals bool   // telemetry.process_signals
	uid     uint32 // the terminals' user: the one whose processes may be signalled
	self    int32  // the daemon's pid
	now     func() time.Time
}

// cpuReading is a process's CPU time (user + system, seconds) and start,
// at one reading.
type cpuReading struct {
	cpu   float64
	start int64 // ms since the epoch: tells a reused pid apart
}

const (
	// maxTrackedProcesses bounds the readings kept between two listings
	// (pid_max is 4,194,304 at most; a machine with more processes than
	// this gets no CPU figure for the rest until they are read first).
	maxTrackedProcesses = 65536
	// cpuWindow is how long listing waits between two readings when the
	// last listing is older than cpuStale (or there was none): CPU use is
	// a rate, and one reading has none.
	cpuWindow = 250 * time.Millisecond
	cpuStale  = 30 * time.Second
	// defaultProcessesListed is the limit of a list that gives none.
	defaultProcessesListed = 50
)

// NewProcesses returns the processes of this host; signals says whether
// processes/signal is allowed (telemetry.process_signals), termUser is
// terminal.user ("" for the daemon's own user), whose processes alone it
// may signal. An unknown termUser is an error.
func NewProcesses(signals bool, termUser string) (*Processes, error) {
	uid := uint32(os.Getuid())
	if termUser != "" {
		u, err := user.Lookup(termUser)
		if err != nil {
			return nil, fmt.Errorf("processes: terminal.user %q: %w", termUser, err)
		}
		n, err := strconv.ParseUint(u.Uid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("processes: terminal.user %q: uid %q", termUser, u.Uid)
		}
		uid = uint32(n)
	}
	return &Processes{signals: signals, uid: uid, self: int32(os.Getpid()), now: time.Now}, nil
}

// Capability is what the initialize result says of them.
func (p *Processes) Capability() *rpc.ProcessesCapability {
	return &rpc.ProcessesCapability{Signal: p.signals}
}

// Requests are processes/list and processes/signal, beside the lane
// (listing may wait cpuWindow).
func (p *Processes) Requests() []adapters.Request {
	return []adapters.Request{
		{Method: rpc.MethodProcessesList, Beside: true, Permission: auth.ProcessesList, Serve: p.serveList},
		{Method: rpc.MethodProcessesSignal, Beside: true, Permission: auth.ProcessesSignal, Serve: p.serveSignal},
	}
}

// serveList answers processes/list. Only an owner gets each process's
// commandLine: its arguments may carry what another identity typed into a
// terminal it did not share (a password on a command line), and the
// listing does not know which terminal a process belongs to; the others
// get "" (command, pid, cpu and memory stay).
func (p *Processes) serveList(ctx context.Context, caller adapters.Caller, raw json.RawMessage) (any, *rpc.Error) {
	var params rpc.ProcessesListParams
	if len(raw) > 0 && string(raw) != "null" {
		if err := rpc.DecodeParams(raw, &params); err != nil {
			return nil, err
		}
	}
	res, err := p.List(ctx, params)
	if err != nil {
		var re *rpc.Error
		if errors.As(err, &re) {
			return nil, re
		}
		return nil, &rpc.Error{Code: rpc.CodeInternalError, Message: "processes/list: " + err.Error()}
	}
	if caller.Identity.Role != auth.Owner {
		for i := range res.Processes {
			res.Processes[i].CommandLine = ""
		}
	}
	return res, nil
}

func (p *Processes) serveSignal(ctx context.Context, _ adapters.Caller, raw json.RawMessage) (any, *rpc.Error) {
	var params rpc.ProcessesSignalParams
	if err := rpc.DecodeParams(raw, &params); err != nil {
		return nil, err
	}
	if err := p.Signal(ctx, params); err != nil {
		var re *rpc.Error
		if errors.As(err, &re) {
			return nil, re
		}
		return nil, &rpc.Error{Code: rpc.CodeInternalError, Message: "processes/signal: " + err.Error()}
	}
	return nil, nil
}

// sortKeys are processes/list's sortBy values, each with its order.
var sortKeys = map[string]func(a, b *rpc.ProcessInfo) int{
	"cpu": func(a, b *rpc.ProcessInfo) int {
		return cmp.Or(cmp.Compare(b.CPUUtilization, a.CPUUtilization), cmp.Compare(a.PID, b.PID))
	},
	"memory": func(a, b *rpc.ProcessInfo) int {
		return cmp.Or(cmp.Compare(b.MemoryUsageBytes, a.MemoryUsageBytes), cmp.Compare(a.PID, b.PID))
	},
	"pid": func(a, b *rpc.ProcessInfo) int { return cmp.Compare(a.PID, b.PID) },
	"start": func(a, b *rpc.ProcessInfo) int {
		return cmp.Or(cmp.Compare(b.StartTimeUnixNano, a.StartTimeUnixNano), cmp.Compare(a.PID, b.PID))
	},
	"command": func(a, b *rpc.ProcessInfo) int {
		return cmp.Or(strings.Compare(a.Command, b.Command), cmp.Compare(a.PID, b.PID))
	},
}

// List reads the host's processes and returns the first params.Limit of
// them in params.SortBy's order. Errors: an *rpc.Error (InvalidParams)
// for an unknown sortBy or a limit out of range; ctx's error.
func (p *Processes) List(ctx context.Context, params rpc.ProcessesListParams) (*rpc.ProcessesListResult, error) {
	if params.SortBy == "" {
		params.SortBy = "cpu"
	}
	order, ok := sortKeys[params.SortBy]
	if !ok {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "processes/list: unknown sortBy %q: want cpu, memory, pid, start or command", params.SortBy)
	}
	switch {
	case params.Limit == 0:
		params.Limit = defaultProcessesListed
	case params.Limit < 0 || params.Limit > rpc.MaxProcessesListed:
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "processes/list: limit %d: want 1 to %d", params.Limit, rpc.MaxProcessesListed)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prev == nil || p.now().Sub(p.prevAt) > cpuStale {
		// No earlier reading to measure from: take one, and wait.
		procs, err := process.ProcessesWithContext(ctx)
		if err != nil {
			return nil, err
		}
		p.prev, p.prevAt = readCPU(ctx, procs), p.now()
		select {
		case <-time.After(cpuWindow):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	procs, err := process.ProcessesWithContext(ctx)
	if err != nil {
		return nil, err
	}
	at := p.now()
	interval := at.Sub(p.prevAt)
	next := make(map[int32]cpuReading, min(len(procs), maxTrackedProcesses))
	infos := make([]rpc.ProcessInfo, 0, len(procs))
	for _, pr := range procs {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		info, r, ok := describe(ctx, pr)
		if !ok {
			continue // gone meanwhile
		}
		if before, seen := p.prev[pr.Pid]; seen && before.start == r.start && interval > 0 {
			info.CPUUtilization = max(0, r.cpu-before.cpu) / interval.Seconds()
		}
		if len(next) < maxTrackedProcesses {
			next[pr.Pid] = r
		}
		infos = append(infos, info)
	}
	p.prev, p.prevAt = next, at
	slices.SortFunc(infos, func(a, b rpc.ProcessInfo) int { return order(&a, &b) })
	total := len(infos)
	return &rpc.ProcessesListResult{
		Processes:         infos[:min(total, params.Limit)],
		Total:             total,
		SampledAtUnixNano: at.UnixNano(),
		IntervalMs:        interval.Milliseconds(),
	}, nil
}

// readCPU reads every process's CPU time, at most maxTrackedProcesses.
func readCPU(ctx context.Context, procs []*process.Process) map[int32]cpuReading {
	m := make(map[int32]cpuReading, min(len(procs), maxTrackedProcesses))
	for _, pr := range procs {
		if len(m) == maxTrackedProcesses || ctx.Err() != nil {
			break
		}
		t, err := pr.TimesWithContext(ctx)
		if err != nil {
			continue
		}
		start, _ := pr.CreateTimeWithContext(ctx)
		m[pr.Pid] = cpuReading{cpu: t.User + t.System, start: start}
	}
	return m
}

// describe reads one process; false when it is gone (or unreadable:
// its times are the one field every process has).
func describe(ctx context.Context, pr *process.Process) (rpc.ProcessInfo, cpuReading, bool) {
	t, err := pr.TimesWithContext(ctx)
	if err != nil {
		return rpc.ProcessInfo{}, cpuReading{}, false
	}
	start, _ := pr.CreateTimeWithContext(ctx)
	info := rpc.ProcessInfo{PID: pr.Pid, StartTimeUnixNano: start * int64(time.Millisecond)}
	info.ParentPID, _ = pr.PpidWithContext(ctx)
	info.Owner, _ = pr.UsernameWithContext(ctx)
	if info.Owner == "" {
		if uids, err := pr.UidsWithContext(ctx); err == nil && len(uids) > 0 {
			info.Owner = strconv.FormatUint(uint64(uids[0]), 10)
		}
	}
	info.Command, _ = pr.NameWithContext(ctx)
	cl, _ := pr.CmdlineWithContext(ctx)
	info.CommandLine = truncateUTF8(cl, rpc.MaxCommandLine)
	if mi, err := pr.MemoryInfoWithContext(ctx); err == nil {
		info.MemoryUsageBytes = mi.RSS
	}
	if st, err := pr.StatusWithContext(ctx); err == nil && len(st) > 0 {
		info.Status = st[0]
	}
	return info, cpuReading{cpu: t.User + t.System, start: start}, true
}

// truncateUTF8 cuts s to at most n bytes at a rune boundary, "…" (3
// bytes) included when it cuts; invalid UTF-8 becomes U+FFFD first.
func truncateUTF8(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// signalNames are the signals processes/signal sends.
var signalNames = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL, "SIGINT": syscall.SIGINT,
	"SIGHUP": syscall.SIGHUP, "SIGQUIT": syscall.SIGQUIT, "SIGSTOP": syscall.SIGSTOP,
	"SIGCONT": syscall.SIGCONT, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2,
}

// Signal sends params.Signal to params.PID. Errors, each an *rpc.Error
// naming the process and the rule: -32009 PermissionDenied when signals
// are not allowed (telemetry.process_signals), for a process of another
// user than the terminals', and for the kernel's own refusal (EPERM);
// -32602 for an unknown signal, pid 1 or below, the daemon itself, or a
// thread's id (which kill(2) would take for its whole process);
// -32008 NotFound for no such process (or one whose start time is not
// the one given: its pid was reused).
func (p *Processes) Signal(ctx context.Context, params rpc.ProcessesSignalParams) error {
	if !p.signals {
		return rpc.Errorf(rpc.CodePermissionDenied, "processes/signal: not allowed by this host (telemetry.process_signals = false)")
	}
	sig, ok := signalNames[params.Signal]
	if !ok {
		return rpc.Errorf(rpc.CodeInvalidParams, "processes/signal: unknown signal %q: want SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGSTOP, SIGCONT, SIGUSR1 or SIGUSR2", params.Signal)
	}
	switch {
	case params.PID <= 1:
		return rpc.Errorf(rpc.CodeInvalidParams, "processes/signal: pid %d: not a process that may be signalled (pid 1 and below never are)", params.PID)
	case params.PID == p.self:
		return rpc.Errorf(rpc.CodeInvalidParams, "processes/signal: pid %d is the sidecar daemon itself: stop it with its service manager", params.PID)
	}
	pr, err := process.NewProcessWithContext(ctx, params.PID)
	if err != nil {
		return rpc.Errorf(rpc.CodeNotFound, "processes/signal: no process %d", params.PID)
	}
	// kill(2) given a thread's id signals its whole process: only a
	// process's own pid (its thread group's leader) is taken, so that a
	// thread of the daemon or of pid 1 is not a way around the rules.
	if tgid, err := pr.TgidWithContext(ctx); err != nil {
		return rpc.Errorf(rpc.CodeNotFound, "processes/signal: no process %d", params.PID)
	} else if tgid != params.PID {
		return rpc.Errorf(rpc.CodeInvalidParams, "processes/signal: %d is a thread of process %d, not a process: give the process's pid", params.PID, tgid)
	}
	if params.StartTimeUnixNano != 0 {
		start, err := pr.CreateTimeWithContext(ctx)
		if err != nil || start*int64(time.Millisecond) != params.StartTimeUnixNano {
			return rpc.Errorf(rpc.CodeNotFound, "processes/signal: process %d is not the one listed (it ended, and its pid was reused)", params.PID)
		}
	}
	uids, err := pr.UidsWithContext(ctx)
	if err != nil || len(uids) < 2 {
		return rpc.Errorf(rpc.CodeNotFound, "processes/signal: process %d: its owner cannot be read (it ended?)", params.PID)
	}
	// The real uid, as kill(2) checks for an unprivileged sender.
	if uids[0] != p.uid {
		return rpc.Errorf(rpc.CodePermissionDenied, "processes/signal: process %d runs as uid %d: only processes of the terminals' user (uid %d) may be signalled", params.PID, uids[0], p.uid)
	}
	if err := syscall.Kill(int(params.PID), sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return rpc.Errorf(rpc.CodeNotFound, "processes/signal: no process %d", params.PID)
		}
		return rpc.Errorf(rpc.CodePermissionDenied, "processes/signal: %s to process %d: %v", params.Signal, params.PID, err)
	}
	return nil
}
