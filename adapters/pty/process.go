// Package pty runs programs on pseudo-terminals for the terminal adapter:
// one process per PTY (Process), the decoding of raw PTY output into AHP
// terminal/data text (OutputDecoder), and a VT emulator behind every
// terminal (Screen) whose redraw, with a bounded scrollback (History), is
// a snapshot's content.
package pty

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	cpty "github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// DefaultPath is the PATH given to a child when Options.Env does not set one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// DefaultTerm is the TERM given to a child when Options.Term is empty.
const DefaultTerm = "xterm-256color"

// DrainIdle is how long Read waits for more output once the child has been
// reaped before it reports io.EOF. It bounds the drain when a background
// grandchild keeps the slave side open (so EIO never arrives).
const DrainIdle = 250 * time.Millisecond

// Options describe the program to start on a new PTY.
type Options struct {
	// Argv is the command and its arguments. Empty means the shell (see
	// Shell), started as a login shell ("-bash" style argv[0]) when Login is
	// set. A command without a slash is looked up in the child's PATH.
	Argv []string
	// Shell is the shell used when Argv is empty (and the SHELL value).
	// "" means the target user's shell from /etc/passwd when that is an
	// executable file, else /bin/bash, else /bin/sh. A Shell that is not an
	// executable file makes Start fail.
	Shell string
	// Login starts the shell as a login shell (argv[0] prefixed by '-').
	// It has no effect when Argv is set.
	Login bool
	// User is the user to run as: a name or a numeric uid. "" means the
	// current user, with no credential change. Otherwise the child gets that
	// user's uid, primary gid and supplementary groups, and HOME, USER,
	// LOGNAME and SHELL are set for that user. Changing users needs root (or
	// CAP_SETUID and CAP_SETGID).
	User string
	// Dir is the working directory. "" means the user's home directory (or
	// "/" when that does not exist).
	Dir string
	// Env is extra environment, applied last (it may override the base).
	// The base environment is clean: HOME, USER, LOGNAME, SHELL, PATH
	// (DefaultPath), TERM, and LANG / LC_ALL when the daemon itself has them.
	Env map[string]string
	// Term is the TERM value; "" means DefaultTerm.
	Term string
	// Cols and Rows are the initial size in character cells; 0 means 80x24.
	Cols, Rows uint16
}

// MaxEnvBytes bounds the environment a client gives a terminal
// (Options.Env, createTerminal's env): its "NAME=value" strings, each
// with the NUL that ends it, together. exec refuses (E2BIG) arguments
// and environment over the system's ARG_MAX (2 MiB with Linux's default
// 8 MiB stack); this leaves most of it to the command's arguments and
// the base environment.
const MaxEnvBytes = 256 << 10

// MaxEnvEntryBytes bounds one "NAME=value" string: Linux refuses a
// longer one (MAX_ARG_STRLEN, 128 KiB with its NUL) whatever the total.
const MaxEnvEntryBytes = 128<<10 - 1

// CheckEnv returns why env cannot be a program's environment, naming the
// variable (quoted, cut short) and the rule, for the first variable in
// name order that breaks one, or nil: a name must be non-empty, without
// "=" or NUL; a value without NUL; one "NAME=value" at most
// MaxEnvEntryBytes; all of them, each with its NUL, at most MaxEnvBytes.
// Start checks Options.Env with it.
func CheckEnv(env map[string]string) error {
	const rule = `a name must be non-empty, without "=" or NUL`
	total, largest, largestLen := 0, "", -1
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		n := len(k) + 1 + len(v) // NAME=value
		switch {
		case k == "":
			return fmt.Errorf("a variable name is empty: %s", rule)
		case strings.ContainsRune(k, '='):
			return fmt.Errorf(`variable name %s contains "=": %s`, quoteShort(k), rule)
		case strings.ContainsRune(k, 0):
			return fmt.Errorf("variable name %s contains NUL: %s", quoteShort(k), rule)
		case strings.ContainsRune(v, 0):
			return fmt.Errorf("the value of %s contains NUL: a value must not", quoteShort(k))
		case n > MaxEnvEntryBytes:
			return fmt.Errorf("variable %s is %d bytes as NAME=value: one may be at most %d", quoteShort(k), n, MaxEnvEntryBytes)
		}
		total += n + 1
		if n > largestLen {
			largest, largestLen = k, n
		}
	}
	if total > MaxEnvBytes {
		return fmt.Errorf("the environment is %d bytes (%d variables as NAME=value, each with a NUL; the largest %s, %d bytes): at most %d in all",
			total, len(env), quoteShort(largest), largestLen, MaxEnvBytes)
	}
	return nil
}

// quoteShort is s quoted as Go would, its first 64 bytes at most (cut at
// a character boundary), followed by "…(N bytes)" when cut.
func quoteShort(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// Process is one program running on its own PTY, in its own session with the
// PTY as controlling terminal (so it leads its process group).
//
// Read and Write may be called concurrently with each other and with every
// other method. Read should be called by one goroutine at a time.
type Process struct {
	cmd    *exec.Cmd
	master *os.File
	pid    int
	shell  string // $SHELL of the program: Options.Shell, else resolved

	done     chan struct{}
	exitCode int
	exitOK   bool
	signal   syscall.Signal // the signal that ended the child, or 0

	closeOnce sync.Once
	closeErr  error

	killOnce sync.Once
	killErr  error

	mu  sync.Mutex
	eof bool
}

// Start starts the program described by opts on a new PTY. The master side
// is made non-blocking so that Close unblocks a pending Read. A goroutine
// reaps the child; see Done.
func Start(opts Options) (*Process, error) {
	id, err := resolveUser(opts.User)
	if err != nil {
		return nil, err
	}
	shell := opts.Shell
	if shell != "" && !isExecutable(shell) {
		return nil, fmt.Errorf("pty: shell %q is not an executable file", shell)
	}
	if shell == "" {
		shell = id.shell
	}
	if shell == "" || !isExecutable(shell) {
		if isExecutable("/bin/bash") {
			shell = "/bin/bash"
		} else {
			shell = "/bin/sh"
		}
	}
	term := opts.Term
	if term == "" {
		term = DefaultTerm
	}
	env := map[string]string{
		"HOME":    id.home,
		"USER":    id.name,
		"LOGNAME": id.name,
		"SHELL":   shell,
		"PATH":    DefaultPath,
		"TERM":    term,
	}
	for _, k := range []string{"LANG", "LC_ALL"} {
		if v, ok := os.LookupEnv(k); ok && v != "" {
			env[k] = v
		}
	}
	if err := CheckEnv(opts.Env); err != nil {
		return nil, fmt.Errorf("pty: environment: %w", err)
	}
	for k, v := range opts.Env {
		env[k] = v
	}
	envList := make([]string, 0, len(env))
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	sort.Strings(envList)

	var path string
	var args []string
	if len(opts.Argv) == 0 {
		path = shell
		arg0 := filepath.Base(shell)
		if opts.Login {
			arg0 = "-" + arg0
		}
		args = []string{arg0}
	} else {
		path, err = lookPath(opts.Argv[0], env["PATH"])
		if err != nil {
			return nil, err
		}
		args = append([]string(nil), opts.Argv...)
	}

	dir := opts.Dir
	if dir == "" {
		dir = id.home
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			dir = "/"
		}
	}

	cols, rows := opts.Cols, opts.Rows
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}

	ptmx, tty, err := cpty.Open()
	if err != nil {
		return nil, fmt.Errorf("pty: open: %w", err)
	}
	// creack/pty leaves the master in blocking mode (it calls Fd()), where
	// deadlines do nothing and Close does not unblock Read: duplicate it,
	// make the duplicate non-blocking and wrap it again.
	nfd, err := unix.FcntlInt(ptmx.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	ptmx.Close()
	if err != nil {
		tty.Close()
		return nil, fmt.Errorf("pty: dup master: %w", err)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		tty.Close()
		return nil, fmt.Errorf("pty: set non-blocking: %w", err)
	}
	master := os.NewFile(uintptr(nfd), "/dev/ptmx")
	fail := func(err error) (*Process, error) {
		tty.Close()
		master.Close()
		return nil, err
	}
	if err := cpty.Setsize(tty, &cpty.Winsize{Cols: cols, Rows: rows}); err != nil {
		return fail(fmt.Errorf("pty: set size: %w", err))
	}

	attr := &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if id.cred != nil {
		attr.Credential = id.cred
		// Programs that reopen $(tty) (ssh, sudo, gpg) need to own it.
		if err := tty.Chown(int(id.cred.Uid), ttyGroup(int(id.cred.Gid))); err != nil {
			return fail(fmt.Errorf("pty: chown tty: %w", err))
		}
		if err := tty.Chmod(0o620); err != nil {
			return fail(fmt.Errorf("pty: chmod tty: %w", err))
		}
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        args,
		Env:         envList,
		Dir:         dir,
		Stdin:       tty,
		Stdout:      tty,
		Stderr:      tty,
		SysProcAttr: attr,
	}
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("pty: start %s: %w", path, err))
	}
	tty.Close()

	p := &Process{cmd: cmd, master: master, pid: cmd.Process.Pid, shell: shell, done: make(chan struct{})}
	go p.reap()
	return p, nil
}

func (p *Process) reap() {
	_ = p.cmd.Wait() // the status is read from ProcessState
	if st := p.cmd.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Exited():
				p.exitCode, p.exitOK = ws.ExitStatus(), true
			case ws.Signaled():
				p.exitCode, p.exitOK = 128+int(ws.Signal()), true
				p.signal = ws.Signal()
			}
		}
	}
	close(p.done)
	// Wake a Read that is blocked while nothing more arrives (a grandchild
	// may hold the slave open, so EIO may never come).
	_ = p.master.SetReadDeadline(time.Now().Add(DrainIdle))
}

// Pid returns the child's process id, which is also its process group id.
func (p *Process) Pid() int { return p.pid }

// Shell is the shell path the program got as $SHELL: Options.Shell, or
// the user's login shell, /bin/bash or /bin/sh when none was given (the
// shell started when no command was).
func (p *Process) Shell() string { return p.shell }

// Read reads raw output bytes from the PTY master. It returns io.EOF once
// every holder of the slave side has closed it (EIO), or once the child has
// been reaped and no output arrived for DrainIdle (output still buffered
// after the exit is returned first). After Close it returns an error
// wrapping os.ErrClosed. Read may return io.EOF shortly before Done is
// closed; wait for Done before reading ExitCode.
func (p *Process) Read(b []byte) (int, error) {
	p.mu.Lock()
	eof := p.eof
	p.mu.Unlock()
	if eof {
		return 0, io.EOF
	}
	for {
		exited := false
		select {
		case <-p.done:
			exited = true
			if err := p.master.SetReadDeadline(time.Now().Add(DrainIdle)); err != nil {
				return 0, err
			}
		default:
		}
		n, err := p.master.Read(b)
		if n > 0 {
			return n, nil
		}
		switch {
		case err == nil:
			if len(b) == 0 {
				return 0, nil
			}
			continue
		case errors.Is(err, syscall.EIO), errors.Is(err, io.EOF):
			return 0, p.setEOF()
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Only reap sets a deadline, after the exit; a Read that started
			// before the exit re-checks and gets a fresh idle period only if
			// the deadline came from reap while it was blocked.
			if exited {
				return 0, p.setEOF()
			}
			select {
			case <-p.done:
				return 0, p.setEOF()
			default:
			}
			continue
		default:
			return 0, err
		}
	}
}

func (p *Process) setEOF() error {
	p.mu.Lock()
	p.eof = true
	p.mu.Unlock()
	return io.EOF
}

// Write writes input bytes to the program (through the line discipline, so
// "\x03" sends SIGINT in the default cooked mode). It blocks while the PTY
// input queue is full; Close unblocks it.
func (p *Process) Write(b []byte) (int, error) {
	return p.master.Write(b)
}

// Resize sets the terminal size in character cells; the foreground process
// group gets SIGWINCH.
func (p *Process) Resize(cols, rows uint16) error {
	rc, err := p.master.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
	if err != nil {
		return err
	}
	return ioErr
}

// SetEcho turns the terminal's echo of input on or off (termios ECHO on
// the line discipline), as `stty -echo` would. With echo off, input written
// to the PTY reaches the program without being copied to the output.
func (p *Process) SetEcho(on bool) error {
	rc, err := p.master.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		t, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
		if err != nil {
			ioErr = err
			return
		}
		if on {
			t.Lflag |= unix.ECHO
		} else {
			t.Lflag &^= unix.ECHO | unix.ECHONL
		}
		ioErr = unix.IoctlSetTermios(int(fd), unix.TCSETS, t)
	})
	if err != nil {
		return err
	}
	return ioErr
}

// Done is closed once the child has been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitCode returns the child's exit status once Done is closed: the exit
// code, or 128+signal number when a signal ended it. ok is false before the
// child has been reaped.
func (p *Process) ExitCode() (code int, ok bool) {
	select {
	case <-p.done:
		return p.exitCode, p.exitOK
	default:
		return 0, false
	}
}

// Signaled returns the signal that ended the child once Done is closed;
// ok is false when it exited by itself (or has not been reaped yet).
func (p *Process) Signaled() (sig syscall.Signal, ok bool) {
	select {
	case <-p.done:
		return p.signal, p.signal != 0
	default:
		return 0, false
	}
}

// Signal sends sig to the child's whole process group.
func (p *Process) Signal(sig syscall.Signal) error {
	return syscall.Kill(-p.pid, sig)
}

// Kill ends the program and every job it started in its session: SIGHUP,
// SIGTERM and SIGCONT (a stopped job takes the others) to each process
// group of the session (signalSession: a job-control shell puts each job
// in a group of its own, which the child's group alone misses), then it
// waits up to grace for the child to be reaped and the session to empty,
// then SIGKILL to each group of the session, then it waits (at most 5 s)
// for the reap and closes the master. A process that left the session
// (setsid: a daemon) is not reached. Kill is idempotent; concurrent calls
// wait for the first one.
func (p *Process) Kill(grace time.Duration) error {
	p.killOnce.Do(func() {
		_ = p.signalSession(syscall.SIGHUP)
		_ = p.signalSession(syscall.SIGTERM)
		_ = p.signalSession(syscall.SIGCONT)
		p.waitSessionGone(grace)
		if err := p.signalSession(syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			p.killErr = err
		}
		t := time.NewTimer(5 * time.Second)
		select {
		case <-p.done:
		case <-t.C:
			if p.killErr == nil {
				p.killErr = fmt.Errorf("pty: process %d not reaped 5s after SIGKILL", p.pid)
			}
		}
		t.Stop()
		if err := p.Close(); err != nil && p.killErr == nil {
			p.killErr = err
		}
	})
	return p.killErr
}

// waitSessionGone waits up to grace for the child to be reaped and then
// for the rest of its session to end (looked at every sessionPoll: the
// kernel says nothing when processes that are not our children exit).
func (p *Process) waitSessionGone(grace time.Duration) {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	select {
	case <-p.done:
	case <-deadline.C:
		return
	}
	tick := time.NewTicker(sessionPoll)
	defer tick.Stop()
	for len(sessionGroups(p.pid)) > 0 {
		select {
		case <-tick.C:
		case <-deadline.C:
			return
		}
	}
}

// sessionPoll is how often Kill looks whether a session's jobs ended.
const sessionPoll = 20 * time.Millisecond

// signalSession sends sig to the child's process group and to every other
// process group of its session (the child is the session's leader: its
// pid is the session id, which the jobs keep after it exits). It returns
// the error of the child's group (ESRCH once that group is gone).
func (p *Process) signalSession(sig syscall.Signal) error {
	err := syscall.Kill(-p.pid, sig)
	for _, pg := range sessionGroups(p.pid) {
		if pg != p.pid {
			_ = syscall.Kill(-pg, sig)
		}
	}
	return err
}

// sessionGroups returns the process groups of the processes in session
// sid, from /proc (nil where /proc cannot be read: the child's group is
// then all Kill reaches). Zombies are left out: they are gone but for
// their parent's wait.
func sessionGroups(sid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var groups []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		pgrp, session, zombie, ok := parseStat(b)
		if !ok || session != sid || zombie || pid == os.Getpid() {
			continue
		}
		if !slices.Contains(groups, pgrp) {
			groups = append(groups, pgrp)
		}
	}
	return groups
}

// parseStat reads the process group and session of /proc/PID/stat (proc(5):
// "pid (comm) state ppid pgrp session ...", comm may hold spaces and
// parentheses: the fields follow the last ')').
func parseStat(b []byte) (pgrp, session int, zombie, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return 0, 0, false, false
	}
	pgrp, err1 := strconv.Atoi(f[2])
	session, err2 := strconv.Atoi(f[3])
	return pgrp, session, f[0] == "Z", err1 == nil && err2 == nil
}

// Close closes the master side, which unblocks a pending Read or Write and
// makes the kernel send SIGHUP to the child's session. It does not wait for
// the child. Close is idempotent.
func (p *Process) Close() error {
	p.closeOnce.Do(func() { p.closeErr = p.master.Close() })
	return p.closeErr
}

// identity is the resolved target user.
type identity struct {
	name, home, shell string
	cred              *syscall.Credential // nil: keep the current credentials
}

func resolveUser(spec string) (identity, error) {
	var u *user.User
	var err error
	if spec == "" {
		u, err = user.LookupId(strconv.Itoa(os.Getuid()))
		if err != nil {
			// No passwd entry for the current uid: run with what we have.
			name := os.Getenv("USER")
			if name == "" {
				name = strconv.Itoa(os.Getuid())
			}
			home, _ := os.UserHomeDir()
			if home == "" {
				home = "/"
			}
			return identity{name: name, home: home}, nil
		}
	} else {
		u, err = user.Lookup(spec)
		if err != nil {
			if _, convErr := strconv.ParseUint(spec, 10, 32); convErr == nil {
				u, err = user.LookupId(spec)
			}
		}
		if err != nil {
			return identity{}, fmt.Errorf("pty: unknown user %q: %w", spec, err)
		}
	}
	id := identity{name: u.Username, home: u.HomeDir, shell: passwdShell(u.Username)}
	if id.home == "" {
		id.home = "/"
	}
	if spec == "" {
		return id, nil
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return identity{}, fmt.Errorf("pty: user %q: uid %q: %w", spec, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return identity{}, fmt.Errorf("pty: user %q: gid %q: %w", spec, u.Gid, err)
	}
	if int(uid) == os.Getuid() && int(gid) == os.Getgid() && os.Getuid() != 0 {
		// Already that user; setgroups would fail without privilege.
		return id, nil
	}
	var groups []uint32
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				groups = append(groups, uint32(n))
			}
		}
	}
	id.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}
	return id, nil
}

// passwdShell returns the login shell field of name in /etc/passwd, or "".
func passwdShell(name string) string {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 7 && fields[0] == name {
			return strings.TrimSpace(fields[6])
		}
	}
	return ""
}

// ttyGroup returns the gid of the "tty" group, else fallback.
func ttyGroup(fallback int) int {
	if g, err := user.LookupGroup("tty"); err == nil {
		if n, err := strconv.Atoi(g.Gid); err == nil {
			return n
		}
	}
	return fallback
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// lookPath finds name in pathList (a PATH value) unless it contains a slash.
func lookPath(name, pathList string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("pty: %q: %w", name, exec.ErrNotFound)
}
